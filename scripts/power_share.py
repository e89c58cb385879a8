"""The power-cap model's capped time beside the live clock, per load level (issue 17).

For every live run recorded with ``nvidia-smi`` beside it (``data/power/h200/runs.json``), each
level is replayed as ``latsim validate`` replays it, with the replica's power clock
(:class:`latsim.costmodel.power.PowerClock`) watched step by step.  Printed per level:

* ``smi_below_1800``: the share of the level's 100 ms ``nvidia-smi`` samples with the SM clock
  under 1,800 MHz (the GPU held down by its cap; ``scripts/power_summary.py``'s column);
* ``model_capped``: the share of the level's wall time the model spends in capped heavy work
  (each heavy step's capped seconds at the capped ratio, over the level's span);
* ``model_heavy``: the share spent in heavy work at either clock.

A diagnostic of the budget's dynamics on real workloads (they were fitted on one GEMM's duty
cycles), not a fit: nothing here writes a parameter.

    python scripts/power_share.py data/power/h200 [--device h200] [--profile DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import pandas as pd

from latsim.costmodel import power as power_module
from latsim.validate.compare import compare_run

sys.path.insert(0, str(Path(__file__).parent))
from power_summary import live_clocks  # a neighbour script


class Watch:
    """Wraps ``PowerClock.end`` to add up heavy, full-clock and capped seconds of the replay."""

    def __init__(self) -> None:
        self.heavy = self.capped = 0.0
        self.first = self.last = None
        self._end = power_module.PowerClock.end

    def install(self) -> None:
        watch = self

        def end(clock: Any, cost: Any, shape: Any, start: float, stop: float) -> float:
            out: float = watch._end(clock, cost, shape, start, stop)
            watch.first = start if watch.first is None else min(watch.first, start)
            watch.last = out if watch.last is None else max(watch.last, out)
            if out != stop:
                heavy, full_ratio, capped_ratio = cost.heavy_parts(shape)
                heavy = min(heavy, stop - start)
                # out - stop = full (full_ratio - 1) + (heavy - full) (capped_ratio - 1): solve for full
                full = ((out - stop) - heavy * (capped_ratio - 1.0)) / (full_ratio - capped_ratio)
                watch.heavy += heavy
                watch.capped += max(0.0, heavy - full) * capped_ratio
            return out

        power_module.PowerClock.end = end  # type: ignore[method-assign]

    def reset(self) -> None:
        self.heavy = self.capped = 0.0
        self.first = self.last = None


def level_shares(run_dir: Path, device: str, watch: Watch, profile: Path | None = None) -> pd.DataFrame:
    rows = []
    for level_dir in sorted(p for p in run_dir.iterdir() if (p / "meta.json").exists()):
        watch.reset()
        compare_run(level_dir, device, profile=profile)
        span = (watch.last - watch.first) if watch.first is not None else float("nan")
        rows.append({"level": level_dir.name, "model_heavy": round(watch.heavy / span, 2) if span else 0.0,
                     "model_capped": round(watch.capped / span, 2) if span else 0.0})
    return pd.DataFrame(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--device", default="h200")
    ap.add_argument("--profile", type=Path, help="a calibration profile folder instead of the shipped one")
    args = ap.parse_args()
    watch = Watch()
    watch.install()
    for smi_name, run in json.loads((args.folder / "runs.json").read_text()).items():
        run_dir = Path(run)
        clocks = live_clocks(args.folder / smi_name, run_dir)[["level", "share_below_1800"]]
        table = clocks.rename(columns={"share_below_1800": "smi_below_1800"}).merge(
            level_shares(run_dir, args.device, watch, args.profile), on="level")
        print(f"{smi_name} ({run})")
        print(table.to_string(index=False))


if __name__ == "__main__":
    main()
