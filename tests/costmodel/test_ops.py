"""Operator decomposition: names, sharding, MoE expert reads, vectorised variant, validation."""

from __future__ import annotations

import numpy as np
import pytest
from costmodel_specs import mistral_sliding, qwen_moe_shared

from latsim.catalog.models import ModelSpec
from latsim.costmodel.batch import BatchShape
from latsim.costmodel.ops import (
    OP_KINDS,
    OP_NAMES,
    experts_hit,
    op_costs,
    op_costs_vectorized,
)
from latsim.costmodel.shard import shard_model


def _by_name(model: ModelSpec, batch: BatchShape, **kw: object) -> dict:
    return {c.name: c for c in op_costs(model, batch, **kw)}  # type: ignore[arg-type]


def test_table_lists_every_operator_in_contract_order(llama: ModelSpec) -> None:
    table = op_costs(llama, BatchShape(decode_seqs=4, decode_kv_tokens=4000))
    assert tuple(c.name for c in table) == OP_NAMES
    assert all(c.kind in OP_KINDS for c in table)


def test_dense_model_has_no_moe_work_and_tp1_no_allreduce(llama: ModelSpec) -> None:
    ops = _by_name(llama, BatchShape(decode_seqs=8, decode_kv_tokens=8000))
    for name in ("moe_router", "moe_experts", "allreduce", "attn_prefill"):
        assert ops[name].flops == 0 and ops[name].bytes == 0 and ops[name].launches == 0


def test_batch1_decode_reads_the_weights_once(llama: ModelSpec) -> None:
    ops = _by_name(llama, BatchShape(decode_seqs=1, decode_kv_tokens=1))
    gemm_weights = sum(c.weight_elems for c in ops.values() if c.kind == "gemm")
    layer = 4096 * (4096 + 2 * 1024) + 4096 * 4096 + 3 * 4096 * 14336
    assert gemm_weights == 32 * layer + 4096 * 128256  # layers + lm_head (embedding: one row)
    assert ops["qkv_proj"].flops == 2 * ops["qkv_proj"].weight_elems  # M = 1 row


def test_prefill_attention_flops_follow_the_pairs(llama: ModelSpec) -> None:
    batch = BatchShape.from_chunks([(1000, 500)], [])
    ops = _by_name(llama, batch)
    assert ops["attn_prefill"].flops == 4 * 128 * 32 * batch.prefill_attn_pairs * 32
    assert ops["attn_prefill"].bytes == 32 * (2 * 1000 * 4096 * 2 + 1500 * 2 * 1024 * 2)


def test_decode_attention_is_kv_bytes_per_token(llama: ModelSpec) -> None:
    small = _by_name(llama, BatchShape(decode_seqs=1, decode_kv_tokens=1000), kv_dtype="fp8")["attn_decode"]
    big = _by_name(llama, BatchShape(decode_seqs=1, decode_kv_tokens=2000), kv_dtype="fp8")["attn_decode"]
    assert big.bytes - small.bytes == 1000 * 32 * 2 * 1024 * 1  # layers x (K+V) x kv width x fp8


def test_tp_shards_heads_and_replicates_kv_heads_beyond_their_count(llama: ModelSpec) -> None:
    assert shard_model(llama, 2).q_width == 16 * 128 and shard_model(llama, 2).kv_width == 4 * 128
    assert shard_model(llama, 16).kv_width == 128  # 8 KV heads over 16 GPUs: one each, replicated
    assert shard_model(llama, 4).vocab_shard == 128256 // 4


def test_allreduce_two_per_layer_plus_embedding(llama: ModelSpec) -> None:
    ar = _by_name(llama, BatchShape(decode_seqs=10, decode_kv_tokens=100), tp=2)["allreduce"]
    assert ar.launches == 65 and ar.bytes == 65 * 10 * 4096 * 2 and ar.kind == "comm"


def test_experts_hit_formula() -> None:
    assert experts_hit(8, 2, 1) == pytest.approx(2.0)
    assert experts_hit(8, 2, 512) == pytest.approx(8.0)
    assert experts_hit(0, 0, 100) == 0.0
    assert experts_hit(64, 8, 3) < 24  # collisions: fewer than T*k distinct experts


def test_moe_single_token_reads_fewer_expert_weights(mixtral: ModelSpec) -> None:
    one = _by_name(mixtral, BatchShape(decode_seqs=1, decode_kv_tokens=100))["moe_experts"]
    many = _by_name(mixtral, BatchShape(decode_seqs=512, decode_kv_tokens=51200))["moe_experts"]
    assert one.weight_elems == pytest.approx(many.weight_elems * 2 / 8, rel=1e-6)
    assert one.bytes < 0.3 * many.bytes
    assert many.flops == pytest.approx(512 * one.flops)  # T*k token-expert pairs


def test_shared_expert_is_always_read() -> None:
    ops = _by_name(qwen_moe_shared(), BatchShape(decode_seqs=1, decode_kv_tokens=10))
    routed = 4 * (2048 * 2 * 1408 + 1408 * 2048)
    shared = 2048 * 2 * 5632 + 5632 * 2048 + 2048  # gate-up, down and the gate (2,048 x 1)
    assert ops["moe_experts"].weight_elems == pytest.approx(24 * (routed + shared))
    # the shared expert's two GEMMs, its gate's GEMM, sigmoid and product beside the routed four
    assert ops["moe_experts"].launches == pytest.approx(24 * (4 + 5))


def test_sliding_window_caps_decode_kv_reads() -> None:
    model = mistral_sliding()
    short = _by_name(model, BatchShape(decode_seqs=2, decode_kv_tokens=10000))["attn_decode"]
    long = _by_name(model, BatchShape(decode_seqs=2, decode_kv_tokens=80000))["attn_decode"]
    assert short.bytes == long.bytes  # both capped at 2 x 4096 entries


def test_vectorised_variant_matches_the_table(llama: ModelSpec) -> None:
    batches = [BatchShape(decode_seqs=d, decode_kv_tokens=k) for d, k in ((1, 5), (64, 90000), (300, 7))]
    batches.append(BatchShape.from_chunks([(512, 100), (37, 0)], [900, 12]))
    def column(field: str) -> np.ndarray:
        return np.array([getattr(b, field) for b in batches])

    vec = op_costs_vectorized(
        llama, tp=2, prefill_tokens=column("prefill_tokens"), prefill_seqs=column("prefill_seqs"),
        prefill_attn_pairs=column("prefill_attn_pairs"), prefill_kv_tokens=column("prefill_kv_tokens"),
        decode_seqs=column("decode_seqs"), decode_kv_tokens=column("decode_kv_tokens"))
    for i, batch in enumerate(batches):
        for v, s in zip(vec, op_costs(llama, batch, tp=2), strict=True):
            assert np.asarray(v.flops)[i] == pytest.approx(s.flops)
            assert np.asarray(v.bytes)[i] == pytest.approx(s.bytes)
            assert np.asarray(v.launches)[i] == s.launches


@pytest.mark.parametrize("kw", [{"weight_dtype": "fp4"}, {"kv_dtype": "int4"}, {"tp": 3}, {"tp": 0},
                                {"tp": 64}, {"tp": 1.5}])
def test_invalid_deployments_raise(llama: ModelSpec, kw: dict) -> None:
    with pytest.raises(ValueError, match=next(iter(kw))):
        shard_model(llama, **kw)


def test_tp_must_divide_or_be_multiple_of_kv_heads() -> None:
    model = ModelSpec(name="odd", family="x", num_layers=2, hidden_size=768, num_heads=12, num_kv_heads=4,
                      head_dim=64, intermediate_size=3072, vocab_size=1000, max_position_embeddings=512)
    with pytest.raises(ValueError, match="num_kv_heads=4"):
        shard_model(model, 6)


def test_numpy_integer_tp_is_accepted(llama: ModelSpec) -> None:
    assert shard_model(llama, np.int64(4)).tp == 4  # type: ignore[arg-type]  # sweeps pass numpy ints
