"""Measure the front end's time per output ahead of a new request's first token.

    python scripts/output_lag.py data/validation/h200-repeat/phi-3-mini-*/f0.* [--write]

A run that kept vLLM's engine-side times (``latsim.measure.records``: ``engine_first_token_s``
is the engine core's stamp of the step output that carried the first token) shows how long the
output path took: the client's first token less that stamp.  The front end hands a step's
outputs on in the order the scheduler listed them, running requests first and a new request
last, so that lag grows with the requests running beside it (engine-scheduled at or before the
stamp, their last token at or after it: ``ahead``).  Per level this prints the least-squares
line ``lag = a + b x ahead``, with ``b`` also at the reference host (``b x host speed``, the
speed from the level's host probe: the work is the front end's CPU time); pooled, the line
through every request's lag at the reference host (``lag x speed`` on ``ahead``).  The pooled
slope is ``output_seq_s``; the intercept stays in the fitted ``frontend_s``
(``scripts/fit_engine_host.py``), which also carries the input path.  Only open-loop levels
are used (a burst's front end falls behind by a whole backlog).  ``--write`` puts
``output_seq_s`` into the ``calibrated`` entry of the host-terms file (``--yaml``) to
:data:`DECIMALS` places, with its provenance.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from latsim.engines.vllm import host_write
from latsim.measure.records import load_run
from latsim.provenance import display_path, round_decimals, run_inputs, significant
from latsim.sim.simulate import running_at
from latsim.validate.compare import run_host_speed

DECIMALS = 8
"""Decimal places of the written term (0.01 us)."""


def lags(requests: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """``(lag seconds, requests running ahead)`` of each ``ok`` request with engine times."""
    ok = requests[(requests["status"] == "ok") & requests["engine_first_token_s"].notna()
                  & requests["engine_scheduled_s"].notna() & requests["engine_last_token_s"].notna()]
    stamp = ok["engine_first_token_s"].to_numpy(dtype=float)
    scheduled, last = (ok[col].to_numpy(dtype=float) for col in ("engine_scheduled_s", "engine_last_token_s"))
    running = running_at(scheduled, last, stamp)
    return ok["first_token_s"].to_numpy(dtype=float) - stamp, np.maximum(running - 1, 0).astype(float)


def line(ahead: np.ndarray, lag: np.ndarray) -> tuple[float, float]:
    """``(intercept, slope)`` of the least-squares line of ``lag`` on ``ahead``."""
    if len(lag) < 3 or np.ptp(ahead) == 0:
        raise SystemExit("too few requests, or all with the same count ahead, to fit a line")
    slope, intercept = np.polyfit(ahead, lag, 1)
    return float(intercept), float(slope)


def level(run: Path) -> dict[str, object] | None:
    """One open-loop level's line, its host speed and its points at the reference host;
    ``None`` for a burst or a run without engine times."""
    m = load_run(run)
    if (m.meta.get("load") or {}).get("mode") != "open":
        return None
    lag, ahead = lags(m.requests)
    if len(lag) == 0:
        return None
    speed = run_host_speed(m.meta, "probe")
    a, b = line(ahead, lag)
    return {"run": run, "requests": len(lag), "ahead_p50": float(np.median(ahead)), "lag_p50_s": float(np.median(lag)),
            "a_s": a, "b_s": b, "speed": speed, "points": (ahead, lag * speed)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path, help="levels that kept vLLM's engine times")
    ap.add_argument("--yaml", type=Path, default=host_write.shipped_path(), help="the host-terms file")
    ap.add_argument("--write", action="store_true", help="write output_seq_s into --yaml")
    args = ap.parse_args()
    levels = [lv for lv in (level(run) for run in args.runs) if lv is not None]
    if not levels:
        raise SystemExit("no open-loop level with vLLM's engine times (engine_first_token_s) among the runs")
    for lv in levels:
        print(f"{display_path(lv['run']):62s} n {lv['requests']:4d}  ahead p50 {lv['ahead_p50']:4.0f}  "
              f"lag p50 {lv['lag_p50_s'] * 1e3:5.2f} ms  a {lv['a_s'] * 1e3:5.2f} ms  b {lv['b_s'] * 1e6:6.1f} us  "
              f"speed {lv['speed']:.2f}  b at speed 1 {lv['b_s'] * lv['speed'] * 1e6:6.1f} us")
    ahead = np.concatenate([lv["points"][0] for lv in levels])
    lag = np.concatenate([lv["points"][1] for lv in levels])
    a, b = line(ahead, lag)
    per_level = [lv["b_s"] * lv["speed"] for lv in levels]
    print(f"pooled at speed 1 ({len(levels)} levels, {len(lag)} requests): a {a * 1e3:.2f} ms, "
          f"output_seq_s {b * 1e6:.1f} us (per level at speed 1: median {np.median(per_level) * 1e6:.1f}, "
          f"p10 {np.percentile(per_level, 10) * 1e6:.1f}, p90 {np.percentile(per_level, 90) * 1e6:.1f} us)")
    if args.write:
        results = significant({"levels": len(levels), "requests": len(lag), "intercept_s": a, "output_seq_s": b,
                               "per_level_at_speed_1_s": per_level}, 6)
        write(args, b, results)


def write(args: argparse.Namespace, slope: float, results: dict) -> None:
    """Write ``output_seq_s`` and its provenance into ``args.yaml``."""
    inputs = {"runs": run_inputs(args.runs), "decimals": {"output_seq_s": DECIMALS}}
    host_write.write_or_exit(args.yaml, {"output_seq_s": round_decimals(slope, DECIMALS)}, inputs, results,
                             script="output_lag")


if __name__ == "__main__":
    main()
