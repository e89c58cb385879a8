"""How the profile prices decode attention at batch sizes between its grid points.

    python scripts/decode_batches_check.py [--profile latsim/data/calibration/h200] \\
        [--rows data/kernels/h200-decode-batches-check] [--skew data/kernels/h200-skew-probe]

Prices every row of ``--rows`` (an attention table of decode points: by default the
``decode-batches-check`` grid, 5, 10, 20, ... 320 sequences, which no fit reads) and every equal
call of the skew probes (``--skew``: batches of 1-256 sequences at contexts off the grid,
timed beside the spread ones) with the profile's decode regressor, as the cost model does
(``Predictors.attn_decode_s``), and prints measured / priced by batch size: the median and the
median |error|, over all head shapes and contexts.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd

from latsim.catalog import load_device
from latsim.costmodel.profile.regressors import load_predictors
from latsim.costmodel.profile.store import shipped_profile_dir
from latsim.costmodel.profile.tables import read_shard, shard_path


def grid_rows(folder: Path) -> pd.DataFrame:
    """The decode rows of ``folder``'s attention table: batch, ctx, head shape, KV bytes, seconds."""
    rows = read_shard(shard_path(folder, "attention"))
    rows = rows[(rows.phase == "decode") & (rows.status == "ok")]
    kv = rows["kv"].astype(str) if "kv" in rows else pd.Series("bf16", index=rows.index)
    kv_bytes = np.where(kv == "fp8", 1.0, 2.0)
    return pd.DataFrame({"source": "grid", "batch": rows.batch.astype(float), "ctx": rows.ctx.astype(float),
                         "hq": rows.hq, "hkv": rows.hkv, "d": rows.d, "kv_bytes": kv_bytes,
                         "measured_s": rows.median_s}).reset_index(drop=True)


def skew_equal_rows(folder: Path) -> pd.DataFrame:
    """The skew probes' equal calls: each spread case's batch at its mean context, bf16 cache."""
    out = []
    for name in ("skew_probe.json", "skew_grid.json"):
        path = folder / name
        if not path.is_file():
            continue
        data = json.loads(path.read_text())
        for case in data["cases"]:
            hq, hkv, d = data["shapes"][case["shape"]]
            out.append(("skew-equal", float(case["batch"]), float(round(sum(case["lens"]) / case["batch"])),
                        hq, hkv, d, 2.0, case["equal_us"] * 1e-6))
    return pd.DataFrame(out, columns=["source", "batch", "ctx", "hq", "hkv", "d", "kv_bytes", "measured_s"])


def priced(rows: pd.DataFrame, profile: Path) -> pd.DataFrame:
    """``rows`` with the profile's price of each call and measured / priced."""
    pred, device = load_predictors(profile), load_device("h200")
    price = np.empty(len(rows))
    for key, idx in rows.groupby(["hq", "hkv", "d", "kv_bytes"]).indices.items():
        hq, hkv, d, kv = key
        sub = rows.iloc[idx]
        price[idx] = pred.attn_decode_s(sub.batch.to_numpy(), sub.ctx.to_numpy(), (int(hq), int(hkv), int(d)),
                                        float(kv), device)
    return rows.assign(priced_s=price, ratio=rows.measured_s.to_numpy() / price)


def summary(rows: pd.DataFrame) -> pd.DataFrame:
    """Per source and batch: cases, median ratio, median |ratio - 1| (percent)."""
    g = rows.groupby(["source", "batch"]).ratio
    return pd.DataFrame({"cases": g.size(), "median_ratio": g.median().round(3),
                         "median_abs_error_pct": g.apply(lambda r: 100 * np.median(np.abs(r - 1))).round(1)})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", type=Path, default=shipped_profile_dir("h200"))
    ap.add_argument("--rows", type=Path, default=Path("data/kernels/h200-decode-batches-check"))
    ap.add_argument("--skew", type=Path, default=Path("data/kernels/h200-skew-probe"))
    args = ap.parse_args()
    rows = priced(pd.concat([grid_rows(args.rows), skew_equal_rows(args.skew)], ignore_index=True), args.profile)
    pd.set_option("display.width", 160)
    print(summary(rows).unstack("source").to_string())
    for source, sub in rows.groupby("source"):
        err = np.abs(sub.ratio - 1)
        print(f"{source}: {len(sub)} calls, median ratio {sub.ratio.median():.3f}, median |error| "
              f"{100 * err.median():.1f} %, p90 {100 * np.percentile(err, 90):.1f} %")


if __name__ == "__main__":
    main()
