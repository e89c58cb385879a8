"""What an unmeasured server's CPU does to a prediction: TTFT and TPOT p50 across ``--host-speed``.

The engine's CPU terms describe one host (``host.yaml``: the lent H200 VM's typical CPU, the
median host probe of the live runs, 1.78 ms); on that machine the probe ran 1.00-2.34 ms, i.e.
host speeds 0.76-1.78.  For a GPU whose server nobody measured, this prints the predictions at
host speeds 0.75, 1.0, 1.25 and 1.5 for a
host-bound model (Llama-3.2-1B) and a GPU-bound one (Llama-3.1-8B) on each GPU with a profile,
at a fixed Poisson load of 512-token prompts and 128-token outputs (seeded).

    PYTHONPATH=. python scripts/aic_host_range.py
"""

from __future__ import annotations

import numpy as np

from latsim import Deployment, EngineConfig, load_device, load_model, simulate, synthesize

SPEEDS = (0.75, 1.0, 1.25, 1.5)
CASES = (("llama-3.2-1b", 40.0), ("llama-3.1-8b", 10.0))
GPUS = ("a100", "h100", "h200", "b200")


def p50s(model: str, gpu: str, qps: float, speed: float) -> tuple[float, float, str]:
    trace = synthesize(qps, 400, "poisson", 512, 128, np.random.default_rng(0))
    dep = Deployment(load_model(model), load_device(gpu), engine=EngineConfig(host_speed=speed))
    s = simulate(dep, trace, seed=0).summary
    return float(s["ttft_ms"]["p50"]), float(s["tpot_ms"]["p50"]), str(s["cost_model"])


def main() -> None:
    print("| model | req/s | GPU | cost model | " + " | ".join(f"TTFT / TPOT p50 ms at {s}" for s in SPEEDS) + " |")
    print("|---|---|---|---|" + "---|" * len(SPEEDS))
    for model, qps in CASES:
        for gpu in GPUS:
            cells, label = [], ""
            for speed in SPEEDS:
                ttft, tpot, label = p50s(model, gpu, qps, speed)
                cells.append(f"{ttft:.1f} / {tpot:.2f}")
            print(f"| {model} | {qps:g} | {gpu} | {label} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
