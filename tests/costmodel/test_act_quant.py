"""Linear layers of quantized models: the W8A8 activation-quantization op, weight-only dtypes."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from latsim.catalog import load_device, load_model, model_config_dict, parse_hf_config
from latsim.costmodel.batch import BatchShape
from latsim.costmodel.ops import op_costs
from latsim.costmodel.profile.regressors import load_predictors
from latsim.costmodel.profile.store import shipped_profile_dir
from latsim.costmodel.profile.tabulate import per_token
from latsim.costmodel.roofline import RooflineCostModel
from latsim.costmodel.shard import shard_model

FIXTURES = json.loads((Path(__file__).parents[1] / "catalog" / "quant_configs.json").read_text())
BATCH = BatchShape.from_chunks([(512, 0)], [1000] * 8)


def checkpoint(name: str, base: str = "llama-3.1-8b"):
    cfg = model_config_dict(base)
    cfg["quantization_config"] = FIXTURES[name]
    return parse_hf_config(cfg, name)


def op(model, dtype: str, name: str = "act_quant"):
    return next(c for c in op_costs(model, BATCH, 1, dtype, "bf16") if c.name == name)


@pytest.mark.parametrize("dtype", ["bf16", "w8a16", "int4"])
def test_16_bit_and_weight_only_dtypes_quantize_no_activations(dtype: str) -> None:
    c = op(load_model("llama-3.1-8b"), dtype)
    assert (c.flops, c.bytes, c.launches) == (0.0, 0.0, 0.0)
    assert shard_model(load_model("llama-3.1-8b"), 1, dtype).gemm_dtype == "bf16"


def test_w8a8_quantizes_the_o_projection_input_in_its_own_kernel() -> None:
    model = checkpoint("ct_w8a8_fp8")  # dynamic per-token; QKV/MLP inputs fuse into norm and SiLU-mul
    elems = model.num_layers * model.q_size
    c = op(model, "fp8")
    tokens = BATCH.prefill_tokens + BATCH.decode_seqs
    assert c.bytes == pytest.approx(tokens * (elems * 3.0 + 4.0 * model.num_layers))  # 2 B in, 1 B out, fp32 scale
    assert c.launches == model.num_layers


def test_every_w8a8_scheme_quantizes_the_same_inputs() -> None:
    ref = op(checkpoint("ct_w8a8_fp8"), "fp8")
    for name, dtype in (("fp8_dynamic", "fp8"), ("fp8_static", "fp8"), ("fp8_block", "fp8"),
                        ("ct_w8a8_int8", "int8")):
        c = op(checkpoint(name), dtype)
        assert (c.bytes, c.launches) == (ref.bytes, ref.launches), name


def test_moe_experts_inputs_are_quantized_too() -> None:
    model = checkpoint("fp8_block", "qwen3-30b-a3b")
    c = op(model, "fp8")
    per_layer = 1 + 2  # the O input, then the fused-MoE op's two inputs
    assert c.launches == per_layer * model.num_layers
    assert c.bytes > 0


def test_roofline_prices_act_quant_as_memory_bound_and_adds_it() -> None:
    model, h200 = checkpoint("ct_w8a8_fp8"), load_device("h200")
    cm = RooflineCostModel(model, h200, weight_dtype="fp8")
    row = next(t for t in cm.op_times(BATCH) if t.name == "act_quant")
    assert row.bound == "memory" and row.memory_s > 0
    bare = RooflineCostModel(replace(model, quantization=None), h200, weight_dtype="int8")
    assert next(t for t in bare.op_times(BATCH) if t.name == "act_quant").seconds > 0  # W8A8 by flag: per token
    assert cm.step_time(BATCH) == pytest.approx(sum(cm.breakdown(BATCH).values()), rel=1e-12)


def test_int4_checkpoint_streams_its_stored_bytes_at_bf16_compute() -> None:
    model = checkpoint("awq")
    s = shard_model(model, 1, "int4")
    assert s.gemm_dtype == "bf16" and s.weight_bytes == pytest.approx(0.5 + 2.5 / 128)
    decode = BatchShape.from_chunks([], [1000])
    qkv16, qkv4 = (op(load_model("llama-3.1-8b"), "bf16", "qkv_proj"), op(model, "int4", "qkv_proj"))
    assert qkv16.flops == qkv4.flops
    r16 = RooflineCostModel(load_model("llama-3.1-8b"), load_device("h200")).step_time(decode)
    r4 = RooflineCostModel(model, load_device("h200"), weight_dtype="int4").step_time(decode)
    assert r4 < 0.5 * r16  # decode streams the weights: a quarter of the bytes


def test_calibrated_tables_add_the_quantization_kernels_on_the_copy_curve() -> None:
    p, h200 = load_predictors(shipped_profile_dir("h200")), load_device("h200")
    s = shard_model(checkpoint("ct_w8a8_fp8"), 1, "fp8")
    t = np.array([1.0, 64.0, 2048.0])
    with_quant, _ = per_token(p, s, h200, t)
    without, _ = per_token(p, replace(s, act_quant="none"), h200, t)
    extra = with_quant - without
    assert np.all(extra > 0) and extra[-1] > extra[0]  # small sizes sit on the copy curve's floor
