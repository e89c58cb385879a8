"""Fixed prediction scenarios whose results must not move when code is reorganised.

``python -m tests.golden.scenarios --write`` (from the repository root) records each
scenario's key numbers in ``tests/golden/<name>.json``; ``tests/golden/test_golden.py``
recomputes them and compares.  Re-record only on purpose (a modelling change), and say why in
the commit.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from latsim import Deployment, EngineConfig, load_device, load_model, simulate, synthesize

HERE = Path(__file__).parent

SCENARIOS: dict[str, dict] = {
    "h100-8b-default": {"model": "llama-3.1-8b", "device": "h100", "qps": 8.0},
    "h200-8b-calibrated": {"model": "llama-3.1-8b", "device": "h200", "qps": 12.0},
    "h200-qwen3-moe": {"model": "qwen3-30b-a3b", "device": "h200", "qps": 6.0},
    "a100-70b-tp4": {"model": "llama-3.1-70b", "device": "a100", "tp": 4, "qps": 3.0},
    "l40s-8b-static": {"model": "llama-3.1-8b", "device": "l40s", "qps": 2.0,
                       "engine": {"engine": "static", "max_num_seqs": 16}},
    "h100-8b-sync-nochunk": {"model": "llama-3.1-8b", "device": "h100", "qps": 6.0,
                             "engine": {"async_scheduling": False, "enable_chunked_prefill": False}},
    "h100-8b-2replicas-lor": {"model": "llama-3.1-8b", "device": "h100", "qps": 14.0, "replicas": 2,
                              "router": "least-outstanding"},
    "h200-8b-fp8-hostslow": {"model": "llama-3.1-8b", "device": "h200", "qps": 10.0, "weight_dtype": "fp8",
                             "engine": {"host_speed": 0.6, "max_num_seqs": 64}},
}

KEPT = ("ttft_ms", "tpot_ms", "e2e_ms", "queue_ms")
POINTS = ("mean", "p50", "p90", "p99")
SCALARS = ("throughput_rps", "output_tokens_per_s", "engine_steps", "kv_capacity_tokens", "kv_blocks",
           "max_model_len", "cost_model")


def run(name: str) -> dict:
    """The key numbers of scenario ``name`` (500 requests, seed 0)."""
    spec = dict(SCENARIOS[name])
    engine = EngineConfig(**spec.pop("engine", {}))
    qps = spec.pop("qps")
    deployment = Deployment(model=load_model(spec.pop("model")), device=load_device(spec.pop("device")),
                            engine=engine, **spec)
    trace = synthesize(qps, 500, "poisson", "lognormal:median=600,sigma=0.8,min=16,max=4096",
                       "lognormal:median=150,sigma=0.6,min=8,max=1024", np.random.default_rng(0))
    summary = simulate(deployment, trace, seed=0).summary
    out: dict = {k: summary.get(k) for k in SCALARS}
    for metric in KEPT:
        out[metric] = {p: summary[metric][p] for p in POINTS}
    return out


def main() -> None:
    if "--write" not in sys.argv:
        raise SystemExit("usage: python -m tests.golden.scenarios --write")
    for name in SCENARIOS:
        (HERE / f"{name}.json").write_text(json.dumps(run(name), indent=1, sort_keys=True) + "\n")
        print("wrote", name)


if __name__ == "__main__":
    main()
