"""Memory-bound kernels: fused add+RMSNorm, rotary embedding, SiLU x mul and a plain copy.

Each runs as PyTorch eager code (``impl`` says so); vLLM fuses the first three into one kernel
each, so the *bytes* recorded are the fused kernel's minimum traffic (what
:mod:`latsim.costmodel.ops` counts) and the fitted efficiency absorbs the difference.  ``copy``
gives the achievable device-memory bandwidth (bytes read plus bytes written).

Point ``{op, tokens, width}``: ``width`` is the hidden size (rmsnorm), query+key width
(rotary, head size 128), the MLP width ``I`` (silu_mul reads 2I, writes I) or the row width
(copy).
"""

from __future__ import annotations

from typing import Any

from latsim.calibration.context import BenchContext
from latsim.calibration.timing import rotation_sets

OPS = ("rmsnorm", "rotary", "silu_mul", "copy")
ROPE_HEAD = 128


def work(op: str, tokens: int, width: int) -> tuple[float, float]:
    """(FLOPs, minimum bytes) of the fused kernel; bf16 activations, fp32 rotary tables."""
    n = float(tokens * width)
    table = {
        "rmsnorm": (5.0 * n, 2.0 * 4.0 * n),
        "rotary": (3.0 * n, 2.0 * 2.0 * n + 4.0 * tokens * ROPE_HEAD),
        "silu_mul": (5.0 * n, 2.0 * 3.0 * n),
        "copy": (0.0, 2.0 * 2.0 * n),
    }
    if op not in table:
        raise ValueError(f"memory op={op!r}; accepted: {', '.join(OPS)}")
    return table[op]


def run(ctx: BenchContext, p: dict[str, Any]) -> dict[str, Any]:
    """Time one point ``{op, tokens, width}``."""
    op, tokens, width = str(p["op"]), int(p["tokens"]), int(p["width"])
    flops, nbytes = work(op, tokens, width)
    sets = rotation_sets(nbytes, ctx.l2_bytes)
    make = {"rmsnorm": _rmsnorm, "rotary": _rotary, "silu_mul": _silu_mul, "copy": _copy}[op]
    fns = [make(ctx, tokens, width) for _ in range(sets)]
    t = ctx.op_timer_for(tokens).time(lambda i: fns[i % sets]())
    return {"median_s": t.median_s, "p10_s": t.p10_s, "p90_s": t.p90_s, "reps": t.reps, "timer": t.method,
            "impl": "torch-eager", "flops": flops, "bytes": nbytes}


def _rmsnorm(ctx: BenchContext, tokens: int, width: int) -> Any:
    torch = ctx.torch
    x, res, w = ctx.randn(tokens, width), ctx.randn(tokens, width), ctx.randn(width)
    norm = getattr(torch.nn.functional, "rms_norm", None)

    def fn() -> Any:
        h = torch.add(x, res, out=res)
        if norm is not None:
            return norm(h, (width,), w, 1e-6)
        return h * torch.rsqrt(h.float().pow(2).mean(-1, keepdim=True) + 1e-6).to(h.dtype) * w
    return fn


def _rotary(ctx: BenchContext, tokens: int, width: int) -> Any:
    torch, half = ctx.torch, ROPE_HEAD // 2
    heads = max(1, width // ROPE_HEAD)
    x = ctx.randn(tokens, heads, ROPE_HEAD)
    cos = ctx.randn(tokens, 1, half, dtype=torch.float32).to(torch.bfloat16)
    sin = ctx.randn(tokens, 1, half, dtype=torch.float32).to(torch.bfloat16)

    def fn() -> Any:
        x1, x2 = x[..., :half], x[..., half:]
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
    return fn


def _silu_mul(ctx: BenchContext, tokens: int, width: int) -> Any:
    torch = ctx.torch
    x = ctx.randn(tokens, 2 * width)
    return lambda: torch.nn.functional.silu(x[:, :width]) * x[:, width:]


def _copy(ctx: BenchContext, tokens: int, width: int) -> Any:
    src, dst = ctx.randn(tokens, width), ctx.randn(tokens, width)
    return lambda: dst.copy_(src)
