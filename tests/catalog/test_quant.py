"""Quantized checkpoints: quantization_config -> weight dtype, sizing, sources, and bad input."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from latsim.catalog import load_device, model_config_dict, parse_hf_config, weight_bytes
from latsim.catalog.quant_layers import linear_modules
from latsim.catalog.quant_resolve import dtype_report
from latsim.catalog.sizing import param_breakdown
from latsim.deployment import Deployment
from latsim.engines.vllm.memory import plan_memory

FIXTURES: dict[str, Any] = json.loads((Path(__file__).parent / "quant_configs.json").read_text())
H, L, KV, FF = 4096, 32, 1024, 14336  # llama-3.1-8b: hidden, layers, KV width, MLP width
ATTN = H * (H + 2 * KV) + H * H  # q, k, v, o of one layer


def quantized(name: str, base: str = "llama-3.1-8b"):
    cfg = model_config_dict(base)
    cfg["quantization_config"] = FIXTURES[name]
    return parse_hf_config(cfg, f"{base}-{name}")


def deploy(model, **kw) -> Deployment:
    return Deployment(model=model, device=load_device("h200"), **kw)


@pytest.mark.parametrize(("name", "dtype", "act"), [
    ("fp8_dynamic", "fp8", "dynamic-per-token"),
    ("fp8_static", "fp8", "static"),
    ("fp8_block", "fp8", "dynamic-per-token-group"),
    ("modelopt_fp8_kv", "fp8", "static"),
    ("ct_w8a8_fp8", "fp8", "dynamic-per-token"),
    ("ct_w8a8_int8", "int8", "dynamic-per-token"),
    ("ct_w4a16", "int4", "none"),
    ("ct_w8a16", "w8a16", "none"),
    ("awq", "int4", "none"),
    ("gptq4", "int4", "none"),
    ("gptq8", "w8a16", "none"),
    ("bnb_nf4", "int4", "none"),
])
def test_each_method_gives_its_weight_dtype_from_the_config(name: str, dtype: str, act: str) -> None:
    model = quantized(name)
    assert model.quantization is not None
    assert (model.quantization.weight_dtype, model.quantization.act_quant) == (dtype, act)
    dep = deploy(model)
    assert (dep.weight_dtype, dep.weight_dtype_source) == (dtype, "config")


def test_unquantized_checkpoint_defaults_to_bf16() -> None:
    dep = deploy(parse_hf_config(model_config_dict("llama-3.1-8b"), "plain"))
    assert (dep.weight_dtype, dep.weight_dtype_source, dep.kv_dtype, dep.kv_dtype_source) == (
        "bf16", "default", "bf16", "default")


@pytest.mark.parametrize(("name", "kept"), [
    ("fp8_dynamic", 0),  # lm_head is 16-bit anyway
    ("fp8_block", FF * H),  # one down_proj, named exactly
    ("modelopt_fp8_kv", ATTN),  # glob over layer 1's attention
    ("ct_w8a8_fp8", L * H * H),  # re: every o_proj
    ("ct_w4a16", L * ATTN),  # targets only the MLPs
    ("awq", L * FF * H),  # substring: every down_proj
    ("bnb_nf4", L * ATTN),  # component: every self_attn
])
def test_ignore_lists_keep_their_layers_16_bit(name: str, kept: int) -> None:
    model = quantized(name)
    assert model.quantization is not None and model.quantization.unquantized_linear == kept
    parts = param_breakdown(model)
    sixteen = parts.embedding + parts.lm_head + parts.other + kept
    expected = 2 * sixteen + (parts.linear - kept) * model.quantization.bytes_per_weight
    assert weight_bytes(model, model.quantization.weight_dtype) == round(expected)


def test_linear_modules_cover_every_linear_parameter() -> None:
    for base in ("llama-3.1-8b", "qwen3-30b-a3b", "mixtral-8x7b", "phi-3-mini"):
        cfg = model_config_dict(base)
        model = parse_hf_config(cfg, base)
        assert sum(n for _, n in linear_modules(model)) == param_breakdown(model).linear, base


def test_group_scales_and_zero_points_are_in_the_bytes_per_weight() -> None:
    awq, gptq, bnb = (quantized(n).quantization for n in ("awq", "gptq4", "bnb_nf4"))
    assert awq is not None and gptq is not None and bnb is not None
    assert awq.bytes_per_weight == pytest.approx(0.5 + 2.5 / 128)  # fp16 scale + 4-bit zero per 128
    assert gptq.bytes_per_weight == pytest.approx(0.5 + 2.0 / 128)  # symmetric: no zero point
    assert bnb.bytes_per_weight == pytest.approx(0.5 + 4.0 / 64)  # fp32 absmax per 64


def test_quantized_weights_leave_more_kv_cache() -> None:
    plain = plan_memory(deploy(parse_hf_config(model_config_dict("llama-3.1-8b"), "plain")))
    fp8 = plan_memory(deploy(quantized("ct_w8a8_fp8")))
    int4 = plan_memory(deploy(quantized("awq")))
    assert plain.weights_bytes > fp8.weights_bytes > int4.weights_bytes
    assert plain.num_blocks < fp8.num_blocks < int4.num_blocks
    assert fp8.weights_bytes + fp8.kv_bytes == pytest.approx(plain.weights_bytes + plain.kv_bytes, rel=1e-9)


def test_modelopt_kv_cache_is_fp8_and_compressed_tensors_kv_scheme_is_not() -> None:
    mo = deploy(quantized("modelopt_fp8_kv"))
    assert (mo.kv_dtype, mo.kv_dtype_source) == ("fp8", "config")
    ct = deploy(quantized("ct_w8a8_fp8"))
    assert (ct.kv_dtype, ct.kv_dtype_source) == ("bf16", "default")
    assert "kv-cache-dtype fp8" in dtype_report(ct)["quantization"]["note"]
    assert plan_memory(mo).kv_bytes_per_token * 2 == plan_memory(ct).kv_bytes_per_token


def test_explicit_dtype_overrides_the_config_and_says_so() -> None:
    model = quantized("ct_w8a8_fp8")
    dep = deploy(model, weight_dtype="bf16", kv_dtype="fp8")
    assert (dep.weight_dtype, dep.weight_dtype_source, dep.kv_dtype, dep.kv_dtype_source) == (
        "bf16", "flag", "fp8", "flag")
    assert plan_memory(dep).weights_bytes == weight_bytes(model, "bf16")
    report = dtype_report(dep)
    assert report["quantization"]["applied"] is False


def test_replace_keeps_a_true_source_and_relabels_a_changed_dtype() -> None:
    dep = deploy(quantized("awq"))
    assert replace(dep, tp=2).weight_dtype_source == "config"
    assert deploy(quantized("awq"), weight_dtype="int4") == dep  # the source is not part of what is deployed
    assert replace(dep, weight_dtype="fp8").weight_dtype_source == "flag"


@pytest.mark.parametrize(("name", "needle"), [
    ("reject_hqq", "'hqq'"),
    ("reject_bnb8", "load_in_8bit"),
    ("reject_gptq3", "3-bit"),
    ("reject_nvfp4", "W4A4 float"),
    ("reject_mixed", "mixed schemes"),
    ("reject_modelopt_nvfp4", "NVFP4"),
])
def test_unmodelled_method_is_one_line_naming_it_and_the_known_ones(name: str, needle: str) -> None:
    model = quantized(name)
    assert model.quantization is None
    with pytest.raises(ValueError) as err:
        deploy(model)
    message = str(err.value)
    assert needle in message and "known methods: fp8, modelopt, compressed-tensors, awq, gptq, bitsandbytes" in message
    assert "\n" not in message
    assert deploy(model, weight_dtype="int4").weight_dtype == "int4"  # an explicit dtype overrides


@pytest.mark.parametrize(("quant", "needle"), [
    ({"bits": 4}, "string 'quant_method'"),
    ({"quant_method": "fp8", "weight_block_size": [128]}, "weight_block_size must be two positive integers"),
    ({"quant_method": "fp8", "activation_scheme": "sometimes"}, "activation_scheme must be"),
    ({"quant_method": "awq", "bits": "4"}, "'bits' must be an integer"),
    ({"quant_method": "awq", "modules_to_not_convert": "lm_head"}, "must be a list of module names"),
    ({"quant_method": "compressed-tensors", "config_groups": {}}, "non-empty 'config_groups'"),
])
def test_malformed_quantization_config_is_rejected(quant: dict, needle: str) -> None:
    cfg = model_config_dict("llama-3.1-8b")
    cfg["quantization_config"] = quant
    with pytest.raises(ValueError, match=needle):
        deploy(parse_hf_config(cfg, "bad"))


def test_unknown_weight_dtype_names_auto_and_the_dtypes() -> None:
    accepted = "weight dtype must be one of auto, bf16, fp16, fp8, int8, w8a16, int4, got 'fp4'"
    with pytest.raises(ValueError, match=accepted):
        deploy(quantized("awq"), weight_dtype="fp4")


@pytest.mark.parametrize("model_type", ["mamba", "rwkv", "jamba", "RWKV6"])
def test_known_non_transformer_with_llama_keys_is_rejected(model_type: str) -> None:
    cfg = model_config_dict("llama-3.1-8b")
    cfg["model_type"] = model_type
    with pytest.raises(ValueError, match=f"model_type '{model_type}' is a .* architecture, which latsim does not"):
        parse_hf_config(cfg, "x")


def test_moe_checkpoint_counts_ignored_experts() -> None:
    cfg = model_config_dict("qwen3-30b-a3b")
    cfg["quantization_config"] = {**FIXTURES["fp8_block"], "modules_to_not_convert": ["model.layers.0.mlp.experts.3"]}
    model = parse_hf_config(cfg, "q")
    assert model.quantization is not None
    assert model.quantization.unquantized_linear == 3 * cfg["hidden_size"] * cfg["moe_intermediate_size"]
