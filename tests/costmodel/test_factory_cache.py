"""The per-process cost-model cache: one build per deployment shape, the same predictions."""

from __future__ import annotations

from latsim import Deployment, load_device, load_model, simulate, synthesize
from latsim.costmodel import factory


def test_cached_model_is_built_once_per_key() -> None:
    llama, h100 = load_model("llama-3.2-1b"), load_device("h100")
    first = factory.cached_gpu_cost_model(llama, h100, 1, "bf16", "bf16")
    assert factory.cached_gpu_cost_model(llama, h100, 1, "bf16", "bf16") is first
    assert factory.cached_gpu_cost_model(llama, h100, 2, "bf16", "bf16") is not first
    assert factory.cached_gpu_cost_model(llama, h100, 1, "fp8", "bf16") is not first


def test_cache_is_bounded() -> None:
    llama = load_model("llama-3.2-1b")
    for name in ("h100", "a100", "l40s", "a10", "l4"):
        for tp in (1, 2):
            for dtype in ("bf16", "fp8", "int8", "int4"):
                factory.cached_gpu_cost_model(llama, load_device(name), tp, dtype, "bf16")
    assert len(factory._CACHE) <= factory._CACHE_SIZE


def test_reused_model_predicts_what_a_fresh_one_does() -> None:
    import numpy as np

    d = Deployment(model=load_model("llama-3.2-1b"), device=load_device("h100"))
    trace = synthesize(20.0, 60, "poisson", 200, 50, np.random.default_rng(3))
    factory._CACHE.clear()
    fresh = simulate(d, trace, seed=1).summary
    again = simulate(d, trace, seed=1).summary
    assert len(factory._CACHE) == 1
    assert fresh == again
