"""Speed of the roofline cost model: microseconds per ``step_time`` call and per decoded step.

Run: ``python bench/bench_costmodel.py``.  Specs are built by hand (Llama-3.1-8B-like dense,
Mixtral-8x7B-like MoE, H100 SXM) so the benchmark does not depend on the catalog files.
"""

from __future__ import annotations

import timeit
from collections.abc import Callable

import numpy as np

from latsim.catalog.devices import DeviceSpec
from latsim.catalog.models import ModelSpec
from latsim.costmodel.batch import BatchShape
from latsim.costmodel.roofline import RooflineCostModel

LLAMA_8B = ModelSpec(name="llama-3.1-8b", family="llama", num_layers=32, hidden_size=4096, num_heads=32,
                     num_kv_heads=8, head_dim=128, intermediate_size=14336, vocab_size=128256,
                     max_position_embeddings=131072)
MIXTRAL = ModelSpec(name="mixtral-8x7b", family="mixtral", num_layers=32, hidden_size=4096, num_heads=32,
                    num_kv_heads=8, head_dim=128, intermediate_size=14336, vocab_size=32000,
                    max_position_embeddings=32768, num_experts=8, experts_per_token=2,
                    moe_intermediate_size=14336, num_moe_layers=32)
H100 = DeviceSpec(name="h100-sxm", display_name="NVIDIA H100 SXM", vendor="nvidia", memory_bytes=80e9,
                  hbm_bandwidth=3.35e12, peak_flops={"bf16": 989.4e12, "fp8": 1979e12},
                  interconnect="nvlink4", interconnect_bw=450e9, max_gpus_per_node=8, price_per_hour=0.0)


def _batches(rng: np.random.Generator, n: int) -> list[BatchShape]:
    """A mix like a chunked-prefill run: mostly decode batches, some with a prefill chunk."""
    out = []
    for _ in range(n):
        decodes = [int(c) for c in rng.integers(10, 8000, size=int(rng.integers(1, 256)))]
        chunks = [(int(rng.integers(1, 2048)), int(rng.integers(0, 4000)))] if rng.random() < 0.3 else []
        out.append(BatchShape.from_chunks(chunks, decodes))
    return out


def _per_call_us(fn: Callable[[], object], calls: int, repeat: int = 5) -> float:
    return min(timeit.repeat(fn, number=1, repeat=repeat)) / calls * 1e6


def _bench(name: str, cm: RooflineCostModel, batches: list[BatchShape]) -> None:
    def all_steps() -> None:
        for b in batches:
            cm.step_time(b)

    step_us = _per_call_us(all_steps, len(batches))
    print(f"{name:28s} step_time: {step_us:6.2f} us/call")
    for steps in (1, 10, 100, 1000):
        def run(n: int = steps) -> None:
            cm.decode_run(64, 64 * 1000, n)

        run_us = _per_call_us(run, steps, repeat=50)
        print(f"{'':28s} decode_run({steps:4d} steps): {run_us:7.3f} us/step")


def main() -> None:
    batches = _batches(np.random.default_rng(0), 20_000)
    _bench("llama-3.1-8b tp=1 bf16", RooflineCostModel(LLAMA_8B, H100), batches)
    _bench("llama-3.1-8b tp=2 fp8", RooflineCostModel(LLAMA_8B, H100, tp=2, weight_dtype="fp8"), batches)
    _bench("mixtral-8x7b tp=2 bf16", RooflineCostModel(MIXTRAL, H100, tp=2), batches)


if __name__ == "__main__":
    main()
