"""The MoE benchmark's vLLM fused-MoE path, on the CPU with a fake kernel (needs torch, not vLLM).

A context that claims CUDA but allocates on the CPU lets the probe run as it would on a GPU;
the fake ``fused_experts`` checks the argument layout vLLM 0.25.1's kernel expects.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
import pytest

from latsim.calibration import moe
from latsim.calibration.context import BenchContext, make_context
from latsim.calibration.timing import rotation_sets

torch = pytest.importorskip("torch")

POINT = {"tokens": 5, "experts": 8, "top_k": 2, "hidden": 64, "inter": 32}


class CudaOnCpu(BenchContext):
    """Says CUDA (so the vLLM probe runs) but keeps every tensor on the CPU."""

    @property
    def is_cuda(self) -> bool:
        return True

    @property
    def device(self) -> str:
        return "cpu"


def _cuda_ctx() -> BenchContext:
    cpu = make_context("cpu")
    return CudaOnCpu(cpu.torch, "cpu", cpu.timer, cpu.l2_bytes, cpu.generator)


class FakeFusedExperts:
    """Stands in for vLLM's ``fused_experts``: checks its inputs, computes the MoE per token."""

    def __init__(self, scale: float = 1.0) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.scale = scale

    def __call__(self, x: Any, w1: Any, w2: Any, topk_weights: Any, topk_ids: Any) -> Any:
        t, h = x.shape
        e, two_i, h1 = w1.shape
        assert x.dtype == w1.dtype == w2.dtype == torch.bfloat16 and x.is_contiguous()
        assert h1 == h and two_i % 2 == 0 and tuple(w2.shape) == (e, h, two_i // 2)
        assert w1.is_contiguous() and w2.is_contiguous()
        assert topk_weights.dtype == torch.float32 and topk_ids.dtype == torch.int32
        assert topk_weights.shape == topk_ids.shape and topk_ids.shape[0] == t
        self.calls.append((x, w1, w2, topk_weights, topk_ids))
        out = torch.zeros(t, h)
        for i in range(t):
            for j in range(topk_ids.shape[1]):
                ex = int(topk_ids[i, j])
                g = w1[ex].float() @ x[i].float()
                act = torch.nn.functional.silu(g[: two_i // 2]) * g[two_i // 2:]
                out[i] += topk_weights[i, j] * (w2[ex].float() @ act)
        return (self.scale * out).to(torch.bfloat16)


def test_cpu_context_never_tries_vllm(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeFusedExperts()
    monkeypatch.setattr(moe, "fused_experts", lambda: fake)
    row = moe.run(make_context("cpu"), POINT)
    assert row["impl"] == "matmul-loop" and not fake.calls and row["median_s"] > 0


def test_falls_back_when_vllm_does_not_import(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, moe.VLLM_MODULE, None)  # makes the import raise
    with pytest.raises(ImportError):
        moe.fused_experts()
    ctx = _cuda_ctx()
    row = moe.run(ctx, POINT)
    assert row["impl"] == "matmul-loop" == ctx.probes["moe"] and row["median_s"] > 0


@pytest.mark.parametrize("kernel", [FakeFusedExperts(scale=2.0), lambda *a: 1 / 0])
def test_falls_back_when_kernel_is_wrong_or_fails(monkeypatch: pytest.MonkeyPatch, kernel: Any) -> None:
    monkeypatch.setattr(moe, "fused_experts", lambda: kernel)
    assert moe.run(_cuda_ctx(), POINT)["impl"] == "matmul-loop"


def test_vllm_path_times_the_kernel_with_vllm_layout(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeFusedExperts()
    monkeypatch.setattr(moe, "fused_experts", lambda: fake)
    ctx = _cuda_ctx()
    row = moe.run(ctx, POINT)
    assert row["impl"] == moe.VLLM_IMPL == ctx.probes["moe"]
    assert row["median_s"] > 0 and row["reps"] >= 1
    probe, timed = fake.calls[0], fake.calls[1:]
    assert tuple(probe[1].shape) == (8, 128, 128)  # the probe's small case: E=8, I=64, H=128
    t, e, k, h, i = (POINT[x] for x in ("tokens", "experts", "top_k", "hidden", "inter"))
    for x, w1, w2, wts, ids in timed:
        assert tuple(x.shape) == (t, h) and tuple(w1.shape) == (e, 2 * i, h) and tuple(w2.shape) == (e, h, i)
        assert np.array_equal(ids.numpy(), moe.choices(t, e, k))  # the seeded routing of routing()
        assert torch.allclose(wts.sum(-1), torch.ones(t))
    sets = rotation_sets(2.0 * 3.0 * e * h * i, ctx.l2_bytes, max_sets=8)
    assert len({c[1].data_ptr() for c in timed}) == min(sets, len(timed))  # rotates over the sets


def test_routing_matches_choices() -> None:
    rows, counts = moe.routing(7, 6, 3)
    choice = moe.choices(7, 6, 3)
    assert all(len(set(r)) == 3 for r in choice.tolist())
    assert np.array_equal(counts, np.bincount(choice.ravel(), minlength=6))
    assert sorted(rows.tolist()) == sorted(np.repeat(np.arange(7), 3).tolist())
