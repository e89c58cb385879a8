"""Linear-layer GEMMs: ``y = x @ W.T`` for ``x`` of M x K and ``W`` of N x K (``F.linear``).

bf16 runs through ``torch.nn.functional.linear`` (cuBLAS, as vLLM's unquantised layers);
fp8 through ``torch._scaled_mm`` with per-tensor scales and bf16 output (W8A8 on Hopper and
later; the activation quantisation kernel vLLM adds is not included).  fp8 points on a GPU
without it are skipped with the reason recorded.  Weights of one (K, N, dtype) are kept across
consecutive points (the grid orders points by shape, then M).
"""

from __future__ import annotations

from typing import Any

from latsim.calibration.context import BenchContext, Skip
from latsim.calibration.timing import rotation_sets

DTYPE_BYTES = {"bf16": 2, "fp8": 1}


def gemm_work(m: int, k: int, n: int, dtype: str) -> tuple[float, float]:
    """(FLOPs, minimum bytes) of one GEMM: weights and activations once, bf16 output."""
    wb = DTYPE_BYTES[dtype]
    return 2.0 * m * k * n, float(k * n * wb + m * k * wb + m * n * 2)


def _check_fp8(ctx: BenchContext) -> None:
    torch = ctx.torch
    if not ctx.is_cuda or not hasattr(torch, "_scaled_mm"):
        raise Skip("fp8 needs torch._scaled_mm on a CUDA GPU")
    if torch.cuda.get_device_capability(0) < (8, 9):
        raise Skip(f"fp8 needs compute capability >= 8.9, found {torch.cuda.get_device_capability(0)}")


def _weights(ctx: BenchContext, k: int, n: int, dtype: str) -> list[Any]:
    key = f"gemm:{k}x{n}:{dtype}"
    if key not in ctx.cache:
        ctx.clear()
        sets = rotation_sets(k * n * DTYPE_BYTES[dtype], ctx.l2_bytes)
        ctx.cache[key] = [_make(ctx, n, k, dtype) for _ in range(sets)]
    weights: list[Any] = ctx.cache[key]
    return weights


def _make(ctx: BenchContext, rows: int, cols: int, dtype: str) -> Any:
    t = ctx.randn(rows, cols)
    return t.to(ctx.torch.float8_e4m3fn) if dtype == "fp8" else t


def run(ctx: BenchContext, p: dict[str, Any]) -> dict[str, Any]:
    """Time one GEMM point ``{M, K, N, dtype}``."""
    m, k, n, dtype = int(p["M"]), int(p["K"]), int(p["N"]), str(p["dtype"])
    if dtype not in DTYPE_BYTES:
        raise ValueError(f"gemm dtype={dtype!r}; accepted: {', '.join(DTYPE_BYTES)}")
    if dtype == "fp8":
        _check_fp8(ctx)
    ws = _weights(ctx, k, n, dtype)
    xs = [_make(ctx, m, k, dtype) for _ in range(len(ws))]
    fn, impl = _kernel(ctx, dtype, xs, ws)
    t = ctx.timer.time(fn)
    flops, nbytes = gemm_work(m, k, n, dtype)
    return {"median_s": t.median_s, "p10_s": t.p10_s, "p90_s": t.p90_s, "reps": t.reps,
            "impl": impl, "flops": flops, "bytes": nbytes}


def _kernel(ctx: BenchContext, dtype: str, xs: list[Any], ws: list[Any]) -> tuple[Any, str]:
    torch = ctx.torch
    sets = len(ws)
    if dtype == "bf16":
        linear = torch.nn.functional.linear
        return (lambda i: linear(xs[i % sets], ws[i % sets])), "torch.nn.functional.linear"
    one = torch.ones((), dtype=torch.float32, device=ctx.device)

    def fp8(i: int) -> Any:
        return torch._scaled_mm(xs[i % sets], ws[i % sets].t(), scale_a=one, scale_b=one,
                                out_dtype=torch.bfloat16)
    return fp8, "torch._scaled_mm(per-tensor)"
