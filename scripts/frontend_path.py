"""Read the front end's fixed latency off live runs that kept vLLM's engine-side times.

    python scripts/frontend_path.py data/validation [--max-fraction 0.5] [--quantile 5]

``frontend_s`` (``latsim/data/engines/vllm/host.yaml``) stands for the two paths a request's first
token takes outside the engine core's steps: the input path (the client's send to the engine
core queueing the request) and the output path (the engine core's step output to the client's
first token).  The engine's own stamps (``scripts/ttft_parts.py``) give both per request, but
the measured input path also holds the wait for the step running when the request reached the
engine core (the core takes requests in only between steps), and the output path a part that
grows with the requests running (``output_seq_s``, ``scripts/output_lag.py``).  A low quantile
of each (``--quantile``, 5 by default: the requests that came as a step ended, with few running)
is the fixed part, biased up by a twentieth of a step at most.  Each level's sum is taken to
the reference host (times the level's host speed from its probe, as every CPU term is).

Prints one line per Poisson level at or below ``--max-fraction`` of capacity with engine times
and a host probe, and the median per GPU and over all: what a fit that frees ``frontend_s``
(``scripts/fit_engine_host.py``) should land near.
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path

import numpy as np
from ttft_parts import measured_parts  # type: ignore[import-not-found]  # scripts/ is on the path when run

from latsim.measure.records import load_run, read_meta
from latsim.validate.compare import find_runs, host_probe_ms, recorded_device, run_host_speed
from latsim.validate.error_band import load_fraction


def fixed_path_ms(run: Path, quantile: float) -> tuple[float, float] | None:
    """(input, output) paths' ``quantile`` in ms of the ``ok`` requests with engine times
    (:func:`ttft_parts.measured_parts`'s ``front_end`` and ``output``), or None under 20 of them."""
    parts = measured_parts(load_run(run).requests).dropna(subset=["front_end", "output"])
    if len(parts) < 20:
        return None
    into, out = parts["front_end"].to_numpy(dtype=float), parts["output"].to_numpy(dtype=float)
    return 1e3 * float(np.percentile(into, quantile)), 1e3 * float(np.percentile(out, quantile))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root", type=Path)
    ap.add_argument("--max-fraction", type=float, default=0.5)
    ap.add_argument("--quantile", type=float, default=5.0)
    args = ap.parse_args(argv)
    if not 0 < args.quantile < 100:
        ap.error(f"--quantile {args.quantile:g}: expected a percentile in (0, 100)")
    if not 0 < args.max_fraction <= 1:
        ap.error(f"--max-fraction {args.max_fraction:g}: expected a fraction of capacity in (0, 1]")
    try:
        runs = find_runs(args.root)
    except ValueError as exc:
        raise SystemExit(str(exc)) from None
    by_gpu: dict[str, list[float]] = defaultdict(list)
    for run in runs:
        meta = read_meta(run)
        fraction = load_fraction(run.name)
        probe_ms = host_probe_ms(meta)
        if (meta.get("load") or {}).get("mode") != "open" or fraction is None or fraction > args.max_fraction:
            continue
        paths = fixed_path_ms(run, args.quantile) if probe_ms is not None else None
        if paths is None:
            continue
        speed = run_host_speed(meta, "probe")
        gpu = recorded_device(meta) or "h200"
        total = (paths[0] + paths[1]) * speed
        by_gpu[gpu].append(total)
        print(f"{gpu:5s} {run}  probe {probe_ms:.2f} ms  input {paths[0]:.2f}  output {paths[1]:.2f}  "
              f"-> {total:.2f} ms at the reference host")
    everything = [v for values in by_gpu.values() for v in values]
    if not everything:
        raise SystemExit(f"no probed Poisson level with engine times at or below {args.max_fraction} under {args.root}")
    for gpu, values in sorted(by_gpu.items()):
        print(f"{gpu}: {len(values)} levels, median {np.median(values):.2f} ms (p25 {np.percentile(values, 25):.2f}, "
              f"p75 {np.percentile(values, 75):.2f})")
    print(f"all: {len(everything)} levels, median {np.median(everything):.2f} ms")


if __name__ == "__main__":
    main()
