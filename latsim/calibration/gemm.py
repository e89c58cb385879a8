"""Linear-layer GEMMs: ``y = x @ W.T`` for ``x`` of M x K and ``W`` of N x K (``F.linear``).

bf16 runs through ``torch.nn.functional.linear`` (cuBLAS, as vLLM's unquantised layers).
fp8 (W8A8 on Hopper and later), first that works: vLLM's own CUTLASS kernel
(``vllm._custom_ops.cutlass_scaled_mm``, per-token activation and per-channel weight scales, bf16
output: what vLLM 0.25.1 runs for FP8 checkpoints on Hopper) when vLLM imports, else
``torch._scaled_mm`` with per-tensor scales.  The activation quantisation kernel vLLM runs
before it is not included (the cost model prices it as its own op).  fp8 points on a GPU
without either are skipped with the reason recorded; ``impl`` names the kernel of each row.
int4 (4-bit weights, bf16 activations: GPTQ, AWQ and compressed-tensors w4a16 checkpoints)
runs the kernel vLLM 0.25.1 picks for those checkpoints (``choose_mp_linear_kernel``): Machete
(``vllm._custom_ops.machete_mm``, prepacked by ``machete_prepack_B``; groups of :data:`INT4_GROUP`
of bf16 scales) on compute capability 9.0 when K is a multiple of 64 and N of 128, else Marlin
(``marlin_gemm``, weights quantized and repacked by vLLM's Marlin helpers).  The live engine's
log names the kernel ("Using MacheteLinearKernel for AutoGPTQLinearMethod" on the H200); without
vLLM the point is skipped.
Weights of one (K, N, dtype) are kept across consecutive points (the grid orders points by
shape, then M).
"""

from __future__ import annotations

from typing import Any

from latsim.calibration.context import BenchContext, Skip
from latsim.calibration.timing import rotation_sets

INT4_GROUP = 128
DTYPE_BYTES = {"bf16": 2.0, "fp8": 1.0, "int4": 0.5 + 2.0 / INT4_GROUP}
"""Bytes per weight element (int4: the packed nibble plus its group's bf16 scale)."""
ACT_BYTES = {"bf16": 2.0, "fp8": 1.0, "int4": 2.0}
"""Bytes per activation element the kernel reads (W8A8 reads quantized activations)."""


def gemm_work(m: int, k: int, n: int, dtype: str) -> tuple[float, float]:
    """(FLOPs, minimum bytes) of one GEMM: weights and activations once, bf16 output."""
    return 2.0 * m * k * n, float(k * n * DTYPE_BYTES[dtype] + m * k * ACT_BYTES[dtype] + m * n * 2)


def _check_fp8(ctx: BenchContext) -> None:
    torch = ctx.torch
    if not ctx.is_cuda or not hasattr(torch, "_scaled_mm"):
        raise Skip("fp8 needs torch._scaled_mm on a CUDA GPU")
    if torch.cuda.get_device_capability(0) < (8, 9):
        raise Skip(f"fp8 needs compute capability >= 8.9, found {torch.cuda.get_device_capability(0)}")


def _weights(ctx: BenchContext, k: int, n: int, dtype: str) -> list[Any]:
    return _rotated(ctx, f"gemm:{k}x{n}:{dtype}", k * n * DTYPE_BYTES[dtype], lambda: _make(ctx, n, k, dtype))


def _rotated(ctx: BenchContext, key: str, nbytes: float, make: Any) -> list[Any]:
    """``make()``'s weights of one (K, N, kernel), as many copies as the rotation over L2 needs for
    ``nbytes`` each, kept in ``ctx.cache[key]`` while consecutive points share them (the previous
    shape's are freed first)."""
    if key not in ctx.cache:
        ctx.clear()
        ctx.cache[key] = [make() for _ in range(rotation_sets(nbytes, ctx.l2_bytes))]
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
    if dtype == "int4":
        fn, impl = _machete(ctx, m, k, n) if _machete_shape(ctx, k, n) else _marlin(ctx, m, k, n)
    else:
        ws = _weights(ctx, k, n, dtype)
        xs = [_make(ctx, m, k, dtype) for _ in range(len(ws))]
        fn, impl = _kernel(ctx, dtype, xs, ws)
    t = ctx.op_timer_for(m).time(fn)
    flops, nbytes = gemm_work(m, k, n, dtype)
    return {"median_s": t.median_s, "p10_s": t.p10_s, "p90_s": t.p90_s, "reps": t.reps, "timer": t.method,
            "impl": impl, "flops": flops, "bytes": nbytes}


def _kernel(ctx: BenchContext, dtype: str, xs: list[Any], ws: list[Any]) -> tuple[Any, str]:
    torch = ctx.torch
    sets = len(ws)
    if dtype == "bf16":
        linear = torch.nn.functional.linear
        return (lambda i: linear(xs[i % sets], ws[i % sets])), "torch.nn.functional.linear"
    cutlass = _vllm_cutlass(ctx, xs, ws)
    if cutlass is not None:
        return cutlass, "vllm.cutlass_scaled_mm(per-token,per-channel)"
    one = torch.ones((), dtype=torch.float32, device=ctx.device)

    def fp8(i: int) -> Any:
        return torch._scaled_mm(xs[i % sets], ws[i % sets].t(), scale_a=one, scale_b=one,
                                out_dtype=torch.bfloat16)
    return fp8, "torch._scaled_mm(per-tensor)"


def _vllm_cutlass(ctx: BenchContext, xs: list[Any], ws: list[Any]) -> Any:
    """vLLM's CUTLASS W8A8 GEMM over the rotation sets, or None when vLLM or the kernel is missing."""
    try:
        from vllm import _custom_ops as ops
    except Exception:  # any import failure: not available
        return None
    torch, sets = ctx.torch, len(ws)
    m, n = xs[0].shape[0], ws[0].shape[0]
    scale_a = torch.ones((m, 1), dtype=torch.float32, device=ctx.device)
    scale_b = torch.ones((1, n), dtype=torch.float32, device=ctx.device)

    def fn(i: int) -> Any:
        return ops.cutlass_scaled_mm(xs[i % sets], ws[i % sets].t(), scale_a, scale_b, out_dtype=torch.bfloat16)
    try:
        fn(0)
    except Exception:  # a shape CUTLASS refuses: torch._scaled_mm
        return None
    return fn


def _marlin(ctx: BenchContext, m: int, k: int, n: int) -> tuple[Any, str]:
    """vLLM's Marlin W4A16 GEMM of ``m`` rows over the rotation sets of one (K, N) (Skip without it)."""
    packs = _marlin_weights(ctx, k, n)
    from vllm import _custom_ops as ops
    from vllm.model_executor.layers.quantization.utils.marlin_utils import marlin_make_workspace_new
    from vllm.scalar_type import scalar_types

    torch, sets = ctx.torch, len(packs)
    xs = [ctx.randn(m, k) for _ in range(sets)]
    workspace = marlin_make_workspace_new(torch.device("cuda", torch.cuda.current_device()))

    def fn(i: int) -> Any:
        w = packs[i % sets]
        return ops.marlin_gemm(xs[i % sets], None, w["q"], None, w["s"], None, None, None, w["g_idx"], w["perm"],
                               workspace, scalar_types.uint4b8, size_m=m, size_n=n, size_k=k, is_k_full=True,
                               use_atomic_add=False, use_fp32_reduce=True, is_zp_float=False)
    fn(0)
    torch.cuda.synchronize()
    return fn, f"vllm.marlin_gemm(uint4b8,group{INT4_GROUP})"


def _marlin_weights(ctx: BenchContext, k: int, n: int) -> list[dict[str, Any]]:
    """Marlin-packed 4-bit weights of one (K, N), per rotation set (Skip without Marlin)."""
    if not ctx.is_cuda:
        raise Skip("int4 needs vLLM's Marlin kernel on a CUDA GPU")
    try:
        from vllm.model_executor.layers.quantization.utils.marlin_utils_test import marlin_quantize
        from vllm.scalar_type import scalar_types
    except Exception as exc:  # any import failure: no Marlin here
        raise Skip(f"int4 needs vLLM's Marlin kernel ({type(exc).__name__}: {exc})") from exc

    def make() -> dict[str, Any]:
        _, q, s, g_idx, perm, _ = marlin_quantize(ctx.randn(k, n), scalar_types.uint4b8, INT4_GROUP, False)
        return {"q": q, "s": s, "g_idx": g_idx, "perm": perm}
    packs: list[dict[str, Any]] = _rotated(ctx, f"gemm:{k}x{n}:int4", k * n * DTYPE_BYTES["int4"], make)
    return packs


def _machete_shape(ctx: BenchContext, k: int, n: int) -> bool:
    """Whether vLLM runs a 4-bit layer of this shape with Machete here (Hopper, 64 | K, 128 | N)."""
    if not ctx.is_cuda or ctx.torch.cuda.get_device_capability(0) != (9, 0):
        return False
    return k % 64 == 0 and n % 128 == 0


def _machete(ctx: BenchContext, m: int, k: int, n: int) -> tuple[Any, str]:
    """vLLM's Machete W4A16 GEMM (uint4b8, bf16 group scales) over the rotation sets of one (K, N)."""
    try:
        from vllm import _custom_ops as ops
        from vllm.scalar_type import scalar_types
    except Exception as exc:  # any import failure: no Machete here
        raise Skip(f"int4 needs vLLM's Machete kernel ({type(exc).__name__}: {exc})") from exc
    packs = _machete_weights(ctx, k, n)
    torch, sets = ctx.torch, len(packs)
    xs = [ctx.randn(m, k) for _ in range(sets)]

    def fn(i: int) -> Any:
        w, s = packs[i % sets]
        return ops.machete_mm(a=xs[i % sets], b_q=w, b_type=scalar_types.uint4b8, b_group_scales=s,
                              b_group_zeros=None, b_group_size=INT4_GROUP)
    fn(0)
    torch.cuda.synchronize()
    return fn, f"vllm.machete_mm(uint4b8,group{INT4_GROUP})"


def _machete_weights(ctx: BenchContext, k: int, n: int) -> list[tuple[Any, Any]]:
    """Prepacked random 4-bit weights (K/8 x N int32 packed along K, as GPTQ stores them) and
    their group scales, as many copies as the rotation needs (cached)."""
    from vllm import _custom_ops as ops
    from vllm.scalar_type import scalar_types

    torch = ctx.torch

    def make() -> tuple[Any, Any]:
        q = torch.randint(0, 2**31 - 1, (k // 8, n), dtype=torch.int32, device=ctx.device)
        packed = ops.machete_prepack_B(q.t().contiguous().t(), a_type=torch.bfloat16, b_type=scalar_types.uint4b8,
                                       group_scales_type=torch.bfloat16)
        return packed, ctx.randn(k // INT4_GROUP, n) * 0.01
    packs: list[tuple[Any, Any]] = _rotated(ctx, f"gemm:{k}x{n}:int4-machete", k * n * DTYPE_BYTES["int4"], make)
    return packs
