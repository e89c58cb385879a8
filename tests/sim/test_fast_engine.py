"""The fast engine (decode cohort, decode runs) gives exactly the reference engine's results.

The reference is :class:`VllmScheduler` stepped one ``schedule``/``update`` at a time
(``simulate(..., fast_forward=False)``); the fast engine is what ``simulate`` runs by default.
Identical means: the same per-request records, the same ITL samples (hence the same summary,
bootstrap included), engine steps, preemptions and peak KV use.
"""

from __future__ import annotations

from dataclasses import replace
from unittest import mock

import numpy as np
import pandas as pd
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from latsim.costmodel.coreads import CoReads
from latsim.deployment import Deployment
from latsim.engines.vllm import engine as schedulers
from latsim.engines.vllm.cohort import DecodeCohort
from latsim.engines.vllm.memory import DoesNotFitError, plan_memory
from latsim.sim.request import Req
from latsim.sim.simulate import simulate
from latsim.workload.generate import synthesize
from latsim.workload.trace import RequestTrace
from tests.sim.conftest import LinearCost, small_deployment


def fast_and_reference(deployment, trace, cost=None):
    cost = cost or LinearCost()
    fast = simulate(deployment, trace, cost_model=cost, fast_forward=True)
    ref = simulate(deployment, trace, cost_model=cost, fast_forward=False)
    return fast, ref


def assert_identical(fast, ref):
    pd.testing.assert_frame_equal(fast.records, ref.records)
    np.testing.assert_array_equal(fast.itl_values_s, ref.itl_values_s)
    np.testing.assert_array_equal(fast.itl_weights, ref.itl_weights)
    assert fast.summary == ref.summary  # engine_steps, preemptions, kv_peak_utilization included


def random_trace(seed: int, n: int, qps: float, max_in: int, max_out: int, groups: int) -> RequestTrace:
    """Poisson-ish arrivals (some rounded to make ties), uniform lengths, optional prefix groups."""
    rng = np.random.default_rng(seed)
    arrival = np.cumsum(rng.exponential(1.0 / qps, n))
    arrival = np.where(rng.random(n) < 0.3, np.round(arrival, 1), arrival)
    inputs = rng.integers(1, max_in + 1, n)
    outputs = rng.integers(1, max_out + 1, n)
    if not groups:
        return RequestTrace.from_arrays(arrival, inputs, outputs)
    group = rng.integers(-1, groups, n)
    prefix = rng.integers(0, max_in + 1, n)
    return RequestTrace.from_arrays(arrival, inputs, outputs, prefix_group=group, prefix_tokens=prefix)


engines = st.fixed_dictionaries({
    "num_gpu_blocks": st.integers(40, 3000),
    "max_num_seqs": st.integers(1, 96),
    "max_num_batched_tokens": st.sampled_from([16, 64, 256, 1024, 8192]),
    "enable_chunked_prefill": st.booleans(),
    "enable_prefix_caching": st.booleans(),
    "async_scheduling": st.booleans(),
})


def vllm_accepts(engine: dict) -> dict:
    """``engine`` made one vLLM 0.25.1 starts with: without chunked prefill the budget covers
    max_model_len, and max_num_seqs does not exceed the budget."""
    budget = engine["max_num_batched_tokens"]
    if not engine["enable_chunked_prefill"]:
        budget = max(budget, small_deployment(engine["num_gpu_blocks"]).engine.max_model_len or 0)
    return {**engine, "max_num_batched_tokens": budget, "max_num_seqs": min(engine["max_num_seqs"], budget)}


@settings(max_examples=120, deadline=None)
@given(seed=st.integers(0, 2**31), qps=st.floats(1.0, 300.0), max_in=st.integers(1, 700),
       max_out=st.integers(1, 300), groups=st.integers(0, 4), engine=engines, replicas=st.integers(1, 3),
       router=st.sampled_from(["round-robin", "least-outstanding"]))
def test_fast_engine_equals_reference(seed, qps, max_in, max_out, groups, engine, replicas, router):
    trace = random_trace(seed, 70, qps, max_in, max_out, groups)
    dep = replace(small_deployment(**vllm_accepts(engine)), replicas=replicas, router=router)
    assert_identical(*fast_and_reference(dep, trace))


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**31), threshold=st.integers(1, 300), blocks=st.integers(60, 1500),
       budget=st.sampled_from([64, 512, 8192]), asynchronous=st.booleans())
def test_fast_engine_equals_reference_with_a_long_prefill_threshold(seed, threshold, blocks, budget, asynchronous):
    original = schedulers.limits_for
    with_threshold = lambda e, m: replace(original(e, m), long_prefill_token_threshold=threshold)  # noqa: E731
    trace = random_trace(seed, 60, 80.0, 600, 120, 2)
    dep = small_deployment(blocks, max_num_batched_tokens=budget, async_scheduling=asynchronous)
    with mock.patch.object(schedulers, "limits_for", with_threshold):
        fast, ref = fast_and_reference(dep, trace)
    assert_identical(fast, ref)


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**31), batch=st.integers(1, 40), blocks=st.integers(100, 3000))
def test_static_engine_is_unchanged_by_fast_forward(seed, batch, blocks):
    trace = random_trace(seed, 60, 50.0, 300, 100, 0)
    dep = small_deployment(blocks, engine="static", static_batch_size=batch)
    assert_identical(*fast_and_reference(dep, trace))


@pytest.mark.parametrize("asynchronous", [True, False])
def test_reference_workload_with_the_roofline_cost_model(asynchronous):
    trace = synthesize(20.0, 1500, "poisson", "lognormal:median=600,sigma=0.8,min=16,max=8192",
                       "lognormal:median=150,sigma=0.6,min=4,max=2048", np.random.default_rng(0))
    dep = small_deployment(async_scheduling=asynchronous)
    fast = simulate(dep, trace, fast_forward=True)
    ref = simulate(dep, trace, fast_forward=False)
    assert_identical(fast, ref)
    assert fast.summary["num_unfinished"] == 0 and fast.summary["num_completed"] >= 1490


@pytest.mark.parametrize("asynchronous", [True, False])
def test_kv_pressure_with_prefix_groups_preempts_and_still_matches(asynchronous):
    trace = random_trace(7, 150, 60.0, 500, 250, 3)
    fast, ref = fast_and_reference(small_deployment(num_gpu_blocks=120, async_scheduling=asynchronous), trace)
    assert ref.summary["preemptions"] > 0
    assert ref.summary["cached_token_fraction"] > 0
    assert_identical(fast, ref)


def cohort_of(block_size: int, contexts: list[int], step: int) -> tuple[DecodeCohort, list[Req]]:
    """Decoding requests (one token generated, ``c`` tokens computed) joined at ``step``."""
    cohort = DecodeCohort(block_size)
    cohort.step = step
    reqs = []
    for i, c in enumerate(contexts):
        req = Req(i, 0.0, c, 1 + i)
        req.num_computed, req.generated, req.seq = c, 1, i
        cohort.join(req)
        reqs.append(req)
    return cohort, reqs


@given(bs=st.sampled_from([1, 2, 16, 32]), contexts=st.lists(st.integers(1, 500), min_size=1, max_size=30),
       step=st.integers(0, 100), n=st.integers(0, 200), free=st.integers(0, 300))
def test_cohort_block_counts_match_counting_request_by_request(bs, contexts, step, n, free):
    cohort, _ = cohort_of(bs, contexts, step)
    taken = [sum(1 for c in contexts if (c + j) % bs == 0) for j in range(n)]  # blocks at each step
    assert cohort.blocks_over(n) == sum(taken)
    assert cohort.blocks_next() == sum(1 for c in contexts if c % bs == 0)
    fits = max(m for m in range(n + 1) if sum(taken[:m]) <= free)
    assert cohort.steps_within(n, free) == fits


def test_cohort_finishes_members_in_order_and_writes_back_their_values():
    cohort, (a, b, c) = cohort_of(16, [31, 40, 47], step=5)  # targets 1, 2, 3: 0, 1, 2 tokens to go
    assert cohort.context() == 118 and cohort.steps_to_finish() == 0
    assert cohort.pop_finished() == [a]
    cohort.advance(1, end=1.5, index=9)
    assert cohort.context() == 89 and cohort.pop_finished() == [b]
    assert (b.num_computed, b.generated, b.num_blocks, b.last_token, b.base) == (41, 2, 3, 1.5, -1)
    cohort.dissolve()
    assert (c.num_computed, c.generated, c.num_blocks, c.last_token) == (48, 2, 3, 1.5)
    assert cohort.size == 0 and cohort.context() == 0


class PoweredLinearCost(LinearCost):
    """LinearCost with a power cap on its token-proportional part (steps of >= 64 tokens)."""

    def __init__(self) -> None:
        super().__init__()
        from latsim.costmodel.power import PowerCap

        self.power = PowerCap(0.8, 1.3, budget_s=0.02, refill=0.5, heavy_tokens=64)

    def heavy_parts(self, b, light: bool = False) -> tuple[float, float, float]:
        return self.per_token * b.num_tokens, self.power.full_clock_ratio, self.power.capped_ratio


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**31), qps=st.floats(5.0, 300.0), engine=engines, replicas=st.integers(1, 2),
       tensor_rate=st.booleans())
def test_fast_engine_equals_reference_under_a_power_cap(seed, qps, engine, replicas, tensor_rate):
    """The budget alone, and with the tensor-rate state (advanced at steps with prompt work)."""
    trace = random_trace(seed, 60, qps, 700, 120, 2)
    dep = replace(small_deployment(**vllm_accepts(engine)), replicas=replicas)
    cost = RatePoweredLinearCost() if tensor_rate else PoweredLinearCost()
    assert_identical(*fast_and_reference(dep, trace, cost))


def test_the_power_cap_changes_what_heavy_steps_cost():
    trace = random_trace(3, 80, 60.0, 700, 60, 0)
    dep = small_deployment(max_num_batched_tokens=1024)
    plain = simulate(dep, trace, cost_model=LinearCost())
    powered = simulate(dep, trace, cost_model=PoweredLinearCost())
    assert not plain.records["first_token_s"].equals(powered.records["first_token_s"])


class RatePoweredLinearCost(PoweredLinearCost):
    """PoweredLinearCost with the tensor-rate state on (decoders at 20 TFLOP/s a sequence)."""

    def __init__(self) -> None:
        super().__init__()
        self.power = replace(self.power, decode_onset_tflops=50.0, decode_full_tflops=400.0, decode_tau_s=0.05)
        self.tflop_per_token = 0.01

    def decode_tflops(self, b) -> float:
        return 20.0 * b.decode_seqs


def test_the_tensor_rate_state_slows_prompts_beside_busy_decoders():
    trace = random_trace(3, 80, 60.0, 700, 60, 0)
    dep = small_deployment(max_num_batched_tokens=1024)
    budget_only = simulate(dep, trace, cost_model=PoweredLinearCost())
    with_rate = simulate(dep, trace, cost_model=RatePoweredLinearCost())
    ttft = (with_rate.records["first_token_s"] - with_rate.records["arrival_s"]).mean()
    assert ttft > (budget_only.records["first_token_s"] - budget_only.records["arrival_s"]).mean()


class SpreadLinearCost(LinearCost):
    """LinearCost plus a term in the decodes' summed squared contexts (their spread)."""

    per_sq = 1e-9

    def step_time(self, b) -> float:
        return super().step_time(b) + self.per_sq * float(b.decode_kv_sq)

    def decode_run(self, seqs: int, kv_tokens: int, steps: int, kv_sq: int = 0) -> np.ndarray:
        from latsim.costmodel.batch import run_squares

        return super().decode_run(seqs, kv_tokens, steps) + self.per_sq * run_squares(seqs, kv_tokens, kv_sq, steps)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**31), qps=st.floats(5.0, 300.0), engine=engines)
def test_fast_engine_equals_reference_when_the_contexts_spread_costs(seed, qps, engine):
    trace = random_trace(seed, 60, qps, 700, 120, 2)
    dep = small_deployment(**vllm_accepts(engine))
    assert_identical(*fast_and_reference(dep, trace, SpreadLinearCost()))


def test_the_spread_term_reaches_the_decode_steps():
    trace = random_trace(5, 80, 40.0, 700, 120, 0)
    dep = small_deployment()
    plain = simulate(dep, trace, cost_model=LinearCost())
    spread = simulate(dep, trace, cost_model=SpreadLinearCost())
    assert (spread.records["finish_s"] > plain.records["finish_s"]).mean() > 0.9


@given(contexts=st.lists(st.integers(1, 5000), min_size=1, max_size=30), step=st.integers(0, 100),
       moves=st.lists(st.integers(0, 40), max_size=5))
def test_cohort_squared_contexts_match_summing_request_by_request(contexts, step, moves):
    cohort, reqs = cohort_of(16, contexts, step)
    done = 0
    for n in moves:
        cohort.advance(n, end=float(done + n), index=done + n)
        done += n
        assert cohort.context_sq() == sum((c + done) ** 2 for c in contexts)
        assert cohort.context() == sum(c + done for c in contexts)
    first = reqs[0]
    first.target = first.generated  # finished as of the cohort's latest step
    cohort._heap = [(cohort.step if r is first else 10**9, r.seq, r) for r in reqs]
    assert cohort.pop_finished() == [first]
    assert cohort.context_sq() == sum((c + done) ** 2 for c in contexts[1:])


def sliding_deployment(sliding_layers: int, window: int, engine: dict) -> Deployment:
    """:func:`small_deployment` with ``sliding_layers`` of the 8B's 32 layers under a ``window``-token
    window (16: one full and one sliding group; 26: 1 + 5 groups of 6; 32: every layer slides)."""
    dep = small_deployment(**vllm_accepts(engine))
    dep = replace(dep, model=replace(dep.model, sliding_window=window, num_sliding_window_layers=sliding_layers))
    while True:  # the longest context whose one request fits the tiny pool, as for the unwindowed model
        try:
            plan_memory(dep)
            return dep
        except DoesNotFitError:
            dep = replace(dep, engine=replace(dep.engine, max_model_len=dep.engine.max_model_len * 3 // 4))


@settings(max_examples=80, deadline=None)
@example(seed=1_073_741_823, qps=6.0, max_in=91, max_out=226, groups=1, sliding=16, window=17,
         engine={"num_gpu_blocks": 64, "max_num_seqs": 6, "max_num_batched_tokens": 16, "enable_chunked_prefill": False,
                 "enable_prefix_caching": True, "async_scheduling": False})  # a findable block freed behind a window
@given(seed=st.integers(0, 2**31), qps=st.floats(5.0, 300.0), max_in=st.integers(1, 700),
       max_out=st.integers(1, 300), groups=st.integers(0, 3), engine=engines,
       sliding=st.sampled_from([16, 26, 32]), window=st.sampled_from([17, 32, 64, 100, 256]))
def test_fast_engine_equals_reference_with_sliding_windows(seed, qps, max_in, max_out, groups, engine, sliding, window):
    """Decode runs and single steps free the blocks the windows leave behind exactly as the
    reference does, through joins with blocks still to free, zombies and KV pressure."""
    trace = random_trace(seed, 70, qps, max_in, max_out, groups)
    dep = sliding_deployment(sliding, window, engine)
    assert_identical(*fast_and_reference(dep, trace))


@pytest.mark.parametrize("asynchronous", [True, False])
def test_sliding_windows_under_kv_pressure_match_and_free_blocks(asynchronous):
    trace = random_trace(3, 150, 60.0, 500, 250, 0)
    dep = sliding_deployment(26, 64, dict(num_gpu_blocks=300, async_scheduling=asynchronous,
                                          enable_prefix_caching=True, max_num_batched_tokens=512,
                                          max_num_seqs=64, enable_chunked_prefill=True))
    fast, ref = fast_and_reference(dep, trace)
    assert ref.summary["preemptions"] > 0
    assert_identical(fast, ref)
    full = replace(dep, model=replace(dep.model, sliding_window=None, num_sliding_window_layers=0))
    assert simulate(full, trace, cost_model=LinearCost()).summary["preemptions"] > ref.summary["preemptions"]


class CoReadLinearCost(SpreadLinearCost):
    """SpreadLinearCost on a small GPU with co-reads: waves of 4 sequences, 0.6 of a read saved in
    a pure decode step, 0.36 beside a prompt chunk (the 128-row tile's cap)."""

    coreads = CoReads(saving=0.6, ctas_per_sm=1.0, hbm_bandwidth=1e12, source="test", ridge_rows=200.0,
                      peak_flops=1e15).bind(4, 1, 1e12, 1e15, [(1.0, 64)], prompt_rows=[(1.0, 128)])


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31), qps=st.floats(5.0, 300.0), groups=st.integers(1, 4), engine=engines)
def test_fast_engine_equals_reference_when_decoders_co_read_their_prefixes(seed, qps, groups, engine):
    trace = random_trace(seed, 60, qps, 700, 120, groups)
    dep = small_deployment(**vllm_accepts({**engine, "enable_prefix_caching": True}))
    assert_identical(*fast_and_reference(dep, trace, CoReadLinearCost()))


def test_co_reads_shorten_the_decode_steps_of_shared_prefixes_only():
    dep = small_deployment(3000, enable_prefix_caching=True)
    shared = random_trace(11, 80, 40.0, 700, 120, 2)
    plain = simulate(dep, shared, cost_model=SpreadLinearCost())
    co = simulate(dep, shared, cost_model=CoReadLinearCost())
    assert (co.records["finish_s"] < plain.records["finish_s"]).mean() > 0.5
    assert co.records["finish_s"].mean() < plain.records["finish_s"].mean()
    alone = random_trace(11, 80, 40.0, 700, 120, 0)
    pd.testing.assert_frame_equal(simulate(dep, alone, cost_model=SpreadLinearCost()).records,
                                  simulate(dep, alone, cost_model=CoReadLinearCost()).records)


def test_a_step_carrying_a_prompt_discounts_its_decoders_at_the_prompt_saving():
    from latsim.sim.kvcache import Copy
    from latsim.sim.shape import plan_coreads, step_shape
    from latsim.sim.step import StepPlan

    bound = CoReadLinearCost.coreads
    copy = Copy(("g", 0, 0))
    decoders = []
    for i in range(4):
        req = Req(i, 0.0, 200, 10, group=0, prefix_tokens=128)
        req.num_computed, req.generated, req.seq = 200, 1, i
        req.keys[0] = copy
        decoders.append((req, 1))
    prompt = Req(9, 0.0, 300, 10)
    pure, mixed = StepPlan(list(decoders)), StepPlan([*decoders, (prompt, 300)])
    cut = {name: step_shape(plan).decode_kv_tokens - plan_coreads(step_shape(plan), plan, bound).decode_kv_tokens
           for name, plan in (("pure", pure), ("mixed", mixed))}
    assert cut["pure"] == round(bound.discount(4, [(4, 128.0)])) > 0
    assert cut["mixed"] == round(bound.discount(4, [(4, 128.0)], prompt=True)) < cut["pure"]


def test_cohort_counts_the_readers_of_each_shared_prefix():
    from latsim.sim.kvcache import Copy
    from latsim.sim.shape import coread_groups

    cohort = DecodeCohort(16)
    copies = [Copy(("g", g, 0)) for g in range(2)]
    members = []
    for i, g in enumerate([0, 0, 1, 0, -1]):
        req = Req(i, 0.0, 200, 10 + i, group=g, prefix_tokens=64 + 32 * i if g >= 0 else 0)
        req.num_computed, req.generated, req.seq = 200, 1, i
        if g >= 0:
            req.keys[0] = copies[g]
        cohort.join(req)
        members.append(req)
    assert coread_groups(cohort.readers) == [(3, (64 + 96 + 160) / 3)]  # group 1's one reader co-reads nothing
    cohort.advance(9, 1.0, 9)
    assert [r.idx for r in cohort.pop_finished()] == [0]
    assert coread_groups(cohort.readers) == [(2, (96 + 160) / 2)]
    cohort.dissolve()
    assert cohort.readers == {}
