"""Correct a shipped imported profile's bf16 GEMM rows by the source harness's bias on the H200.

The rule and why: :mod:`latsim.calibration.aic_bias`.  ``latsim calibrate --import`` applies it
itself to a GPU of the H200's chip; this script applies it to a profile already imported (the
source checkout is not needed: the profile keeps the source's times in ``source_median_s``, and a
second run gives the same files).

    PYTHONPATH=. python scripts/aic_harness_bias.py [--device h100] [--folder PATH]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from latsim.calibration.aic_bias import correct_imported
from latsim.catalog import load_device
from latsim.costmodel.profile.store import shipped_profile_dir


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="h100")
    ap.add_argument("--folder", type=Path, default=None, help="the imported profile (default: the shipped one)")
    args = ap.parse_args(argv)
    device = load_device(args.device)
    folder = args.folder or shipped_profile_dir(device.name)
    try:
        summary = correct_imported(folder, device)
    except ValueError as exc:
        raise SystemExit(str(exc)) from None
    print(json.dumps({"folder": str(folder), **summary}, indent=1))


if __name__ == "__main__":
    main()
