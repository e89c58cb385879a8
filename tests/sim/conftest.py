"""Fixtures for engine tests: a linear cost model with known step times, small deployments."""

from __future__ import annotations

import numpy as np
import pytest

from latsim.catalog.lookup import load_device, load_model
from latsim.costmodel.batch import BatchShape, NoHostTerms
from latsim.deployment import Deployment, EngineConfig


class LinearCost(NoHostTerms):
    """Step time = base + per_token * tokens + per_kv * KV entries read (seconds)."""

    kind = "test-linear"

    def __init__(self, base=5e-3, per_token=2e-5, per_kv=1e-8):
        self.base, self.per_token, self.per_kv = base, per_token, per_kv

    def step_time(self, b: BatchShape) -> float:
        return float(self._times(np.array([b.num_tokens]), np.array([b.prefill_kv_tokens + b.decode_kv_tokens]))[0])

    def decode_run(self, seqs: int, kv_tokens: int, steps: int, kv_sq: int = 0) -> np.ndarray:
        kv = kv_tokens + seqs * np.arange(steps, dtype=np.int64)
        return self._times(np.full(steps, seqs), kv)

    def _times(self, tokens: np.ndarray, kv: np.ndarray) -> np.ndarray:
        return self.base + self.per_token * tokens.astype(np.float64) + self.per_kv * kv.astype(np.float64)

    def describe(self) -> dict:
        return {"kind": self.kind}


@pytest.fixture
def linear_cost() -> LinearCost:
    return LinearCost()


def small_deployment(num_gpu_blocks=None, max_model_len=None, **engine) -> Deployment:
    """llama-3.1-8b on an H100, optionally with a tiny KV cache (then max_model_len fits in it)."""
    if max_model_len is None:
        max_model_len = min(8192, 16 * num_gpu_blocks) if num_gpu_blocks else 8192
    return Deployment(model=load_model("llama-3.1-8b"), device=load_device("h100"),
                      engine=EngineConfig(num_gpu_blocks=num_gpu_blocks, max_model_len=max_model_len, **engine))
