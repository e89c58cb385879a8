"""Parameter counts, weight bytes and KV-cache bytes of a :class:`ModelSpec`.

Counting rules (checked against published totals in ``tests/catalog/test_sizing.py``):

* embedding ``vocab x hidden``; the LM head adds the same again unless embeddings are tied;
* attention: q, k, v and o projections, plus q/k/v biases (Qwen2) and per-head q/k norms (Qwen3);
* MLP: three matrices when gated (gate, up, down), two otherwise;
* MoE layers: every expert, the router (``hidden x num_experts``) and, when present, the shared
  expert and its one-output gate (Qwen2-MoE); a token activates ``experts_per_token`` experts
  plus the router and the shared expert;
* norms: ``norms_per_layer`` hidden-size vectors per layer and one final norm;
* a multimodal checkpoint's vision tower and projector (``ModelSpec.encoder_params``): 16-bit,
  counted in the total and the weight bytes, never active for a text token.

Weight bytes (:func:`weight_bytes`): the linear layers of attention and MLP/experts are stored in
the chosen weight dtype.  Embedding, LM head, norms, biases and the MoE router stay 16-bit, as in
vLLM's fp8/int8/GPTQ/AWQ paths, which quantize only the decoder's linear layers.  ``int4`` adds
one 16-bit scale per group of :data:`INT4_GROUP_SIZE` weights (GPTQ/AWQ group size 128); the
packed 4-bit zero points of asymmetric schemes (about 0.4 % more) and the per-channel or
per-tensor scales of fp8/int8 are ignored.

A model read from a quantized checkpoint (``ModelSpec.quantization``, see
:mod:`latsim.catalog.quant`) is sized as stored when the weight dtype is the checkpoint's own:
its bytes per weight (group size, zero points, bitsandbytes absmax) and the linear layers its
ignore lists keep 16-bit.  Any other weight dtype is sized by the rules above.
"""

from __future__ import annotations

from dataclasses import dataclass

from latsim.catalog.models import DTYPE_BYTES, KV_DTYPES, WEIGHT_DTYPES, ModelSpec

INT4_GROUP_SIZE = 128
SCALE_BYTES = 2.0  # one fp16 scale per int4 group
UNQUANTIZED_BYTES = 2.0  # embeddings, LM head, norms, biases, router: bf16/fp16


@dataclass(frozen=True)
class ParamBreakdown:
    """Parameter counts by kind.  ``*_active`` count what one token touches in a forward pass.

    ``linear`` and ``linear_active`` are the quantizable decoder matrices (attention and
    MLP/experts/shared expert); ``other`` is everything kept 16-bit except embedding and head.
    """

    embedding: int
    lm_head: int
    linear: int
    linear_active: int
    other: int
    other_active: int

    @property
    def total(self) -> int:
        return self.embedding + self.lm_head + self.linear + self.other

    @property
    def active(self) -> int:
        return self.embedding + self.lm_head + self.linear_active + self.other_active

    @property
    def head(self) -> int:
        """The LM head's parameters: the embedding matrix's when the two are tied."""
        return self.lm_head or self.embedding


def param_breakdown(model: ModelSpec) -> ParamBreakdown:
    """Count the parameters of ``model`` by kind (see the module docstring for the rules)."""
    embedding = model.vocab_size * model.hidden_size
    attn = model.num_layers * _attention_linear(model)
    dense = model.num_dense_layers * _mlp(model, model.intermediate_size)
    experts_total, experts_active = _moe_linear(model)
    small = model.num_layers * _small_per_layer(model) + model.hidden_size
    router, router_active = _router(model)
    return ParamBreakdown(
        embedding=embedding,
        lm_head=0 if model.tie_word_embeddings else embedding,
        linear=attn + dense + experts_total,
        linear_active=attn + dense + experts_active,
        other=small + router + model.encoder_params,
        other_active=small + router_active,
    )


def param_counts(model: ModelSpec) -> tuple[int, int]:
    """``(total, active_per_token)`` parameter counts; equal for dense models."""
    parts = param_breakdown(model)
    return parts.total, parts.active


def weight_bytes(model: ModelSpec, weight_dtype: str) -> int:
    """Bytes of all weights with decoder linear layers in ``weight_dtype`` (one GPU, no TP).

    ``weight_dtype`` is one of :data:`WEIGHT_DTYPES`.  Embedding, LM head, norms, biases and the
    router stay 16-bit; ``int4`` includes the group-scale overhead.  A checkpoint's own
    quantization is used when ``weight_dtype`` is its dtype (module docstring).
    """
    per_weight = _linear_bytes_per_weight(weight_dtype)
    parts = param_breakdown(model)
    unquantized = parts.embedding + parts.lm_head + parts.other
    quant = model.quantization
    if quant is not None and quant.weight_dtype == weight_dtype:
        kept = min(quant.unquantized_linear, parts.linear)
        return round((unquantized + kept) * UNQUANTIZED_BYTES + (parts.linear - kept) * quant.bytes_per_weight)
    return round(unquantized * UNQUANTIZED_BYTES + parts.linear * per_weight)


def decode_bytes_read(model: ModelSpec, weight_dtype: str) -> int:
    """Weight bytes a decode step reads at the least: the linear layers one token activates (at
    their stored size, as :func:`weight_bytes` sizes them; for an MoE model only the experts a
    token routes to), the LM head (the embedding matrix when tied), norms, biases and the active
    router.  Not the input embedding (a step gathers only its tokens' rows) nor a multimodal
    checkpoint's vision encoder (it runs on images only): a lower bound on the bytes any step
    that samples a token moves."""
    parts = param_breakdown(model)
    unquantized = parts.embedding + parts.lm_head + parts.other
    linear_bytes = weight_bytes(model, weight_dtype) - unquantized * UNQUANTIZED_BYTES
    active_linear = linear_bytes * parts.linear_active / parts.linear if parts.linear else 0.0
    return round(active_linear + (parts.head + parts.other_active) * UNQUANTIZED_BYTES)


def kv_bytes_per_token(model: ModelSpec, kv_dtype: str) -> int:
    """KV-cache bytes one token occupies across all layers: ``2 x layers x kv_heads x head_dim x bytes``.

    Every layer is counted, sliding-window layers included.  This is the per-token size vLLM
    0.25.1 divides the KV memory by to get its block count (each layer's page has the same size
    whether it slides or not), so it gives the engine's token capacity.  What sliding changes is
    how many tokens a long request keeps: see :func:`kv_bytes_for_context`.
    """
    return 2 * model.num_layers * model.kv_size * _kv_bytes(kv_dtype)


def kv_bytes_for_context(model: ModelSpec, kv_dtype: str, num_tokens: int) -> int:
    """KV bytes one request of ``num_tokens`` context holds, counting windows.

    Full-attention layers keep every token; sliding-window layers keep at most
    ``sliding_window`` tokens (vLLM's sliding-window KV manager frees blocks that fall out of
    the window; block rounding is ignored here).
    """
    if num_tokens < 0:
        raise ValueError(f"num_tokens must be >= 0, got {num_tokens}")
    per_layer = 2 * model.kv_size * _kv_bytes(kv_dtype)
    kept = num_tokens if model.sliding_window is None else min(num_tokens, model.sliding_window)
    return per_layer * (model.num_full_attention_layers * num_tokens + model.num_sliding_window_layers * kept)


def _attention_linear(model: ModelSpec) -> int:
    return model.hidden_size * (model.q_size + 2 * model.kv_size) + model.q_size * model.hidden_size


def _mlp(model: ModelSpec, width: int) -> int:
    return (3 if model.gated_mlp else 2) * model.hidden_size * width


def _moe_linear(model: ModelSpec) -> tuple[int, int]:
    if not model.is_moe:
        return 0, 0
    expert = _mlp(model, model.moe_intermediate_size)
    shared = _mlp(model, model.shared_expert_intermediate_size)
    total = model.num_moe_layers * (model.num_experts * expert + shared)
    active = model.num_moe_layers * (model.experts_per_token * expert + shared)
    return total, active


def _router(model: ModelSpec) -> tuple[int, int]:
    """Router plus the shared-expert gate; both run for every token, so total == active."""
    if not model.is_moe:
        return 0, 0
    shared_gate = model.hidden_size if model.shared_expert_intermediate_size else 0
    per_layer = model.hidden_size * model.num_experts + shared_gate
    return model.num_moe_layers * per_layer, model.num_moe_layers * per_layer


def _small_per_layer(model: ModelSpec) -> int:
    norms = model.norms_per_layer * model.hidden_size
    bias = model.q_size + 2 * model.kv_size if model.attention_bias else 0
    qk_norm = 2 * model.head_dim if model.qk_norm else 0
    return norms + bias + qk_norm


def _linear_bytes_per_weight(weight_dtype: str) -> float:
    if weight_dtype not in WEIGHT_DTYPES:
        raise ValueError(f"weight_dtype must be one of {', '.join(WEIGHT_DTYPES)}, got {weight_dtype!r}")
    scales = SCALE_BYTES / INT4_GROUP_SIZE if weight_dtype == "int4" else 0.0
    return DTYPE_BYTES[weight_dtype] + scales


def _kv_bytes(kv_dtype: str) -> int:
    if kv_dtype not in KV_DTYPES:
        raise ValueError(f"kv_dtype must be one of {', '.join(KV_DTYPES)}, got {kv_dtype!r}")
    return int(DTYPE_BYTES[kv_dtype])
