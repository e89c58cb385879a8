"""The fast vLLM engine: :class:`VllmScheduler`'s decisions without per-decode Python work.

Design note (the hot functions are :meth:`FastVllmScheduler.advance` and ``_plan``).  Decoding
requests live in a :class:`DecodeCohort`; everything else that runs (prefill chunks, resumed
requests) is an *other*, kept in running order.  One call of :meth:`advance` does either

- a **decode run**: nothing but the cohort runs and nothing can join (no other, waiting head
  not admissible), so the next steps differ only in context length.  They are priced
  together (``decode_run``; ``step_time`` when one or two steps are predicted) and applied in
  O(block_size): the run stops at the first completion, the last step whose blocks fit, the
  next arrival anywhere, or the horizon; or
- **one step**, planned in O(others + admitted) when the order of the running list cannot
  matter: every running request except possibly the tail gets its whole need, and the new
  blocks of all of them fit (then no allocation fails, so no preemption, and the cohort's
  blocks are one ``take``).  Otherwise the cohort is dissolved and the reference
  ``VllmScheduler.schedule`` decides, request by request.

Each step applies exactly the float operations of stepping the reference scheduler one by
one (``start + step_time``, gaps as differences of step ends, ``decode_run`` element i equal
to ``step_time``), so results are identical; ``tests/engine/test_fast_engine.py`` checks it.
"""

from __future__ import annotations

import math

from latsim.costmodel.batch import BatchShape, CostModel
from latsim.engine.cohort import DecodeCohort
from latsim.engine.request import FINISHED, RUNNING, Req
from latsim.engine.scheduler import SchedulerLimits, StepPlan, VllmScheduler
from latsim.engine.shape import step_shape

RUN_CHUNK = 32  # steps priced per call once a run outlives its prediction (then doubling)
SCALAR_STEPS = 2  # this few steps are priced by step_time calls, more by one decode_run call


class FastVllmScheduler(VllmScheduler):
    """vLLM v1 scheduling driven by :meth:`advance`; ``schedule``/``update`` stay the reference."""

    def __init__(self, limits: SchedulerLimits, num_blocks: int) -> None:
        super().__init__(limits, num_blocks)
        self.cohort = DecodeCohort(limits.block_size)
        self.others: list[Req] = []  # running requests outside the cohort, in running order
        self.peak_blocks_used = 0
        self.reference_steps = 0  # steps the reference scheduler decided (diagnostics)
        self._seq = 0
        self._decode_dt = 0.0  # duration of the latest decode-run step (predicts run lengths)

    def settle(self) -> None:
        """Make every running request's fields current (the cohort becomes empty)."""
        self.cohort.dissolve()
        self.others = list(self.running)

    def schedule(self) -> StepPlan:
        self.settle()
        return super().schedule()

    def update(self, plan: StepPlan, now: float) -> list[Req]:
        finished = super().update(plan, now)
        self.others = list(self.running)
        return finished

    def _schedule_waiting(self, plan: StepPlan, budget: int) -> None:
        first = len(plan.new)
        super()._schedule_waiting(plan, budget)
        for req in plan.new[first:]:
            req.seq = self._seq
            self._seq += 1

    def advance(self, clock: float, cost: CostModel, next_arrival: float, horizon: float) -> tuple[float, int]:
        """Run a decode run or one step from ``clock``; return ``(new clock, requests finished)``.

        ``next_arrival`` is the earliest arrival not yet submitted (to any replica): no step
        of a run starts at or after it, nor after ``horizon``.  The clock stays put when the
        step scheduled nothing.
        """
        done = self._decode_run(clock, cost, next_arrival, horizon)
        return done if done is not None else self._step(clock, cost)

    # -- one step ---------------------------------------------------------------------------

    def _step(self, start: float, cost: CostModel) -> tuple[float, int]:
        plan = self._plan()
        k = self.cohort.size
        if plan is None:
            self.reference_steps += 1
            self.settle()
            plan, k = super().schedule(), 0
        for req in plan.new:
            if math.isnan(req.first_scheduled):
                req.first_scheduled = start
        self._note_peak()
        if not plan.scheduled and not k:
            return start, 0
        decode_kv = self.cohort.context() + k if k else 0
        end = start + cost.step_time(step_shape(plan, k, decode_kv))
        assert self.recorder is not None
        self.recorder.num_steps += 1
        return end, self._apply(plan, k, start, end)

    def _plan(self) -> StepPlan | None:
        """This step's plan for the non-cohort requests, or None when the reference must decide."""
        k = self.cohort.size
        budget = self.limits.max_num_batched_tokens - k
        if budget < 0:
            return None
        plan = StepPlan()
        blocks = self.cohort.blocks_next() if k else 0
        if self.others:
            budget = self._plan_others(plan, budget, blocks)
            if budget < 0:
                return None
        elif blocks > self.kv.num_free:
            return None
        else:
            self.kv.pool.take(blocks)
        self._schedule_waiting(plan, budget)
        return plan

    def _plan_others(self, plan: StepPlan, budget: int, cohort_blocks: int) -> int:
        """Schedule the others (and take the cohort's blocks); the budget left, or -1 to fall back."""
        kv, tail, full_budget = self.kv, self.running[-1], self.limits.max_num_batched_tokens
        blocks, registers = cohort_blocks, False
        for req in self.others:
            need = self._new_tokens(req, full_budget)
            num_new = min(need, budget)
            if num_new < need and req is not tail:
                return -1  # a shortage before the tail: the running order decides
            if num_new <= 0:
                continue
            blocks += kv.blocks_needed(req, num_new)
            registers = registers or (kv.prefix_caching and req.prefix_blocks > req.cached_upto)
            plan.scheduled.append((req, num_new))
            budget -= num_new
        if blocks > kv.num_free or (registers and kv.pool.evicts_key(blocks)):
            plan.scheduled.clear()
            return -1  # a preemption, or an eviction that could change what gets cached
        kv.pool.take(cohort_blocks)
        for req, num_new in plan.scheduled:
            kv.allocate(req, num_new)
        return budget

    def _apply(self, plan: StepPlan, k: int, start: float, end: float) -> int:
        """Advance the step's requests to ``end`` (as ``VllmScheduler.update``); return finished."""
        rec, cohort = self.recorder, self.cohort
        assert rec is not None
        if k:
            rec.same_gap(end - start, k)
        cohort.advance(1, end)
        finished = cohort.pop_finished() if k else []
        joiners: list[Req] = []
        for req, n in plan.scheduled:
            req.num_computed += n
            if req.num_computed < req.num_tokens:
                continue
            req.generated += 1
            if req.generated == 1:
                req.first_token = end
            else:
                rec.gap(end - req.last_token)
            req.last_token = end
            (finished if req.generated >= req.target else joiners).append(req)
        candidates = self.running if not k else self.others + plan.new
        done = self._retire(finished, end) if finished else 0
        for req in joiners:
            cohort.join(req)
        self.others = [r for r in candidates if r.base < 0 and r.state == RUNNING]
        return done

    # -- decode runs ------------------------------------------------------------------------

    def _decode_run(self, start: float, cost: CostModel, next_arrival: float,
                    horizon: float) -> tuple[float, int] | None:
        """Steps of the cohort alone until the batch may change; None when it may change now."""
        cohort, budget = self.cohort, self.limits.max_num_batched_tokens
        k = cohort.size
        if self.others or not k or k > budget or self.head_admissible(budget - k):
            return None
        n_max = cohort.steps_within(cohort.steps_to_finish(), self.kv.num_free)
        if n_max <= 0:
            return None
        ends = self._run_ends(start, cost, k, n_max, next_arrival, horizon)
        n = len(ends) - 1
        if n <= 0:
            return None
        self.kv.pool.take(cohort.blocks_over(n))
        self._note_peak()
        rec = self.recorder
        assert rec is not None
        rec.step_gaps(ends, k)
        rec.num_steps += n
        end = ends[-1]
        cohort.advance(n, end)
        finished = cohort.pop_finished()
        return end, (self._retire(finished, end) if finished else 0)

    def _run_ends(self, start: float, cost: CostModel, k: int, n_max: int, next_arrival: float,
                  horizon: float) -> list[float]:
        """``[start, end of step 1, ...]`` for the steps of the run that start in time.

        Steps are priced in batches whose first size is the number of steps predicted to start
        before ``next_arrival`` (from the latest decode step's duration), so that short runs --
        most of them -- cost one or two ``step_time`` calls rather than one ``decode_run``.
        """
        ends, end, done = [start], start, 0
        kv0 = self.cohort.context() + k
        dt = self._decode_dt
        want = n_max if dt <= 0.0 or next_arrival - start >= dt * n_max else int((next_arrival - start) / dt) + 1
        while done < n_max and end < next_arrival and end <= horizon:
            m = min(max(want, 1), n_max - done)
            for t in _decode_times(cost, k, kv0 + done * k, m):
                if end >= next_arrival or end > horizon:
                    break
                end = end + t
                ends.append(end)
                self._decode_dt = t
            done, want = done + m, RUN_CHUNK << (done // RUN_CHUNK).bit_length()
        return ends

    # -- bookkeeping ------------------------------------------------------------------------

    def _retire(self, finished: list[Req], now: float) -> int:
        """Free finished requests in running order and drop them from the running list."""
        if len(finished) > 1:
            finished.sort(key=_seq_of)
        for req in finished:
            req.finish = now
            req.state = FINISHED
            self.kv.free(req, preempted=False)
        if len(finished) <= 4:
            for req in finished:
                self.running.remove(req)
        else:
            self.running = [r for r in self.running if r.state != FINISHED]
        return len(finished)

    def _note_peak(self) -> None:
        used = self.kv.pool.num_used
        if used > self.peak_blocks_used:
            self.peak_blocks_used = used


def _seq_of(req: Req) -> int:
    return req.seq


def _decode_times(cost: CostModel, k: int, kv_tokens: int, steps: int) -> list[float]:
    """Durations of ``steps`` decode-only steps of ``k`` requests (``CostModel.decode_run``)."""
    if steps <= SCALAR_STEPS:
        return [cost.step_time(BatchShape(decode_seqs=k, decode_kv_tokens=kv_tokens + i * k)) for i in range(steps)]
    return cost.decode_run(k, kv_tokens, steps).tolist()
