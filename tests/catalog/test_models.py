"""Parsing HF configs and finding models by name or path."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from latsim.catalog import (
    ModelSpec,
    UnknownNameError,
    list_models,
    load_model,
    model_config_dict,
    parse_hf_config,
)
from latsim.catalog.multimodal import language_model_config

REQUIRED_NAMES = {
    "llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b", "llama-3.2-1b", "llama-3.2-3b", "llama-2-7b",
    "qwen2.5-7b", "qwen2.5-14b", "qwen2.5-32b", "qwen2.5-72b", "qwen3-8b", "qwen3-32b",
    "qwen3-30b-a3b", "qwen1.5-moe-a2.7b", "mistral-7b", "mixtral-8x7b", "mixtral-8x22b",
    "phi-3-mini", "phi-3-medium", "gemma-2-9b", "gemma-2-27b", "gemma-3-1b", "gemma-3-27b",
}


def tiny_llama(**overrides: Any) -> dict[str, Any]:
    """A minimal Llama-style config; keyword arguments replace or add keys (None deletes)."""
    cfg: dict[str, Any] = {
        "model_type": "llama", "hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 8,
        "num_key_value_heads": 2, "intermediate_size": 512, "vocab_size": 1000,
        "max_position_embeddings": 2048,
    }
    cfg.update(overrides)
    return {k: v for k, v in cfg.items() if v is not None}


def test_catalog_has_the_required_models() -> None:
    names = list_models()
    assert len(names) >= 18
    assert set(names) >= REQUIRED_NAMES
    assert names == sorted(names)


@pytest.mark.parametrize("name", list_models())
def test_every_builtin_config_parses_and_keeps_its_dict(name: str) -> None:
    spec = load_model(name)
    assert spec.name == name
    assert spec.hf_config_dict() == model_config_dict(name)
    cfg = model_config_dict(name)
    text = language_model_config(cfg) or cfg  # a multimodal config's language model, defaults filled in
    for key in ("architectures", "model_type", "torch_dtype"):
        assert key in cfg, f"{name}: published config key {key!r} missing"
    assert "max_position_embeddings" in text, f"{name}: no context length"
    assert spec.max_position_embeddings == text["max_position_embeddings"]


@pytest.mark.parametrize(
    ("name", "family"),
    [("llama-3.1-8b", "llama"), ("qwen2.5-7b", "qwen2"), ("qwen3-8b", "qwen3"), ("mistral-7b", "mistral"),
     ("mixtral-8x7b", "mixtral"), ("qwen1.5-moe-a2.7b", "qwen2_moe"), ("qwen3-30b-a3b", "qwen3_moe"),
     ("phi-3-mini", "phi3"), ("gemma-2-9b", "gemma2")],
)
def test_each_family_parses(name: str, family: str) -> None:
    assert load_model(name).family == family


def test_head_dim_explicit_or_derived() -> None:
    assert load_model("gemma-2-9b").head_dim == 256  # explicit, not 3584 / 16 = 224
    assert load_model("llama-3.2-1b").head_dim == 64
    assert load_model("phi-3-mini").head_dim == 96  # derived 3072 / 32
    with pytest.raises(ValueError, match="head_dim"):
        parse_hf_config(tiny_llama(hidden_size=250), "odd")


def test_missing_kv_heads_means_mha_and_llama2_is_mha() -> None:
    spec = parse_hf_config(tiny_llama(num_key_value_heads=None), "mha")
    assert spec.num_kv_heads == spec.num_heads == 8
    llama2 = load_model("llama-2-7b")
    assert llama2.num_kv_heads == llama2.num_heads == 32


def test_tied_embeddings_follow_config_and_family_default() -> None:
    assert load_model("llama-3.2-1b").tie_word_embeddings
    assert not load_model("llama-3.1-8b").tie_word_embeddings
    assert "tie_word_embeddings" not in model_config_dict("gemma-2-9b")
    assert load_model("gemma-2-9b").tie_word_embeddings  # Gemma2Config default


def test_moe_fields_per_family() -> None:
    mixtral = load_model("mixtral-8x7b")
    assert (mixtral.num_experts, mixtral.experts_per_token, mixtral.moe_intermediate_size) == (8, 2, 14336)
    assert mixtral.num_moe_layers == 32 and mixtral.shared_expert_intermediate_size == 0
    qwen3 = load_model("qwen3-30b-a3b")
    assert (qwen3.num_experts, qwen3.experts_per_token, qwen3.moe_intermediate_size) == (128, 8, 768)
    assert qwen3.num_moe_layers == 48 and qwen3.qk_norm
    qwen15 = load_model("qwen1.5-moe-a2.7b")
    assert (qwen15.num_experts, qwen15.shared_expert_intermediate_size) == (60, 5632)
    assert qwen15.attention_bias


def test_decoder_sparse_step_and_mlp_only_layers() -> None:
    base = model_config_dict("qwen3-30b-a3b")
    every_other = parse_hf_config({**base, "decoder_sparse_step": 2}, "x")
    assert every_other.num_moe_layers == 24 and every_other.num_dense_layers == 24
    some_dense = parse_hf_config({**base, "mlp_only_layers": [0, 1, 47]}, "x")
    assert some_dense.num_moe_layers == 45
    with pytest.raises(ValueError, match="decoder_sparse_step"):
        parse_hf_config({**base, "decoder_sparse_step": 0}, "x")
    with pytest.raises(ValueError, match="num_experts_per_tok"):
        parse_hf_config({**base, "num_experts_per_tok": None}, "x")


def test_sliding_window_per_family() -> None:
    mistral = load_model("mistral-7b")
    assert (mistral.sliding_window, mistral.num_sliding_window_layers) == (4096, 32)
    gemma = load_model("gemma-2-27b")
    assert (gemma.sliding_window, gemma.num_sliding_window_layers) == (4096, 23)
    assert load_model("phi-3-mini").sliding_window == 2047
    qwen = load_model("qwen2.5-7b")  # sliding_window is set but use_sliding_window is false
    assert (qwen.sliding_window, qwen.num_sliding_window_layers) == (None, 0)
    on = parse_hf_config({**model_config_dict("qwen2.5-7b"), "use_sliding_window": True,
                          "max_window_layers": 20, "sliding_window": 4096}, "x")
    assert (on.sliding_window, on.num_sliding_window_layers) == (4096, 8)
    listed = parse_hf_config(tiny_llama(sliding_window=128, layer_types=[
        "sliding_attention", "full_attention", "full_attention", "full_attention"]), "x")
    assert listed.num_sliding_window_layers == 1 and listed.num_full_attention_layers == 3


def test_llama_like_unknown_model_type_parses_with_its_own_family() -> None:
    spec = parse_hf_config(tiny_llama(model_type="granite"), "g")
    assert spec.family == "granite" and spec.num_layers == 4


@pytest.mark.parametrize(
    ("cfg", "pattern"),
    [
        (tiny_llama(model_type=None), "model_type"),
        (tiny_llama(model_type="deepseek_v2", kv_lora_rank=512), "kv_lora_rank"),
        (tiny_llama(model_type="nemotron_h", hybrid_override_pattern="M-M*"), "hybrid"),
        (tiny_llama(vocab_size=None), "vocab_size"),
        (tiny_llama(model_type="gpt2", hidden_size=None), "hidden_size.*Llama-like"),
        (tiny_llama(num_hidden_layers="32"), "num_hidden_layers"),
        (tiny_llama(num_key_value_heads=3), "num_kv_heads=3"),
    ],
)
def test_bad_configs_raise_value_error_naming_the_key(cfg: dict[str, Any], pattern: str) -> None:
    with pytest.raises(ValueError, match=pattern):
        parse_hf_config(cfg, "bad")


def test_unsupported_model_type_lists_what_is_accepted() -> None:
    with pytest.raises(ValueError, match=r"accepted.*llama.*gemma2"):
        parse_hf_config(tiny_llama(model_type="deepseek_v3", q_lora_rank=1536), "bad")


def test_catalog_names_are_case_insensitive() -> None:
    assert load_model("Llama-3.1-8B") == load_model("llama-3.1-8b")


def test_unknown_model_suggests_close_names() -> None:
    with pytest.raises(UnknownNameError) as info:
        load_model("llama-3.1-8")
    assert "llama-3.1-8b" in info.value.suggestions
    assert "latsim models" in str(info.value)
    assert isinstance(info.value, ValueError)


def test_load_from_file_and_folder(tmp_path: Path) -> None:
    folder = tmp_path / "My-Llama"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(model_config_dict("llama-3.1-8b")))
    from_folder = load_model(folder)
    from_file = load_model(str(folder / "config.json"))
    assert from_folder.name == from_file.name == "My-Llama"
    assert replace(from_folder, name="llama-3.1-8b") == load_model("llama-3.1-8b")
    other = tmp_path / "tiny.json"
    other.write_text(json.dumps(tiny_llama()))
    assert load_model(other).name == "tiny"
    assert model_config_dict(other) == tiny_llama()


def test_folder_without_config_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"no config\.json"):
        load_model(tmp_path)


def test_corrupt_json_names_file_and_position(tmp_path: Path) -> None:
    bad = tmp_path / "config.json"
    bad.write_text('{"model_type": "llama",\n  "hidden_size": 4096,,\n}')
    with pytest.raises(ValueError, match=r"config\.json: invalid JSON at line 2 column \d+") as info:
        load_model(bad)
    assert str(bad) in str(info.value)
    bad.write_text("[1, 2]")
    with pytest.raises(ValueError, match="JSON object"):
        load_model(bad)


def test_model_config_dict_is_a_fresh_copy() -> None:
    cfg = model_config_dict("qwen3-8b")
    cfg["hidden_size"] = 1
    assert model_config_dict("qwen3-8b")["hidden_size"] == 4096
    spec = load_model("qwen3-8b")
    spec.hf_config_dict()["hidden_size"] = 1
    assert spec.hf_config_dict()["hidden_size"] == 4096


def test_spec_is_hashable_and_equality_ignores_the_raw_dict() -> None:
    spec = load_model("mixtral-8x7b")
    bare = replace(spec, hf_config=())
    assert spec == bare and hash(spec) == hash(bare)
    assert len({spec, bare, load_model("mistral-7b")}) == 2


@pytest.mark.parametrize(
    ("change", "pattern"),
    [
        ({"num_heads": 0}, "num_heads must be >= 1"),
        ({"num_experts": 8, "experts_per_token": 9, "moe_intermediate_size": 64, "num_moe_layers": 1},
         "experts_per_token=9"),
        ({"num_moe_layers": 2}, "num_experts=0"),
        ({"sliding_window": 64}, "disagree"),
        ({"num_sliding_window_layers": 9, "sliding_window": 64}, "num_sliding_window_layers=9"),
    ],
)
def test_model_spec_validates_in_one_place(change: dict[str, Any], pattern: str) -> None:
    spec = parse_hf_config(tiny_llama(), "tiny")
    with pytest.raises(ValueError, match=pattern):
        replace(spec, **change)


def test_hand_built_spec_needs_no_hf_config() -> None:
    spec = ModelSpec(name="toy", family="llama", num_layers=2, hidden_size=64, num_heads=4, num_kv_heads=2,
                     head_dim=16, intermediate_size=128, vocab_size=100, max_position_embeddings=512)
    assert spec.hf_config_dict() == {} and spec.q_size == 64 and spec.kv_size == 32
