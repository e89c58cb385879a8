"""Step by step, the fast engine's state equals the reference scheduler's.

Both engines are driven side by side on hand-made or random request streams (arrivals by
step index), one step per call: ``advance`` is told an arrival is due right away, so it never
fast-forwards.  After every step the clocks, the KV free queue (order included), the running
and waiting lists, preemptions, the inter-token gaps and every request's current fields must
agree.  This reaches corners the end-to-end tests rarely hit (a long-prefill threshold, tiny
budgets, a budget shortage ahead of the running tail).
"""

from __future__ import annotations

import math
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from latsim.engines.vllm.fastsched import FastVllmScheduler
from latsim.engines.vllm.scheduler import SchedulerLimits, VllmScheduler
from latsim.sim.recorder import Recorder
from latsim.sim.request import Req
from latsim.sim.shape import step_shape
from tests.sim.conftest import LinearCost

FIELDS = ("num_computed", "generated", "num_blocks", "last_token", "first_token", "first_scheduled", "finish",
          "state", "preemptions", "cached_tokens")


def reference_step(sched: VllmScheduler, clock: float, cost: LinearCost) -> float:
    """One step of the reference engine, as the replica runs it; the new clock."""
    plan = sched.schedule()
    for req in plan.new:
        if math.isnan(req.first_scheduled):
            req.first_scheduled = clock
    if not plan.scheduled:
        return clock
    end = clock + cost.step_time(step_shape(plan))
    sched.update(plan, end)
    return end


def current(req: Req, fast: FastVllmScheduler) -> tuple:
    """A request's fields as they are now (a cohort member's lazy fields brought forward)."""
    values = {f: getattr(req, f) for f in FIELDS}
    if req.base >= 0:
        moved = fast.cohort.step - req.base
        values["num_computed"] += moved
        values["generated"] += moved
        values["num_blocks"] = -(-values["num_computed"] // fast.limits.block_size)
        values["last_token"] = fast.cohort.last_end
    return tuple(values.values())


def queue_state(sched) -> list:
    """The free queue as (key, live) runs, adjacent anonymous runs merged."""
    return sched.kv.pool.runs()


def gaps(rec: Recorder) -> Counter:
    values, weights = rec.itl_samples()
    return Counter(dict(zip(values.tolist(), weights.tolist(), strict=True)))


def run_side_by_side(specs: list[tuple], limits: SchedulerLimits, num_blocks: int,
                     max_steps: int = 600) -> FastVllmScheduler:
    """Step both engines over ``specs`` = (arrival step, prompt, output, group, prefix)."""
    cost = LinearCost()
    ref, fast = VllmScheduler(limits, num_blocks), FastVllmScheduler(limits, num_blocks)
    ref.recorder, fast.recorder = Recorder(), Recorder()
    twins = [(Req(i, 0.0, p, o, g, x, limits.block_size), Req(i, 0.0, p, o, g, x, limits.block_size))
             for i, (_, p, o, g, x) in enumerate(specs)]
    arrivals = Counter(step for step, *_ in specs)
    pending = sorted(range(len(specs)), key=lambda i: specs[i][0])
    clock_r = clock_f = 0.0
    for step in range(max_steps):
        for _ in range(arrivals[step]):
            i = pending.pop(0)
            if specs[i][1] + specs[i][2] <= limits.max_model_len:
                ref.add_request(twins[i][0])
                fast.add_request(twins[i][1])
        if not pending and not ref.has_work():
            break
        clock_r = reference_step(ref, clock_r, cost)
        clock_f, _ = fast.advance(clock_f, cost, clock_f, math.inf)
        assert clock_f == clock_r
        assert queue_state(fast) == queue_state(ref) and fast.kv.num_free == ref.kv.num_free
        assert [r.idx for r in fast.running] == [r.idx for r in ref.running]
        assert [r.idx for r in fast.waiting] == [r.idx for r in ref.waiting]
        assert fast.num_preemptions == ref.num_preemptions
        assert gaps(fast.recorder) == gaps(ref.recorder)
        assert all(current(f, fast) == tuple(getattr(r, x) for x in FIELDS) for r, f in twins)
    return fast


def test_chunked_prompts_beside_decodes_are_planned_without_the_reference():
    # A 24-token threshold: two long prompts chunk side by side among decoding requests, the
    # later one short of budget at the tail; nothing needs the request-by-request reference.
    limits = SchedulerLimits(64, 80, 4096, 16, long_prefill_token_threshold=24)
    specs = [(0, 1, 40, -1, 0)] * 20 + [(0, 300, 5, -1, 0), (0, 300, 5, -1, 0), (3, 1, 30, -1, 0)] * 2
    fast = run_side_by_side(specs, limits, 2000)
    assert not fast.has_work() and fast.reference_steps == 0


request = st.tuples(st.integers(0, 40), st.integers(1, 200), st.integers(1, 60), st.integers(-1, 2),
                    st.integers(0, 200))


@settings(max_examples=400, deadline=None)
@given(specs=st.lists(request, min_size=1, max_size=40), seqs=st.integers(1, 40),
       budget=st.integers(1, 300), bs=st.sampled_from([1, 4, 16]), blocks=st.integers(20, 600),
       chunked=st.booleans(), caching=st.booleans(), threshold=st.integers(0, 80), gate=st.booleans(),
       asynchronous=st.booleans())
def test_fast_engine_matches_the_reference_at_every_step(specs, seqs, budget, bs, blocks, chunked, caching,
                                                          threshold, gate, asynchronous):
    max_model_len = min(blocks * bs, 400)
    if not chunked:
        budget = max(budget, max_model_len)
    limits = SchedulerLimits(seqs, budget, max_model_len, bs, chunked, caching, threshold,
                             scheduler_reserve_full_isl=gate, async_scheduling=asynchronous)
    run_side_by_side(specs, limits, blocks)
