"""Roofline cost model: physical bounds, scaling with batch/context/tp/dtype, exact decode runs."""

from __future__ import annotations

import numpy as np
import pytest
from costmodel_specs import h100, llama_8b, mistral_sliding, mixtral_8x7b, qwen_moe_shared
from hypothesis import given, settings
from hypothesis import strategies as st

from latsim.catalog.devices import DeviceSpec
from latsim.catalog.models import ModelSpec
from latsim.costmodel.batch import BatchShape
from latsim.costmodel.ops import OP_NAMES, op_costs
from latsim.costmodel.roofline import RooflineCostModel

BF16_PEAK = 989.4e12
HBM = 3.35e12


def _pure_roofline(model: ModelSpec, batch: BatchShape, **kw: object) -> float:
    """Sum over operators of max(FLOPs / peak, bytes / bandwidth): the unreachable floor."""
    table = op_costs(model, batch, **kw)  # type: ignore[arg-type]
    return sum(max(float(c.flops) / BF16_PEAK, float(c.bytes) / HBM) for c in table if c.kind != "comm")


def test_decode_time_grows_with_batch_and_context(llama: ModelSpec, gpu: DeviceSpec) -> None:
    cm = RooflineCostModel(llama, gpu)
    for ctx in (128, 2048, 32768):
        times = [cm.step_time(BatchShape(decode_seqs=b, decode_kv_tokens=b * ctx)) for b in (1, 8, 64, 256)]
        assert times == sorted(times) and len(set(times)) == len(times)
    by_ctx = [cm.step_time(BatchShape(decode_seqs=32, decode_kv_tokens=32 * c)) for c in (100, 1000, 10000)]
    assert by_ctx == sorted(by_ctx) and len(set(by_ctx)) == 3


def test_batch1_decode_is_weight_bandwidth_bound(llama: ModelSpec, gpu: DeviceSpec) -> None:
    batch = BatchShape(decode_seqs=1, decode_kv_tokens=1024)
    floor = _pure_roofline(llama, batch)
    assert 4.3e-3 < floor < 4.9e-3  # ~15 GB of weights / 3.35 TB/s
    assert floor <= RooflineCostModel(llama, gpu).step_time(batch) <= 3 * floor


def test_prefill_8192_is_compute_bound_and_sane(llama: ModelSpec, gpu: DeviceSpec) -> None:
    cm = RooflineCostModel(llama, gpu)
    batch = BatchShape.from_chunks([(8192, 0)], [])
    table = op_costs(llama, batch)
    assert sum(float(c.flops) for c in table) / sum(float(c.bytes) for c in table) > BF16_PEAK / HBM
    gemms = ("qkv_proj", "mlp_up", "mlp_down")
    assert all(t.bound == "compute" for t in cm.op_times(batch) if t.name in gemms)
    params = 32 * (4096 * 6144 + 4096 * 4096 + 3 * 4096 * 14336)
    floor = 2 * params * 8192 / BF16_PEAK
    assert floor < cm.step_time(batch) < 3 * floor
    assert cm.prefill_time(8192) == cm.step_time(batch)


def test_tp2_halves_gemms_and_adds_allreduce(llama: ModelSpec, gpu: DeviceSpec) -> None:
    batch = BatchShape.from_chunks([(2048, 0)], [1000] * 32)
    one, two = (RooflineCostModel(llama, gpu, tp=tp).breakdown(batch) for tp in (1, 2))
    gemms = ("qkv_proj", "o_proj", "mlp_up", "mlp_down")
    assert 0.45 < sum(two[g] for g in gemms) / sum(one[g] for g in gemms) < 0.6
    assert one["allreduce"] == 0 < two["allreduce"]


def test_fp8_weights_speed_up_decode(llama: ModelSpec, gpu: DeviceSpec) -> None:
    batch = BatchShape(decode_seqs=32, decode_kv_tokens=32 * 1500)
    bf16, fp8 = (RooflineCostModel(llama, gpu, weight_dtype=w).step_time(batch) for w in ("bf16", "fp8"))
    assert 0.5 * bf16 < fp8 < 0.8 * bf16  # weights halve; KV reads and overheads stay


def test_moe_decode_of_one_token_is_cheaper_than_512(mixtral: ModelSpec, gpu: DeviceSpec) -> None:
    cm = RooflineCostModel(mixtral, gpu, tp=2)
    one = cm.breakdown(BatchShape(decode_seqs=1, decode_kv_tokens=100))["moe_experts"]
    many = cm.breakdown(BatchShape(decode_seqs=512, decode_kv_tokens=51200))["moe_experts"]
    assert one < 0.4 * many


def test_breakdown_sums_to_step_time(llama: ModelSpec, gpu: DeviceSpec) -> None:
    cm = RooflineCostModel(llama, gpu, tp=2)
    batch = BatchShape.from_chunks([(300, 1200)], [500, 20000])
    parts = cm.breakdown(batch)
    assert tuple(parts) == (*OP_NAMES, "step_overhead")
    assert sum(parts.values()) == pytest.approx(cm.step_time(batch), rel=1e-12)


def test_empty_batch_costs_nothing(llama: ModelSpec, gpu: DeviceSpec) -> None:
    cm = RooflineCostModel(llama, gpu)
    assert cm.step_time(BatchShape()) == 0.0
    assert cm.decode_run(0, 0, 3).tolist() == [0.0, 0.0, 0.0]


def test_decode_run_rejects_negative_arguments(llama: ModelSpec, gpu: DeviceSpec) -> None:
    with pytest.raises(ValueError, match="steps=-1"):
        RooflineCostModel(llama, gpu).decode_run(4, 100, -1)


def test_describe_names_kind_efficiencies_and_source(llama: ModelSpec, gpu: DeviceSpec) -> None:
    info = RooflineCostModel(llama, gpu).describe()
    assert info["kind"] == "roofline" and "roofline.yaml" in str(info["source"])
    assert "memory_efficiency" in info["efficiency"]  # type: ignore[operator]
    assert "status" in info["provenance"]  # type: ignore[operator]


_GPU = h100()
_MODELS = [RooflineCostModel(llama_8b(), _GPU), RooflineCostModel(llama_8b(), _GPU, tp=4, kv_dtype="fp8"),
           RooflineCostModel(mixtral_8x7b(), _GPU, tp=2), RooflineCostModel(qwen_moe_shared(), _GPU),
           RooflineCostModel(mistral_sliding(), _GPU, weight_dtype="fp8")]


@settings(max_examples=300, deadline=None)
@given(which=st.integers(0, len(_MODELS) - 1), seqs=st.integers(0, 2048),
       kv_tokens=st.integers(0, 20_000_000), steps=st.integers(0, 40))
def test_decode_run_is_bitwise_equal_to_stepping(which: int, seqs: int, kv_tokens: int, steps: int) -> None:
    cm = _MODELS[which]
    run = cm.decode_run(seqs, kv_tokens, steps)
    stepped = [cm.step_time(BatchShape(decode_seqs=seqs, decode_kv_tokens=kv_tokens + i * seqs))
               for i in range(steps)]
    assert run.dtype == np.float64 and run.shape == (steps,)
    assert all(a == b for a, b in zip(run.tolist(), stepped, strict=True))


def test_the_roofline_prices_a_mixture_of_experts_padded_graph_tokens() -> None:
    """More tokens reach more experts, so the padding of a graph step costs weight reads; a
    dense model has no routed experts to pad."""
    from latsim.catalog.lookup import load_device as device_of
    from latsim.catalog.lookup import load_model as model_of

    moe = RooflineCostModel(model_of("qwen3-30b-a3b"), device_of("a100"))
    assert 0.0 < moe.moe_pad_s(5, 8) < moe.moe_pad_s(5, 16)
    assert moe.moe_pad_s(8, 8) == 0.0 and moe.moe_pad_s(0, 8) == 0.0
    assert moe.moe_pad_s(5, 8) == moe.moe_pad_s(5, 8)  # memoised, the same value
    assert RooflineCostModel(model_of("llama-3.1-8b"), device_of("a100")).moe_pad_s(5, 8) == 0.0
