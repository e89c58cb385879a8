"""Take TTFT apart on live runs that kept vLLM's engine-side times, beside the simulator's replay.

A request's time to first token, as the client sees it, is four parts (the engine's own
timestamps, ``latsim.measure.records``):

* ``front_end``: sent by the client to queued in the engine core (the input path: the
  front-end process, its IPC to the engine core);
* ``queue``: queued to its first scheduled step (waiting for the running step to end, and
  for the token budget);
* ``prefill``: first scheduled step began to the engine core emitting the step output with
  the first token (the prefill chunks and the step that samples the first token);
* ``output``: that output to the client (the output path: detokenisation skipped, IPC back,
  the front-end's output processing, the client's event loop).

The simulator's replay of the same run (``latsim validate``'s, at the run's host speed with
``--host-speed probe``) gives ``queue`` (the start of its first step minus arrival) and ``prefill``
(first token minus that start) and one front-end latency, ``frontend_s``, which it
adds to every token; the measured ``front_end + output`` is what that term stands for, less the
part of ``output`` that grows with the requests running (``output_seq_s`` per request, which
the replay adds to each first token and so shows inside its ``prefill``;
``scripts/output_lag.py`` measures it).

    python scripts/ttft_parts.py data/validation/h200-fidelity/llama-3.1-8b-mix-timed [--host-speed probe]

prints, per level, the mean of each part in milliseconds (means add up to the mean TTFT;
medians do not), measured and simulated, ``before_output`` (``front_end + queue + prefill``:
arrival to the engine's output of the first token), and the TTFT's median and p90.

    python scripts/ttft_parts.py data/validation/h100-s51/qwen1.5-moe-a2.7b-mix --by-graph [--host-speed probe]

splits each level's requests instead by whether the prompt's uncomputed tokens fit the run's
CUDA graphs (``graph``: at most the replayed engine's graph limit, ``graph_tokens``) or not (``eager``:
its step runs without graphs, launch-bound on a small GPU load) and prints each group's TTFT
median, measured and simulated, beside the whole level's, and over a folder of runs the pooled
errors per level name (``pooled_graph_errors``).  It needs no engine-side times.  A
level whose prompts straddle the limit has a TTFT of two modes; its median falls in the gap or
at the edge of the upper mode, where a few requests moving between the modes move it far, so
each mode's median says where the model is off and the level's median alone may not.

The two sides end ``queue`` at different events.  vLLM stamps ``scheduled`` when its scheduler
puts the request in a step; under asynchronous scheduling that is one step before the step
runs (decided while the step before it is still on the GPU), and the engine core takes a new
request in only between steps, so the measured ``queue`` is about zero and the wait for the
running step is in ``front_end``.  The replay's ``queue`` ends when the request's step starts.
So the length of a step moves from ``prefill`` (measured) to ``queue`` (simulated), and the
measured wait for the running step sits in ``front_end``: compare ``before_output`` (the
replay's includes the output path's share of ``frontend_s``, a few milliseconds) and the whole
TTFT, not the parts one by one.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from latsim.deployment import resolve_engine
from latsim.engines.vllm.engine import graph_tokens
from latsim.measure.records import load_run
from latsim.sim.simulate import default_cost_model
from latsim.validate.compare import compare_run, find_runs, recorded_device

PARTS = ("front_end", "queue", "prefill", "output", "ttft")


def measured_parts(requests: pd.DataFrame) -> pd.DataFrame:
    """The four parts of each ``ok`` request with engine times (seconds); empty without them."""
    ok = requests[(requests["status"] == "ok") & requests["engine_first_token_s"].notna()]
    return pd.DataFrame({
        "front_end": ok["engine_queued_s"] - ok["sent_s"],
        "queue": ok["engine_scheduled_s"] - ok["engine_queued_s"],
        "prefill": ok["engine_first_token_s"] - ok["engine_scheduled_s"],
        "output": ok["first_token_s"] - ok["engine_first_token_s"],
        "ttft": ok["first_token_s"] - ok["sent_s"],
    })


def simulated_parts(records: pd.DataFrame, frontend_s: float) -> pd.DataFrame:
    """The replay's parts.  Its one front-end term stands for both the input and the output
    path; it is put in ``front_end`` whole, and ``output`` is zero."""
    done = records[records["status"] == "ok"]
    first = done["first_token_s"] - frontend_s
    return pd.DataFrame({
        "front_end": np.full(len(done), frontend_s),
        "queue": done["first_scheduled_s"] - done["arrival_s"],
        "prefill": first - done["first_scheduled_s"],
        "output": np.zeros(len(done)),
        "ttft": done["first_token_s"] - done["arrival_s"],
    })


def level_rows(run_dir: Path, host_speed: float | str) -> list[dict[str, object]]:
    """One row per side (measured, simulated) of one level: each part's mean, TTFT's p50/p90, in ms."""
    m = load_run(run_dir)
    measured = measured_parts(m.requests)
    if measured.empty:
        return []
    cmp = compare_run(run_dir, recorded_device(m.meta) or "h200", host_speed=host_speed)
    frontend = default_cost_model(cmp.deployment, resolve_engine(cmp.deployment)).frontend_s
    sides = {"measured": measured, "simulated": simulated_parts(cmp.predicted_records, frontend)}
    rows = []
    for side, parts in sides.items():
        row: dict[str, object] = {"level": cmp.level, "side": side, "n": len(parts)}
        for part in PARTS:
            row[part] = 1e3 * float(parts[part].mean())
        row["before_output"] = 1e3 * float((parts["front_end"] + parts["queue"] + parts["prefill"]).mean())
        row["ttft_p50"] = 1e3 * float(parts["ttft"].median())
        row["ttft_p90"] = 1e3 * float(parts["ttft"].quantile(0.9))
        rows.append(row)
    return rows


def graph_groups(records: pd.DataFrame, limit: int) -> dict[str, pd.Series]:
    """The ``ok`` requests' TTFTs (seconds): all, those whose prompt's uncomputed tokens fit a
    CUDA graph of ``limit`` tokens (``graph``) and the rest (``eager``)."""
    ok = records[records["status"] == "ok"]
    ttft = ok["first_token_s"] - ok["arrival_s"]
    new = ok["input_tokens"] - ok["cached_tokens"].fillna(0)
    return {"all": ttft, "graph": ttft[new <= limit], "eager": ttft[new > limit]}


def graph_rows(run_dir: Path, host_speed: float | str) -> list[dict[str, object]]:
    """One row per side of one level: the TTFT median (ms) and count of all its requests and of
    each graph group (:func:`graph_groups`, at the graph limit of the engine the replay runs)."""
    m = load_run(run_dir)
    cmp = compare_run(run_dir, recorded_device(m.meta) or "h200", host_speed=host_speed)
    limit = graph_tokens(resolve_engine(cmp.deployment))
    rows, run = [], f"{run_dir.parent.parent.name}/{run_dir.parent.name}"
    for side, records in (("measured", cmp.measured_records), ("simulated", cmp.predicted_records)):
        row: dict[str, object] = {"run": run, "level": cmp.level, "side": side, "limit": limit}
        for name, ttft in graph_groups(records, limit).items():
            row[f"n_{name}"] = len(ttft)
            row[f"p50_{name}"] = 1e3 * float(ttft.median()) if len(ttft) else float("nan")
        rows.append(row)
    return rows


MODES = ("all", "graph", "eager")
MIN_MODE = 5
"""A level enters the pooled errors only with at least this many requests in each mode."""


def pooled_graph_errors(table: pd.DataFrame) -> pd.DataFrame:
    """Per level name, over the levels of :func:`graph_rows` rows with both modes (``MIN_MODE``
    requests each, measured): the count and the median signed and absolute error (percent, the
    simulated median over the measured) of the level's TTFT median and of each mode's."""
    sides = table.set_index(["run", "level", "side"]).unstack("side")
    both = sides[(sides[("n_graph", "measured")] >= MIN_MODE) & (sides[("n_eager", "measured")] >= MIN_MODE)]
    errors = pd.DataFrame({m: 100 * (both[(f"p50_{m}", "simulated")] / both[(f"p50_{m}", "measured")] - 1)
                           for m in MODES})
    rows = []
    for level, group in errors.groupby(level="level"):
        row: dict[str, object] = {"level": level, "levels": len(group)}
        for m in MODES:
            row[f"{m}_signed"] = float(group[m].median())
            row[f"{m}_abs"] = float(group[m].abs().median())
        rows.append(row)
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root", type=Path, help="a run directory or a folder of them")
    ap.add_argument("--host-speed", default="1", help="a number, or 'probe' (the run's own host probe)")
    ap.add_argument("--by-graph", action="store_true",
                    help="the TTFT median of prompts that fit the CUDA graphs and of those that do not")
    ap.add_argument("--levels", default="", help="only these level names, comma-separated (e.g. f0.25,f0.50)")
    args = ap.parse_args(argv)
    speed: float | str = args.host_speed if args.host_speed == "probe" else float(args.host_speed)
    rows_of = graph_rows if args.by_graph else level_rows
    wanted = {name for name in args.levels.split(",") if name}
    try:
        runs = [run for run in find_runs(args.root) if not wanted or run.name in wanted]
        if not runs:
            sys.exit(f"{args.root}: no level named {', '.join(sorted(wanted))} under it")
        rows = [r for run in runs for r in rows_of(run, speed)]
    except (ValueError, FileNotFoundError) as exc:
        sys.exit(str(exc))
    if not rows:
        sys.exit(f"{args.root}: no run with engine-side times (vLLM's request stats) under it")
    table = pd.DataFrame(rows)
    cols = (["run", "level", "side", "limit", "n_all", "p50_all", "n_graph", "p50_graph", "n_eager", "p50_eager"]
            if args.by_graph else ["level", "side", "n", *PARTS, "before_output", "ttft_p50", "ttft_p90"])
    print(table[cols].to_string(index=False, float_format=lambda x: f"{x:.1f}"))
    if args.by_graph and len(runs) > 1:
        print("\npooled over levels with both modes (percent, simulated over measured):")
        print(pooled_graph_errors(table).to_string(index=False, float_format=lambda x: f"{x:.1f}"))


if __name__ == "__main__":
    main()
