"""Gemma 3: the language model read from a multimodal config's ``text_config``, its vision tower counted."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from latsim.catalog import parse_hf_config
from latsim.catalog.multimodal import encoder_params, language_model_config
from latsim.catalog.quant_resolve import resolve_weight_dtype
from latsim.catalog.sizing import param_counts, weight_bytes
from tests.cli_runner import run_cli as run

SIGLIP_SO400M = {"hidden_size": 1152, "image_size": 896, "intermediate_size": 4304, "model_type": "siglip_vision_model",
                 "num_attention_heads": 16, "num_hidden_layers": 27, "patch_size": 14, "vision_use_head": False}


def gemma3_27b(**top: Any) -> dict[str, Any]:
    """The shape keys of google/gemma-3-27b-it's config.json: the text_config leaves out the keys it
    shares with Gemma3TextConfig's defaults (vocabulary, context length, the pattern)."""
    cfg: dict[str, Any] = {
        "architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3", "torch_dtype": "bfloat16",
        "text_config": {"head_dim": 128, "hidden_size": 5376, "intermediate_size": 21504, "model_type": "gemma3_text",
                        "num_attention_heads": 32, "num_hidden_layers": 62, "num_key_value_heads": 16,
                        "query_pre_attn_scalar": 168, "sliding_window": 1024},
        "vision_config": dict(SIGLIP_SO400M),
    }
    cfg.update(top)
    return cfg


GEMMA3_1B = {  # google/gemma-3-1b-it: a text-only Gemma 3, flat
    "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "head_dim": 256, "hidden_size": 1152,
    "intermediate_size": 6912, "max_position_embeddings": 32768, "num_attention_heads": 4, "num_hidden_layers": 26,
    "num_key_value_heads": 1, "sliding_window": 512, "sliding_window_pattern": 6, "vocab_size": 262144,
    "torch_dtype": "bfloat16",
}


def test_the_27b_language_model_takes_the_class_defaults_its_text_config_leaves_out() -> None:
    spec = parse_hf_config(gemma3_27b(), "g3")
    assert spec.family == "gemma3"
    assert (spec.vocab_size, spec.max_position_embeddings) == (262_208, 131_072)
    shape = (spec.num_layers, spec.hidden_size, spec.num_heads, spec.num_kv_heads, spec.head_dim)
    assert shape == (62, 5376, 32, 16, 128)
    assert (spec.sliding_window, spec.num_sliding_window_layers) == (1024, 62 - 10)  # global on layers 5, 11, ..., 59
    assert spec.tie_word_embeddings and spec.qk_norm and spec.norms_per_layer == 4
    assert spec.hf_config_dict() == gemma3_27b()  # the original, nested dict is what a vLLM config dir gets


def test_parameter_totals_match_the_published_ones() -> None:
    """Published: Gemma 3 27B 27.4B parameters, 1B 1.0B (Gemma 3 technical report, model cards);
    the SigLIP tower counts 416,866,032 parameters (transformers' SiglipVisionModel at this shape)."""
    big = parse_hf_config(gemma3_27b(), "g3")
    assert big.encoder_params == 416_866_032 + 1152 * 5376 + 1152
    total, active = param_counts(big)
    assert total == pytest.approx(27.4e9, rel=0.005)
    assert total - active == big.encoder_params  # the tower is memory, not work per token
    small = parse_hf_config(GEMMA3_1B, "g3-1b")
    assert small.encoder_params == 0
    assert param_counts(small)[0] == pytest.approx(1.0e9, rel=0.005)
    assert (small.sliding_window, small.num_sliding_window_layers) == (512, 26 - 4)


def test_the_vision_tower_takes_16_bit_memory_beside_fp8_weights() -> None:
    text_only = parse_hf_config({**gemma3_27b(), "vision_config": None, "model_type": "gemma3"}, "g3")
    with_tower = parse_hf_config(gemma3_27b(), "g3")
    assert with_tower.encoder_params > text_only.encoder_params > 0  # SigLIP defaults when the dict is absent
    tower_gap = with_tower.encoder_params - text_only.encoder_params
    assert weight_bytes(with_tower, "fp8") - weight_bytes(text_only, "fp8") == 2 * tower_gap


def test_layer_types_decide_over_the_pattern() -> None:
    cfg = gemma3_27b()
    cfg["text_config"] = {**cfg["text_config"], "num_hidden_layers": 4,
                          "layer_types": ["sliding_attention", "full_attention", "full_attention", "full_attention"]}
    assert parse_hf_config(cfg, "g3").num_sliding_window_layers == 1
    assert parse_hf_config({**GEMMA3_1B, "sliding_window_pattern": 2}, "g3").num_sliding_window_layers == 13


def test_the_checkpoint_quantization_reaches_the_language_model() -> None:
    quant = {"quant_method": "fp8", "activation_scheme": "dynamic"}
    spec = parse_hf_config(gemma3_27b(quantization_config=quant), "g3")
    assert spec.quantization is not None and spec.quantization.weight_dtype == "fp8"
    assert resolve_weight_dtype(spec, "auto")[0] == "fp8"
    assert language_model_config(gemma3_27b(quantization_config=quant))["quantization_config"] == quant


@pytest.mark.parametrize(("cfg", "match"), [
    ({"model_type": "gemma3"}, r"'text_config' dict"),
    ({"model_type": "gemma3", "text_config": [1]}, r"'text_config' dict"),
    ({**GEMMA3_1B, "sliding_window_pattern": 0}, r"sliding_window_pattern.*>= 1"),
    (gemma3_27b(vision_config={"hidden_size": 0}), r"vision_config.hidden_size.*positive"),
    ({"model_type": "mistral3", "text_config": {"model_type": "mistral", "hidden_size": 5120}},
     r"under 'text_config'.*gemma3 only"),
])
def test_bad_configs_name_the_key(cfg: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        parse_hf_config(cfg, "bad")


def test_encoder_params_is_zero_for_text_only_configs() -> None:
    assert encoder_params(GEMMA3_1B) == 0
    assert encoder_params({"model_type": "llama"}) == 0


def test_predict_runs_a_gemma3_checkpoint_and_rejects_a_broken_one(tmp_path: Path, monkeypatch, capsys) -> None:
    good = tmp_path / "good.json"
    good.write_text(json.dumps(gemma3_27b()))
    code, out, _ = run(["predict", "--model", str(good), "--device", "h200", "--qps", "1", "--num-requests", "30",
                        "--replications", "1", "--json"], monkeypatch, capsys)
    assert code == 0
    assert json.loads(out)["ttft_ms"]["p50"] > 0
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"model_type": "gemma3"}))
    code, out, err = run(["predict", "--model", str(bad), "--device", "h200", "--json"], monkeypatch, capsys)
    assert code == 2 and out == ""
    assert "text_config" in err and "Traceback" not in err


def test_language_model_only_frees_exactly_the_encoder_weights_for_kv_cache() -> None:
    from latsim import Deployment, EngineConfig, load_device, load_model
    from latsim.engines.vllm.memory import plan_memory

    def plan(model: str, only: bool):
        return plan_memory(Deployment(load_model(model), load_device("h200"),
                                      engine=EngineConfig(max_model_len=8192, language_model_only=only)))

    full, text = plan("gemma-3-27b", False), plan("gemma-3-27b", True)
    assert full.weights_bytes - text.weights_bytes == 2 * load_model("gemma-3-27b").encoder_params
    assert text.num_blocks > full.num_blocks
    assert plan("gemma-3-1b", True) == plan("gemma-3-1b", False)  # a text-only checkpoint: nothing to skip


def test_a_replay_reads_language_model_only_from_the_run_s_engine_args() -> None:
    from latsim.validate.compare import deployment_for

    meta = {"model": {"name": "g", "config": gemma3_27b()}, "engine_config": {"max_model_len": 8192}}
    assert not deployment_for(meta, "h200").engine.language_model_only
    meta["engine_args"] = {"language_model_only": True}
    assert deployment_for(meta, "h200").engine.language_model_only


def test_a_deployment_file_and_the_flag_set_language_model_only(tmp_path: Path, monkeypatch, capsys) -> None:
    args = ["predict", "--model", "gemma-3-27b", "--device", "h100", "--gpu-memory-utilization", "0.70",
            "--max-model-len", "4096", "--qps", "1", "--num-requests", "20", "--replications", "1", "--json"]
    code, _, err = run(args, monkeypatch, capsys)
    assert code == 2 and "--language-model-only" in err
    code, out, _ = run([*args, "--language-model-only"], monkeypatch, capsys)
    assert code == 0 and json.loads(out)["kv_capacity_tokens"] > 0
    file = tmp_path / "d.yaml"
    file.write_text("model: gemma-3-27b\ndevice: h100\nengine: {language_model_only: true, max_model_len: 4096, "
                    "gpu_memory_utilization: 0.70}\nworkload: {qps: 1, num_requests: 20}\n")
    code, out, _ = run(["predict", "--config", str(file), "--replications", "1", "--json"], monkeypatch, capsys)
    assert code == 0 and json.loads(out)["kv_capacity_tokens"] > 0
