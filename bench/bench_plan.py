"""How long ``latsim plan`` takes over the issue's example search space.

Llama-3.1-70B at 10 req/s, prompts of 1,000 and outputs of 200 tokens, SLO P99 TTFT <= 1 s and
P99 TPOT <= 80 ms, devices h100/h200/a100/l40s x TP 1/2/4/8 x 1..8 replicas x bf16/fp8:
256 candidates, 3 replications each, the highest rate under the SLO searched for the
candidates that meet it.  Prints wall and CPU seconds and what the search did:

    python bench/bench_plan.py [--requests 1000] [--replications 3] [--no-rate-search]

Wall time on a shared machine moves with the other load; the CPU figure is the steadier one.
The first run in a process includes building the calibrated cost models (about 0.4 s each,
then reused: ``latsim.costmodel.factory.cached_gpu_cost_model``).  Measurements: bench/NOTES.md.
"""

from __future__ import annotations

import argparse
import time

from latsim.config import Settings
from latsim.plan.search import Options, Space, plan
from latsim.plan.slo import parse_slo

DEVICES = ("h100", "h200", "a100", "l40s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--replications", type=int, default=3)
    parser.add_argument("--no-rate-search", action="store_true")
    args = parser.parse_args()
    base = Settings(model="llama-3.1-70b", qps=10.0, input_len=1000, output_len=200, num_requests=args.requests)
    space = Space(devices=DEVICES, tps=(1, 2, 4, 8), replicas=tuple(range(1, 9)), weight_dtypes=("bf16", "fp8"))
    wall, cpu = time.perf_counter(), time.process_time()
    answer = plan(base, space, parse_slo("ttft_p99_ms=1000,tpot_p99_ms=80"),
                  Options(replications=args.replications, rate_search=not args.no_rate_search))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    s = answer["search"]
    best = answer["best"]
    print(f"plan over {s['candidates']} candidates ({args.requests} requests, {args.replications} replications): "
          f"{wall:.1f} s wall, {cpu:.1f} s CPU; {s['pruned']} pruned, {s['simulated']} simulated")
    if best:
        print(f"best: {best['device']} TP{best['tp']} x{best['replicas']} {best['weight_dtype']}, "
              f"${best['usd_per_hour']:.2f}/h, max {best['max_rps_at_slo']:.1f} req/s at the SLO")


if __name__ == "__main__":
    main()
