"""Host-boundness: the CPU's share of step time, and TTFT/TPOT at other host speeds."""

from __future__ import annotations

import numpy as np
import pytest

from latsim import Deployment, load_device, load_model, simulate, synthesize
from latsim.costmodel.batch import BatchShape
from latsim.costmodel.factory import build_cost_model
from latsim.costmodel.host import HostOverlapCostModel
from latsim.sim.host_report import (
    decode_host_ratio,
    host_share,
    host_speed_sensitivity,
    prompt_launch_ratio,
    share_from_parts,
)


def trace(qps: float, n: int = 80):
    return synthesize(qps, n, "poisson", 400, 64, np.random.default_rng(1))


def deployment(model: str) -> Deployment:
    return Deployment(model=load_model(model), device=load_device("h200"))


def test_share_of_asynchronous_steps_counts_the_steps_the_cpu_sets() -> None:
    s = share_from_parts([1.0, 1.0, 1.0], [0.5, 2.0, 0.0], asynchronous=True)
    assert s.step_s == 4.0 and s.cpu_set_share == 0.5 and s.cpu_excess_share == 0.25
    assert s.host_bound_steps == pytest.approx(1 / 3)


def test_share_of_synchronous_steps_is_the_host_seconds() -> None:
    s = share_from_parts([1.0, 1.0, 1.0], [0.5, 2.0, 0.0], asynchronous=False)
    assert s.step_s == 5.5 and s.cpu_set_share == s.cpu_excess_share == pytest.approx(2.5 / 5.5)


def test_eager_seconds_are_set_by_the_cpu_though_they_sit_in_the_gpu_time() -> None:
    # step 1 kernel-bound with 0.4 s of eager launches inside its 1.0 GPU seconds; step 2 host-bound
    s = share_from_parts([1.0, 1.0], [0.5, 2.0], asynchronous=True, eager_s=[0.4, 0.0])
    assert s.step_s == 3.0 and s.eager_s == pytest.approx(0.4)
    assert s.cpu_set_share == pytest.approx((0.4 + 2.0) / 3.0)
    assert s.cpu_excess_share == pytest.approx((0.4 + 1.0) / 3.0)  # left: the kernels, 0.6 + 1.0
    sync = share_from_parts([1.0, 1.0], [0.5, 2.0], asynchronous=False, eager_s=[0.4, 0.0])
    assert sync.cpu_set_share == sync.cpu_excess_share == pytest.approx((0.5 + 2.0 + 0.4) / 4.5)
    with pytest.raises(ValueError, match="must not exceed gpu_s"):
        share_from_parts([1.0], [0.5], asynchronous=True, eager_s=[1.5])


def test_eager_seconds_of_a_step_are_those_of_graph_less_steps_only() -> None:
    cm = build_cost_model(load_model("llama-3.1-8b"), load_device("h200"), graph_tokens=512)
    assert isinstance(cm, HostOverlapCostModel)
    graph, eager = BatchShape.from_chunks([], [900] * 64), BatchShape.from_chunks([(2000, 0)], [900] * 4)
    assert cm.eager_s(graph) == 0.0 and cm.eager_s(BatchShape()) == 0.0
    assert cm.eager_s(eager) == pytest.approx(cm.host.eager_layer_s * load_model("llama-3.1-8b").num_layers)
    assert cm.eager_s(eager) < cm.parts(eager)[0]


@pytest.mark.parametrize(("gpu", "host", "needle"), [
    ([1.0, 2.0], [1.0], "equal length"),
    ([1.0], [-1.0], ">= 0"),
    ([float("nan")], [1.0], "finite"),
])
def test_share_rejects_bad_parts(gpu, host, needle) -> None:
    with pytest.raises(ValueError, match=needle):
        share_from_parts(gpu, host, asynchronous=True)


@pytest.mark.parametrize("asynchronous", [True, False])
def test_parts_combine_to_the_step_time(asynchronous: bool) -> None:
    cm = build_cost_model(load_model("llama-3.1-8b"), load_device("h200"), asynchronous=asynchronous,
                          graph_tokens=512)
    assert isinstance(cm, HostOverlapCostModel)
    for batch in (BatchShape.from_chunks([], [900] * 4), BatchShape.from_chunks([(2000, 0)], [900] * 4),
                  BatchShape()):
        gpu, host = cm.parts(batch)
        assert cm.step_time(batch) == ((max(gpu, host) if asynchronous else gpu + host) if gpu > 0 else 0.0)


def test_small_model_is_host_bound_and_the_share_run_changes_nothing() -> None:
    small, large = deployment("llama-3.2-1b"), deployment("llama-3.1-8b")
    work = trace(12.0)
    s_small, s_large = host_share(small, work), host_share(large, work)
    assert s_small.cpu_set_share > s_large.cpu_set_share
    assert s_small.host_bound_steps > 0.5
    assert s_small.steps == simulate(small, work).summary["engine_steps"]


def test_speed_sensitivity_moves_a_host_bound_deployment_and_is_zero_at_its_own_speed() -> None:
    dep, work = deployment("llama-3.2-1b"), trace(12.0)
    out = host_speed_sensitivity(dep, work, (0.6, 1.0, 1.2))
    slow, same, fast = out["at"]
    assert same["tpot_p50_change"] == 0.0 and same["ttft_p50_change"] == 0.0
    assert slow["tpot_p50_ms"] > out["tpot_p50_ms"] > fast["tpot_p50_ms"]
    assert slow["tpot_p50_change"] > 0.1 and all(e["stable"] for e in out["at"])


def test_speed_sensitivity_rejects_a_speed_out_of_range() -> None:
    with pytest.raises(ValueError, match="host_speed must be a number in"):
        host_speed_sensitivity(deployment("llama-3.2-1b"), trace(2.0, 5), (0.0,))


def test_the_share_run_prices_steps_as_the_prediction_does_power_cap_included() -> None:
    """Long prompts on the H200 run heavy steps at the power cap: the tally's simulation (the
    reference engine) gives the prediction's own first-token times."""
    from latsim.sim.host_report import _cost_model, _Tally

    dep = deployment("llama-3.1-8b")
    work = synthesize(6.0, 40, "poisson", 6000, 32, np.random.default_rng(2))
    cost = _cost_model(dep)
    assert cost.power is not None
    tally = simulate(dep, work, seed=0, cost_model=_Tally(cost), fast_forward=False).records
    plain = simulate(dep, work, seed=0, fast_forward=False).records
    np.testing.assert_array_equal(tally["first_token_s"].to_numpy(), plain["first_token_s"].to_numpy())


def test_decode_host_ratio_is_above_one_where_the_cpu_paces_decoding() -> None:
    small, large = deployment("llama-3.2-1b"), deployment("qwen2.5-32b")
    ratios = {}
    for name, d in (("1b", small), ("32b", large)):
        summary = simulate(d, trace(4.0)).summary
        ratios[name] = decode_host_ratio(d, summary)
    assert ratios["1b"] is not None and ratios["1b"] > 1.0
    assert ratios["32b"] is not None and ratios["32b"] < 0.25


def test_decode_host_ratio_of_a_run_that_completed_nothing_is_none() -> None:
    d = deployment("llama-3.1-8b")
    assert decode_host_ratio(d, {"throughput_rps": 0.0, "e2e_ms": {"mean": float("nan")}}) is None


def test_decode_host_ratio_grows_with_the_batch_in_flight() -> None:
    d = deployment("llama-3.1-8b")
    base = {"input_tokens_per_s": 400.0, "output_tokens_per_s": 64.0, "throughput_rps": 1.0}
    one = decode_host_ratio(d, {**base, "e2e_ms": {"mean": 1000.0}})  # one request in flight
    many = decode_host_ratio(d, {**base, "e2e_ms": {"mean": 1000.0 * 200}})  # 200 in flight
    assert one is not None and many is not None and one != many


def operating_point(in_flight: float, prompt: float = 1500.0) -> dict:
    """A summary of one request a second with ``in_flight`` of them in the engine on average."""
    return {"throughput_rps": 1.0, "input_tokens_per_s": prompt, "output_tokens_per_s": 200.0,
            "e2e_ms": {"mean": 1000.0 * in_flight}}


def test_a_mixture_of_experts_prompt_step_is_paced_by_its_launch() -> None:
    """Qwen3-30B-A3B's graph-less prompt step launches 48 layers of attention and experts from the
    CPU while its kernels, 3B parameters active, are short: the CPU paces it, though its decode
    steps (CUDA graphs) are the GPU's; a 32B dense model's prompt kernels outlast the launch."""
    moe, dense = deployment("qwen3-30b-a3b"), deployment("qwen2.5-32b")
    point = operating_point(8.0)
    moe_prompt, moe_decode = prompt_launch_ratio(moe, point), decode_host_ratio(moe, point)
    assert moe_prompt is not None and moe_decode is not None and moe_prompt > 1.0 > moe_decode
    dense_prompt = prompt_launch_ratio(dense, point)
    assert dense_prompt is not None and dense_prompt < 1.0


def test_a_prompt_step_inside_the_cuda_graphs_has_no_launch() -> None:
    """One 256-token prompt alone fits the captured graphs (up to 512 tokens): only its host work
    counts, far under its kernels' time; a 4,000-token one runs graph-less and adds the launch."""
    d = deployment("qwen3-30b-a3b")
    small = prompt_launch_ratio(d, operating_point(1.0, 256.0))
    large = prompt_launch_ratio(d, operating_point(1.0, 4000.0))
    assert small is not None and large is not None
    assert small < 0.5 < large


def test_the_prompt_ratio_of_a_run_that_completed_nothing_is_none() -> None:
    d = deployment("qwen3-30b-a3b")
    nothing = {"throughput_rps": 0.0, "e2e_ms": {"mean": float("nan")}}
    assert prompt_launch_ratio(d, nothing) is None
