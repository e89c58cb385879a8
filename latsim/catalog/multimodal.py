"""The language model inside a multimodal checkpoint's ``config.json``, and its vision tower's size.

A multimodal checkpoint nests its language model's keys under ``text_config`` and writes only
the keys that differ from the class defaults there (Hugging Face's diff-saving), so the nested
dict alone is not a complete config.  :func:`language_model_config` returns the flat config of
the language model: the class defaults, overlaid by ``text_config``, with the top level's
``quantization_config`` and dtype carried down; for a text-only config it fills the same
defaults.  Only Gemma 3 is read this way (``model_type`` ``gemma3``, whose language model is
``gemma3_text``; a text-only Gemma 3 such as the 1B is ``gemma3_text`` itself).

vLLM loads the vision tower and projector of such a checkpoint beside the language model (unless
it is started language-model-only), so their weights take GPU memory; a text request never runs
them.  :func:`encoder_params` counts them (Gemma 3: a SigLIP vision transformer and one
projection matrix).  Not modelled: the activation memory vLLM reserves when it profiles the
encoder at start-up, and image inputs (latsim's requests are text).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

GEMMA3_TEXT_DEFAULTS: dict[str, Any] = {
    "vocab_size": 262_208, "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
    "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "max_position_embeddings": 131_072,
    "sliding_window": 4096, "sliding_window_pattern": 6, "tie_word_embeddings": True,
}
"""``transformers``' ``Gemma3TextConfig`` defaults for the keys latsim reads (a published Gemma 3
``text_config`` leaves out those it shares with them, e.g. ``vocab_size``)."""
SIGLIP_DEFAULTS: dict[str, int] = {
    "hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12, "num_channels": 3,
    "image_size": 224, "patch_size": 16,
}
"""``transformers``' ``SiglipVisionConfig`` defaults (Gemma 3's published ``vision_config`` sets them all)."""
WRAPPERS = {"gemma3": "gemma3_text"}
"""Multimodal ``model_type`` -> the ``model_type`` of the language model it nests."""
TEXT_DEFAULTS = {"gemma3_text": GEMMA3_TEXT_DEFAULTS}
FAMILY = {"gemma3": "gemma3", "gemma3_text": "gemma3"}
"""The family latsim gives the language model of each ``model_type`` read here."""
CARRIED = ("quantization_config", "torch_dtype", "dtype")
"""Top-level keys that describe the whole checkpoint and so the language model too."""


def language_model_config(cfg: Mapping[str, Any]) -> dict[str, Any] | None:
    """The flat config of ``cfg``'s language model (module docstring), with ``model_type`` set to
    its family; None when ``cfg`` is not one read here.  ValueError when a wrapper's
    ``text_config`` is missing or not a dict."""
    model_type = cfg.get("model_type")
    if model_type in WRAPPERS:
        text = cfg.get("text_config")
        if not isinstance(text, Mapping):
            raise ValueError(f"model_type {model_type!r} config needs a 'text_config' dict (its language model), "
                             f"got {text!r}")
        flat = {**TEXT_DEFAULTS[WRAPPERS[model_type]], **text}
        flat.update({k: cfg[k] for k in CARRIED if k in cfg and k not in text})
    elif model_type in TEXT_DEFAULTS:
        flat = {**TEXT_DEFAULTS[model_type], **cfg}
    else:
        return None
    flat["model_type"] = FAMILY[model_type]
    return flat


def encoder_params(cfg: Mapping[str, Any]) -> int:
    """Parameters of the vision tower and projector a multimodal ``cfg`` loads; 0 for a text-only
    config.  Gemma 3: a SigLIP vision transformer without its pooling head (patch and position
    embeddings, per layer q/k/v/o with biases, two layer norms and a two-layer MLP, a final norm)
    and the projector (``vision hidden x text hidden`` plus one norm)."""
    if cfg.get("model_type") not in WRAPPERS:
        return 0
    raw = cfg.get("vision_config")
    vision = {**SIGLIP_DEFAULTS, **(raw if isinstance(raw, Mapping) else {})}
    h, inner = _positive(vision, "hidden_size"), _positive(vision, "intermediate_size")
    patch, image = _positive(vision, "patch_size"), _positive(vision, "image_size")
    channels = _positive(vision, "num_channels")
    layer = 4 * h * h + 4 * h + 2 * h * inner + inner + h + 4 * h  # attention, MLP, two layer norms
    embeddings = channels * patch * patch * h + h + (image // patch) ** 2 * h
    text_hidden = {**GEMMA3_TEXT_DEFAULTS, **cfg.get("text_config", {})}["hidden_size"]
    projector = h * _checked_int("text_config.hidden_size", text_hidden) + h
    return _positive(vision, "num_hidden_layers") * layer + embeddings + 2 * h + projector


def _positive(vision: Mapping[str, Any], key: str) -> int:
    return _checked_int(f"vision_config.{key}", vision[key])


def _checked_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"config key {name!r} must be a positive integer, got {value!r}")
    return value
