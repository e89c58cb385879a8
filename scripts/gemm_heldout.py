"""How a profile's GEMM regressor prices GEMM shapes it never saw (or rows between its own).

    python scripts/gemm_heldout.py --profile latsim/data/calibration/h200 \\
        --rows data/kernels/h200-live-steps/gemm.parquet [--repeat data/kernels/h200-live-steps-repeat/gemm.parquet]

Prices every ``ok`` bf16/fp8 row of ``--rows`` (a GEMM table of a calibration run) with the
profile's fitted ``gemm`` regressor on the profile's GPU and compares it with the measurement less
the timer floor the fit took off its own rows (``fit_report.json``'s ``timer_floor_s``, or
``graph_gap_s`` for rows replayed in CUDA graphs: the step model adds launches apart); it prints
predicted / measured - 1 by
shape (K, N; ``seen`` when the profile's own table holds the shape) and band of rows: at most 512
(vLLM replays those steps from CUDA graphs), 513-767 (a 512-token prompt beside its decodes),
768-1,535 and past it.  ``--repeat`` (a second run of the same grid) prints the two runs'
median |ratio - 1| beside the error, the floor any price can reach.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from latsim import load_device
from latsim.catalog.devices import DeviceSpec
from latsim.costmodel.profile.floor import without_floor
from latsim.costmodel.profile.regressors import Predictors, load_predictors
from latsim.costmodel.profile.tables import read_shard, shard_path

BANDS = (0, 512, 767, 1535, np.inf)
BAND_NAMES = ("<=512", "513-767", "768-1535", ">1535")


def predicted_s(pred: Predictors, rows: pd.DataFrame, device: DeviceSpec) -> np.ndarray:
    """The profile's price of each row (seconds), one regressor call per shape and dtype."""
    out = np.full(len(rows), np.nan)
    for (dtype, k, n), group in rows.groupby(["dtype", "K", "N"]):
        at = rows.index.get_indexer(group.index)
        wbytes = 1.0 if dtype == "fp8" else 2.0
        out[at] = pred.gemm_s(group["M"].to_numpy(dtype=float), float(k), float(n), device, str(dtype), wbytes)
    return out


def ok_rows(path: Path) -> pd.DataFrame:
    """The ``ok`` bf16 and fp8 rows of a GEMM table (the 4-bit rows have their own family)."""
    rows = read_shard(path)
    return rows[(rows["status"] == "ok") & rows["dtype"].isin(["bf16", "fp8"])].reset_index(drop=True)


def kernel_rows(path: Path, pred: Predictors) -> pd.DataFrame:
    """:func:`ok_rows` of ``path`` with ``median_s`` less the profile fit's timer floor."""
    report = pred.report
    return without_floor(ok_rows(path), float(report.get("timer_floor_s", 0.0)),
                         float(report.get("graph_gap_s", 0.0)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", type=Path, required=True)
    ap.add_argument("--rows", type=Path, required=True)
    ap.add_argument("--repeat", type=Path, help="a second run of the same grid (repeatability)")
    args = ap.parse_args()
    pred = load_predictors(args.profile)
    rows = kernel_rows(args.rows, pred)
    rows["signed"] = predicted_s(pred, rows, load_device(pred.profile["device"])) / rows["median_s"] - 1.0
    rows["err"] = rows["signed"].abs()
    seen = read_shard(shard_path(args.profile, "gemm"))
    seen_keys = set(zip(seen["K"].astype(int), seen["N"].astype(int), strict=True))
    rows["seen"] = [(int(k), int(n)) in seen_keys for k, n in zip(rows["K"], rows["N"], strict=True)]
    rows["rows"] = pd.cut(rows["M"], BANDS, labels=BAND_NAMES)
    if args.repeat is not None:
        again = kernel_rows(args.repeat, pred)[["point_id", "median_s"]].rename(columns={"median_s": "again_s"})
        rows = rows.merge(again, on="point_id", how="left")
        rows["repeat"] = (rows["again_s"] / rows["median_s"] - 1.0).abs()
    keys = ["dtype", "K", "N", "seen", "rows"]
    groups = rows.groupby(keys, observed=True)
    table = groups["err"].agg(n="size", median="median", p90=lambda e: e.quantile(0.9))
    table["signed_median"] = groups["signed"].median()
    if "repeat" in rows:
        table["repeat_median"] = groups["repeat"].median()
    print(table.round(3).to_string())
    for band, g in rows.groupby("rows", observed=True):
        line = f"rows {band}: median |error| {g['err'].median():.1%}, signed {g['signed'].median():+.1%}"
        if "repeat" in g:
            line += f", repeat {g['repeat'].median():.1%}"
        print(f"{line} ({len(g)} rows)")


if __name__ == "__main__":
    main()
