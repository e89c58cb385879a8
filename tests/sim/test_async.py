"""Asynchronous scheduling (vLLM's default): which step runs what, and when it is decided.

The scheduling rules are checked against vLLM's own ``AsyncScheduler`` in
``tests/differential``; these tests need no vLLM.  They pin the two effects users see: a
finished request keeps its seat for one more step, and a request arriving during a step is
first scheduled two steps later (one step later without asynchronous scheduling), unless the
engine was idle.
"""

from __future__ import annotations

from dataclasses import replace
from unittest import mock

import numpy as np
import pytest

from latsim.engines.vllm import engine as schedulers
from latsim.oracle.differential import format_step
from latsim.oracle.steprecord import StreamRequest
from latsim.oracle.stream import run_latsim_scheduler
from latsim.sim.simulate import simulate
from latsim.workload.trace import RequestTrace
from tests.sim.conftest import LinearCost, small_deployment


def test_a_finished_request_keeps_its_seat_one_more_step():
    stream = [StreamRequest("a", 0, 16, 2), StreamRequest("b", 0, 16, 1)]
    recs = run_latsim_scheduler(stream, num_gpu_blocks=8, max_num_seqs=1, max_num_batched_tokens=64,
                                max_model_len=64, async_scheduling=True)
    assert [format_step(r) for r in recs] == [
        "a:16 | new a", "a:1 | fin a", "idle", "b:16 | new b | fin b", "idle",
    ]


def test_held_seats_slow_admissions_by_a_few_steps_as_in_vllm():
    stream = [StreamRequest(f"r{i}", 0, 512, 128) for i in range(200)]
    sync, asynchronous = (run_latsim_scheduler(stream, num_gpu_blocks=100_000, max_num_seqs=64,
                                               max_num_batched_tokens=8192, max_model_len=4096,
                                               async_scheduling=mode) for mode in (False, True))
    assert (len(sync), len(asynchronous)) == (512, 516)  # vLLM 0.25.1's counts (docs, section 8)
    per_request = {rid: 0 for rid in (s.request_id for s in stream)}
    for rec in asynchronous:
        for rid, n in rec.scheduled:
            per_request[rid] += n
    assert set(per_request.values()) == {512 + 128 - 1}  # no step is wasted on a finished request


def one_then_another(second_arrival: float) -> RequestTrace:
    return RequestTrace.from_arrays(np.array([0.0, second_arrival]), np.array([100, 50]), np.array([40, 5]))


@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("asynchronous", [True, False])
def test_a_request_arriving_during_a_step_waits_for_the_next_decision(fast, asynchronous):
    cost = LinearCost()
    step0 = cost.base + cost.per_token * 100 + cost.per_kv * 100  # a's prefill: b arrives during it
    dep = small_deployment(async_scheduling=asynchronous)
    records = simulate(dep, one_then_another(0.3 * step0), cost_model=cost, fast_forward=fast).records
    step1 = cost.base + cost.per_token * 1 + cost.per_kv * 101  # a's first decode, alone
    first_b = step0 + step1 if asynchronous else step0  # decided at step 1's start vs at step 0's start
    assert records["first_scheduled_s"][1] == pytest.approx(first_b, rel=1e-12)


@pytest.mark.parametrize("fast", [True, False])
def test_an_idle_engine_schedules_an_arrival_at_once(fast):
    trace = RequestTrace.from_arrays(np.array([0.0, 5.0]), np.array([100, 50]), np.array([3, 2]))
    records = simulate(small_deployment(), trace, cost_model=LinearCost(), fast_forward=fast).records
    assert records["first_scheduled_s"].tolist() == [0.0, 5.0]


@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("asynchronous", [True, False])
def test_a_prompt_larger_than_the_pool_blocks_the_queue_without_spinning(fast, asynchronous):
    # 4 blocks, one of them vLLM's null block: a 60-token prompt (4 blocks) can never be admitted,
    # and (FCFS) nothing behind it either; the engine waits for arrivals instead of spinning.
    trace = RequestTrace.from_arrays(np.array([0.0, 0.1, 0.2]), np.array([20, 60, 10]), np.array([2, 2, 2]))
    dep = small_deployment(num_gpu_blocks=4, async_scheduling=asynchronous)
    result = simulate(dep, trace, cost_model=LinearCost(), fast_forward=fast)
    assert result.records["status"].tolist() == ["ok", "unfinished", "unfinished"]
    assert result.summary["kv_peak_utilization"] <= 1.0


def test_requests_that_never_overlap_see_no_difference():
    # Asynchronous scheduling only changes what a decision sees of other requests (arrivals,
    # seats and blocks of requests finishing in the step in flight); alone, a request runs
    # the same steps at the same times (with the same step prices).
    arrival = np.arange(20) * 10.0
    trace = RequestTrace.from_arrays(arrival, np.full(20, 300), np.arange(1, 21))
    runs = [simulate(small_deployment(async_scheduling=mode), trace, cost_model=LinearCost()).records
            for mode in (True, False)]
    assert runs[0].equals(runs[1])


@pytest.mark.parametrize("asynchronous", [True, False])
def test_a_request_that_outgrows_the_pool_is_recomputed_until_the_horizon(asynchronous):
    # Without the admission gate a 60-token prompt is readmitted chunk by chunk although its
    # decode needs a 5th block of 4: vLLM would preempt and recompute it forever.  The engine
    # must keep stepping (not sleep as if stuck), identically in both engines.
    original = schedulers.limits_for
    no_gate = lambda e, m: replace(original(e, m), scheduler_reserve_full_isl=False)  # noqa: E731
    trace = RequestTrace.from_arrays(np.array([0.0, 0.05]), np.array([60, 10]), np.array([20, 2]))
    dep = small_deployment(num_gpu_blocks=5, max_model_len=80, async_scheduling=asynchronous,
                           max_num_batched_tokens=16, enable_prefix_caching=False)
    with mock.patch.object(schedulers, "limits_for", no_gate):
        fast, ref = (simulate(dep, trace, cost_model=LinearCost(), horizon_s=1.0, fast_forward=f)
                     for f in (True, False))
    assert fast.records.equals(ref.records) and fast.summary == ref.summary
    assert fast.records["preemptions"][0] > 20 and fast.records["status"].tolist() == ["unfinished"] * 2
