"""Graph-less step launches under asynchronous scheduling (:mod:`latsim.engines.vllm.launch`)."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from latsim.costmodel.batch import BatchShape
from latsim.costmodel.host import HostOverhead, HostOverlapCostModel
from latsim.engines.vllm.launch import LaunchClock
from latsim.sim.recorder import Recorder
from latsim.sim.request import Req
from latsim.sim.simulate import simulate
from latsim.workload.trace import RequestTrace
from tests.sim.conftest import LinearCost, small_deployment
from tests.sim.test_fast_engine import assert_identical, random_trace


class LaunchCost(LinearCost):
    """LinearCost whose steps above ``launch_from`` tokens take ``launch`` seconds to launch."""

    def __init__(self, launch: float = 0.02, tail: float = 0.002, launch_from: int = 64, sigma: float = 0.0) -> None:
        super().__init__()
        self.launch, self.launch_tail_s, self.launch_from, self.launch_sigma = launch, tail, launch_from, sigma

    def launch_s(self, b: BatchShape) -> float:
        return self.launch if b.prefill_tokens + b.decode_seqs > self.launch_from else 0.0


BIG = BatchShape(prefill_tokens=600, prefill_seqs=1)
SMALL = BatchShape(decode_seqs=4, decode_kv_tokens=400)


def test_graph_steps_change_nothing() -> None:
    clock = LaunchClock()
    assert clock.step(LaunchCost(), SMALL, 0.0, 1.0, 1.005) == (1.005, 1.0)
    assert clock.held == {} and clock.last_end == 1.005


def test_a_long_launch_holds_the_step_before_and_delays_the_next_decision() -> None:
    clock = LaunchClock(last_end=1.0)  # a step ended at 1.0; this one was decided at 0.995 (its start)
    end, decision = clock.step(LaunchCost(launch=0.02, tail=0.002), BIG, 0.995, 1.0, 1.010)
    assert decision == pytest.approx(1.015)  # launched 0.995 + 0.020: the next decision waits for it
    assert end == pytest.approx(1.017)  # the GPU's tail after the launch outlasts the priced 10 ms
    assert clock.held == {1.0: pytest.approx(1.015)}  # outputs of the step ending at 1.0 go out then


def test_a_launch_hidden_behind_the_step_before_holds_nothing() -> None:
    clock = LaunchClock(last_end=1.0)
    end, decision = clock.step(LaunchCost(launch=0.004, tail=0.002), BIG, 0.99, 1.0, 1.03)
    assert (end, decision) == (1.03, 1.0) and clock.held == {}


def test_after_idle_no_earlier_step_is_held() -> None:
    clock = LaunchClock(last_end=0.5)  # the engine idled from 0.5 to 1.0
    end, decision = clock.step(LaunchCost(launch=0.02, tail=0.002), BIG, 1.0, 1.0, 1.01)
    assert clock.held == {} and decision == pytest.approx(1.02) and end == pytest.approx(1.022)


def test_a_worker_launch_holds_nothing_and_the_next_decision_does_not_wait() -> None:
    """vLLM's multiprocess executor: the worker launches while the engine core decides on."""
    clock = LaunchClock(in_worker=True, last_end=1.0)
    end, decision = clock.step(LaunchCost(launch=0.02, tail=0.002), BIG, 0.995, 1.0, 1.010)
    assert decision == 1.0 and clock.held == {}  # the step before goes out when it ends
    assert end == pytest.approx(1.017)  # the step itself still waits for its launch and the tail


def test_a_worker_launches_one_step_at_a_time() -> None:
    clock = LaunchClock(in_worker=True, last_end=1.0)
    first, decision = clock.step(LaunchCost(launch=0.02, tail=0.002), BIG, 0.995, 1.0, 1.010)
    # the next step was decided when the first one started, during its launch (ends 1.015)
    second, _ = clock.step(LaunchCost(launch=0.02, tail=0.002), BIG, decision, first, first + 0.01)
    assert second == pytest.approx(1.015 + 0.02 + 0.002)  # launched after the worker's first launch
    assert clock.held == {}


def test_in_the_engine_core_the_same_steps_hold_and_wait() -> None:
    clock = LaunchClock(last_end=1.0)
    first, decision = clock.step(LaunchCost(launch=0.02, tail=0.002), BIG, 0.995, 1.0, 1.010)
    second, _ = clock.step(LaunchCost(launch=0.02, tail=0.002), BIG, decision, first, first + 0.01)
    assert decision == pytest.approx(1.015) and second == pytest.approx(1.015 + 0.02 + 0.002)
    assert set(clock.held) == {1.0, first}


def test_release_moves_first_token_and_finish_stamped_at_a_held_step_end() -> None:
    a, b, c = Req(0, 0.0, 10, 2), Req(1, 0.0, 10, 2), Req(2, 0.0, 10, 2)
    a.first_token, a.finish = 1.0, 2.0
    b.first_token, b.finish = 0.5, 1.0
    c.first_token, c.finish = 1.0, math.nan
    LaunchClock(held={1.0: 1.015}).release([a, b])
    LaunchClock().release([c])  # another replica: its clock holds nothing
    assert (a.first_token, a.finish) == (1.015, 2.0)
    assert (b.first_token, b.finish) == (0.5, 1.015)
    assert c.first_token == 1.0 and math.isnan(c.finish)


def test_host_model_prices_a_launch_only_for_graph_less_asynchronous_steps() -> None:
    host = HostOverhead(1e-3, 0.0, 0.0, launch_layer_s=5e-4, launch_moe_layer_s=1e-3, launch_tail_s=2e-3,
                        launch_sigma=0.3)
    model = HostOverlapCostModel(LinearCost(), host, True, layers=32, moe_layers=0, graph_tokens=512)
    assert model.launch_s(BatchShape(prefill_tokens=513, prefill_seqs=1)) == pytest.approx(1e-3 + 0.016)
    assert model.launch_s(BatchShape(prefill_tokens=500, prefill_seqs=1, decode_seqs=12)) == 0.0
    assert model.launch_tail_s == 2e-3 and model.launch_from == 512 and model.launch_sigma == 0.3
    moe = HostOverlapCostModel(LinearCost(), host, True, layers=48, moe_layers=48, graph_tokens=512)
    assert moe.launch_s(BIG) == pytest.approx(1e-3 + 48 * 1.5e-3)
    per_seq = HostOverlapCostModel(LinearCost(), HostOverhead(1e-3, 1e-5, 0.0, launch_layer_s=5e-4), True,
                                   layers=32, graph_tokens=512)
    # the step's host work (scheduling, inputs) comes before the layer-by-layer launch
    assert per_seq.launch_s(BatchShape(prefill_tokens=512, prefill_seqs=1, decode_seqs=100)) == pytest.approx(
        1e-3 + 101 * 1e-5 + 0.016)
    sync = HostOverlapCostModel(LinearCost(), host, False, layers=32, graph_tokens=512)
    assert sync.launch_s(BIG) == 0.0 and sync.launch_from is None  # the synchronous loop adds host time instead
    with pytest.raises(ValueError, match="launch_tail_s"):
        HostOverhead(1e-3, 0.0, 0.0, launch_tail_s=-1.0)


def two_prompts(gap: float) -> RequestTrace:
    return RequestTrace.from_arrays(np.array([0.0, gap]), np.array([600, 600]), np.array([3, 3]))


def test_the_first_token_of_a_prompt_waits_for_the_next_prompts_launch() -> None:
    """Two prompts 1 ms apart: the second is decided during the first one's launch, so it runs in
    the step right after it, and the first one's token is held until that step is launched."""
    dep = small_deployment(async_scheduling=True)
    held = simulate(dep, two_prompts(0.001), cost_model=LaunchCost(launch=0.02, tail=0.002))
    plain = simulate(dep, two_prompts(0.001), cost_model=LinearCost())
    first = held.records["first_token_s"].to_numpy()
    plain_first = plain.records["first_token_s"].to_numpy()
    assert first[0] > plain_first[0] + 0.015  # held by the second prompt's 20 ms launch
    assert held.records["first_scheduled_s"].iloc[1] < plain.records["first_scheduled_s"].iloc[1]  # one step sooner


def test_a_worker_executor_sends_the_first_prompts_token_before_the_next_launch_ends() -> None:
    """The two prompts of the test above, the model run by a worker process: the first prompt's
    token is not held, and the second prompt (arriving during the first's launch) waits for the
    step after the next decision instead."""
    cost = LaunchCost(launch=0.02, tail=0.002)
    core = simulate(small_deployment(async_scheduling=True), two_prompts(0.001), cost_model=cost)
    worker = simulate(small_deployment(async_scheduling=True, executor="mp"), two_prompts(0.001), cost_model=cost)
    assert worker.records["first_token_s"].iloc[0] < core.records["first_token_s"].iloc[0] - 0.015
    assert worker.records["first_scheduled_s"].iloc[1] > core.records["first_scheduled_s"].iloc[1]


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31), qps=st.floats(5.0, 300.0), launch=st.floats(0.0, 0.05),
       tail=st.floats(0.0, 0.01), launch_from=st.sampled_from([16, 64, 512]), seqs=st.integers(1, 96),
       sigma=st.sampled_from([0.0, 0.3]), executor=st.sampled_from(["uni", "mp"]))
def test_fast_engine_equals_reference_with_launches(seed, qps, launch, tail, launch_from, seqs, sigma, executor):
    trace = random_trace(seed, 70, qps, 700, 120, 2)
    dep = small_deployment(async_scheduling=True, max_num_seqs=seqs, executor=executor)
    cost = LaunchCost(launch, tail, launch_from, sigma)
    fast = simulate(dep, trace, cost_model=cost, fast_forward=True, seed=seed)
    ref = simulate(dep, trace, cost_model=cost, fast_forward=False, seed=seed)
    assert_identical(fast, ref)


def test_launch_spread_is_seeded_and_widens_first_token_times() -> None:
    trace = random_trace(5, 300, 20.0, 700, 40, 0)
    dep = small_deployment(async_scheduling=True)
    ttft = {}
    for name, sigma, seed in [("fixed", 0.0, 0), ("spread", 0.5, 0), ("again", 0.5, 0), ("other", 0.5, 1)]:
        rec = simulate(dep, trace, cost_model=LaunchCost(0.02, 0.002, 64, sigma), seed=seed).records
        ttft[name] = (rec["first_token_s"] - rec["arrival_s"]).to_numpy()
    np.testing.assert_array_equal(ttft["spread"], ttft["again"])  # same seed: same launches
    assert not np.array_equal(ttft["spread"], ttft["other"])
    spread = np.percentile(ttft["spread"], 99) - np.percentile(ttft["spread"], 10)
    fixed = np.percentile(ttft["fixed"], 99) - np.percentile(ttft["fixed"], 10)
    assert spread > 1.2 * fixed


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**31), qps=st.floats(5.0, 300.0), launch=st.floats(0.005, 0.05),
       replicas=st.integers(1, 2), fast_forward=st.booleans())
def test_inter_token_gaps_run_between_released_tokens(seed, qps, launch, replicas, fast_forward):
    """Each request's gaps add up to its (re-stamped) first token to finish, held steps included."""
    trace = random_trace(seed, 60, qps, 700, 60, 2)
    dep = replace(small_deployment(async_scheduling=True), replicas=replicas)
    res = simulate(dep, trace, cost_model=LaunchCost(launch, 0.002, 64), fast_forward=fast_forward, seed=seed)
    rec = res.records[res.records["status"] == "ok"]
    spans = float((rec["finish_s"] - rec["first_token_s"]).sum())
    assert rec.shape[0] == len(trace)
    assert float(np.dot(res.itl_values_s, res.itl_weights)) == pytest.approx(spans, rel=1e-9)


def test_a_held_token_widens_its_gap_and_narrows_the_next() -> None:
    """The decode step before a prompt's graph-less step goes out when that launch ends."""
    trace = RequestTrace.from_arrays(np.array([0.0, 0.05]), np.array([32, 600]), np.array([40, 3]))
    dep = small_deployment(async_scheduling=True)
    held = simulate(dep, trace, cost_model=LaunchCost(launch=0.03, tail=0.002, launch_from=64))
    plain = simulate(dep, trace, cost_model=LaunchCost(launch=0.0, tail=0.0, launch_from=64))
    assert held.itl_values_s.max() > plain.itl_values_s.max() + 0.01  # a decode token waits for the launch
    assert held.itl_values_s.min() < plain.itl_values_s.min()  # the token after it comes sooner


def test_the_recorder_counts_held_tokens_from_their_release() -> None:
    rec = Recorder()
    rec.gap(0.0, 1.0)  # a single request: tokens at 0.0 and 1.0 (held until 1.5)
    rec.same_gap(1.0, 2.0, 3)  # three requests: 1.0 (held) -> 2.0
    rec.step_gaps([2.0, 2.5, 3.0], 2)  # two requests through two more steps
    values, weights = rec.itl_samples()
    assert values.tolist() == [0.5, 1.0] and weights.tolist() == [4.0, 4.0]
    values, weights = rec.itl_samples({1.0: 1.5})
    assert values.tolist() == [0.5, 1.5] and weights.tolist() == [7.0, 1.0]


def test_the_clock_of_an_executor_launches_in_a_worker_only_for_mp() -> None:
    assert LaunchClock.for_executor("mp").in_worker
    assert not LaunchClock.for_executor("uni").in_worker
    with pytest.raises(ValueError, match="'ray'"):
        LaunchClock.for_executor("ray")
