"""The calibration grids, as data: which points each benchmark family measures.

A :class:`GridSpec` lists per-family axes; :func:`points` expands it against the shipped shape
table (:mod:`latsim.calibration.shapes`) into :class:`Point` records in run order (GEMMs by
shape then M, so weights are allocated once per shape).  A point's ``id`` is a stable string of
its family and parameters; the runner's resume logic and the tables key on it.  ``grid_hash``
fingerprints the expanded point list (recorded in ``profile.json``).

Budgets (one H200): ``full`` <= 6 minutes, ``quick`` <= 1.5 minutes of benchmark time;
:func:`estimate_seconds` is the planning estimate the tests hold the grids to.  ``tiny`` is for
the CPU backend (tests, CI).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

from latsim.calibration.timing import GRAPH_MAX_ROWS

FAMILIES = ("overhead", "memory", "attention", "moe", "gemm", "comm")


@dataclass(frozen=True)
class Point:
    """One measurement: ``family`` and its parameters; ``id`` is unique within a grid."""

    id: str
    family: str
    params: tuple[tuple[str, Any], ...]

    @property
    def kwargs(self) -> dict[str, Any]:
        return dict(self.params)


@dataclass(frozen=True)
class GridSpec:
    """Axes of every family.  ``*_stride`` keeps every n-th shape of the shape table (0: none).

    GEMM shapes are ordered by weight size; shape ``i`` of that order is measured when
    ``i % gemm_stride == 0`` and also in fp8 when ``i % gemm_fp8_stride == 0``, so a grid whose
    strides are multiples of another's measures a subset of its points.
    """

    name: str
    gemm_m: tuple[int, ...]
    gemm_stride: int
    gemm_fp8_stride: int
    prefill_configs: int
    prefill_q: tuple[int, ...]
    prefill_ctx: tuple[int, ...]
    max_prefill_pairs: float
    decode_configs: int
    decode_batch: tuple[int, ...]
    decode_ctx: tuple[int, ...]
    decode_mix: tuple[str, ...]
    max_decode_kv: int
    memory_tokens: tuple[int, ...]
    memory_widths: tuple[tuple[str, tuple[int, ...]], ...]
    moe_stride: int
    moe_tokens: tuple[int, ...]
    overhead_kernels: tuple[int, ...]
    comm_world: tuple[int, ...]
    comm_bytes: tuple[int, ...]
    gemm_bf16: bool = True
    """Whether the strided shapes are measured in bf16 (every grid but the quantized-only ones)."""
    gemm_int4_stride: int = 0
    """Shape ``i`` is also measured as a 4-bit weight-only GEMM (the W4A16 kernel vLLM picks on
    the GPU: ``gemm.py``) when ``i % gemm_int4_stride == 0`` (0: never)."""
    attention_kv: tuple[str, ...] = ("bf16",)
    """KV-cache dtypes of the attention points; a point names its ``kv`` only when it is not bf16,
    so the ids of the bf16 points do not change."""
    attention_window: int = 0
    """Sliding window of every attention point (0: none, and the point does not name one)."""
    decode_between: tuple[int, ...] = ()
    """Decode batch sizes between :attr:`decode_batch`'s, timed in the uniform mix only: FA3's
    decode call steps between powers of two (its splits and waves over the SMs change with the
    batch; ``decode-batches``).  Not in the full grid: fitted on the H200's rows, they made the
    held-out live levels worse (``data/kernels/README.md``)."""
    fp8kv_configs: int = 0
    """The first n head configurations (most-used first) are also timed over an fp8 KV cache
    (prefill, and decode in the uniform mix the cost model prices from)."""


def _pow2(lo: int, hi: int, step: int = 1) -> tuple[int, ...]:
    return tuple(2**e for e in range(lo, hi + 1, step))


FULL = GridSpec(
    name="full", gemm_m=(1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072,
                         4096, 6144, 8192, 12288, 16384),
    gemm_stride=1, gemm_fp8_stride=2,
    prefill_configs=12, prefill_q=(16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384),
    prefill_ctx=(0, 256, 1024, 2048, 4096, 8192, 16384, 32768, 65536), max_prefill_pairs=2.0**29,
    decode_configs=20, decode_batch=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024),
    decode_ctx=(64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072),
    decode_mix=("uniform", "skewed"), max_decode_kv=2**21,
    memory_tokens=(1, 4, 16, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768),
    memory_widths=(("rmsnorm", (2048, 3072, 4096, 5120, 8192, 16384)), ("rotary", (768, 1536, 3072, 6144, 12288)),
                   ("silu_mul", (768, 1536, 3584, 7168, 14336, 28672)), ("copy", (1024, 4096, 16384, 65536))),
    moe_stride=1, moe_tokens=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384),
    overhead_kernels=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024), comm_world=(2, 4, 8), comm_bytes=_pow2(12, 28, 1),
    gemm_int4_stride=4, fp8kv_configs=7,
)

QUICK = GridSpec(
    name="quick", gemm_m=(1, 8, 32, 128, 512, 2048, 8192, 16384), gemm_stride=3, gemm_fp8_stride=6,
    prefill_configs=4, prefill_q=(64, 256, 1024, 4096, 8192), prefill_ctx=(0, 2048, 16384),
    max_prefill_pairs=2.0**27, decode_configs=8, decode_batch=(1, 8, 32, 128, 512),
    decode_ctx=(256, 1024, 4096, 16384), decode_mix=("uniform", "skewed"), max_decode_kv=2**20,
    memory_tokens=(1, 128, 4096, 16384),
    memory_widths=(("rmsnorm", (4096, 8192)), ("rotary", (6144,)), ("silu_mul", (14336,)), ("copy", (16384,))),
    moe_stride=2, moe_tokens=(1, 16, 128, 1024, 8192),
    overhead_kernels=(1, 8, 32, 128, 512), comm_world=(2,), comm_bytes=_pow2(12, 28, 4),
)

TINY = GridSpec(
    name="tiny", gemm_m=(1, 8, 32), gemm_stride=1, gemm_fp8_stride=0,
    prefill_configs=2, prefill_q=(8, 32), prefill_ctx=(0, 32), max_prefill_pairs=2.0**12,
    decode_configs=2, decode_batch=(1, 4), decode_ctx=(16, 64), decode_mix=("uniform", "skewed"), max_decode_kv=2**10,
    memory_tokens=(1, 16), memory_widths=(("rmsnorm", (64,)), ("silu_mul", (64,)), ("copy", (64,))),
    moe_stride=1, moe_tokens=(1, 8), overhead_kernels=(1, 8), comm_world=(2,), comm_bytes=(4096,),
)

SHAPES = replace(
    FULL, name="shapes", prefill_configs=99, decode_configs=99, gemm_stride=0, gemm_fp8_stride=0,
    memory_widths=(), moe_stride=0, overhead_kernels=(), comm_world=(), gemm_int4_stride=0, fp8kv_configs=0,
    decode_between=(),
)
"""The attention-shape study: the full grid's prefill and decode axes over :data:`STUDY_SHAPES`
(head dims 64-256, GQA ratios 1-8, MHA at every head dim), attention only."""

WIDE = replace(SHAPES, name="wide")
"""Attention of many query heads per GPU (48-96, GQA 4-12, head dim 128) with a control shape
the full grid holds (40/8/128): the 70B-class models at TP 1, beyond the full grid's 40 heads."""

MSTEPS = replace(
    SHAPES, name="msteps", gemm_stride=1, gemm_fp8_stride=1,
    gemm_m=(96, 112, 128, 136, 144, 152, 160, 176, 192, 208, 224, 240, 256, 272, 288, 320, 352, 384, 416, 448,
            480, 512, 576, 640, 704, 768, 832, 896, 960, 1024),
    prefill_configs=0, decode_batch=(64, 96, 128, 150, 152, 160, 192, 224, 256), decode_ctx=(512, 640, 896),
    decode_mix=("uniform",),
)
"""The step between grid points: linear-layer GEMMs of the 8B and 70B (bf16 and fp8) at every
few rows from 96 to 1,024, and decode attention of their head shapes at the batch sizes a live
engine runs, where the full grid has one point per power of two (or 1.5x)."""

PAGED = replace(
    SHAPES, name="paged", prefill_configs=0, decode_mix=("uniform",),
)
"""Decode attention again, over a paged KV cache the way vLLM runs it (``attention.py``): the full
grid's decode axes (uniform batches) over every head shape the H200 profile holds - the full
grid's 20 catalog shapes, the study's and the wide ones."""

DECODE_TILES = replace(
    PAGED, name="decode-tiles", decode_batch=(64, 256), decode_ctx=tuple(range(448, 1089, 16)), fp8kv_configs=7,
)
"""Decode attention over the paged cache at every page (16 tokens) from 448 to 1,088 tokens, 64 and
256 sequences, over :data:`PAGED`'s head shapes (the seven most used also over an fp8 cache):
FA3 walks a sequence's keys in tiles of a fixed number of tokens and pays a tile whole, so the
time steps at the tile's multiples, which the other grids' powers of two all sit on
(``latsim.costmodel.profile.tiles`` reads the tile from these rows)."""

DECODE_BATCHES = replace(PAGED, name="decode-batches", decode_batch=(),
                         decode_between=(3, 6, 12, 24, 48, 96, 192, 384, 768), fp8kv_configs=7)
"""Decode attention over the paged cache at batch sizes between the powers of two (3, 6, 12, ...
768: :attr:`GridSpec.decode_between`), every context of the full grid, over :data:`PAGED`'s head
shapes (the seven most used also over an fp8 cache): the same call steps with FA3's splits and
waves, up to 1.5x between neighbouring powers of two (``data/kernels/README.md``).  A diagnostic
(``scripts/decode_batches_check.py``), not merged into the shipped profile."""

DECODE_BATCHES_CHECK = replace(DECODE_BATCHES, name="decode-batches-check",
                               decode_between=(5, 10, 20, 40, 80, 160, 320))
"""Batch sizes between those of :data:`DECODE_BATCHES` (5, 10, ... 320): how well a regressor
prices a batch no grid times (``scripts/decode_batches_check.py``)."""

PAGED_PREFILL = replace(SHAPES, name="paged-prefill", decode_configs=0)
"""Prefill attention over the paged cache (``attention.py``), the full grid's prefill axes over the
same head shapes as :data:`PAGED`: a live trace found long chunks 14-28 % slower than the
contiguous rows the H200 profile holds."""

MSTEPS_HIGH = replace(
    SHAPES, name="msteps-high", gemm_stride=1, gemm_fp8_stride=1, gemm_int4_stride=1,
    gemm_m=(520, 528, 536, 544, 552, 560, 568, 584, 600, 640, 768, 1032, 1056, 1088, 1152, 1280, 1408, 1536, 1792,
            2048, 2064, 2176, 2560, 3072),
    prefill_configs=0, decode_configs=0,
)
"""GEMMs of the 8B and 70B layers (bf16, fp8 and 4-bit) just past 512 rows, where a
512-token prompt's step with a few decodes lands and vLLM's CUTLASS fp8 kernel changes tile
configuration, and on to 3,072 rows: :data:`MSTEPS` stops at 1,024."""

MSTEPS_LOW = replace(
    MSTEPS_HIGH, name="msteps-low",
    gemm_m=(1, 2, 4, 8, 16, 17, 20, 24, 28, 32, 33, 36, 40, 44, 48, 52, 56, 60, 64, 65, 68, 72, 76, 80, 84, 88, 92),
)
"""GEMMs of the 8B and 70B layers (bf16, fp8 and 4-bit) at decode batch sizes below :data:`MSTEPS`'s
96 rows: the full grid's rows (1-64) and rows between them, one just past each power of two.
Where a kernel's time steps between two grid rows is not measured, and a regressor fitted on the
grid places the step midway (the GPTQ 70B's live decode steps of 33-48 and 65-96 sequences read
5-10 % slower than priced until 4-bit GEMMs were priced at Machete's tiles,
``latsim.costmodel.profile.machete``; cuBLAS's bf16 and CUTLASS's fp8 choices are not modelled
that way); and the 70B's layers have no fp8 row below 96 in the shipped profile (the full grid
times fp8 on every few shapes), so the FP8 70B's decode GEMMs are priced from other shapes
(``data/kernels/README.md``).  Merged with ``--mode append``, the points the profile holds keep
their rows."""

W4A16 = replace(
    FULL, name="w4a16", gemm_m=FULL.gemm_m[:-2], gemm_stride=3, gemm_fp8_stride=0, gemm_int4_stride=1,
    gemm_bf16=False, prefill_configs=0, decode_configs=0, memory_widths=(), moe_stride=0, overhead_kernels=(),
    comm_world=(),
)
"""4-bit weight-only GEMMs as vLLM 0.25.1 runs GPTQ, AWQ and compressed-tensors w4a16 checkpoints
on the GPU (Machete on Hopper, else Marlin; groups of 128: ``gemm.py``), over every third catalog
shape and 1-8,192 rows.  (Its two H200 runs in ``data/kernels/`` were made under its first
name, ``marlin``.)"""

W4_STEPS = replace(
    MSTEPS, name="w4-steps", gemm_bf16=False, gemm_fp8_stride=0, gemm_int4_stride=1, decode_configs=0,
    gemm_m=tuple(sorted(set(FULL.gemm_m[:-2]) | set(MSTEPS.gemm_m) | set(MSTEPS_HIGH.gemm_m))),
)
"""4-bit weight-only GEMMs of the 8B and 70B layers at every row count the other grids time
(1-8,192), through the kernel vLLM picks on the GPU (Machete on the H200)."""

FP8_KV = replace(
    SHAPES, name="fp8-kv", decode_mix=("uniform",), attention_kv=("fp8",),
)
"""Attention over an FP8 KV cache (``--kv-cache-dtype fp8``: FA3 on fp8 queries, keys and
values, per-head descales), decode and prefill, over :data:`FP8_KV_SHAPES`."""

WINDOW = replace(
    SHAPES, name="window", decode_mix=("uniform",), attention_window=4096,
    decode_ctx=(1024, 2048, 4096, 8192, 16384, 32768), prefill_q=(256, 1024, 4096, 8192),
    prefill_ctx=(0, 2048, 4096, 8192, 16384, 32768),
)
"""Attention under a sliding window of 4,096 tokens (Mistral-7B, Gemma-2) over a paged cache,
contexts from inside the window to 8 x past it, over :data:`WINDOW_SHAPES`: a check of the
cost model's windowed pricing (context read capped at the window), not a fitted family."""

MOE_STEP_SHAPES: dict[str, Any] = {
    "gemm": [], "attention": [],
    "moe": [{"experts": e, "top_k": k, "hidden": h, "inter": i, "tags": [tag]} for e, k, h, i, tag in (
        (128, 8, 2048, 768, "qwen3-30b-a3b/tp1"), (60, 4, 2048, 1408, "qwen1.5-moe-a2.7b/tp1"))],
}

MOE_STEPS = replace(
    MSTEPS_HIGH, name="moe-steps", gemm_m=(), gemm_stride=0, gemm_fp8_stride=0, gemm_int4_stride=0, moe_stride=1,
    moe_tokens=(1, 2, 3, 4, 6, 8, 12, 16, 20, 24, 28, 32, 40, 48, 56, 64, 80, 96, 128, 192, 256, 384, 512),
)
"""The fused MoE layer of Qwen3-30B-A3B and Qwen1.5-MoE at decode batch sizes between the full
grid's powers of two (1-512 tokens, the steps vLLM runs in CUDA graphs): a check of the MoE
family's price between its rows (Qwen3-30B-A3B's live decode steps read 6-7 % slower than
priced on every shape, ``data/kernels/README.md``)."""


def _bf16_above_graphs(grid: GridSpec, name: str, *gemm_m: tuple[int, ...]) -> GridSpec:
    """``grid``'s bf16 GEMM shapes at the rows of ``gemm_m`` past :data:`GRAPH_MAX_ROWS`, nothing else."""
    rows = tuple(sorted({m for ms in gemm_m for m in ms if m > GRAPH_MAX_ROWS}))
    return replace(grid, name=name, gemm_m=rows, gemm_fp8_stride=0, gemm_int4_stride=0, gemm_bf16=True,
                   prefill_configs=0, decode_configs=0, memory_widths=(), moe_stride=0, overhead_kernels=(),
                   comm_world=(), fp8kv_configs=0)


LIVE_STEPS = replace(
    MSTEPS_HIGH, name="live-steps", gemm_fp8_stride=0, gemm_int4_stride=0,
    gemm_m=tuple(sorted(set(MSTEPS.gemm_m) | set(MSTEPS_HIGH.gemm_m))),
)
"""bf16 GEMMs of :data:`LIVE_STEP_SHAPES` at every row count :data:`MSTEPS` and :data:`MSTEPS_HIGH`
time (96-3,072): the steps of a 512-token prompt beside many decodes run 520-700 rows, where the
H100's imported profile has one point (513) and its price read 0.163 ms against 0.30 measured on
the 8B's gate_up (``data/power/README.md``).  ``device_fidelity.sh grids live-steps`` times the rows
up to 512 replayed in CUDA graphs (the runner's default ``--op-timing graph``), as vLLM runs those
steps, and the rows past it call by call; the H200's two runs: ``data/kernels/h200-live-steps*``."""


NARROW_SHAPES: dict[str, Any] = {
    "gemm": [{"K": k, "N": n, "tags": [tag]} for k, n, tag in (
        (2048, 128, "qwen3-30b-a3b/router"), (2048, 60, "qwen1.5-moe-a2.7b/router"),
        (2048, 1, "qwen1.5-moe-a2.7b/shared_gate"), (4096, 8, "mixtral-8x7b/router"),
        (6144, 8, "mixtral-8x22b/router"))],
    "moe": [], "attention": [],
}
"""The catalog MoE models' narrowest linear layers, the same on every GPU of a TP group (vLLM
replicates them): each router (hidden x experts) and each shared expert's gate (hidden x 1).  The
full grid's narrowest width is 384; below it the GEMM regressor extrapolates (at 64 rows it prices
Qwen1.5-MoE's router at 1.3 us, which a live trace measured at 8.9, and its shared gate, at 4.9,
not at all: ``docs/step-time-model.md``, "A shared expert's launch")."""

NARROW = replace(
    MSTEPS_HIGH, name="narrow", gemm_fp8_stride=0, gemm_int4_stride=0,
    gemm_m=(1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 1024, 2048, 4096, 8192),
)
"""bf16 GEMMs of :data:`NARROW_SHAPES` from one row to 8,192 (decode batches and prompt chunks):
the measurement the routers' and shared gates' price waits on."""


HEAVY_GEMM = _bf16_above_graphs(FULL, "heavy-gemm", FULL.gemm_m)
"""The full grid's bf16 GEMMs of steps too large for CUDA graphs, to be timed at the full clock
(``run_device --heavy-timing cool``) for the power model (``latsim.costmodel.power``): the burst
timing they had heats the long calls partly into the power cap, by how much depending on the
point (``data/power/README.md``)."""

HEAVY_GEMM_STEPS = _bf16_above_graphs(MSTEPS_HIGH, "heavy-gemm-steps", MSTEPS.gemm_m, MSTEPS_HIGH.gemm_m)
"""The same for the bf16 GEMMs of :data:`MSTEPS` and :data:`MSTEPS_HIGH` past 512 rows."""

GRIDS = {g.name: g for g in (FULL, QUICK, TINY, SHAPES, WIDE, MSTEPS, PAGED, DECODE_TILES, DECODE_BATCHES,
                             DECODE_BATCHES_CHECK, PAGED_PREFILL, MSTEPS_HIGH, MSTEPS_LOW, MOE_STEPS, W4A16,
                             W4_STEPS, LIVE_STEPS, NARROW, FP8_KV, WINDOW, HEAVY_GEMM, HEAVY_GEMM_STEPS)}
TINY_SHAPES: dict[str, Any] = {
    "gemm": [{"K": 64, "N": 96, "tags": ["tiny-a/tp1/qkv"]}, {"K": 128, "N": 64, "tags": ["tiny-a/tp1/o"]},
             {"K": 64, "N": 256, "tags": ["tiny-b/tp1/gate_up"]}],
    "attention": [{"hq": 4, "hkv": 2, "d": 32, "tags": ["tiny-a/tp1"]},
                  {"hq": 2, "hkv": 2, "d": 16, "tags": ["tiny-b/tp1"]}],
    "moe": [{"experts": 4, "top_k": 2, "hidden": 64, "inter": 32, "tags": ["tiny-moe/tp1"]}],
}

STUDY_SHAPES: dict[str, Any] = {
    "gemm": [], "moe": [],
    "attention": [{"hq": hq, "hkv": hkv, "d": d, "tags": ["study"]} for hq, hkv, d in (
        (16, 16, 64), (32, 32, 64), (32, 8, 64), (32, 32, 80), (32, 8, 80), (16, 16, 96), (32, 32, 96),
        (32, 8, 96), (32, 32, 128), (32, 4, 128), (8, 8, 256), (16, 8, 256), (32, 16, 256))],
}
"""Per-GPU attention shapes of the study grid; several are no catalog model's, on purpose (held out)."""
WIDE_SHAPES: dict[str, Any] = {
    "gemm": [], "moe": [],
    "attention": [{"hq": hq, "hkv": hkv, "d": 128, "tags": ["wide"]}
                  for hq, hkv in ((40, 8), (48, 8), (64, 8), (64, 16), (96, 8))],
}


MSTEP_SHAPES: dict[str, Any] = {
    "gemm": [{"K": k, "N": n, "tags": [tag]} for k, n, tag in (
        (4096, 6144, "llama-3.1-8b/tp1/qkv"), (4096, 4096, "llama-3.1-8b/tp1/o"),
        (4096, 28672, "llama-3.1-8b/tp1/gate_up"), (14336, 4096, "llama-3.1-8b/tp1/down"),
        (8192, 10240, "llama-3.1-70b/tp1/qkv"), (8192, 8192, "llama-3.1-70b/tp1/o"),
        (8192, 57344, "llama-3.1-70b/tp1/gate_up"), (28672, 8192, "llama-3.1-70b/tp1/down"))],
    "moe": [],
    "attention": [{"hq": hq, "hkv": 8, "d": 128, "tags": ["msteps"]} for hq in (32, 64)],
}


LIVE_STEP_SHAPES: dict[str, Any] = {
    "gemm": [{"K": k, "N": n, "tags": [tag]} for k, n, tag in (
        (2048, 3072, "llama-3.2-1b/tp1/qkv"), (2048, 2048, "llama-3.2-1b/tp1/o"),
        (2048, 16384, "llama-3.2-1b/tp1/gate_up"), (8192, 2048, "llama-3.2-1b/tp1/down"),
        (3072, 9216, "phi-3-mini/tp1/qkv"), (3072, 3072, "phi-3-mini/tp1/o"),
        (3072, 16384, "phi-3-mini/tp1/gate_up"), (8192, 3072, "phi-3-mini/tp1/down"),
        (3584, 4608, "qwen2.5-7b/tp1/qkv"), (3584, 3584, "qwen2.5-7b/tp1/o"),
        (3584, 37888, "qwen2.5-7b/tp1/gate_up"), (18944, 3584, "qwen2.5-7b/tp1/down"))],
    "moe": [], "attention": [],
}
"""The linear layers of the other dense models validated live (Llama-3.2-1B, Phi-3-mini,
Qwen2.5-7B), whose shapes :data:`MSTEP_SHAPES` (the 8B and 70B) does not hold."""


FP8_KV_SHAPES: dict[str, Any] = {
    "gemm": [], "moe": [],
    "attention": [{"hq": hq, "hkv": hkv, "d": d, "tags": ["fp8-kv"]} for hq, hkv, d in (
        (8, 1, 128), (16, 2, 128), (32, 8, 128), (40, 8, 128), (64, 8, 128), (32, 32, 96), (28, 4, 128))],
}
"""Per-GPU attention shapes timed over an FP8 cache: the 8B and 70B (TP 1, 4, 8), a 14B-class
40/8, Phi-3-mini's MHA of dim 96 and a GQA-7 shape."""


WINDOW_SHAPES: dict[str, Any] = {
    "gemm": [], "moe": [],
    "attention": [{"hq": hq, "hkv": hkv, "d": d, "tags": ["window"]} for hq, hkv, d in (
        (32, 8, 128), (16, 8, 256), (32, 16, 128))],
}
"""Mistral-7B's, Gemma-2-9B's and Gemma-2-27B's attention at TP 1."""


def paged_shapes(catalog: dict[str, Any]) -> dict[str, Any]:
    """The attention shapes of the full, study and wide grids, each once."""
    ranked = sorted(catalog["attention"], key=lambda s: (-len(s["tags"]), s["hq"], s["hkv"], s["d"]))
    full = ranked[:FULL.decode_configs]
    seen, out = set(), []
    for s in [*full, *STUDY_SHAPES["attention"], *WIDE_SHAPES["attention"]]:
        if (key := (s["hq"], s["hkv"], s["d"])) not in seen:
            seen.add(key)
            out.append(s)
    return {"gemm": [], "moe": [], "attention": out}


def get_grid(name: str) -> GridSpec:
    if name not in GRIDS:
        raise ValueError(f"grid={name!r} is not known; accepted: {', '.join(GRIDS)}")
    return GRIDS[name]


def _point(family: str, **params: Any) -> Point:
    body = ",".join(f"{k}={v}" for k, v in params.items())
    return Point(f"{family}:{body}", family, tuple(params.items()))


def _spread(items: list[dict[str, Any]], count: int) -> list[dict[str, Any]]:
    """``count`` items evenly spread over ``items`` (all when count >= len)."""
    if count >= len(items):
        return items
    step = (len(items) - 1) / max(1, count - 1)
    return [items[round(i * step)] for i in range(count)]


def _gemm(g: GridSpec, shapes: dict[str, Any]) -> Iterator[Point]:
    ordered = sorted(shapes["gemm"], key=lambda s: (s["K"] * s["N"], s["K"]))
    for i in range(0, len(ordered), g.gemm_stride) if g.gemm_stride else ():
        s, dtypes = ordered[i], ["bf16"] if g.gemm_bf16 else []
        if g.gemm_fp8_stride and i % g.gemm_fp8_stride == 0 and _fp8_ok(s):
            dtypes.append("fp8")
        if g.gemm_int4_stride and i % g.gemm_int4_stride == 0 and _int4_ok(s):
            dtypes.append("int4")
        for dtype in dtypes:
            for m in g.gemm_m:
                yield _point("gemm", dtype=dtype, K=s["K"], N=s["N"], M=m)


def _fp8_ok(s: dict[str, Any]) -> bool:
    """fp8 GEMMs for 16-aligned dims."""
    return _quantizable(s, 16, 16)


def _int4_ok(s: dict[str, Any]) -> bool:
    """4-bit GEMMs on shapes Marlin takes: K a multiple of the 128-row quantization group, N of
    its 64-column tile."""
    return _quantizable(s, 128, 64)


def _quantizable(s: dict[str, Any], k_multiple: int, n_multiple: int) -> bool:
    """A quantized GEMM of shape ``s``: a linear layer other than lm_head (vLLM keeps it 16-bit)
    whose K and N are multiples of the kernel's."""
    lm_head_only = all(t.endswith("lm_head") for t in s["tags"])
    return not lm_head_only and s["K"] % k_multiple == 0 and s["N"] % n_multiple == 0


def _attention(g: GridSpec, shapes: dict[str, Any]) -> Iterator[Point]:
    configs = sorted(shapes["attention"], key=lambda s: (-len(s["tags"]), s["hq"], s["hkv"], s["d"]))
    fp8 = {(s["hq"], s["hkv"], s["d"]) for s in configs[:g.fp8kv_configs]}

    def kvs(s: dict[str, Any], mix: str = "uniform") -> tuple[str, ...]:
        extra = (s["hq"], s["hkv"], s["d"]) in fp8 and mix == "uniform" and "fp8" not in g.attention_kv
        return g.attention_kv + (("fp8",) if extra else ())

    for s in sorted(configs[:g.prefill_configs], key=lambda s: (s["hq"], s["hkv"], s["d"])):
        for q in g.prefill_q:
            for c in g.prefill_ctx:
                if q * c + q * (q + 1) / 2 <= g.max_prefill_pairs:
                    for kv in kvs(s):
                        yield _point("attention", phase="prefill", hq=s["hq"], hkv=s["hkv"], d=s["d"], q=q, ctx=c,
                                     **_kv(kv, g.attention_window))
    for s in sorted(configs[:g.decode_configs], key=lambda s: (s["hq"], s["hkv"], s["d"])):
        for b in sorted(g.decode_batch + g.decode_between):
            for c in g.decode_ctx:
                for mix in g.decode_mix if b > 1 and b in g.decode_batch else ("uniform",):
                    if b * c <= g.max_decode_kv:
                        for kv in kvs(s, mix):
                            yield _point("attention", phase="decode", hq=s["hq"], hkv=s["hkv"], d=s["d"],
                                         batch=b, ctx=c, mix=mix, **_kv(kv, g.attention_window))


def _kv(kv: str, window: int) -> dict[str, Any]:
    return ({} if kv == "bf16" else {"kv": kv}) | ({"window": window} if window else {})


def _memory(g: GridSpec) -> Iterator[Point]:
    for op, widths in g.memory_widths:
        for w in widths:
            for t in g.memory_tokens:
                yield _point("memory", op=op, tokens=t, width=w)


def _moe(g: GridSpec, shapes: dict[str, Any]) -> Iterator[Point]:
    for s in shapes["moe"][::g.moe_stride] if g.moe_stride else ():
        for t in g.moe_tokens:
            yield _point("moe", tokens=t, experts=s["experts"], top_k=s["top_k"], hidden=s["hidden"], inter=s["inter"])


def _overhead(g: GridSpec) -> Iterator[Point]:
    for mode in ("eager", "graph"):
        for n in g.overhead_kernels:
            yield _point("overhead", mode=mode, kernels=n)


def _comm(g: GridSpec) -> Iterator[Point]:
    for w in g.comm_world:
        for b in g.comm_bytes:
            yield _point("comm", world=w, bytes=b)


def points(grid: GridSpec, shapes: dict[str, Any] | None = None) -> list[Point]:
    """Every point of ``grid`` in run order (families in :data:`FAMILIES` order)."""
    if shapes is None:
        from latsim.calibration.shapes import load_shapes

        named = {"tiny": TINY_SHAPES, "shapes": STUDY_SHAPES, "wide": WIDE_SHAPES, "msteps": MSTEP_SHAPES,
                 "msteps-high": MSTEP_SHAPES, "msteps-low": MSTEP_SHAPES, "w4-steps": MSTEP_SHAPES,
                 "heavy-gemm-steps": MSTEP_SHAPES, "moe-steps": MOE_STEP_SHAPES, "live-steps": LIVE_STEP_SHAPES,
                 "narrow": NARROW_SHAPES, "fp8-kv": FP8_KV_SHAPES, "window": WINDOW_SHAPES}
        shapes = named.get(grid.name) or load_shapes()
        if grid.name in ("paged", "paged-prefill", "decode-tiles", "decode-batches", "decode-batches-check"):
            shapes = paged_shapes(shapes)
    out = [*_overhead(grid), *_memory(grid), *_attention(grid, shapes), *_moe(grid, shapes),
           *_gemm(grid, shapes), *_comm(grid)]
    return out


def grid_hash(pts: list[Point]) -> str:
    """sha256 (first 16 hex digits) of the point ids, in order."""
    return hashlib.sha256(json.dumps([p.id for p in pts]).encode()).hexdigest()[:16]
