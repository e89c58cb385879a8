"""A model split over a tensor-parallel group, as one GPU of the group sees it.

Sharding follows vLLM's default tensor parallelism: query heads, the dense MLP width and each
expert's width are split by ``tp`` (experts are sharded, not placed: no expert parallelism);
KV heads are split while ``tp <= kv_heads`` and replicated, one per GPU, beyond; the
vocabulary of ``lm_head`` is split as ``ceil(vocab / tp)`` (padding ignored).
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from dataclasses import dataclass

from latsim.catalog.models import DTYPE_BYTES, KV_DTYPES, WEIGHT_DTYPES, ModelSpec

ACT_DTYPE = "bf16"
GEMM_COMPUTE_DTYPE = {"bf16": "bf16", "fp16": "fp16", "fp8": "fp8", "int8": "int8", "w8a16": "bf16", "int4": "bf16"}
"""Tensor-core dtype of a GEMM per weight dtype: W8A8 for fp8/int8, w8a16 and int4 are weight-only."""
DEFAULT_ACT_QUANT = "dynamic-per-token"
"""Activation quantization of a W8A8 dtype chosen by flag rather than read from a checkpoint."""


@dataclass(frozen=True)
class ShardSpec:
    """Per-GPU dimensions of a model under tensor parallelism (built by :func:`shard_model`).

    Widths are per GPU: ``q_width`` = query heads x head_dim, ``kv_width`` = KV heads x
    head_dim (of K or of V), ``mlp_width`` / ``expert_width`` / ``shared_width`` the dense,
    routed-expert and shared-expert intermediate sizes.  ``window_layers`` of the ``layers``
    attend to the last ``window`` tokens (0: none).  ``norms`` counts hidden-size RMSNorms
    per step.  Byte sizes are per element of weights, KV cache and activations.
    ``act_quant`` is how GEMM inputs are quantized before a W8A8 GEMM (one of
    :data:`latsim.catalog.quant.ACT_QUANT`; ``none`` for 16-bit and weight-only dtypes).
    """

    tp: int
    layers: int
    window_layers: int
    window: int
    dense_layers: int
    moe_layers: int
    hidden: int
    q_width: int
    kv_width: int
    mlp_width: int
    gated: bool
    experts: int
    top_k: int
    expert_width: int
    shared_width: int
    vocab: int
    vocab_shard: int
    norms: int
    qk_norm: bool
    weight_bytes: float
    kv_bytes: float
    act_bytes: float
    gemm_dtype: str
    act_quant: str = "none"
    w4a16: bool = False
    """Whether the 4-bit linear layers run vLLM's mixed-precision W4A16 kernel (GPTQ, AWQ,
    compressed-tensors w4a16: Machete on Hopper, Marlin elsewhere, in vLLM 0.25.1), not a
    dequantize-then-GEMM path (bitsandbytes)."""
    bnb: bool = False
    """Whether the linear layers run bitsandbytes' 4-bit matmul (:mod:`latsim.costmodel.bnb`)."""


def shard_model(model: ModelSpec, tp: int = 1, weight_dtype: str = "bf16",
                kv_dtype: str = "bf16") -> ShardSpec:
    """Split ``model`` over ``tp`` GPUs the way vLLM does; ValueError if vLLM would refuse."""
    _check_choice("weight_dtype", weight_dtype, WEIGHT_DTYPES)
    _check_choice("kv_dtype", kv_dtype, KV_DTYPES)
    tp = _checked_tp(model, tp)
    return ShardSpec(
        tp=tp, layers=model.num_layers, window_layers=model.num_sliding_window_layers,
        window=model.sliding_window or 0, dense_layers=model.num_dense_layers,
        moe_layers=model.num_moe_layers, hidden=model.hidden_size,
        q_width=model.q_size // tp, kv_width=max(1, model.num_kv_heads // tp) * model.head_dim,
        mlp_width=model.intermediate_size // tp if model.num_dense_layers else 0,
        gated=model.gated_mlp, experts=model.num_experts, top_k=model.experts_per_token,
        expert_width=model.moe_intermediate_size // tp if model.is_moe else 0,
        shared_width=model.shared_expert_intermediate_size // tp if model.is_moe else 0,
        vocab=model.vocab_size, vocab_shard=-(-model.vocab_size // tp),
        norms=model.norms_per_layer * model.num_layers + 1, qk_norm=model.qk_norm,
        weight_bytes=stored_weight_bytes(model, weight_dtype), kv_bytes=DTYPE_BYTES[kv_dtype],
        act_bytes=DTYPE_BYTES[ACT_DTYPE], gemm_dtype=GEMM_COMPUTE_DTYPE[weight_dtype],
        act_quant=act_quant_of(model, weight_dtype), w4a16=runs_w4a16_kernel(model, weight_dtype),
        bnb=runs_bitsandbytes(model, weight_dtype),
    )


W4A16_METHODS = ("gptq", "awq", "compressed-tensors")
"""Checkpoint methods whose 4-bit layers vLLM runs with its W4A16 kernels (bitsandbytes has its own)."""


BNB_UNMEASURED = ("bitsandbytes 4-bit weights are priced from bitsandbytes 0.50's dispatch as read from its source "
                  "(its own kernel for a few rows, then on Hopper the weights dequantized to bf16 and a bf16 GEMM; "
                  "other GPUs: its own kernel at every row count), and no live run measured them")
"""Why a bitsandbytes 4-bit prediction carries no validated band, and how it is priced."""


def runs_bitsandbytes(model: ModelSpec, weight_dtype: str) -> bool:
    """Whether the linear layers run bitsandbytes' 4-bit matmul (a bitsandbytes 4-bit checkpoint
    served at its own dtype), which latsim has not measured (:data:`BNB_UNMEASURED`)."""
    quant = model.quantization
    return weight_dtype == "int4" and quant is not None and quant.method == "bitsandbytes"


def runs_w4a16_kernel(model: ModelSpec, weight_dtype: str) -> bool:
    """4-bit weights from such a method's checkpoint, or chosen by flag (``--weight-dtype int4``
    on a 16-bit checkpoint prices the common GPTQ/AWQ path)."""
    if weight_dtype != "int4":
        return False
    quant = model.quantization
    return quant is None or quant.weight_dtype != "int4" or quant.method in W4A16_METHODS


def stored_weight_bytes(model: ModelSpec, weight_dtype: str) -> float:
    """Bytes one quantized weight occupies: the checkpoint's (scales included) when
    ``weight_dtype`` is the checkpoint's dtype, else the dtype's size."""
    quant = model.quantization
    if quant is not None and quant.weight_dtype == weight_dtype:
        return quant.bytes_per_weight
    return DTYPE_BYTES[weight_dtype]


def act_quant_of(model: ModelSpec, weight_dtype: str) -> str:
    """How activations are quantized for ``weight_dtype``: the checkpoint's scheme when it is the
    checkpoint's dtype, :data:`DEFAULT_ACT_QUANT` for another W8A8 dtype, ``none`` otherwise."""
    if GEMM_COMPUTE_DTYPE[weight_dtype] not in ("fp8", "int8"):
        return "none"
    quant = model.quantization
    if quant is not None and quant.weight_dtype == weight_dtype and quant.act_quant != "none":
        return quant.act_quant
    return DEFAULT_ACT_QUANT


def _check_choice(field: str, value: str, accepted: Sequence[str]) -> None:
    if value not in accepted:
        raise ValueError(f"{field}={value!r} is not supported; accepted: {', '.join(accepted)}")


def _checked_tp(model: ModelSpec, tp: int) -> int:
    if isinstance(tp, bool) or not isinstance(tp, numbers.Integral) or tp < 1:
        raise ValueError(f"tp={tp!r} must be an integer >= 1")
    tp = int(tp)
    kv = model.num_kv_heads
    kv_ok = kv % tp == 0 if tp <= kv else tp % kv == 0
    if model.num_heads % tp or not kv_ok:
        raise ValueError(
            f"tp={tp} must divide num_heads={model.num_heads} and either divide "
            f"num_kv_heads={kv} or be a multiple of it (model {model.name!r})"
        )
    widths = {"intermediate_size": model.intermediate_size if model.num_dense_layers else 0,
              "moe_intermediate_size": model.moe_intermediate_size if model.is_moe else 0,
              "shared_expert_intermediate_size": model.shared_expert_intermediate_size if model.is_moe else 0}
    for field, width in widths.items():
        if width % tp:
            raise ValueError(f"tp={tp} must divide {field}={width} (model {model.name!r})")
    return tp
