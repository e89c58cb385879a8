"""Turn a Hugging Face ``config.json`` dict into a :class:`ModelSpec`.

Supported ``model_type`` values: llama (Llama 2/3/3.1/3.2), mistral, mixtral, qwen2 (Qwen2 and
Qwen2.5), qwen2_moe (Qwen1.5-MoE, Qwen2-MoE), qwen3, qwen3_moe, phi3, gemma2, and gemma3 (the
multimodal checkpoints, whose language model is read from ``text_config`` with the vision tower's
weights counted, and the text-only ``gemma3_text``: :mod:`latsim.catalog.multimodal`).  Any other
``model_type`` whose config carries the standard Llama keys and no marker of a different
attention or mixer (MLA, state-space or linear-attention layers) is parsed as Llama-like and keeps
its ``model_type`` as the family.

What is modelled, per family:

* ``head_dim``: the explicit key when present (Gemma-2 and -3, Qwen3, Llama 3.2), else
  ``hidden_size // num_attention_heads``.  ``num_key_value_heads`` missing means MHA.
* MLP: always gated (SwiGLU, or GeGLU for Gemma-2 and -3).  Mixtral experts have width
  ``intermediate_size``; Qwen MoE experts ``moe_intermediate_size``.  A Qwen MoE layer ``i`` is
  sparse when ``i`` is not in ``mlp_only_layers`` and ``(i + 1) % decoder_sparse_step == 0``
  (the rule of the HF and vLLM Qwen2-MoE/Qwen3-MoE code); Mixtral layers are all sparse.
* Sliding window: a ``layer_types`` list, when present, decides per layer.  Otherwise Gemma-2
  slides on even layers (0, 2, ...) and is global on odd ones; Gemma-3 is global on every
  ``sliding_window_pattern``-th layer (default 6: five sliding, one global); Qwen families slide only when
  ``use_sliding_window`` is true, and then on layers ``>= max_window_layers``; every other
  family slides on every layer when ``sliding_window`` is set (Mistral-7B-v0.1: 4096, Phi-3:
  2047).  Only the layer count and window size are kept; the KV sizing in
  :mod:`latsim.catalog.sizing` documents how they are used.
* ``tie_word_embeddings`` missing takes the HF class default: true for Gemma-2 and -3, false
  otherwise.  Gemma-2 and -3 have four norms a layer, Gemma-3 and Qwen3 per-head q/k norms.
* ``quantization_config``: read into ``ModelSpec.quantization`` (:mod:`latsim.catalog.quant`),
  with the linear parameters its ignore lists keep 16-bit counted
  (:mod:`latsim.catalog.quant_layers`).  A method latsim does not model leaves it None here;
  :func:`latsim.catalog.quant_resolve.resolve_weight_dtype` raises then, unless a weight dtype
  is given explicitly.
* A ``model_type`` of a known non-transformer or hybrid architecture (Mamba, RWKV, ...) is
  rejected even when the config also carries Llama-style keys.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from latsim.catalog.models import ModelSpec
from latsim.catalog.multimodal import encoder_params, language_model_config
from latsim.catalog.quant import parse_quantization
from latsim.catalog.quant_layers import unquantized_linear_params

SUPPORTED_MODEL_TYPES = (
    "llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "phi3", "gemma2", "gemma3",
    "gemma3_text",
)
_GEMMA = frozenset({"gemma2", "gemma3"})
_QWEN_FAMILIES = frozenset({"qwen2", "qwen2_moe", "qwen3", "qwen3_moe"})
_QWEN_MOE = frozenset({"qwen2_moe", "qwen3_moe"})
_REQUIRED_KEYS = (
    "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size",
    "max_position_embeddings",
)
# Keys that mean "this is not a Llama-style attention + MLP stack".
_FOREIGN_MARKERS = {
    "kv_lora_rank": "multi-head latent attention",
    "q_lora_rank": "multi-head latent attention",
    "n_routed_experts": "DeepSeek-style MoE",
    "ssm_state_size": "state-space (Mamba) layers",
    "hybrid_override_pattern": "hybrid Mamba/attention layers",
    "linear_num_key_heads": "linear-attention layers",
    "attn_type_list": "linear-attention layers",
}
# model_type values of architectures that are not attention + MLP stacks (or only partly).
NON_TRANSFORMER_TYPES = {
    "mamba": "state-space (Mamba)", "mamba2": "state-space (Mamba-2)", "falcon_mamba": "state-space (Mamba)",
    "falcon_h1": "hybrid Mamba/attention", "jamba": "hybrid Mamba/attention", "bamba": "hybrid Mamba/attention",
    "zamba": "hybrid Mamba/attention", "zamba2": "hybrid Mamba/attention", "nemotron_h": "hybrid Mamba/attention",
    "granitemoehybrid": "hybrid Mamba/attention", "plamo2": "hybrid Mamba/attention",
    "rwkv": "recurrent (RWKV)", "rwkv5": "recurrent (RWKV)", "rwkv6": "recurrent (RWKV)", "rwkv7": "recurrent (RWKV)",
    "recurrent_gemma": "recurrent (Griffin)", "xlstm": "recurrent (xLSTM)", "retnet": "retention (RetNet)",
    "lfm2": "hybrid convolution/attention", "minimax_text_01": "hybrid linear attention",
    "qwen3_next": "hybrid linear attention",
}


def parse_hf_config(cfg: Mapping[str, Any], name: str) -> ModelSpec:
    """Build the :class:`ModelSpec` named ``name`` from an HF ``config.json`` dict.

    The whole dict is kept in ``ModelSpec.hf_config``; a multimodal checkpoint's language model
    is read from its ``text_config`` (:func:`~latsim.catalog.multimodal.language_model_config`).
    Raises ``ValueError`` naming the offending key or value (and what is accepted) for an
    unsupported ``model_type``, a missing required key or inconsistent values.
    """
    original, cfg = cfg, language_model_config(cfg) or cfg
    family = _family(cfg)
    _check_required(cfg, family, nested="text_config" in original)
    num_layers = _int(cfg, "num_hidden_layers")
    window, sliding_layers = _sliding_window(cfg, family, num_layers)
    spec = ModelSpec(
        name=name,
        family=family,
        num_layers=num_layers,
        hidden_size=_int(cfg, "hidden_size"),
        num_heads=_int(cfg, "num_attention_heads"),
        num_kv_heads=_kv_heads(cfg),
        head_dim=_head_dim(cfg),
        intermediate_size=_int(cfg, "intermediate_size"),
        vocab_size=_int(cfg, "vocab_size"),
        max_position_embeddings=_int(cfg, "max_position_embeddings"),
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", family in _GEMMA)),
        sliding_window=window,
        num_sliding_window_layers=sliding_layers,
        attention_bias=_attention_bias(cfg, family),
        qk_norm=family in ("qwen3", "qwen3_moe", "gemma3"),
        norms_per_layer=4 if family in _GEMMA else 2,
        gated_mlp=True,
        hf_config=tuple(sorted(original.items())),
        encoder_params=encoder_params(original),
        **_moe_fields(cfg, family, num_layers),
    )
    return _with_quantization(spec, cfg)


def _with_quantization(spec: ModelSpec, cfg: Mapping[str, Any]) -> ModelSpec:
    """``spec`` with its checkpoint quantization; unchanged when there is none or latsim does not
    model it (resolving the weight dtype reports that, see the module docstring)."""
    try:
        quant = parse_quantization(cfg)
    except ValueError:
        return spec
    if quant is None:
        return spec
    return replace(spec, quantization=replace(quant, unquantized_linear=unquantized_linear_params(spec, quant)))


def _family(cfg: Mapping[str, Any]) -> str:
    model_type = cfg.get("model_type")
    accepted = ", ".join(SUPPORTED_MODEL_TYPES)
    if not isinstance(model_type, str) or not model_type:
        raise ValueError(f"config has no string 'model_type' (got {model_type!r}); accepted: {accepted}")
    if model_type in SUPPORTED_MODEL_TYPES:
        return model_type
    if model_type.lower() in NON_TRANSFORMER_TYPES:
        raise ValueError(
            f"model_type {model_type!r} is a {NON_TRANSFORMER_TYPES[model_type.lower()]} architecture, which "
            f"latsim does not simulate (even with Llama-style keys); accepted model_type values: {accepted} "
            "(or a Llama-like config)"
        )
    for key, what in _FOREIGN_MARKERS.items():
        if key in cfg:
            raise ValueError(
                f"model_type {model_type!r} is not supported: key {key!r} means {what}; "
                f"accepted model_type values: {accepted} (or a Llama-like config)"
            )
    return model_type


def _check_required(cfg: Mapping[str, Any], family: str, nested: bool = False) -> None:
    missing = [key for key in _REQUIRED_KEYS if cfg.get(key) is None]
    if not missing:
        return
    hint = "" if family in SUPPORTED_MODEL_TYPES else (
        f"; model_type {family!r} is parsed as Llama-like, which needs these keys "
        f"(natively supported model_type values: {', '.join(SUPPORTED_MODEL_TYPES)})"
    )
    if nested and family not in SUPPORTED_MODEL_TYPES:
        hint += ("; its language model's keys are under 'text_config' (a multimodal checkpoint), which latsim "
                 "reads for model_type gemma3 only")
    raise ValueError(f"config for model_type {family!r} is missing required key(s) {missing}{hint}")


def _int(cfg: Mapping[str, Any], key: str) -> int:
    value = cfg.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"config key {key!r} must be a non-negative integer, got {value!r}")
    return value


def _kv_heads(cfg: Mapping[str, Any]) -> int:
    if cfg.get("num_key_value_heads") is None:
        return _int(cfg, "num_attention_heads")
    return _int(cfg, "num_key_value_heads")


def _head_dim(cfg: Mapping[str, Any]) -> int:
    if cfg.get("head_dim") is not None:
        return _int(cfg, "head_dim")
    hidden, heads = _int(cfg, "hidden_size"), _int(cfg, "num_attention_heads")
    if heads == 0 or hidden % heads != 0:
        raise ValueError(
            f"config has no 'head_dim' and hidden_size={hidden} is not divisible by "
            f"num_attention_heads={heads}; add an explicit 'head_dim'"
        )
    return hidden // heads


def _attention_bias(cfg: Mapping[str, Any], family: str) -> bool:
    """Qwen2/Qwen2-MoE always put a bias on q/k/v; others follow ``attention_bias``."""
    if family in ("qwen2", "qwen2_moe"):
        return True
    return bool(cfg.get("attention_bias", False))


def _moe_fields(cfg: Mapping[str, Any], family: str, num_layers: int) -> dict[str, Any]:
    num_experts = _num_experts(cfg)
    if num_experts == 0:
        return {}
    if cfg.get("num_experts_per_tok") is None:
        raise ValueError(
            f"MoE config ({num_experts} experts) is missing required key 'num_experts_per_tok'"
        )
    has_moe_width = cfg.get("moe_intermediate_size") is not None
    width_key = "moe_intermediate_size" if has_moe_width else "intermediate_size"
    has_shared = cfg.get("shared_expert_intermediate_size") is not None
    return {
        "num_experts": num_experts,
        "experts_per_token": _int(cfg, "num_experts_per_tok"),
        "moe_intermediate_size": _int(cfg, width_key),
        "shared_expert_intermediate_size": _int(cfg, "shared_expert_intermediate_size") if has_shared else 0,
        "num_moe_layers": _count_moe_layers(cfg, family, num_layers),
    }


def _num_experts(cfg: Mapping[str, Any]) -> int:
    for key in ("num_local_experts", "num_experts"):
        if cfg.get(key) is not None:
            return _int(cfg, key)
    return 0


def _count_moe_layers(cfg: Mapping[str, Any], family: str, num_layers: int) -> int:
    """Sparse layers: all of them, unless the Qwen-MoE sparse-step / MLP-only rules say otherwise."""
    if family not in _QWEN_MOE and "decoder_sparse_step" not in cfg and "mlp_only_layers" not in cfg:
        return num_layers
    step = cfg.get("decoder_sparse_step")
    step = 1 if step is None else _int(cfg, "decoder_sparse_step")
    if step < 1:
        raise ValueError(f"config key 'decoder_sparse_step' must be >= 1, got {step}")
    dense_only = set(_int_list(cfg, "mlp_only_layers"))
    return sum(1 for i in range(num_layers) if i not in dense_only and (i + 1) % step == 0)


def _int_list(cfg: Mapping[str, Any], key: str) -> list[int]:
    value = cfg.get(key) or []
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise ValueError(f"config key {key!r} must be a list of layer indices, got {value!r}")
    return value


def _sliding_window(cfg: Mapping[str, Any], family: str, num_layers: int) -> tuple[int | None, int]:
    """Return ``(window, number of sliding layers)``; ``(None, 0)`` when nothing slides."""
    window = cfg.get("sliding_window")
    if window is None:
        return None, 0
    window = _int(cfg, "sliding_window")
    sliding = _sliding_layer_count(cfg, family, num_layers)
    return (window, sliding) if sliding > 0 else (None, 0)


def _sliding_layer_count(cfg: Mapping[str, Any], family: str, num_layers: int) -> int:
    layer_types = cfg.get("layer_types")
    if isinstance(layer_types, list):
        return sum(1 for kind in layer_types if kind == "sliding_attention")
    if family == "gemma2":
        return (num_layers + 1) // 2
    if family == "gemma3":
        pattern = _int(cfg, "sliding_window_pattern") if "sliding_window_pattern" in cfg else 6
        if pattern < 1:
            raise ValueError(f"config key 'sliding_window_pattern' must be >= 1, got {pattern}")
        return num_layers - num_layers // pattern
    if family in _QWEN_FAMILIES:
        if not cfg.get("use_sliding_window", False):
            return 0
        first = cfg.get("max_window_layers")
        first = 0 if first is None else _int(cfg, "max_window_layers")
        return max(0, num_layers - first)
    return num_layers
