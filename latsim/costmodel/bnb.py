"""bitsandbytes 4-bit linear layers as bitsandbytes 0.50 runs them under vLLM 0.25.1.

vLLM's bitsandbytes method calls ``matmul_4bit`` once per weight shard of a fused layer (q, k and v
of the QKV projection; gate and up of the MLP), so each shard's shape decides its kernel.  In
inference that call goes to ``gemm_4bit``, whose dispatch (``backends/cuda/ops.py`` in the
bitsandbytes 0.50.0 wheel, read, not run) picks per call between

* bitsandbytes' own kernel (a SIMT GEMV for a few rows, an mma.sync GEMM past them), priced here
  as before: the bf16 GEMM curve on the 4-bit weights' roofline; and
* dequantizing the whole weight to bf16 and running a bf16 GEMM (``F.linear``): priced as a
  memory-bound kernel reading the packed weight and writing the bf16 one (the measured copy
  curve at those bytes) plus the bf16 GEMM of the layer.

On Hopper (:func:`own_kernel_rows`, the rule for compute capability 9.0) the own kernel takes at
most a few rows of a large layer: the dequantize path wins from 8 to 65 rows by the layer's width
against the GPU's SM count.  The rules of other architectures are not modelled: there the own
kernel is assumed at every row count (:func:`own_kernel_rows` gives ``None``), as latsim priced
every bitsandbytes layer before; so is a GPU priced by the roofline alone (the rule applies where
a kernel profile prices the step: ``latsim.costmodel.profile.tabulate``).  The prediction says it
was not measured either way (:data:`latsim.costmodel.shard.BNB_UNMEASURED`).
"""

from __future__ import annotations

from latsim.catalog.devices import DeviceSpec

ALWAYS_OWN_ROWS = 4
"""Rows bitsandbytes always runs on its own kernel, on any GPU."""
LARGE_WEIGHT = 4 * 1024 * 1024
"""Weights of at least this many elements take the large-layer rules."""
COLUMNS_PER_BLOCK = 64
"""Output columns per thread block of the own kernel: the waves are counted in these blocks."""


def own_kernel_rows(k: int, n: int, device: DeviceSpec) -> int | None:
    """The most rows of an ``m x k`` by ``k x n`` bitsandbytes 4-bit matmul that run bitsandbytes'
    own kernel on ``device`` (more rows: dequantize + bf16 GEMM); ``None`` where the GPU's rule is
    not modelled (not Hopper, or its SM count unknown).  ``k`` must be a multiple of the 64-weight
    quantization block (else bitsandbytes dequantizes at any row count; model layers are)."""
    if device.arch != "sm90" or not device.sm_count:
        return None
    sms, blocks = device.sm_count, -(-n // COLUMNS_PER_BLOCK)
    if k * n < LARGE_WEIGHT:
        return _small_weight_rows(k, n, blocks, sms)
    return max(_few_rows_limit(k, n, blocks, sms), _hopper_tier(k, n, blocks, sms))


def _small_weight_rows(k: int, n: int, blocks: int, sms: int) -> int:
    """Hopper, a weight under :data:`LARGE_WEIGHT` elements: a short reduction (``2k < n``) stays
    on the own kernel to 512 rows under a third of a wave of blocks, else to 320; otherwise to 32
    rows under a quarter wave, 16 under half a wave, and only the first few rows beyond."""
    if 2 * k < n:
        return 512 if 3 * blocks < sms else 320
    if 4 * blocks <= sms:
        return 32
    if 2 * blocks <= sms:
        return 16
    return ALWAYS_OWN_ROWS


def _few_rows_limit(k: int, n: int, blocks: int, sms: int) -> int:
    """Hopper, a large weight, 5-7 rows: the own kernel, except that from 6 rows a layer of at least
    36 blocks under three quarters of a wave dequantizes when its reduction is longer than its
    width, or square at 0.6-0.75 of a wave: then only 5 rows stay."""
    tall_or_square = k > n or (k == n and 5 * blocks >= 3 * sms)
    return 5 if blocks >= 36 and 4 * blocks < 3 * sms and tall_or_square else 7


def _hopper_tier(k: int, n: int, blocks: int, sms: int) -> int:
    """Hopper, a large weight, 8 rows and up: the own kernel to 64 rows at three or more waves of
    blocks, 48 at two, 32 at one, 16 at half a wave (none when the reduction is at least the width
    under three quarters of a wave), and none below half a wave."""
    for waves, rows in ((3, 64), (2, 48), (1, 32)):
        if blocks >= waves * sms:
            return rows
    if blocks >= sms // 2:
        return 0 if (k >= n and 4 * blocks < 3 * sms) else 16
    return 0
