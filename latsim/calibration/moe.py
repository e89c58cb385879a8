"""Mixture-of-experts layer: gather, grouped up-projection, SiLU x mul, grouped down, combine.

Tokens are routed uniformly at random to ``top_k`` of ``experts`` (seeded; routing and the
sort by expert stay outside the timed region, as vLLM's align kernel is cheap next to the
GEMMs).  Grouped GEMMs use ``torch._grouped_mm`` when it runs on this GPU (probed once), else
one ``torch.matmul`` per expert over its contiguous slice; ``impl`` records which.

Point ``{tokens, experts, top_k, hidden, inter}``: ``inter`` is one expert's width on one GPU.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from latsim.calibration.context import BenchContext
from latsim.calibration.timing import rotation_sets


def work(tokens: int, experts: int, top_k: int, hidden: int, inter: int) -> tuple[float, float, float]:
    """(FLOPs, minimum bytes, experts hit): weights of the experts hit read once (bf16)."""
    rows = tokens * top_k
    hit = experts * (1.0 - (1.0 - top_k / experts) ** tokens)
    per_expert = 3.0 * hidden * inter
    flops = 2.0 * rows * per_expert
    nbytes = 2.0 * (hit * per_expert + rows * (2 * hidden + 3 * inter))
    return flops, nbytes, hit


def routing(tokens: int, experts: int, top_k: int) -> tuple[np.ndarray, np.ndarray]:
    """(token index of each routed row sorted by expert, rows per expert), seeded."""
    rng = np.random.default_rng(tokens * 31 + experts)
    choice = np.argsort(rng.random((tokens, experts)), axis=1)[:, :top_k]
    order = np.argsort(choice.ravel(), kind="stable")
    counts = np.bincount(choice.ravel(), minlength=experts)
    return (order // top_k).astype(np.int64), counts


def run(ctx: BenchContext, p: dict[str, Any]) -> dict[str, Any]:
    """Time one MoE point."""
    t_, e, k, h, i_ = (int(p[x]) for x in ("tokens", "experts", "top_k", "hidden", "inter"))
    flops, nbytes, hit = work(t_, e, k, h, i_)
    rows, counts = routing(t_, e, k)
    impl = _impl(ctx)
    sets = rotation_sets(2.0 * 3.0 * e * h * i_, ctx.l2_bytes, max_sets=8)
    layers = [_layer(ctx, t_, e, h, i_, rows, counts, impl) for _ in range(sets)]
    t = ctx.timer.time(lambda j: layers[j % sets]())
    return {"median_s": t.median_s, "p10_s": t.p10_s, "p90_s": t.p90_s, "reps": t.reps, "impl": impl,
            "flops": flops, "bytes": nbytes, "experts_hit": hit}


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
        ctx.probes["moe"] = "grouped_mm" if _grouped_ok(ctx) else "matmul-loop"
    impl: str = ctx.probes["moe"]
    return impl


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
