"""Parameter counts, weight bytes and KV bytes against published figures."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from latsim.catalog import (
    ModelSpec,
    kv_bytes_for_context,
    kv_bytes_per_token,
    load_model,
    param_counts,
    weight_bytes,
)
from latsim.catalog.sizing import INT4_GROUP_SIZE, param_breakdown

# Exact totals: the parameter counts of the published safetensors checkpoints.
EXACT_TOTALS = {
    "llama-3.1-8b": 8_030_261_248,
    "llama-3.1-70b": 70_553_706_496,
    "llama-3.2-1b": 1_235_814_400,
    "llama-3.2-3b": 3_212_749_824,
    "mistral-7b": 7_241_732_096,
    "mixtral-8x7b": 46_702_792_704,
    "qwen2.5-7b": 7_615_616_512,
    "phi-3-mini": 3_821_079_552,
    "gemma-2-9b": 9_241_705_984,
}

# Rounded (total, active) figures from model cards; checked within 1 % (2 % for sub-1B actives).
APPROX = {
    "llama-3.1-405b": (405.9e9, 405.9e9),
    "llama-2-7b": (6.74e9, 6.74e9),
    "mixtral-8x7b": (46.7e9, 12.9e9),
    "mixtral-8x22b": (140.6e9, 39.1e9),
    "qwen3-30b-a3b": (30.5e9, 3.35e9),
    "qwen1.5-moe-a2.7b": (14.3e9, 2.7e9),
    "qwen2.5-72b": (72.7e9, 72.7e9),
    "qwen3-8b": (8.19e9, 8.19e9),
    "gemma-2-27b": (27.2e9, 27.2e9),
    "gemma-3-1b": (1.0e9, 1.0e9),
    "gemma-3-27b": (27.4e9, 27.0e9),  # the SigLIP tower (0.42B) is weight memory, not work per token
    "phi-3-medium": (13.96e9, 13.96e9),
}


@pytest.mark.parametrize(("name", "total"), sorted(EXACT_TOTALS.items()))
def test_total_params_match_published_checkpoints(name: str, total: int) -> None:
    assert param_counts(load_model(name))[0] == total


@pytest.mark.parametrize(("name", "expected"), sorted(APPROX.items()))
def test_total_and_active_params_within_one_percent(name: str, expected: tuple[float, float]) -> None:
    total, active = param_counts(load_model(name))
    assert total == pytest.approx(expected[0], rel=0.01)
    assert active == pytest.approx(expected[1], rel=0.01)


def test_dense_models_have_total_equal_active_and_moe_less() -> None:
    total, active = param_counts(load_model("llama-3.1-70b"))
    assert total == active
    total, active = param_counts(load_model("qwen3-30b-a3b"))
    assert active < total / 5


def test_tied_embeddings_drop_the_lm_head() -> None:
    spec = load_model("llama-3.2-1b")
    parts = param_breakdown(spec)
    assert parts.lm_head == 0 and parts.embedding == 128256 * 2048
    untied = param_breakdown(replace(spec, tie_word_embeddings=False))
    assert untied.total - parts.total == parts.embedding


def test_kv_bytes_per_token_known_values() -> None:
    assert kv_bytes_per_token(load_model("llama-3.1-8b"), "bf16") == 128 * 1024
    assert kv_bytes_per_token(load_model("llama-3.1-8b"), "fp8") == 64 * 1024
    assert kv_bytes_per_token(load_model("llama-2-7b"), "fp16") == 512 * 1024
    assert kv_bytes_per_token(load_model("llama-3.1-70b"), "bf16") == 320 * 1024
    with pytest.raises(ValueError, match="kv_dtype must be one of bf16, fp16, fp8, got 'int4'"):
        kv_bytes_per_token(load_model("llama-3.1-8b"), "int4")


def test_kv_bytes_for_context_caps_sliding_layers_at_the_window() -> None:
    mistral = load_model("mistral-7b")  # every layer slides, window 4096
    per_token = kv_bytes_per_token(mistral, "bf16")
    assert kv_bytes_for_context(mistral, "bf16", 1000) == 1000 * per_token
    assert kv_bytes_for_context(mistral, "bf16", 10_000) == 4096 * per_token
    gemma = load_model("gemma-2-9b")  # 21 of 42 layers slide
    half = kv_bytes_per_token(gemma, "bf16") // 2
    assert kv_bytes_for_context(gemma, "bf16", 8192) == half * 8192 + half * 4096
    llama = load_model("llama-3.1-8b")
    assert kv_bytes_for_context(llama, "bf16", 10_000) == 10_000 * kv_bytes_per_token(llama, "bf16")
    with pytest.raises(ValueError, match="num_tokens"):
        kv_bytes_for_context(llama, "bf16", -1)


def test_weight_bytes_keep_embeddings_norms_and_router_16_bit() -> None:
    spec = load_model("mixtral-8x7b")
    parts = param_breakdown(spec)
    assert weight_bytes(spec, "bf16") == 2 * parts.total
    sixteen_bit = parts.embedding + parts.lm_head + parts.other
    assert weight_bytes(spec, "fp8") == 2 * sixteen_bit + parts.linear
    assert parts.other > 32 * 4096 * 8  # the router is in the 16-bit part
    int4 = weight_bytes(spec, "int4")
    assert int4 == round(2 * sixteen_bit + parts.linear * (0.5 + 2 / INT4_GROUP_SIZE))


def test_weight_bytes_reject_unknown_dtype() -> None:
    accepted = "weight_dtype must be one of bf16, fp16, fp8, int8, w8a16, int4, got 'fp4'"
    with pytest.raises(ValueError, match=accepted):
        weight_bytes(load_model("llama-3.1-8b"), "fp4")


def test_llama_8b_weights_in_bf16_are_about_15_gib() -> None:
    # vLLM's memory profile logs "model weights take 14.96GiB" for Llama-3-8B (same shapes), PR #10511.
    assert weight_bytes(load_model("llama-3.1-8b"), "bf16") / 2**30 == pytest.approx(14.96, abs=0.05)


@st.composite
def llama_like(draw: st.DrawFn) -> ModelSpec:
    kv_heads = draw(st.integers(1, 8))
    heads = kv_heads * draw(st.integers(1, 8))
    experts = draw(st.sampled_from([0, 4, 8]))
    layers = draw(st.integers(1, 12))
    return ModelSpec(
        name="h", family="llama", num_layers=layers, hidden_size=draw(st.integers(1, 64)) * 64,
        num_heads=heads, num_kv_heads=kv_heads, head_dim=draw(st.sampled_from([64, 128])),
        intermediate_size=draw(st.integers(1, 64)) * 64, vocab_size=draw(st.integers(100, 50_000)),
        max_position_embeddings=4096, tie_word_embeddings=draw(st.booleans()),
        num_experts=experts, experts_per_token=min(2, experts),
        moe_intermediate_size=256 if experts else 0, num_moe_layers=layers if experts else 0,
        shared_expert_intermediate_size=draw(st.sampled_from([0, 512])) if experts else 0,
    )


@given(llama_like())
def test_sizing_invariants(spec: ModelSpec) -> None:
    total, active = param_counts(spec)
    assert 0 < active <= total
    assert (active == total) == (not spec.is_moe or spec.experts_per_token == spec.num_experts)
    bf16, fp8, int4 = (weight_bytes(spec, d) for d in ("bf16", "fp8", "int4"))
    assert bf16 == 2 * total and bf16 > fp8 > int4
    assert kv_bytes_per_token(spec, "bf16") == 2 * spec.num_layers * spec.num_kv_heads * spec.head_dim * 2


def test_decode_bytes_read_leave_out_the_embedding_and_a_vision_encoder() -> None:
    from latsim.catalog.sizing import decode_bytes_read

    dense = load_model("llama-3.1-8b")
    parts = param_breakdown(dense)
    assert decode_bytes_read(dense, "bf16") == weight_bytes(dense, "bf16") - 2 * parts.embedding
    tied = load_model("llama-3.2-1b")  # the head is the embedding matrix: read once
    assert decode_bytes_read(tied, "bf16") == weight_bytes(tied, "bf16")
    moe = load_model("qwen3-30b-a3b")
    assert decode_bytes_read(moe, "bf16") < 0.2 * weight_bytes(moe, "bf16")
    quantized = decode_bytes_read(dense, "int4")
    assert 0.3 * decode_bytes_read(dense, "bf16") < quantized < 0.5 * decode_bytes_read(dense, "bf16")
    vision = load_model("gemma-3-27b")
    text = replace(vision, encoder_params=0)
    assert vision.encoder_params > 0 and decode_bytes_read(vision, "bf16") == decode_bytes_read(text, "bf16")
