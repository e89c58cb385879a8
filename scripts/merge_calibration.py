"""Merge one family table of a device calibration run into a shipped profile folder.

    python scripts/merge_calibration.py --profile latsim/data/calibration/h200 \\
        --run /tmp/cal/h200-full --family gemm --mode replace
    python scripts/merge_calibration.py --profile latsim/data/calibration/h200 \\
        --run /tmp/cal/h200-shapes --family attention --mode append

``replace`` swaps the profile's ``<family>.parquet`` for the run's; ``append`` adds the run's
rows whose ``point_id`` the profile lacks (a point both measured keeps the profile's row);
``update`` takes every row of the run, in place of the profile's row of the same ``point_id``
(a point both measured keeps the run's row; the profile's other rows stay).
``--only COLUMN=VALUE`` limits either to the rows where that column holds that value (e.g.
``--only dtype=fp8``: the fp8 GEMMs of a run replace the profile's fp8 GEMMs, its bf16 rows stay).
``profile.json`` gets a ``<family>_sources`` list entry naming the run (its date, grid, grid
hash, GPU, vLLM), the mode, the rows taken, the implementations and timers seen (runs before the
``timer`` column timed every call between events) and the sha256 of the
run's table, and its ``impl``/``counts`` are recomputed from the merged table.  Refit afterwards:
``latsim calibrate --fit-only --profile DIR``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path

import pandas as pd

from latsim.atomic import atomic_write_text
from latsim.costmodel.profile.tables import read_shard, shard_path, write_shard


def merge(profile: Path, run: Path, family: str, mode: str, only: tuple[str, str] | None = None) -> dict[str, object]:
    """Merge ``run``'s ``family`` table into ``profile`` (see the module note); the source record."""
    ours, theirs = read_shard(shard_path(profile, family)), read_shard(shard_path(run, family))
    if only is not None:
        theirs = theirs[theirs[only[0]].astype(str) == only[1]]
    if mode == "replace":
        kept = ours[ours[only[0]].astype(str) != only[1]] if only is not None else ours.iloc[:0]
        merged, taken = pd.concat([kept, theirs], ignore_index=True), len(theirs)
    elif mode == "update":
        kept = ours[~ours["point_id"].isin(theirs["point_id"])]
        merged, taken = pd.concat([kept, theirs], ignore_index=True), len(theirs)
    else:
        new = theirs[~theirs["point_id"].isin(ours["point_id"])]
        merged, taken = pd.concat([ours, new], ignore_index=True), len(new)
    write_shard(profile, family, merged.to_dict("records"))
    run_meta = json.loads((run / "profile.json").read_text())
    source = {"run_date_utc": run_meta["date_utc"], "grid": run_meta["grid"], "grid_hash": run_meta["grid_hash"],
              "gpu_name": run_meta["gpu_name"], "vllm": run_meta.get("vllm"), "mode": mode,
              "only": "=".join(only) if only else None, "rows_taken": taken,
              "impl": sorted(theirs["impl"].dropna().unique().tolist()),
              "timer": sorted(theirs["timer"].dropna().unique().tolist()) if "timer" in theirs else ["cuda-events"],
              "table_sha256": hashlib.sha256(shard_path(run, family).read_bytes()).hexdigest()}
    _update_profile(profile, family, merged, source)
    return source


def _update_profile(profile: Path, family: str, merged: pd.DataFrame, source: dict[str, object]) -> None:
    path = profile / "profile.json"
    doc = json.loads(path.read_text())
    doc.setdefault(f"{family}_sources", []).append(source)
    doc["impl"][family] = sorted(merged["impl"].dropna().unique().tolist())
    doc["counts"][family] = {str(k): int(v) for k, v in merged["status"].value_counts().sort_index().items()}
    atomic_write_text(path, json.dumps(doc, indent=1) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", type=Path, required=True)
    ap.add_argument("--run", type=Path, required=True, help="an unpacked device run folder")
    ap.add_argument("--family", required=True)
    ap.add_argument("--mode", choices=("replace", "append", "update"), required=True)
    ap.add_argument("--only", help="COLUMN=VALUE: merge only the rows holding it")
    args = ap.parse_args()
    only = None
    if args.only:
        column, sep, value = args.only.partition("=")
        if not sep or not column:
            ap.error(f"--only {args.only!r}: expected COLUMN=VALUE")
        only = (column, value)
    print(json.dumps(merge(args.profile, args.run, args.family, args.mode, only), indent=1))


if __name__ == "__main__":
    main()
