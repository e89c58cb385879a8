"""How fast the engine works through a burst's prompts, measured against the replay's.

    python scripts/burst_prefill.py data/validation [--host-speed probe] [--csv OUT.csv]

A saturation burst sends every request at once; the engine then runs steps of its full token
budget, mostly prompt tokens, and the requests' first tokens come out in order.  Sorted by TTFT
against the prompt tokens before them (cumulative), the first tokens lie on a line whose slope
is the engine's time per prompt token: its prefill throughput, GPU-bound where the steps are
large.  The slope is read over the middle 80 % of the requests (the first steps carry no decode
rows, the last few the stragglers), on the measured run and on the simulator's replay of it
(``latsim validate``'s replay), and their ratio says how the cost model prices a prompt-heavy step
of this deployment: 1.00 exact, above 1 too slow.  Where the run's deadline cut requests off, both
sides are read over the requests the live engine finished (as ``latsim validate`` compares them).

Prints one line per burst (device, run, slopes in microseconds per prompt token, ratio) and the
median ratio per model and device.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import pandas as pd

from latsim.atomic import atomic_write_text
from latsim.measure.records import read_meta
from latsim.validate.compare import compare_run, find_runs, finished_live, host_speed_option, recorded_device

MIDDLE = (0.1, 0.9)
"""The share of a burst's requests, in TTFT order, the slope is fitted over."""


def prefill_slope(records: pd.DataFrame) -> float:
    """Seconds per prompt token: the slope of the ``ok`` requests' TTFT against the prompt tokens
    of the requests before them, fitted over :data:`MIDDLE`; NaN with fewer than 10 requests."""
    ok = records[records["status"] == "ok"]
    ttft = (ok["first_token_s"] - ok["arrival_s"]).to_numpy(dtype=float)
    order = np.argsort(ttft, kind="stable")
    ttft, tokens = ttft[order], ok["input_tokens"].to_numpy(dtype=float)[order]
    n = len(ttft)
    if n < 10:
        return float("nan")
    lo, hi = int(MIDDLE[0] * n), int(MIDDLE[1] * n)
    return float(np.polyfit(np.cumsum(tokens)[lo:hi], ttft[lo:hi], 1)[0])


def burst_runs(root: Path) -> list[Path]:
    """Every saturation burst (a run whose load sent all its requests at once) under ``root``."""
    return [r for r in find_runs(root) if r.name == "burst" or (read_meta(r).get("load") or {}).get("mode") == "burst"]


def burst_row(run: Path, host_speed: float | str) -> dict[str, object]:
    """One burst's measured and replayed prefill slopes (us per prompt token) and their ratio."""
    meta = read_meta(run)
    device = recorded_device(meta) or "h200"
    cmp = compare_run(run, device, host_speed=host_speed)
    replayed = finished_live(cmp.predicted_records, cmp.measured_records)
    measured, predicted = prefill_slope(cmp.measured_records), prefill_slope(replayed)
    return {"device": device, "run": str(run), "model": cmp.deployment.model.name, "tp": cmp.deployment.tp,
            "measured_us": 1e6 * measured, "predicted_us": 1e6 * predicted, "ratio": predicted / measured}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root", type=Path)
    ap.add_argument("--host-speed", default="probe")
    ap.add_argument("--csv", type=Path, default=None)
    args = ap.parse_args(argv)
    try:
        speed = host_speed_option(args.host_speed)
        runs = burst_runs(args.root)
    except ValueError as exc:
        ap.error(str(exc))
    if not runs:
        raise SystemExit(f"no saturation burst under {args.root}")
    rows = []
    for run in runs:
        row = burst_row(run, speed)
        rows.append(row)
        print(f"{row['device']:5s} {row['run']}  measured {row['measured_us']:7.2f}  replayed "
              f"{row['predicted_us']:7.2f} us a prompt token  ratio {row['ratio']:.3f}", flush=True)
    groups: dict[tuple[str, str, int], list[float]] = defaultdict(list)
    for row in rows:
        groups[(str(row["device"]), str(row["model"]), int(row["tp"]))].append(float(row["ratio"]))
    print("\nmedian replayed / measured per device, model and TP:")
    for (device, model, tp), ratios in sorted(groups.items()):
        print(f"  {device:5s} {model:24s} TP{tp}  {np.median(ratios):.3f}  ({len(ratios)} bursts, "
              f"{min(ratios):.3f}-{max(ratios):.3f})")
    if args.csv is not None:
        atomic_write_text(args.csv, pd.DataFrame(rows).to_csv(index=False))


if __name__ == "__main__":
    sys.exit(main())
