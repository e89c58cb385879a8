"""Simulation studies of latsim's statistics: interval coverage and the stability verdict's boundary.

Coverage: for a deployment at a load of ``rho`` times its burst-replay capacity, run
``experiments`` independent predictions as ``latsim predict`` makes them
(:func:`latsim.plan.replicate.replicate_long_enough`: ``replications`` runs of ``num_requests``
requests, rerun longer when they are too short; ``--fixed-length`` keeps ``num_requests``) and
count how often each nominal 95 % interval holds the long-run percentile.  The long-run value
(the reference) is the pooled steady-state percentile of ``ref_runs`` further runs of
``ref_requests`` requests each, drawn from seeds no experiment uses; its own standard error
(sectioning over those runs) is printed beside the interval's half-width: it must be small
against it, or the measured coverage understates the true one.  A coverage measured over
``experiments`` has a binomial standard error of about ``sqrt(0.9 * 0.1 / experiments)`` near
0.9 (0.021 for 200 experiments).  Boundary: the verdict of single runs at loads on both sides of
capacity, several seeds each; right means stable below capacity and unstable above.

    python scripts/interval_coverage.py                 # the fuller study, prints tables
    python scripts/interval_coverage.py --config default --experiments 100

The tests (``tests/plan/test_replicate.py``) run a smaller version of the same functions.
"""

from __future__ import annotations

import argparse
import math
import time
from typing import NamedTuple

import numpy as np

from latsim import Deployment, EngineConfig, load_device, load_model, simulate, synthesize
from latsim.metrics.intervals import standard_error
from latsim.metrics.per_request import add_latencies
from latsim.metrics.stability import stability_verdict, steady_latency_window_s
from latsim.metrics.stats import weighted_percentiles
from latsim.plan.capacity import estimate_capacity
from latsim.plan.replicate import MAX_AUTO_REQUESTS, replicate_long_enough, synthetic_traces

METRICS = {"ttft_ms": "ttft_s", "tpot_ms": "tpot_s", "e2e_ms": "e2e_s"}


class Config(NamedTuple):
    """A deployment and a workload's length distributions (Poisson arrivals)."""

    model: str
    device: str
    max_num_seqs: int | None
    input_dist: str
    output_dist: str

    def deployment(self) -> Deployment:
        return Deployment(model=load_model(self.model), device=load_device(self.device),
                          engine=EngineConfig(max_num_seqs=self.max_num_seqs))

    def capacity(self) -> float:
        probe = synthesize(1.0, 1000, "poisson", self.input_dist, self.output_dist, np.random.default_rng(0))
        return estimate_capacity(self.deployment(), probe)


CONFIGS = {
    # cheap: a 1B model on the roofline A100 with small batches and short outputs (~50 us/request);
    # prompts clipped far above their P99 (a clip near it puts an atom at the P99, see the report)
    "cheap": Config("llama-3.2-1b", "a100", 32, "lognormal:median=300,sigma=0.8,min=16,max=8192",
                    "lognormal:median=24,sigma=0.6,min=2,max=128"),
    # the CLI's default workload and model on an A100 (~150 us/request)
    "default": Config("llama-3.1-8b", "a100", None, "lognormal:median=600,sigma=0.8,min=16,max=4096",
                      "lognormal:median=150,sigma=0.6,min=8,max=1024"),
}


class Reference(NamedTuple):
    """The long-run P99 of each metric and its own standard error (sectioning over the runs)."""

    p99: dict[str, float]
    se: dict[str, float]


def reference(config: Config, qps: float, ref_runs: int, ref_requests: int, seed: int) -> Reference:
    """Long-run P99 of each metric: pooled steady-state samples (the window ``replicate`` uses)
    of ``ref_runs`` (>= 2) independent long runs, with the sectioning standard error over them."""
    samples: dict[str, list[np.ndarray]] = {k: [] for k in METRICS}
    for j in range(ref_runs):
        trace = synthesize(qps, ref_requests, "poisson", config.input_dist, config.output_dist,
                           np.random.default_rng([seed, 10**6 + j]))
        records = simulate(config.deployment(), trace).records
        frame = add_latencies(records)
        start, end = steady_latency_window_s(records)
        steady = frame[(frame["status"] == "ok") & frame["arrival_s"].between(start, end)]
        for key, col in METRICS.items():
            values = steady[col].to_numpy() * 1e3
            samples[key].append(values[~np.isnan(values)])
    p99 = {k: float(weighted_percentiles(np.concatenate(v), None, [99.0])[0]) for k, v in samples.items()}
    se = {k: standard_error([weighted_percentiles(x, None, [99.0])[0] for x in v]) for k, v in samples.items()}
    return Reference(p99, se)


def coverage(config: Config, rho: float, experiments: int, replications: int, num_requests: int,
             ref_runs: int, ref_requests: int, seed: int = 0, max_requests: int = MAX_AUTO_REQUESTS) -> dict:
    """Share of experiments whose 95 % P99 interval holds the reference, per metric.

    Each experiment is a prediction as ``latsim predict`` makes it without ``--num-requests``
    (:func:`latsim.plan.replicate.replicate_long_enough`: ``num_requests`` per replication,
    rerun longer, up to ``max_requests``, when the runs are too short); ``max_requests`` =
    ``num_requests`` measures fixed-length runs.  Also returned: the mean relative half-width,
    the share of experiments lengthened and their mean requests per replication, and the
    reference's relative standard error (small against the half-width, or the measured coverage
    understates the true one).
    """
    qps = rho * config.capacity()
    ref = reference(config, qps, ref_runs, ref_requests, seed)
    hits = {k: 0 for k in METRICS}
    half: dict[str, list[float]] = {k: [] for k in METRICS}
    lengths = []
    for e in range(experiments):
        def traces(n: int, e: int = e):
            return synthetic_traces(qps, n, "poisson", config.input_dist, config.output_dist, seed * 7919 + e)

        result = replicate_long_enough(config.deployment(), traces, num_requests, replications, seed=e,
                                       max_requests=max_requests)
        lengths.append(len(result.records[0]))
        for key in METRICS:
            lo, hi = result.summary[key]["ci95"]["p99"]
            hits[key] += lo <= ref.p99[key] <= hi
            half[key].append((hi - lo) / 2 / ref.p99[key])
    longer = [n for n in lengths if n > num_requests]
    return {"rho": rho, "qps": qps, "reference_p99": ref.p99, "experiments": experiments,
            "coverage": {k: hits[k] / experiments for k in METRICS},
            "half_width": {k: float(np.mean(half[k])) for k in METRICS},
            "reference_rel_se": {k: ref.se[k] / ref.p99[k] for k in METRICS},
            "lengthened": len(longer) / experiments, "mean_requests": float(np.mean(lengths))}


def boundary(config: Config, rhos: tuple[float, ...], seeds: int, num_requests: int) -> list[dict]:
    """The single-run verdict at each load (times capacity) for ``seeds`` seeds."""
    capacity = config.capacity()
    rows = []
    for rho in rhos:
        for s in range(seeds):
            trace = synthesize(rho * capacity, num_requests, "poisson", config.input_dist, config.output_dist,
                               np.random.default_rng([s, 4242]))
            result = simulate(config.deployment(), trace)
            verdict = stability_verdict(result.records, result.summary["offered_rps"])
            rows.append({"rho": rho, "seed": s, "stable": verdict.stable, "right": verdict.stable == (rho < 1),
                         "served_fraction": verdict.served_fraction, "trend_slope": verdict.trend_slope,
                         "trend_p_value": verdict.trend_p_value})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", choices=sorted(CONFIGS), default="cheap")
    parser.add_argument("--loads", default="0.5,0.8", help="loads (times capacity) for the coverage study")
    parser.add_argument("--experiments", type=int, default=40)
    parser.add_argument("--replications", type=int, default=5)
    parser.add_argument("--num-requests", type=int, default=1000)
    parser.add_argument("--ref-runs", type=int, default=10)
    parser.add_argument("--ref-requests", type=int, default=40000)
    parser.add_argument("--fixed-length", action="store_true",
                        help="never lengthen the runs (measures replicate() at --num-requests)")
    parser.add_argument("--boundary-seeds", type=int, default=10, help="0 skips the boundary study")
    args = parser.parse_args()
    config = CONFIGS[args.config]
    start = time.time()
    print(f"config {args.config}: {config}; capacity {config.capacity():.2f} req/s")
    if args.boundary_seeds:
        print_boundary(config, args.boundary_seeds, args.num_requests)
    cap = args.num_requests if args.fixed_length else MAX_AUTO_REQUESTS
    print(f"\ncoverage of the nominal 95 % P99 interval ({args.experiments} experiments x "
          f"{args.replications} replications x {args.num_requests} requests, lengthened up to {cap}; "
          f"reference {args.ref_runs} x {args.ref_requests} requests)")
    for rho in (float(x) for x in args.loads.split(",")):
        out = coverage(config, rho, args.experiments, args.replications, args.num_requests, args.ref_runs,
                       args.ref_requests, max_requests=cap)
        binomial = math.sqrt(0.9 * 0.1 / args.experiments)
        cells = "  ".join(f"{k} {out['coverage'][k]:.3f} (half-width {out['half_width'][k]:.1%}, "
                          f"reference se {out['reference_rel_se'][k]:.1%})" for k in METRICS)
        print(f"  {rho:4.2f}x ({out['qps']:.2f} req/s): {cells}; lengthened {out['lengthened']:.0%}, mean "
              f"{out['mean_requests']:.0f} requests; coverage se ~{binomial:.3f}   [{time.time() - start:.0f} s]",
              flush=True)


def print_boundary(config: Config, seeds: int, num_requests: int) -> None:
    print("\nboundary study (single runs):  load  right/seeds  served fraction range")
    rows = boundary(config, (0.5, 0.8, 0.9, 1.2, 1.5), seeds, num_requests)
    for rho in sorted({r["rho"] for r in rows}):
        mine = [r for r in rows if r["rho"] == rho]
        served = [r["served_fraction"] for r in mine]
        print(f"  {rho:4.2f}x  {sum(r['right'] for r in mine):3d}/{len(mine)}  {min(served):.3f}-{max(served):.3f}")


if __name__ == "__main__":
    main()
