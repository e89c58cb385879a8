"""How the attention regressors of a profile extrapolate to attention shapes they never saw.

    python scripts/attention_heldout.py --profile latsim/data/calibration/h200 \\
        --rows /tmp/cal/h200-shapes/attention.parquet [--exclude-seen]

Prices every ``ok`` row of ``--rows`` (an attention table, e.g. the ``shapes`` study grid) with
the profile's fitted ``attn_prefill``/``attn_decode`` regressors and prints the median and P90
of |predicted / measured - 1| (and the signed median) per phase and (hq, hkv, d), marking the shapes the profile's own
table holds (``seen``).  Decode rows are the ``uniform`` mix, which the cost model prices from.
Rows over an fp8 cache (``kv=fp8``) are priced as a 1-byte cache; rows of a sliding window
(``window``, grid ``window``) the way the calibrated cost model prices a windowed layer: decode
at the context capped at the window, a prefill chunk's query-key pairs and reads within the
window (``attention.windowed``) with the inefficiency looked up at the context it reads.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from latsim import load_device
from latsim.calibration.attention import windowed
from latsim.catalog.devices import DeviceSpec
from latsim.costmodel.profile.features import roofline_s
from latsim.costmodel.profile.regressors import Predictors, load_predictors
from latsim.costmodel.profile.tables import read_shard, shard_path


def predicted_s(pred: Predictors, rows: pd.DataFrame, device: DeviceSpec) -> np.ndarray:
    """The profile's price of each row (seconds): one regressor call per phase and head shape."""
    out = np.full(len(rows), np.nan)
    rows = rows.assign(kv_bytes=np.where(rows.get("kv", pd.Series(index=rows.index)) == "fp8", 1.0, 2.0),
                       win=rows["window"].fillna(0).astype(int) if "window" in rows else 0)
    for (phase, hq, hkv, d, kvb, win), group in rows.groupby(["phase", "hq", "hkv", "d", "kv_bytes", "win"]):
        heads, at = (int(hq), int(hkv), int(d)), rows.index.get_indexer(group.index)
        ctx = group["ctx"].to_numpy(dtype=float)
        if phase == "decode":
            seen = np.minimum(ctx, win) if win else ctx
            out[at] = pred.attn_decode_s(group["batch"].to_numpy(dtype=float), seen, heads, kvb, device)
            continue
        q = group["q"].to_numpy(dtype=float)
        chunks = [windowed([int(k + n)], [int(n)], int(win)) for n, k in zip(q, ctx, strict=True)]
        reads = np.array([r[0] for r, _ in chunks], dtype=float)
        pairs = np.array([w for _, w in chunks], dtype=float)
        roof = roofline_s(4.0 * d * hq * pairs, d * q * hq * (kvb + 2.0) + 2.0 * d * reads * hkv * kvb,
                          device.flops_for("bf16"), device.hbm_bandwidth)
        out[at] = roof * pred.attn_prefill_ratio(q, reads - q, heads, device, kvb)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", type=Path, required=True)
    ap.add_argument("--rows", type=Path, required=True)
    args = ap.parse_args()
    pred = load_predictors(args.profile)
    device = load_device(pred.profile["device"])
    rows = read_shard(args.rows)
    rows = rows[(rows["status"] == "ok") & ((rows["phase"] == "prefill") | (rows["mix"] == "uniform"))]
    rows = rows.reset_index(drop=True)
    seen = read_shard(shard_path(args.profile, "attention"))
    seen_keys = set(zip(seen["phase"], seen["hq"], seen["hkv"], seen["d"], strict=True))
    rows["signed"] = predicted_s(pred, rows, device) / rows["median_s"] - 1.0
    rows["err"] = rows["signed"].abs()
    rows["seen"] = [(p, hq, hkv, d) in seen_keys for p, hq, hkv, d in
                    zip(rows["phase"], rows["hq"], rows["hkv"], rows["d"], strict=True)]
    groups = rows.groupby(["phase", "hq", "hkv", "d", "seen"])
    table = groups["err"].agg(rows="size", median="median", p90=lambda e: e.quantile(0.9))
    table["signed_median"] = groups["signed"].median()
    print(table.round(3).to_string())
    for phase, g in rows.groupby("phase"):
        unseen = g[~g["seen"]]["err"]
        print(f"{phase}: median |error| {g['err'].median():.1%} (unseen shapes {unseen.median():.1%}, "
              f"P90 {unseen.quantile(0.9):.1%}, {len(unseen)} rows)")


if __name__ == "__main__":
    main()
