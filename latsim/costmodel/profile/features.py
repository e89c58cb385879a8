"""Regressor features and roofline times: the one definition shared by fitting and prediction.

Every regressor predicts ``log(measured seconds / roofline seconds)`` (the log of the inverse
efficiency) from shape features, where the roofline time is ``max(FLOPs / peak, bytes /
bandwidth)`` with the device's datasheet peaks (:class:`~latsim.catalog.devices.DeviceSpec`).
Predicting a ratio, not a time, is what lets a curve learned on one GPU be applied to another
GPU's roofline (``kind="transferred"``).  Inputs are dicts of equal-length numpy arrays (table
columns); outputs are ``float64`` matrices with the columns of :data:`COLUMNS`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

Arr = npt.NDArray[np.float64]
Cols = Mapping[str, Any] | Any
"""Columns by name; ``attn_decode`` needs ``skewed`` (1.0 for the skewed context mix, else 0.0)."""
MEMORY_OPS = ("rmsnorm", "rotary", "silu_mul", "copy")
FAMILIES = ("gemm", "attn_prefill", "attn_decode", "memory", "moe", "gemm_w4a16", "attn_prefill_fp8kv",
            "attn_decode_fp8kv")
VARIANTS = {"gemm_w4a16": "gemm", "attn_prefill_fp8kv": "attn_prefill", "attn_decode_fp8kv": "attn_decode"}
"""Optional families measured on another kernel of the same operator (4-bit weight-only GEMMs,
FA3 over an fp8 KV cache): the features of the base family, a model of their own."""
COLUMNS: dict[str, tuple[str, ...]] = {
    "gemm": ("m_bucket", "log2_m", "log2_k", "log2_n", "fp8", "log2_intensity", "log2_roofline"),
    "attn_prefill": ("log2_q", "log2_ctx", "hq", "hkv", "d", "log2_roofline"),
    "attn_decode": ("log2_batch", "log2_ctx", "skewed", "hq", "hkv", "d", "log2_roofline", "log2_q_heads",
                    "log2_kv_heads", "log2_kv_row", "log2_group"),
    "memory": (*(f"op_{o}" for o in MEMORY_OPS), "log2_bytes"),
    "moe": ("log2_tokens", "experts", "top_k", "log2_hidden", "log2_inter", "log2_hit", "log2_roofline"),
}
COLUMNS.update({variant: COLUMNS[base] for variant, base in VARIANTS.items()})


def _a(cols: Cols, key: str) -> Arr:
    return np.asarray(cols[key], dtype=np.float64)


def _log2(x: Arr) -> Arr:
    return np.asarray(np.log2(np.maximum(x, 1.0)), dtype=np.float64)


def roofline_s(flops: Arr, nbytes: Arr, peak: float | Arr, bandwidth: float) -> Arr:
    """Seconds at the device's peaks: the slower of compute and memory."""
    return np.asarray(np.maximum(flops / peak, nbytes / bandwidth), dtype=np.float64)


def matrix(family: str, cols: Cols, roof: Arr) -> Arr:
    """Feature matrix of ``family`` (columns :data:`COLUMNS` ``[family]``).

    Besides raw shapes, decode attention gets the parallelism the kernel splits over (sequences
    x heads), the KV bytes of one sequence and the GQA group size: with them the held-out-config
    error halved on the H200 profile (MAPE 34 % -> 16 %).  GEMMs get ``m_bucket``, the power of
    two at or above M (its log2): vLLM's CUTLASS W8A8 kernels pick their tile configuration by it
    (a GEMM of 129-256 rows runs the configuration of 256), so the time steps there; from M alone
    a tree puts that step midway between the measured 128 and 192 rows.  It comes first, so
    that where the rows cannot tell the two apart (no M between two powers of two measured) a
    split follows the bucket.
    """
    lr = np.log2(np.maximum(roof, 1e-12))
    family = VARIANTS.get(family, family)
    if family == "gemm":
        m, k, n = _a(cols, "M"), _a(cols, "K"), _a(cols, "N")
        inten = _a(cols, "flops") / np.maximum(_a(cols, "bytes"), 1.0)
        feats = [np.ceil(_log2(m)), _log2(m), _log2(k), _log2(n), _a(cols, "fp8"), _log2(inten), lr]
    elif family == "attn_prefill":
        feats = [_log2(_a(cols, "q")), _log2(_a(cols, "ctx") + 1.0), _a(cols, "hq"), _a(cols, "hkv"), _a(cols, "d"), lr]
    elif family == "attn_decode":
        b, ctx, hq, hkv, d = (_a(cols, k) for k in ("batch", "ctx", "hq", "hkv", "d"))
        feats = [_log2(b), _log2(ctx), _a(cols, "skewed"), hq, hkv, d, lr, _log2(b * hq), _log2(b * hkv),
                 _log2(ctx * hkv * d), _log2(hq / hkv)]
    elif family == "memory":
        op = np.asarray(cols["op"])
        feats = [*((op == o).astype(np.float64) for o in MEMORY_OPS), _log2(_a(cols, "bytes"))]
    elif family == "moe":
        feats = [_log2(_a(cols, "tokens")), _a(cols, "experts"), _a(cols, "top_k"), _log2(_a(cols, "hidden")),
                 _log2(_a(cols, "inter")), np.log2(np.maximum(_a(cols, "experts_hit"), 1e-3)), lr]
    else:
        raise ValueError(f"family={family!r}; accepted: {', '.join(FAMILIES)}")
    return np.column_stack([np.broadcast_to(f, roof.shape) for f in feats]).astype(np.float64)
