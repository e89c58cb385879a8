"""Engine-version drift of kernel times, measured in the source itself.

For one GPU of an aiconfigurator checkout, every measured vLLM version's tables are converted
as the importer does (:mod:`latsim.calibration.aic_convert`) and each shape measured under
both a version and the newest is compared: the median ratio (older / newest, percent off)
per op family.  This is how far a profile from another vLLM version can be expected to be
from the engine latsim models, kernel by kernel.

    PYTHONPATH=. python scripts/aic_version_drift.py PATH [--device h200]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from latsim.calibration import aic_convert as conv
from latsim.calibration.aic_source import find_root, load_source, system_for, versions


def families(path: Path, device: str, version: str) -> dict[str, pd.DataFrame]:
    db = load_source(path, device, version, allow_partial=True)
    att_p, _ = conv.convert_prefill(db.frames["context_attention"])
    att_d, _ = conv.convert_decode(db.frames["generation_attention"])
    out = {"gemm": conv.convert_gemm(db.frames["gemm"])[0], "attn_prefill": att_p, "attn_decode": att_d}
    if "moe" in db.frames:
        out["moe"] = conv.convert_moe(db.frames["moe"])[0]
    if "allreduce" in db.frames:
        out["allreduce"] = conv.convert_allreduce(db.frames["allreduce"])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("path", type=Path)
    ap.add_argument("--device", default="h200")
    args = ap.parse_args()
    root = find_root(args.path)
    have = versions(root, system_for(args.device, root))
    newest = families(args.path, args.device, have[-1])
    print(f"| {args.device}: vLLM version vs {have[-1]} | family | shapes in both | median % off | p10 % | p90 % |")
    print("|---|---|---|---|---|---|")
    for ver in have[:-1]:
        old = families(args.path, args.device, ver)
        for fam, df in old.items():
            if fam not in newest:
                continue
            both = df.merge(newest[fam][["point_id", "median_s"]], on="point_id", suffixes=("", "_new"))
            if both.empty:
                continue
            off = 100.0 * (both["median_s"] / both["median_s_new"] - 1.0)
            p10, p50, p90 = np.percentile(off, [10, 50, 90])
            print(f"| {ver} | {fam} | {len(both)} | {p50:+.1f} | {p10:+.1f} | {p90:+.1f} |")


if __name__ == "__main__":
    main()
