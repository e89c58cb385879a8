"""Latency vs load for one deployment: where is the cliff?

    python examples/capacity_sweep.py

Simulates llama-3.1-8b on one H200 (calibrated cost model) at increasing request rates and
prints p50/p99 TTFT and TPOT, and whether the simulated system kept up with the offered load.
"""

from __future__ import annotations

import numpy as np

from latsim import Deployment, load_device, load_model, simulate, synthesize


def main() -> None:
    deployment = Deployment(model=load_model("llama-3.1-8b"), device=load_device("h200"))
    print(f"{'req/s':>6} {'TTFT p50':>9} {'TTFT p99':>9} {'TPOT p50':>9} {'TPOT p99':>9} {'served req/s':>13}")
    for qps in (5, 10, 20, 30, 40, 50, 60):
        trace = synthesize(qps, 3000, "poisson", "lognormal:median=600,sigma=0.8,min=16,max=4096",
                           "lognormal:median=150,sigma=0.6,min=8,max=1024", np.random.default_rng(0))
        s = simulate(deployment, trace, seed=0).summary
        print(f"{qps:>6} {s['ttft_ms']['p50']:>9.1f} {s['ttft_ms']['p99']:>9.1f} {s['tpot_ms']['p50']:>9.2f} "
              f"{s['tpot_ms']['p99']:>9.2f} {s['throughput_rps']:>13.2f}")


if __name__ == "__main__":
    main()
