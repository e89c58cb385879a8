"""Simulated requests per wall second on the reference run.

Reference: llama-3.1-8b on h100, Poisson 20 req/s, lognormal lengths (input median 600,
output median 150), 20,000 requests, vLLM server defaults.  Prints one figure per mode:

    python bench/bench_simulate.py [--requests 20000] [--device h100] [--model NAME|CONFIG] [--no-fast-forward]
                                   [--linear-cost] [--profile]

``--model`` swaps the model (a model with sliding-window layers, such as gemma-2-9b or a Gemma 3
config, exercises the decode cohort's frees); ``--no-fast-forward`` runs the reference engine
(one ``schedule``/``update`` per step);
``--linear-cost`` prices steps with the tests' ``LinearCost`` instead of the roofline, which
separates the engine's own cost from the cost model's.  Wall and CPU seconds are both
reported: on a shared machine the CPU figure is the steadier one.  Predictions and
measurements of each speed-up are in ``bench/NOTES.md``.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import resource
import sys
import time
from pathlib import Path

import numpy as np

from latsim.catalog.lookup import load_device, load_model
from latsim.deployment import Deployment
from latsim.sim.simulate import simulate
from latsim.workload.generate import synthesize


def reference_trace(n: int):
    return synthesize(20.0, n, "poisson", "lognormal:median=600,sigma=0.8,min=16,max=8192",
                      "lognormal:median=150,sigma=0.6,min=4,max=2048", np.random.default_rng(0))


def linear_cost():
    """The engine tests' linear cost model (cheap, so the engine's own cost shows)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.sim.conftest import LinearCost

    return LinearCost()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--device", default="h100", help="GPU of the reference deployment (h200: its calibrated "
                        "profile, decode spread included)")
    parser.add_argument("--model", default="llama-3.1-8b", help="catalog name or config.json of the model")
    parser.add_argument("--no-fast-forward", action="store_true")
    parser.add_argument("--linear-cost", action="store_true")
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    deployment = Deployment(model=load_model(args.model), device=load_device(args.device))
    cost = linear_cost() if args.linear_cost else None
    trace = reference_trace(args.requests)
    simulate(deployment, reference_trace(200), cost_model=cost)  # warm imports and caches
    profiler = cProfile.Profile() if args.profile else None
    start, cpu_start = time.perf_counter(), time.process_time()
    if profiler:
        profiler.enable()
    result = simulate(deployment, trace, cost_model=cost, fast_forward=not args.no_fast_forward)
    if profiler:
        profiler.disable()
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    s = result.summary
    print(f"requests={args.requests} steps={s['engine_steps']} wall_s={wall:.2f} cpu_s={cpu:.2f} "
          f"simulated_requests_per_s={args.requests / wall:,.0f} per_cpu_s={args.requests / cpu:,.0f} "
          f"peak_rss_mb={rss_mb:.0f} "
          f"p99_ttft_ms={s['ttft_ms']['p99']:.1f} p99_tpot_ms={s['tpot_ms']['p99']:.2f} "
          f"cost_model={s['cost_model']}")
    if profiler:
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(25)


if __name__ == "__main__":
    main()
