"""Fit decode attention's spread table from a skew-probe folder and write it beside the profile.

    python scripts/fit_decode_spread.py data/kernels/h200-skew-probe \
        --profile latsim/data/calibration/h200 [--write]

The fit is :mod:`latsim.calibration.spread_fit` (its module note says how); the folder holds
``skew_grid.json`` (``scripts/device_skew_probe.py --grid``, or ``latsim calibrate``'s probe) and,
when present, the held-out ``skew_probe.json``.  Without ``--write`` it prints the fit; with it,
writes ``<profile>/decode_spread.json`` (atomically) with the table, the fit's residuals, the
sources' sha256 and this command.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

from latsim.calibration.spread_fit import document
from latsim.calibration.unchanged import write_json_if_changed
from latsim.costmodel.spread import SPREAD_FILE


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("folder", type=Path, help="a skew-probe folder holding skew_grid.json (and skew_probe.json)")
    p.add_argument("--profile", type=Path, default=Path("latsim/data/calibration/h200"))
    p.add_argument("--write", action="store_true", help=f"write <profile>/{SPREAD_FILE}")
    args = p.parse_args(argv)
    command = " ".join(["python", "scripts/fit_decode_spread.py", *(sys.argv[1:] if argv is None else argv)])
    provenance = {"command": command, "commit": _commit(), "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}
    try:
        out = document(args.folder, provenance)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps({k: out[k] for k in ("tables", "cv_full", "fit")}, indent=1))
    if args.write:
        write_json_if_changed(args.profile / SPREAD_FILE, out)
        print(f"wrote {args.profile / SPREAD_FILE}")
    return 0


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


if __name__ == "__main__":
    raise SystemExit(main())
