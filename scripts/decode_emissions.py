"""Pure decode steps of measured levels against the cost model's price of the same batch.

    python scripts/decode_emissions.py data/validation/h200-s25/llama-3.1-70b-gptq-fixed-in512-out128/f0.90 [...]

A level's streamed token times split into one emission per engine step
(``launch_gaps.split_emissions``); a gap between two emissions is that step's time when
neither of them, nor the next, carries a first token (no prompt in the step, none launched
beside it, the step not held by a graph-less launch).  Those gaps are grouped by the step's
sequences (the emission's tokens) into :data:`BUCKETS`; per group the median gap beside the cost
model's time of a decode step of the group's median sequences, replayed as ``latsim validate``
does (``--host-speed``: a number, or ``probe`` for the level's own reading; default 1), its
contexts spread evenly over the prompt plus 1 to the prompt plus the output (a fixed shape:
``fixed:in=I,out=O``; other shapes' contexts are not known per step and are refused, exit 2).
``ratio`` is the model over the measured: below 1, the model's step is too fast.  Groups of fewer
than ``--min-steps`` steps are left out.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import numpy as np
from launch_gaps import carrying_emission, split_emissions

from latsim.costmodel.batch import BatchShape
from latsim.deployment import resolve_engine
from latsim.measure.records import load_run
from latsim.sim.simulate import default_cost_model
from latsim.validate.compare import host_probe_ms, host_speed_option, replay_deployment

BUCKETS = (0, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 1024)
"""Upper edges of the sequence groups (a step of 40 sequences is in (32, 48])."""


def pure_decode_steps(times: np.ndarray, first_tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(seconds, sequences)`` of the pure decode steps in the sorted token times ``times``:
    the gap before each emission that carries no first token, whose previous and next emissions
    carry none either (see the module note)."""
    starts, counts = split_emissions(times)
    firsts = np.bincount(carrying_emission(starts, first_tokens), minlength=len(starts))
    gap = np.diff(starts)
    k = np.arange(1, len(starts) - 1)  # the emission ending gap k - 1; its neighbours on both sides exist
    keep = (firsts[k] == 0) & (firsts[k - 1] == 0) & (firsts[k + 1] == 0)
    return gap[k[keep] - 1], counts[k[keep]]


def fixed_contexts(shape: dict[str, Any], seqs: int) -> list[int]:
    """``seqs`` contexts spread evenly over a fixed shape's prompt + 1 to prompt + output tokens."""
    prompt, out = int(shape["in"]), int(shape["out"])
    return [int(c) for c in np.linspace(prompt + 1, prompt + out, seqs).round()]


def level_rows(run: Path, host_speed: float | str, device: str, min_steps: int) -> tuple[dict, list[dict]]:
    """The level's meta (a dict) and one row per sequence group (see the module note)."""
    m = load_run(run)
    shape = (m.meta.get("workload") or {}).get("shape") or {}
    if shape.get("kind") != "fixed":
        raise ValueError(f"{run}: shape {shape.get('kind')!r} is not a fixed one (fixed:in=I,out=O); "
                         f"its steps' contexts are not known")
    ok = m.requests[m.requests["status"] == "ok"]
    times = np.sort(np.concatenate([np.asarray(c, dtype=float) for c in ok["chunk_times_s"]]))
    gaps, seqs = pure_decode_steps(times, ok["first_token_s"].to_numpy(dtype=float))
    dep = replay_deployment(m.meta, device, host_speed)
    cost = default_cost_model(dep, resolve_engine(dep))
    rows = []
    for lo, hi in itertools.pairwise(BUCKETS):
        sel = (seqs > lo) & (seqs <= hi)
        if sel.sum() < min_steps:
            continue
        n = int(np.median(seqs[sel]))
        measured = float(np.median(gaps[sel]))
        model = cost.step_time(BatchShape.from_chunks([], fixed_contexts(shape, n)))
        rows.append({"group": f"({lo}, {hi}]", "steps": int(sel.sum()), "seqs": n, "measured_ms": 1e3 * measured,
                     "model_ms": 1e3 * model, "ratio": model / measured})
    return m.meta, rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path, help="measured levels of a fixed shape")
    ap.add_argument("--host-speed", default="1", help="a number, or probe")
    ap.add_argument("--device", default="h200")
    ap.add_argument("--min-steps", type=int, default=10)
    args = ap.parse_args(argv)
    try:
        args.host_speed = host_speed_option(args.host_speed)
    except ValueError as err:
        ap.error(str(err))
    if args.min_steps < 1:
        ap.error(f"--min-steps {args.min_steps}: expected a whole number >= 1")
    for run in args.runs:
        try:
            meta, rows = level_rows(run, args.host_speed, args.device, args.min_steps)
        except (ValueError, FileNotFoundError) as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        probe = host_probe_ms(meta)
        print(f"{run}  probe {'-' if probe is None else f'{probe:.2f} ms'}")
        for r in rows:
            print(f"  {r['group']:12s} steps {r['steps']:5d}  seqs {r['seqs']:4d}  measured {r['measured_ms']:7.2f} ms"
                  f"  model {r['model_ms']:7.2f} ms  ratio {r['ratio']:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
