"""Calibrate the GPU of the machine this runs on; meant for the bare GPU image (python3).

    PYTHONUNBUFFERED=1 python3 -m latsim.calibration.run_device --device h200 --out $OUT --quick-too

Runs the ``quick`` grid (when ``--quick-too``) and then the ``full`` grid, each into
``/tmp/latsim-calib/<grid>/`` under a time cap, packs each folder into
``<out>/<device>-<grid>.tar.gz`` (the device tool returns at most 8 files) and prints the
per-family timing table of each.  Needs torch, numpy, pandas, pyarrow and rich; never imports
the catalog, xgboost or simpy.  Exit status 2 when the GPU is missing or is not ``--device``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tarfile
from pathlib import Path

from rich.console import Console

from latsim.calibration.grid import FAMILIES
from latsim.calibration.progress import RunDisplay, timing_table
from latsim.calibration.runner import RunRequest, run_calibration
from latsim.calibration.timing import HEAVY_TIMINGS, OP_TIMINGS

CAPS_S = {"quick": 80.0, "full": 330.0, "shapes": 150.0, "wide": 90.0, "msteps": 150.0, "paged": 170.0,
          "decode-tiles": 150.0, "paged-prefill": 240.0, "msteps-high": 120.0, "w4a16": 200.0, "w4-steps": 120.0,
          "fp8-kv": 150.0, "window": 90.0, "heavy-gemm": 540.0, "heavy-gemm-steps": 120.0, "decode-batches": 150.0,
          "decode-batches-check": 120.0, "msteps-low": 120.0, "moe-steps": 90.0,
          "live-steps": 120.0, "narrow": 60.0}
WORK = Path("/tmp/latsim-calib")


def _parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="h200", help="catalog name the GPU must match")
    ap.add_argument("--out", type=Path, required=True, help="folder for the .tar.gz results")
    ap.add_argument("--quick-too", action="store_true", help="run the quick grid before the full one")
    ap.add_argument("--only", choices=tuple(CAPS_S), help="run just this grid (shapes: the attention-shape study)")
    ap.add_argument("--backend", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--op-timing", default="graph", choices=OP_TIMINGS,
                    help="GEMMs, memory ops and MoE layers: replayed in CUDA graphs (as vLLM runs them) or one call at "
                         "a time between events")
    ap.add_argument("--heavy-timing", default="burst", choices=HEAVY_TIMINGS,
                    help="the same operators above the CUDA-graph size: right after the point before (burst) or "
                         "at the full clock after an idle pause, inside its budget (cool)")
    ap.add_argument("--families", default=",".join(FAMILIES),
                    help=f"comma-separated families to run (of {','.join(FAMILIES)})")
    args = ap.parse_args(argv)
    args.families = tuple(f.strip() for f in args.families.split(",") if f.strip())
    unknown = sorted(set(args.families) - set(FAMILIES))
    if unknown or not args.families:
        ap.error(f"--families {','.join(unknown) or '(empty)'}: not a family; known: {', '.join(FAMILIES)}")
    return args


def _run_grid(grid: str, args: argparse.Namespace, console: Console) -> dict[str, object]:
    folder = WORK / grid
    display = RunDisplay(console)
    req = RunRequest(out=folder, device=args.device if args.backend == "cuda" else "cpu", grid=grid,
                     backend=args.backend, resume=True, max_seconds=CAPS_S[grid],
                     families=args.families, op_timing=args.op_timing, heavy_timing=args.heavy_timing)
    try:
        profile = run_calibration(req, on_point=display.on_point, on_start=display.on_start)
    finally:
        display.close()
    args.out.mkdir(parents=True, exist_ok=True)
    with tarfile.open(args.out / f"{args.device}-{grid}.tar.gz", "w:gz") as tar:
        tar.add(folder, arcname=f"{args.device}-{grid}")
    console.print(timing_table(profile, f"{grid} grid on {profile['gpu_name']} "
                                        f"({'complete' if profile['complete'] else 'STOPPED AT TIME CAP'})"))
    return profile


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    console = Console(width=110)
    grids = [args.only] if args.only else (["quick", "full"] if args.quick_too else ["full"])
    summary = {}
    for grid in grids:
        try:
            profile = _run_grid(grid, args, console)
        except ValueError as exc:
            console.print(f"error: {exc}")
            return 2
        summary[grid] = {k: profile[k] for k in ("gpu_name", "duration_s", "complete", "counts", "family_seconds",
                                                  "clocks", "impl")}
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1))
    console.print(json.dumps({g: {"s": s["duration_s"], "complete": s["complete"]} for g, s in summary.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
