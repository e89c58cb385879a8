"""Mixture-of-experts layer: gather, grouped up-projection, SiLU x mul, grouped down, combine.

Tokens are routed uniformly at random to ``top_k`` distinct of ``experts`` (seeded, see
:func:`choices`).  Implementation, first that works (probed once per context on a small case
and checked against a float32 dense reference); ``impl`` in each row records which:

1. ``vllm_fused_moe``: vLLM's fused Triton MoE (``fused_experts``, the kernel vLLM serves
   unquantized MoE with on Hopper), CUDA only, when vLLM imports.  The timed call includes
   vLLM's ``moe_align_block_size`` and the final top-k sum, as every vLLM forward does;
2. ``grouped_mm``: ``torch._grouped_mm`` per projection;
3. ``matmul-loop``: one ``torch.matmul`` per expert over its contiguous slice (the CPU path).

For 2 and 3, routing and the sort by expert stay outside the timed region.
Point ``{tokens, experts, top_k, hidden, inter}``: ``inter`` is one expert's width on one GPU.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import numpy as np

from latsim.calibration.context import BenchContext
from latsim.calibration.timing import rotation_sets

VLLM_IMPL = "vllm_fused_moe"
VLLM_MODULE = "vllm.model_executor.layers.fused_moe.fused_moe"


def work(tokens: int, experts: int, top_k: int, hidden: int, inter: int) -> tuple[float, float, float]:
    """(FLOPs, minimum bytes, experts hit): weights of the experts hit read once (bf16)."""
    rows = tokens * top_k
    hit = experts * (1.0 - (1.0 - top_k / experts) ** tokens)
    per_expert = 3.0 * hidden * inter
    flops = 2.0 * rows * per_expert
    nbytes = 2.0 * (hit * per_expert + rows * (2 * hidden + 3 * inter))
    return flops, nbytes, hit


def choices(tokens: int, experts: int, top_k: int) -> np.ndarray:
    """Experts of each token, ``tokens x top_k``: distinct, uniform at random, seeded."""
    rng = np.random.default_rng(tokens * 31 + experts)
    return np.argsort(rng.random((tokens, experts)), axis=1)[:, :top_k]


def routing(tokens: int, experts: int, top_k: int) -> tuple[np.ndarray, np.ndarray]:
    """(token index of each routed row sorted by expert, rows per expert), from :func:`choices`."""
    choice = choices(tokens, experts, top_k)
    order = np.argsort(choice.ravel(), kind="stable")
    counts = np.bincount(choice.ravel(), minlength=experts)
    return (order // top_k).astype(np.int64), counts


def run(ctx: BenchContext, p: dict[str, Any]) -> dict[str, Any]:
    """Time one MoE point."""
    t_, e, k, h, i_ = (int(p[x]) for x in ("tokens", "experts", "top_k", "hidden", "inter"))
    flops, nbytes, hit = work(t_, e, k, h, i_)
    impl = _impl(ctx)
    sets = rotation_sets(2.0 * 3.0 * e * h * i_, ctx.l2_bytes, max_sets=8)
    if impl == VLLM_IMPL:
        fused, choice = fused_experts(), choices(t_, e, k)
        layers = [_vllm_layer(fused, *_vllm_inputs(ctx, choice, e, h, i_)) for _ in range(sets)]
    else:
        rows, counts = routing(t_, e, k)
        layers = [_layer(ctx, t_, e, h, i_, rows, counts, impl) for _ in range(sets)]
    t = ctx.op_timer_for(t_).time(lambda j: layers[j % sets]())
    return {"median_s": t.median_s, "p10_s": t.p10_s, "p90_s": t.p90_s, "reps": t.reps, "timer": t.method, "impl": impl,
            "flops": flops, "bytes": nbytes, "experts_hit": hit}


def fused_experts() -> Any:
    """vLLM's ``fused_experts(hidden_states, w1, w2, topk_weights, topk_ids)`` (ImportError without vLLM)."""
    return importlib.import_module(VLLM_MODULE).fused_experts


def _vllm_inputs(ctx: BenchContext, choice: np.ndarray, e: int, h: int, inter: int) -> tuple[Any, ...]:
    """vLLM's layout: x ``T x H`` bf16, w1 ``E x 2I x H`` ([gate; up]) and w2 ``E x H x I``, both
    contiguous bf16, topk_weights ``T x k`` float32, topk_ids ``T x k`` int32."""
    torch = ctx.torch
    x, w1, w2 = ctx.randn(choice.shape[0], h), ctx.randn(e, 2 * inter, h), ctx.randn(e, h, inter)
    weights = ctx.randn(*choice.shape, dtype=torch.float32).softmax(-1)
    ids = torch.tensor(choice, dtype=torch.int32, device=ctx.device)
    return x, w1, w2, weights, ids


def _vllm_layer(fused: Any, x: Any, w1: Any, w2: Any, weights: Any, ids: Any) -> Any:
    return lambda: fused(x, w1, w2, weights, ids)


def _layer(ctx: BenchContext, tokens: int, e: int, h: int, inter: int, rows: np.ndarray, counts: np.ndarray,
           impl: str) -> Any:
    torch = ctx.torch
    x, out = ctx.randn(tokens, h), ctx.randn(tokens, h)
    w1 = ctx.randn(e, 2 * inter, h).transpose(1, 2)  # per expert K x N, column-major like vLLM's
    w2 = ctx.randn(e, h, inter).transpose(1, 2)
    idx = torch.tensor(rows, device=ctx.device)
    ends = np.cumsum(counts)
    offs = torch.tensor(ends, dtype=torch.int32, device=ctx.device)
    spans = [(int(a), int(b)) for a, b in zip(np.concatenate([[0], ends[:-1]]), ends, strict=True)]
    mm = (lambda a, w: torch._grouped_mm(a, w, offs=offs)) if impl == "grouped_mm" else (
        lambda a, w: _loop(torch, a, w, spans))

    def fn() -> Any:
        xs = x.index_select(0, idx)
        g = mm(xs, w1)
        a = torch.nn.functional.silu(g[:, :inter]) * g[:, inter:]
        return out.index_add_(0, idx, mm(a, w2))
    return fn


def _loop(torch: Any, a: Any, w: Any, spans: list[tuple[int, int]]) -> Any:
    y = a.new_empty(a.shape[0], w.shape[2])
    for e, (lo, hi) in enumerate(spans):
        if hi > lo:
            torch.matmul(a[lo:hi], w[e], out=y[lo:hi])
    return y


def _impl(ctx: BenchContext) -> str:
    if "moe" not in ctx.probes:
        ctx.probes["moe"] = (VLLM_IMPL if ctx.is_cuda and _vllm_ok(ctx)
                             else "grouped_mm" if _grouped_ok(ctx) else "matmul-loop")
    impl: str = ctx.probes["moe"]
    return impl


def reference(torch: Any, x: Any, w1: Any, w2: Any, weights: Any, ids: Any) -> Any:
    """Dense float32 MoE in vLLM's layout: sum over k of weight * w2[e] @ (silu(gate) * up)."""
    inter, sel = w2.shape[2], ids.long()
    g = torch.einsum("th,tkoh->tko", x.float(), w1.float()[sel])
    a = torch.nn.functional.silu(g[..., :inter]) * g[..., inter:]
    y = torch.einsum("tki,tkhi->tkh", a, w2.float()[sel])
    return (y * weights.float()[..., None]).sum(1)


def _vllm_ok(ctx: BenchContext) -> bool:
    """True when vLLM's fused MoE imports, runs here and matches :func:`reference`."""
    try:
        inputs = _vllm_inputs(ctx, choices(16, 8, 2), 8, 128, 64)
        got, ref = _vllm_layer(fused_experts(), *inputs)().float(), reference(ctx.torch, *inputs)
        error = float((got - ref).norm() / ref.norm())
        if error < 2e-2:
            return True
        print(f"moe: vLLM fused_experts disagrees with the reference (relative error {error:.3g}); "
              "falling back", file=sys.stderr)
    except Exception as exc:  # any failure means: not usable here
        print(f"moe: vLLM fused_experts unavailable ({type(exc).__name__}: {exc}); falling back", file=sys.stderr)
    return False


def _grouped_ok(ctx: BenchContext) -> bool:
    """True when ``torch._grouped_mm`` runs here and matches the per-expert loop."""
    torch = ctx.torch
    if not ctx.is_cuda or not hasattr(torch, "_grouped_mm"):
        return False
    try:
        counts = np.array([16, 0, 32, 16])
        a, w = ctx.randn(64, 128), ctx.randn(4, 64, 128).transpose(1, 2)
        offs = torch.tensor(np.cumsum(counts), dtype=torch.int32, device="cuda")
        spans = [(0, 16), (16, 16), (16, 48), (48, 64)]
        got, ref = torch._grouped_mm(a, w, offs=offs).float(), _loop(torch, a, w, spans).float()
        return bool(((got - ref).norm() / ref.norm()) < 1e-2)
    except Exception:
        return False
