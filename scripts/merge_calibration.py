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
``--at-most COLUMN=VALUE`` takes only the run's rows whose numeric column is at most the value
(``--at-most M=512``: the GEMMs of steps vLLM replays from CUDA graphs), ``--at-least`` those at
least it (both: a band, e.g. the rows an imported table skipped), and ``--known-points``
only those of points the profile already holds (a re-timing that adds no new shapes).
``--into TABLE`` merges into the profile's ``TABLE.parquet`` instead of the family's (created when
missing): the ``decode-tiles`` grid's attention rows go to ``decode_tiles``, which the fit reads
for FA3's key tile and does not fit the attention regressor on (``latsim.costmodel.profile.tiles``).
``profile.json`` gets a ``<family>_sources`` (``<TABLE>_sources``) list entry naming the run (its date, grid, grid
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


def merge(profile: Path, run: Path, family: str, mode: str, only: tuple[str, str] | None = None,
          at_most: tuple[str, float] | None = None, known_points: bool = False,
          into: str | None = None, at_least: tuple[str, float] | None = None) -> dict[str, object]:
    """Merge ``run``'s ``family`` table into ``profile``'s ``into`` table (default: the family's;
    see the module note); the source record."""
    into = into or family
    theirs = read_shard(shard_path(run, family))
    ours_path = shard_path(profile, into)
    ours = read_shard(ours_path) if into == family or ours_path.is_file() else theirs.iloc[:0]
    if only is not None:
        theirs = theirs[theirs[only[0]].astype(str) == only[1]]
    if at_most is not None:
        theirs = theirs[pd.to_numeric(theirs[at_most[0]]) <= at_most[1]]
    if at_least is not None:
        theirs = theirs[pd.to_numeric(theirs[at_least[0]]) >= at_least[1]]
    if known_points:
        theirs = theirs[theirs["point_id"].isin(ours["point_id"])]
    if mode == "replace":
        kept = ours[ours[only[0]].astype(str) != only[1]] if only is not None else ours.iloc[:0]
        merged, taken = pd.concat([kept, theirs], ignore_index=True), len(theirs)
    elif mode == "update":
        kept = ours[~ours["point_id"].isin(theirs["point_id"])]
        merged, taken = pd.concat([kept, theirs], ignore_index=True), len(theirs)
    else:
        new = theirs[~theirs["point_id"].isin(ours["point_id"])]
        merged, taken = pd.concat([ours, new], ignore_index=True), len(new)
    write_shard(profile, into, merged.to_dict("records"))
    run_meta = json.loads((run / "profile.json").read_text())
    source = {"run_date_utc": run_meta["date_utc"], "grid": run_meta["grid"], "grid_hash": run_meta["grid_hash"],
              "gpu_name": run_meta["gpu_name"], "vllm": run_meta.get("vllm"), "mode": mode,
              "only": "=".join(only) if only else None, "rows_taken": taken,
              "at_most": f"{at_most[0]}<={at_most[1]:g}" if at_most else None,
              "at_least": f"{at_least[0]}>={at_least[1]:g}" if at_least else None, "known_points": known_points,
              "impl": sorted(theirs["impl"].dropna().unique().tolist()),
              "timer": sorted(theirs["timer"].dropna().unique().tolist()) if "timer" in theirs else ["cuda-events"],
              "table_sha256": hashlib.sha256(shard_path(run, family).read_bytes()).hexdigest()}
    _update_profile(profile, into, merged, source)
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
    ap.add_argument("--at-most", help="COLUMN=NUMBER: merge only the rows whose column is at most the number")
    ap.add_argument("--at-least", help="COLUMN=NUMBER: merge only the rows whose column is at least the number")
    ap.add_argument("--known-points", action="store_true", help="merge only points the profile already holds")
    ap.add_argument("--into", help="the profile's table to merge into (default: the family's)")
    args = ap.parse_args()
    only = _pair(ap, "--only", args.only) if args.only else None
    at_most = _bound(ap, "--at-most", args.at_most) if args.at_most else None
    at_least = _bound(ap, "--at-least", args.at_least) if args.at_least else None
    print(json.dumps(merge(args.profile, args.run, args.family, args.mode, only, at_most, args.known_points,
                           args.into, at_least), indent=1))


def _bound(ap: argparse.ArgumentParser, flag: str, text: str) -> tuple[str, float]:
    """``COLUMN=NUMBER`` as (column, number), or the parser's usage error (exit 2)."""
    column, value = _pair(ap, flag, text)
    try:
        return column, float(value)
    except ValueError:
        ap.error(f"{flag} {text!r}: {value!r} is not a number")


def _pair(ap: argparse.ArgumentParser, flag: str, text: str) -> tuple[str, str]:
    """``COLUMN=VALUE`` split, or the parser's usage error (exit 2)."""
    column, sep, value = text.partition("=")
    if not sep or not column:
        ap.error(f"{flag} {text!r}: expected COLUMN=VALUE")
    return column, value


if __name__ == "__main__":
    main()
