"""vLLM's 4-bit Machete GEMM with and without zero points, in bursts and at the power cap (issue 17).

The profile's 4-bit rows time Machete on symmetric GPTQ-style weights (``uint4b8``, bf16 group
scales).  vLLM 0.25.1 runs an AWQ checkpoint through the same kernel with zero points
(``uint4`` weights, the zeros pre-multiplied by the scales as a bf16 ``b_group_zeros`` tensor:
``MacheteLinearKernel.process_weights_after_loading``).  Two questions, on Llama-3.1-70B's four
linear shapes:

1. **Zero points**: each shape over 1-8,192 rows, symmetric and with zero points, timed the way
   the calibration grid times a point (:mod:`latsim.calibration.timing`: a burst of calls after a
   GPU sleep, rotation sets against the L2).
2. **The power cap**: the gate_up GEMM of 537-8,160 rows back to back for ``--seconds`` after an
   idle pause, every call timed (``device_power_probe.sustained``): its full-clock and its
   capped time, for the 4-bit pair of ``scripts/fit_power.py``.
3. ``--all-shapes``: the same sustained runs on every one of the four shapes, 4-bit (symmetric
   and with zero points, 2,048 and 8,160 rows) and vLLM's CUTLASS fp8 GEMM on randn weights
   (2,048 and 3,072 rows, the fp8 grid's largest), so that each class's capped ratio is not
   gate_up's alone; writes ``$OUT/shapes_probe.json``.  ``--dtypes bf16`` does the same for
   torch's bf16 GEMM on Llama-3.1-8B's four shapes (2,048 and 8,160 rows) and the 70B's (2,048
   and 3,072: the bf16 grid's largest there), or with ``--models A,B`` those catalog models'
   shapes at 2,048 and 8,160 rows; writes ``$OUT/shapes_probe_bf16.json``.
4. ``--warming SECONDS``: a whole bf16 layer (the four shapes in turn, as an engine's step runs
   them) back to back for ``SECONDS``, the 8B's at 8,160 rows, then after a cool-down the 70B's
   at 3,072: how far the capped level keeps falling as the chip warms past the 2.5 s of the
   runs above; writes ``$OUT/warming_probe.json``.  ``--warming-models A,B`` runs the layers of
   those catalog models instead (shapes from the catalog, 8,160 rows), one after another with
   the cool-down between: whether models of one class slow alike at the cap (twentieth session:
   Qwen2.5-7B's live clock at the cap read 2-3 % above Mistral-7B's).

Writes ``$OUT/int4_probe.json``; from the repository root on the GPU machine with vLLM
importable (``scripts/device_fidelity.sh int4``).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from device_power_probe import _gemm, _summary, sustained  # scripts/ is on the path when a script runs by path

from latsim.atomic import atomic_write_text
from latsim.calibration.context import make_context
from latsim.calibration.gemm import INT4_GROUP
from latsim.calibration.timing import rotation_sets

SHAPES = {"qkv": (8192, 10240), "o": (8192, 8192), "gate_up": (8192, 57344), "down": (28672, 8192)}
ROWS = (1, 8, 16, 32, 64, 128, 256, 512, 537, 1024, 2048, 4096, 8192)
SUSTAINED_ROWS = (537, 2048, 8160)
ALL_SHAPES_ROWS = {"int4": (2048, 8160), "fp8": (2048, 3072)}
SHAPES_8B = {"qkv": (4096, 6144), "o": (4096, 4096), "gate_up": (4096, 28672), "down": (14336, 4096)}
BF16_ROWS = {"llama-3.1-8b": (SHAPES_8B, (2048, 8160)), "llama-3.1-70b": (SHAPES, (2048, 3072))}


def machete(ctx: Any, m: int, k: int, n: int, zero_points: bool, weights: str = "random") -> Any:
    """``fn(i)``: Machete of ``m`` rows on 4-bit weights of (K, N), over rotation sets; ``weights``
    ``random`` (every nibble uniform) or ``empty`` (``torch.empty``, what vLLM's dummy loader
    leaves in an integer tensor on CUDA) or ``zeros``."""
    import torch
    from vllm import _custom_ops as ops
    from vllm.scalar_type import scalar_types

    b_type = scalar_types.uint4 if zero_points else scalar_types.uint4b8
    sets = rotation_sets(k * n / 2, ctx.l2_bytes, max_sets=8)
    packs = []
    for _ in range(sets):
        if weights == "random":
            q = torch.randint(0, 2**31 - 1, (k // 8, n), dtype=torch.int32, device="cuda")
        else:
            q = (torch.empty if weights == "empty" else torch.zeros)((k // 8, n), dtype=torch.int32, device="cuda")
        w = ops.machete_prepack_B(q.t().contiguous().t(), a_type=torch.bfloat16, b_type=b_type,
                                  group_scales_type=torch.bfloat16)
        s = torch.randn(k // INT4_GROUP, n, device="cuda", dtype=torch.bfloat16) * 0.01
        z = -s * torch.randint(0, 16, s.shape, device="cuda").to(torch.bfloat16) if zero_points else None
        packs.append((w, s, z))
    xs = [torch.randn(m, k, device="cuda", dtype=torch.bfloat16) for _ in range(sets)]

    def fn(i: int) -> Any:
        w, s, z = packs[i % sets]
        return ops.machete_mm(a=xs[i % sets], b_q=w, b_type=b_type, b_group_scales=s, b_group_zeros=z,
                              b_group_size=INT4_GROUP)
    fn(0)
    torch.cuda.synchronize()
    return fn


def bursts(ctx: Any) -> list[dict[str, Any]]:
    rows = []
    for name, (k, n) in SHAPES.items():
        for m in ROWS:
            row: dict[str, Any] = {"shape": name, "K": k, "N": n, "M": m}
            for zp in (False, True):
                t = ctx.timer.time(machete(ctx, m, k, n, zp))
                row["zp_s" if zp else "sym_s"] = t.median_s
            ctx.torch.cuda.empty_cache()
            print(f"{name:>8} M={m:>5}  sym {row['sym_s'] * 1e6:9.1f} us  zp {row['zp_s'] * 1e6:9.1f} us"
                  f"  zp/sym {row['zp_s'] / row['sym_s']:.3f}", flush=True)
            rows.append(row)
    return rows


def dummy_weights(ctx: Any, seconds: float, ms: list[int]) -> list[dict[str, Any]]:
    """The gate_up GEMM on random against dummy-loader weights, sustained: does the weights'
    content move the clock (a power effect) and the time?"""
    import torch
    from vllm import _custom_ops as ops

    k, n = SHAPES["gate_up"]
    rows = []
    for m in ms:
        for weights in ("random", "empty", "zeros"):
            r = sustained(ctx, machete(ctx, m, k, n, False, weights), seconds)
            print(f"int4 {weights:>6} M={m:>5}  {_summary(r)}", flush=True)
            rows.append({"dtype": "int4", "weights": weights, "M": m, **r})
            torch.cuda.empty_cache()
        a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
        sa, sb = torch.ones((m, 1), device="cuda"), torch.ones((1, n), device="cuda")
        for weights in ("randn", "dummy"):
            w = torch.randn(n, k, device="cuda")
            w8 = (w if weights == "randn" else w.uniform_(-1e-3, 1e-3)).to(torch.float8_e4m3fn)
            del w

            def fp8(i: int, w8: Any = w8, a: Any = a, sa: Any = sa, sb: Any = sb) -> Any:
                return ops.cutlass_scaled_mm(a, w8.t(), sa, sb, out_dtype=torch.bfloat16)
            r = sustained(ctx, fp8, seconds)
            print(f"fp8  {weights:>6} M={m:>5}  {_summary(r)}", flush=True)
            rows.append({"dtype": "fp8", "weights": weights, "M": m, **r})
            del w8
            torch.cuda.empty_cache()
    return rows


def all_shapes(ctx: Any, seconds: float) -> list[dict[str, Any]]:
    """Sustained runs of every shape: 4-bit symmetric and with zero points, and fp8 (randn weights)."""
    rows = []
    for name, (k, n) in SHAPES.items():
        for m in ALL_SHAPES_ROWS["int4"]:
            for zp in (False, True):
                r = sustained(ctx, machete(ctx, m, k, n, zp), seconds)
                print(f"sustained {name:>7} int4 {'zp ' if zp else 'sym'} M={m:>5}  {_summary(r)}", flush=True)
                rows.append({"kernel": "gemm", "shape": name, "dtype": "int4", "zero_points": zp,
                             "K": k, "N": n, "M": m, **r})
                ctx.torch.cuda.empty_cache()
        for m in ALL_SHAPES_ROWS["fp8"]:
            r = sustained(ctx, _gemm(ctx, "fp8", k, n, m), seconds)
            print(f"sustained {name:>7} fp8      M={m:>5}  {_summary(r)}", flush=True)
            rows.append({"kernel": "gemm", "shape": name, "dtype": "fp8", "K": k, "N": n, "M": m, **r})
            ctx.clear()
    return rows


def all_shapes_bf16(ctx: Any, seconds: float, models: list[str] | None = None) -> list[dict[str, Any]]:
    """Sustained runs of torch's bf16 GEMM on the 8B's and the 70B's four shapes, or on those of
    each of ``models`` (catalog names; 2,048 and 8,160 rows)."""
    plan = {name: (catalog_shapes(name), (2048, 8160)) for name in models} if models else BF16_ROWS
    rows = []
    for model, (shapes, ms) in plan.items():
        for name, (k, n) in shapes.items():
            for m in ms:
                r = sustained(ctx, _gemm(ctx, "bf16", k, n, m), seconds)
                print(f"sustained {model} {name:>7} bf16 M={m:>5}  {_summary(r)}", flush=True)
                rows.append({"kernel": "gemm", "model": model, "shape": name, "dtype": "bf16", "K": k, "N": n,
                             "M": m, **r})
                ctx.clear()
    return rows


def layer_fn(ctx: Any, shapes: dict[str, tuple[int, int]], m: int) -> Any:
    """``fn(i)``: call ``i`` runs shape ``i % 4`` of ``shapes`` (bf16, ``m`` rows), a layer's order."""
    fns = [_gemm(ctx, "bf16", k, n, m) for k, n in shapes.values()]

    def fn(i: int) -> Any:
        return fns[i % len(fns)](i // len(fns))
    return fn


CATALOG = Path(__file__).resolve().parents[1] / "latsim" / "data" / "catalog" / "models"


def catalog_shapes(name: str) -> dict[str, tuple[int, int]]:
    """``{qkv, o, gate_up, down: (K, N)}`` of a dense catalog model's linear layers at TP=1, read
    from its Hugging Face config (``latsim/data/catalog/models/NAME.json``) directly: the GPU
    machine runs this without latsim's dependencies (no pydantic for the catalog's loader)."""
    cfg = json.loads((CATALOG / f"{name}.json").read_text())
    h, heads, inter = cfg["hidden_size"], cfg["num_attention_heads"], cfg["intermediate_size"]
    head_dim = cfg.get("head_dim") or h // heads
    q, kv = heads * head_dim, 2 * cfg.get("num_key_value_heads", heads) * head_dim
    return {"qkv": (h, q + kv), "o": (q, h), "gate_up": (h, 2 * inter), "down": (inter, h)}


def warming(ctx: Any, seconds: float, cool_s: float = 20.0,
            models: list[str] | None = None) -> list[dict[str, Any]]:
    """A bf16 layer of the 8B (8,160 rows) and of the 70B (3,072 rows), or of each of ``models``
    (8,160 rows), sustained for ``seconds`` each, ``cool_s`` idle between; call ``j`` of a run is
    shape ``j % 4`` (qkv, o, gate_up, down)."""
    import time

    runs = ([(name, catalog_shapes(name), 8160) for name in models] if models else
            [("llama-3.1-8b", SHAPES_8B, 8160), ("llama-3.1-70b", SHAPES, 3072)])
    rows: list[dict[str, Any]] = []
    for model, shapes, m in runs:
        if rows:
            time.sleep(cool_s)
        r = sustained(ctx, layer_fn(ctx, shapes, m), seconds)
        print(f"warming {model} layer M={m}  {_summary(r)}", flush=True)
        rows.append({"kernel": "gemm-layer", "model": model, "dtype": "bf16", "M": m,
                     "shapes": {name: list(kn) for name, kn in shapes.items()}, **r})
        ctx.clear()
    return rows


def gate_up_sustained(ctx: Any, seconds: float) -> list[dict[str, Any]]:
    """The gate_up GEMM of :data:`SUSTAINED_ROWS` sustained, symmetric and with zero points."""
    rows = []
    k, n = SHAPES["gate_up"]
    for zp in (False, True):
        for m in SUSTAINED_ROWS:
            r = sustained(ctx, machete(ctx, m, k, n, zp), seconds)
            print(f"sustained gate_up {'zp ' if zp else 'sym'} M={m:>5}  {_summary(r)}", flush=True)
            rows.append({"kernel": "gemm", "dtype": "int4", "zero_points": zp, "K": k, "N": n, "M": m, **r})
            ctx.torch.cuda.empty_cache()
    return rows


def _write(ctx: Any, folder: str, name: str, **fields: Any) -> None:
    """``folder/name``: the GPU's name and ``fields``, as JSON, written atomically (a probe cut
    short leaves no half file)."""
    atomic_write_text(Path(folder, name), json.dumps({"gpu": ctx.torch.cuda.get_device_name(0), **fields}))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.environ.get("OUT", "."))
    p.add_argument("--seconds", type=float, default=2.5)
    p.add_argument("--dummy-weights", action="store_true", help="only the random against dummy weights check")
    p.add_argument("--dummy-rows", type=lambda v: [int(x) for x in v.split(",")], default=[2048, 8160])
    p.add_argument("--all-shapes", action="store_true", help="only the sustained runs of every shape")
    p.add_argument("--dtypes", default="int4,fp8", choices=["int4,fp8", "bf16"],
                   help="with --all-shapes: the quantized kernels (default) or bf16")
    p.add_argument("--warming", type=float, metavar="SECONDS", help="only the long bf16 layer runs")
    p.add_argument("--warming-models", type=lambda v: [x for x in v.split(",") if x],
                   help="with --warming: these catalog models' layers (comma-separated) instead")
    p.add_argument("--models", type=lambda v: [x for x in v.split(",") if x],
                   help="with --all-shapes --dtypes bf16: these catalog models' shapes (comma-separated) instead")
    args = p.parse_args()
    ctx = make_context("cuda")
    if args.warming:
        _write(ctx, args.out, "warming_probe.json", rows=warming(ctx, args.warming, models=args.warming_models))
    elif args.all_shapes and args.dtypes == "bf16":
        _write(ctx, args.out, "shapes_probe_bf16.json", rows=all_shapes_bf16(ctx, args.seconds, args.models))
    elif args.all_shapes:
        _write(ctx, args.out, "shapes_probe.json", group_size=INT4_GROUP, rows=all_shapes(ctx, args.seconds))
    elif args.dummy_weights:
        _write(ctx, args.out, "dummy_weights_probe.json", rows=dummy_weights(ctx, args.seconds, args.dummy_rows))
    else:
        _write(ctx, args.out, "int4_probe.json", group_size=INT4_GROUP, bursts=bursts(ctx),
               sustained=gate_up_sustained(ctx, args.seconds))


if __name__ == "__main__":
    main()
