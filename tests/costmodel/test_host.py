"""Host time around the GPU model: overlap, the eager (no CUDA graph) term, the fitted defaults."""

from __future__ import annotations

import numpy as np
import pytest

from latsim.catalog.lookup import load_device, load_model
from latsim.costmodel.batch import BatchShape
from latsim.costmodel.host import SPEED_FIELDS, TERMS, HostOverhead, HostOverlapCostModel, padded_graph_size
from latsim.deployment import Deployment, EngineConfig, resolve_engine
from latsim.engines.vllm.defaults import cudagraph_capture_sizes, cudagraph_limit
from latsim.engines.vllm.host_terms import default_host_overhead, reference_probe_s
from latsim.sim.simulate import default_cost_model


class LinearGpu:
    """GPU time 1 ms + 10 us per token, so every term below is easy to read off."""

    kind = "test"

    def step_time(self, batch: BatchShape) -> float:
        return 1e-3 + 1e-5 * batch.num_tokens if batch.num_tokens else 0.0

    def decode_run(self, seqs: int, kv_tokens: int, steps: int, kv_sq: int = 0) -> np.ndarray:
        return np.full(steps, self.step_time(BatchShape(decode_seqs=seqs)))

    def describe(self) -> dict[str, object]:
        return {"kind": self.kind}


HOST = HostOverhead(step_s=2e-4, seq_s=1e-6, frontend_s=0.0, gpu_scale=1.0, eager_layer_s=1e-4)


def test_cudagraph_limit_follows_vllm() -> None:
    assert cudagraph_limit(1024, 8192) == 512
    assert cudagraph_limit(100, 8192) == 200
    assert cudagraph_limit(1024, 256) == 256
    assert cudagraph_limit(50, 8192) == 96  # 2 x 50 = 100 is not a captured size: graphs end at 96
    assert cudagraph_limit(3, 8192) == 4


def test_capture_sizes_follow_vllm_0_25_1() -> None:
    sizes = cudagraph_capture_sizes(1024, 8192)
    assert sizes[:5] == (1, 2, 4, 8, 16) and sizes[-3:] == (480, 496, 512)
    assert 248 in sizes and 256 in sizes and 264 not in sizes and 272 in sizes
    assert cudagraph_capture_sizes(3, 8192) == (1, 2, 4)
    assert cudagraph_capture_sizes(1024, 100)[-3:] == (88, 96, 100)  # the token budget is captured too


@pytest.mark.parametrize(("max_num_seqs", "budget"), [(1024, 8192), (100, 8192), (50, 8192), (1024, 100),
                                                      (3, 8192), (256, 300), (200, 2048)])
def test_a_graph_step_replays_the_first_captured_size_at_or_above_it(max_num_seqs, budget) -> None:
    sizes = cudagraph_capture_sizes(max_num_seqs, budget)
    for tokens in range(1, sizes[-1] + 1):
        assert padded_graph_size(tokens, sizes[-1]) == next(s for s in sizes if s >= tokens)


class PaddedMoeGpu(LinearGpu):
    """LinearGpu whose experts cost 100 us a token, so padding shows as 100 us a padded token."""

    def moe_pad_s(self, tokens: int, padded: int) -> float:
        return 1e-4 * (padded - tokens)


def test_a_mixture_of_experts_pays_for_its_padded_graph_tokens() -> None:
    cost = HostOverlapCostModel(PaddedMoeGpu(), HOST, layers=4, moe_layers=4, graph_tokens=512)
    five, eight = BatchShape(decode_seqs=5), BatchShape(decode_seqs=8)
    assert cost.step_time(five) == pytest.approx(1e-3 + 5e-5 + 3e-4)  # replays the graph of 8
    assert cost.step_time(eight) == pytest.approx(1e-3 + 8e-5)
    assert cost.padding_s(300) == pytest.approx(1e-4 * (304 - 300))
    assert cost.padding_s(513) == 0.0  # above the limit: launched eagerly, no padding
    for seqs in (5, 11, 64, 700):  # a decode run prices as its steps, bitwise
        run = cost.decode_run(seqs, seqs * 100, 3)
        assert run.tolist() == [cost.step_time(BatchShape(decode_seqs=seqs, decode_kv_tokens=seqs * 100))] * 3
    assert cost.describe()["graph_padding"] == {"priced": "routed experts at the captured size", "graph_limit": 512}
    dense = HostOverlapCostModel(PaddedMoeGpu(), HOST, layers=4, graph_tokens=512)  # no MoE layers: no padding
    assert dense.describe()["graph_padding"] is None
    assert dense.step_time(five) == pytest.approx(1e-3 + 5e-5)
    assert HostOverlapCostModel(PaddedMoeGpu(), HOST, moe_layers=4).padding_s(5) == 0.0  # no graph limit known


def test_steps_above_the_graph_limit_pay_the_eager_term() -> None:
    cost = HostOverlapCostModel(LinearGpu(), HOST, layers=32, graph_tokens=512)
    at = BatchShape(prefill_tokens=500, prefill_seqs=1, decode_seqs=12)  # 512 tokens: a graph replay
    over = BatchShape(prefill_tokens=501, prefill_seqs=1, decode_seqs=12)  # 513: eager
    assert cost.step_time(at) == pytest.approx(1e-3 + 512e-5)
    assert cost.step_time(over) == pytest.approx(1e-3 + 513e-5 + 32 * 1e-4)
    no_graph_info = HostOverlapCostModel(LinearGpu(), HOST, layers=32, graph_tokens=None)
    assert no_graph_info.step_time(over) == pytest.approx(1e-3 + 513e-5)


def test_decode_run_matches_step_time_bitwise_on_both_sides_of_the_limit() -> None:
    cost = HostOverlapCostModel(LinearGpu(), HOST, layers=16, graph_tokens=64)
    for seqs in (1, 64, 65, 300):
        run = cost.decode_run(seqs, seqs * 100, 3)
        step = cost.step_time(BatchShape(decode_seqs=seqs, decode_kv_tokens=seqs * 100))
        assert run.tolist() == [step] * 3


def test_host_bound_steps_and_synchronous_sum() -> None:
    slow_host = HostOverhead(step_s=5e-3, seq_s=0.0, frontend_s=0.0)
    batch = BatchShape(decode_seqs=4)
    assert HostOverlapCostModel(LinearGpu(), slow_host).step_time(batch) == pytest.approx(5e-3)
    assert HostOverlapCostModel(LinearGpu(), slow_host, asynchronous=False).step_time(batch) == pytest.approx(
        5e-3 + 1e-3 + 4e-5)


def test_negative_eager_term_is_rejected() -> None:
    with pytest.raises(ValueError, match="eager_layer_s"):
        HostOverhead(step_s=0.0, seq_s=0.0, frontend_s=0.0, eager_layer_s=-1e-4)


def test_shipped_terms_and_the_default_model_use_the_engine_graph_limit() -> None:
    host = default_host_overhead("calibrated")
    assert host.eager_layer_s > 0.0 and host.source.endswith("vllm-0.25.1/calibrated")
    dep = Deployment(model=load_model("llama-3.1-8b"), device=load_device("h200"),
                     engine=EngineConfig(max_num_seqs=64))
    cost = default_cost_model(dep, resolve_engine(dep))
    assert cost.describe()["host"]["eager_above_tokens"] == 128


def test_roofline_entry_takes_the_cpu_terms_of_the_calibrated_one() -> None:
    """Host (CPU) time does not depend on the GPU model: ``cpu_terms_from`` shares it."""
    from latsim.engines.vllm.host_terms import CPU_FIELDS

    roof, cal = default_host_overhead("roofline"), default_host_overhead("calibrated")
    assert all(getattr(roof, name) == getattr(cal, name) for name in CPU_FIELDS)
    assert roof.launch_layer_s > 0.0 and roof.gpu_scale != cal.gpu_scale
    assert roof.source.endswith("vllm-0.25.1/roofline")
    with pytest.raises(ValueError, match="no entry"):
        default_host_overhead("warp-drive")


def test_host_speed_scales_the_cpu_terms_only() -> None:
    shipped = default_host_overhead("calibrated")
    assert shipped.at_speed(1.0) is shipped
    slow = shipped.at_speed(0.5)
    for name in TERMS:
        expected = getattr(shipped, name) * (2.0 if name in SPEED_FIELDS else 1.0)
        assert getattr(slow, name) == pytest.approx(expected), name
    assert "host speed 0.5" in slow.source
    for bad in (0.0, -1.0, 11.0, float("nan"), True, "1"):
        with pytest.raises(ValueError, match="host_speed"):
            shipped.at_speed(bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="host_speed must be a number in"):
        EngineConfig(host_speed=0.05)


def test_engine_host_speed_reaches_the_default_cost_model() -> None:
    dep = Deployment(load_model("llama-3.2-1b"), load_device("h200"), engine=EngineConfig(host_speed=0.5))
    cost = default_cost_model(dep, resolve_engine(dep))
    assert cost.host.seq_s == pytest.approx(2 * default_host_overhead(cost.kind).seq_s)


def test_reference_probe_is_shipped_with_the_terms() -> None:
    assert 0.5e-3 < reference_probe_s() < 5e-3
    with pytest.raises(ValueError, match="host_reference_probe_s"):
        reference_probe_s("vllm-0.1")


def test_the_moe_eager_wait_never_outlasts_the_launch() -> None:
    """A graph-less MoE step's eager MoE term is the GPU waiting for the Python-level expert calls:
    in full while the launch is ahead of the kernels, only what is left of the launch near it, none
    once the kernels outlast it (a long prompt's chunk: traced, no gap); the dense term stays."""
    host = HostOverhead(step_s=2e-4, seq_s=1e-6, frontend_s=0.0, gpu_scale=1.0, eager_layer_s=1e-4,
                        eager_moe_layer_s=3e-4, launch_layer_s=5e-4, launch_moe_layer_s=8e-4)
    cost = HostOverlapCostModel(LinearGpu(), host, layers=48, moe_layers=48, graph_tokens=512)
    launch, dense, moe = 48 * (5e-4 + 8e-4), 48 * 1e-4, 48 * 3e-4
    short = BatchShape(prefill_tokens=600, prefill_seqs=1)  # kernels 7 ms, the launch 62.4 ms
    near = BatchShape(prefill_tokens=6000, prefill_seqs=1)  # kernels 61 ms: 1.4 ms of launch left
    long = BatchShape(prefill_tokens=8000, prefill_seqs=1)  # kernels 81 ms
    assert cost.step_time(short) == pytest.approx(1e-3 + 600e-5 + dense + moe)
    assert cost.step_time(near) == pytest.approx(1e-3 + 6000e-5 + dense + (launch - (1e-3 + 6000e-5)))
    assert cost.step_time(long) == pytest.approx(1e-3 + 8000e-5 + dense)
    sync = HostOverlapCostModel(LinearGpu(), host, layers=48, moe_layers=48, graph_tokens=512, asynchronous=False)
    assert sync.eager_s(long) == pytest.approx(dense + moe)  # no launch term: the eager terms in full
    for seqs in (600, 6000, 8000):  # decode runs price graph-less decodes the same way
        run = cost.decode_run(seqs, seqs * 10, 2)
        assert run.tolist() == [cost.step_time(BatchShape(decode_seqs=seqs, decode_kv_tokens=seqs * 10))] * 2


def test_a_shared_expert_lengthens_a_graph_less_launch_only() -> None:
    """vLLM runs a shared expert's MLP and gate eagerly inside the MoE op: each MoE layer with one
    adds ``launch_shared_layer_s`` to a graph-less step's launch (at the host's speed), nothing to a
    step that replays a CUDA graph or to a model without shared experts."""
    host = HostOverhead(step_s=2e-4, seq_s=0.0, frontend_s=0.0, launch_layer_s=5e-4, launch_moe_layer_s=8e-4,
                        launch_shared_layer_s=6e-4)
    plain = HostOverlapCostModel(LinearGpu(), host, layers=24, moe_layers=24, graph_tokens=512)
    shared = HostOverlapCostModel(LinearGpu(), host, layers=24, moe_layers=24, shared_layers=24, graph_tokens=512)
    prompt, graph = BatchShape(prefill_tokens=1024, prefill_seqs=1), BatchShape(prefill_tokens=256, prefill_seqs=1)
    assert shared.launch_s(prompt) - plain.launch_s(prompt) == pytest.approx(24 * 6e-4)
    assert shared.launch_s(graph) == plain.launch_s(graph) == 0.0
    half = HostOverlapCostModel(LinearGpu(), host.at_speed(2.0), layers=24, moe_layers=24, shared_layers=24,
                                graph_tokens=512)
    assert half.launch_s(prompt) == pytest.approx(shared.launch_s(prompt) / 2)


def test_the_factory_counts_shared_expert_layers_from_the_model() -> None:
    from latsim.costmodel.factory import build_cost_model

    host = HostOverhead(step_s=0.0, seq_s=0.0, frontend_s=0.0, launch_layer_s=1e-4, launch_moe_layer_s=1e-4,
                        launch_shared_layer_s=1e-3)
    prompt = BatchShape(prefill_tokens=2048, prefill_seqs=1)
    launches = {}
    for name in ("qwen1.5-moe-a2.7b", "qwen3-30b-a3b"):
        model = load_model(name)
        cost = build_cost_model(model, load_device("h100"), host=host, graph_tokens=512, kind="roofline")
        launches[name] = cost.launch_s(prompt) / model.num_layers
    assert launches["qwen1.5-moe-a2.7b"] == pytest.approx(1.2e-3)  # 24 layers, each with a shared expert
    assert launches["qwen3-30b-a3b"] == pytest.approx(2e-4)
