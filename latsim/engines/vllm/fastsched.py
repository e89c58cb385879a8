"""The fast vLLM engine: :class:`VllmScheduler`'s decisions without per-decode Python work.

Design note (the hot functions are :meth:`FastVllmScheduler.advance` and ``_plan``).  Decoding
requests live in a :class:`DecodeCohort`; everything else that runs (prefill chunks, resumed
requests) is an *other*, kept in running order.  One call of :meth:`advance` chains, until
a decision could see an arrival, steps of two kinds:

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
to ``step_time``), so results are identical; ``tests/sim/test_fast_engine.py`` checks it.

Sliding-window layers: the cohort frees the blocks its members' windows leave behind
(:class:`~latsim.engines.vllm.cohort.DecodeCohort`); a step's check counts none of its own frees
(the running order could put them after another's allocation: then the reference decides),
frees go back before the run's blocks are taken (the same blocks leave the queue, which is taken
from its front), and a run stops where the frees would let the waiting head in.

Asynchronous scheduling changes two things here, as in the reference: requests that finish
are zombies until the end of the next decision (a decode run may start with zombies and
releases them after its first step), and the decision for a step is taken at the start of
the previous one, so a call holds the steps decided before the next unseen arrival
(:meth:`advance`).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from latsim.costmodel.batch import BatchShape, CostModel, squares_after
from latsim.engines.vllm.cohort import DecodeCohort
from latsim.engines.vllm.scheduler import SchedulerLimits, VllmScheduler
from latsim.sim.request import RUNNING, Req, advance_request
from latsim.sim.shape import coread_tokens, discounted_kv, plan_coreads, step_shape
from latsim.sim.step import StepPlan

RUN_CHUNK = 32  # steps priced per call once a run outlives its prediction (then doubling)
SCALAR_STEPS = 2  # this few steps are priced by step_time calls, more by one decode_run call


class FastVllmScheduler(VllmScheduler):
    """vLLM v1 scheduling driven by :meth:`advance`; ``schedule``/``update`` stay the reference."""

    def __init__(self, limits: SchedulerLimits, num_blocks: int) -> None:
        super().__init__(limits, num_blocks)
        self.cohort = DecodeCohort(limits.block_size, limits.kv_layout)
        self.others: list[Req] = []  # running requests outside the cohort, in running order
        self.reference_steps = 0  # steps the reference scheduler decided (diagnostics)
        self.last_start = 0.0  # when the next step is decided: the latest step's start (or
        # empty decision's), or the end of its launch when the step runs without CUDA graphs
        self._decode_dt = 0.0  # duration of the latest decode-run step (predicts run lengths)

    def settle(self) -> None:
        """Make every running request's fields current (the cohort becomes empty)."""
        self.cohort.dissolve()
        self.others = self._unfinished()

    def _unfinished(self) -> list[Req]:
        """The running requests that still run (zombies excluded)."""
        return [r for r in self.running if r.state == RUNNING] if self.zombies else list(self.running)

    def schedule(self) -> StepPlan:
        self.settle()
        return super().schedule()

    def update(self, plan: StepPlan, now: float) -> list[Req]:
        finished = super().update(plan, now)
        self.others = self._unfinished()
        return finished

    def advance(self, clock: float, cost: CostModel, next_arrival: float, horizon: float,
                unseen: float | None = None, reveal: Callable[[float], float] | None = None) -> tuple[float, int]:
        """Run steps and decode runs from ``clock``; return ``(new clock, requests finished)``.

        ``next_arrival`` is the earliest arrival not yet submitted (to any replica) and
        ``unseen`` the earliest the scheduler has not seen (default: ``next_arrival``).  A step
        is decided at its start, or with asynchronous scheduling at the start of the step
        before (the first step of the call was decided earlier; ``reveal(t)``, given when some
        arrivals wait to be seen, hands the scheduler those up to ``t`` and returns the new
        ``unseen``).  No step is decided at or after ``unseen`` or starts after ``horizon``;
        none starts at or after ``next_arrival`` unless it is part of a decode run, decided
        before it, and finishes nothing (what the router can see at the arrival is then the
        same as stepping one by one).  The call returns after a decision that scheduled
        nothing (the clock stays put; ``last_start`` is then that clock), so the replica can
        apply its rules for those.  The first step is taken whatever ``next_arrival`` is.
        """
        unseen = next_arrival if unseen is None else unseen
        lag, finished, start = self.limits.async_scheduling, 0, clock
        while True:
            ran = self._decode_run(clock, cost, (unseen, next_arrival), horizon)
            if ran is None:
                if clock >= next_arrival and clock > start:  # only a run goes on past an arrival
                    return clock, finished
                ran = self._step(clock, cost)
            end, done = ran
            finished += done
            if end == clock:
                return clock, finished
            clock = end
            if lag and reveal is not None and self.last_start >= unseen:
                unseen = reveal(self.last_start)
            if (self.last_start if lag else clock) >= unseen or clock > horizon:  # when the next is decided
                return clock, finished

    # -- one step ---------------------------------------------------------------------------

    def _step(self, start: float, cost: CostModel) -> tuple[float, int]:
        plan = self._plan()
        k = self.cohort.size
        if plan is None:
            self.reference_steps += 1
            self.settle()
            plan, k = super().schedule(), 0
            self.others = self._unfinished()  # it may have preempted (possibly all) of them
        else:
            self.step_index += 1
            self._note_peak()
            if self.zombies:
                self.release_zombies()
        decided = self.last_start if self.launch.last_end == start else start
        self.last_start = start
        for req in plan.new:
            if math.isnan(req.first_scheduled):
                req.first_scheduled = start
        if not plan.scheduled and not k:
            return start, 0
        decode_kv, decode_sq = self._cohort_kv(k)
        shape = plan_coreads(step_shape(plan, k, decode_kv, decode_sq), plan, cost.coreads, self.cohort.readers)
        end, self.last_start = self.launch.step(cost, shape, decided, start, start + cost.step_time(shape))
        assert self.recorder is not None
        self.recorder.num_steps += 1
        return end, self._apply(plan, k, start, end)

    def _cohort_kv(self, k: int) -> tuple[int, int]:
        """The cohort's next decode contexts (each ``num_computed + 1``): their sum and the sum of
        their squares (0, 0 for an empty cohort)."""
        if not k:
            return 0, 0
        kv = self.cohort.context()
        return kv + k, self.cohort.context_sq() + 2 * kv + k

    def _plan(self) -> StepPlan | None:
        """This step's plan for the non-cohort requests, or None when the reference must decide."""
        k = self.cohort.size
        budget = self.limits.max_num_batched_tokens - k
        if budget < 0:
            return None
        plan = StepPlan()
        blocks = self.cohort.blocks_next() if k else 0
        frees = self.cohort.frees_next() if k else 0
        if self.others:
            budget = self._plan_others(plan, budget, blocks, frees)
            if budget < 0:
                return None
        elif blocks > self.kv.num_free:
            return None
        else:
            if blocks:
                self.kv.pool.take(blocks)
            if frees:
                self.kv.give_back(frees)
        self._schedule_waiting(plan, budget)
        return plan

    def _plan_others(self, plan: StepPlan, budget: int, cohort_blocks: int, cohort_frees: int = 0) -> int:
        """Schedule the others (and take, then free, the cohort's blocks); the budget left, or -1 to
        fall back.  The check counts no block freed this step: the blocks taken then fit whatever
        the running order, and come from the queue's front before any freed one."""
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
        if cohort_frees and any(kv.will_free_findable(req) for req, _ in plan.scheduled):
            plan.scheduled.clear()
            return -1  # findable blocks freed behind a window: their place in the queue follows the running order
        if cohort_blocks:
            kv.pool.take(cohort_blocks)
        for req, num_new in plan.scheduled:
            kv.allocate(req, num_new)
        if cohort_frees:
            kv.give_back(cohort_frees)
        return budget

    def _apply(self, plan: StepPlan, k: int, start: float, end: float) -> int:
        """Advance the step's requests to ``end`` (as ``VllmScheduler.update``); return finished."""
        rec, cohort, index = self.recorder, self.cohort, self.step_index
        track = self.limits.async_scheduling  # Req.lag matters only then
        assert rec is not None
        if k:
            rec.same_gap(start, end, k)
        cohort.advance(1, end, index)
        finished = cohort.pop_finished() if k else []
        joiners: list[Req] = []
        for req, n in plan.scheduled:
            if advance_request(req, n, end, index, track, rec.gap):
                (finished if req.generated >= req.target else joiners).append(req)
        candidates = self.running if not k else self.others + plan.new
        done = self._retire(finished, end) if finished else 0
        for req in joiners:
            if not self.kv.will_free_findable(req):  # else it decodes as an other (its frees follow the running order)
                cohort.join(req)
        self.others = [r for r in candidates if r.base < 0 and r.state == RUNNING]
        return done

    # -- decode runs ------------------------------------------------------------------------

    def _decode_run(self, start: float, cost: CostModel, arrivals: tuple[float, float],
                    horizon: float) -> tuple[float, int] | None:
        """Steps of the cohort alone until the batch may change; None when it may change now."""
        room = self._run_room()
        if room is None:
            return None
        cohort = self.cohort
        launch_from = cost.launch_from
        if launch_from is not None and cohort.size > launch_from:
            return None  # graph-less decode steps: one at a time, for their launches
        finish_at = cohort.steps_to_finish()
        free, freed, first, admit = room
        if cohort.sliding:
            n_max = cohort.run_pool(int(min(finish_at, cohort.steps_to_aging())), free, freed, admit)[0]
        else:
            n_max = cohort.steps_within(finish_at, free + freed)
        if n_max <= 0:
            return None
        ends = self._run_ends(start, cost, cohort.size, (n_max, finish_at), arrivals, horizon)
        if len(ends) < 2:
            return None
        if cohort.sliding:
            return self._apply_sliding_run(ends, room, finish_at)
        return self._apply_run(ends, first, finish_at)

    def _run_room(self) -> tuple[int, int, int, float] | None:
        """``(free blocks, blocks the zombies free after the first decision, blocks of the first
        step, free blocks that would admit the waiting head)`` when only the cohort can run, else None.

        Zombies (asynchronous scheduling) are released after the run's first decision, as the
        reference does, so the head must stay inadmissible with their seats and blocks free
        (zombies holding cached blocks, possibly shared, leave that to :meth:`_step`).
        """
        cohort, budget, zombies = self.cohort, self.limits.max_num_batched_tokens, self.zombies
        k = cohort.size
        if self.others or not k or k > budget:
            return None
        freed = first = 0
        for z in zombies:
            if z.keys:
                return None  # shared blocks: what the release frees is not just a count
            freed += self.kv.held(z)
        admit = self.head_block_need(budget - k, len(zombies)) if self.waiting else math.inf
        if admit <= self.kv.num_free + freed:
            return None
        free = self.kv.pool.num_free
        if zombies:
            first = cohort.blocks_next()
            if first > free:
                return None
        return free, freed, first, admit

    def _apply_run(self, ends: list[float], first: int, finish_at: int) -> tuple[float, int]:
        """Take a run's blocks (zombies go after its first step), record it; ``(end, finished)``."""
        cohort, pool = self.cohort, self.kv.pool
        n = len(ends) - 1
        if self.zombies:
            if first:
                pool.take(first)
            self._note_peak()
            self.release_zombies()
        more = cohort.blocks_over(n) - first
        if more:
            pool.take(more)
        used = pool.num_blocks - pool.num_free
        if used > self.peak_blocks_used:
            self.peak_blocks_used = used
        return self._record_run(ends, finish_at)

    def _apply_sliding_run(self, ends: list[float], room: tuple[int, int, int, float],
                           finish_at: int) -> tuple[float, int]:
        """:meth:`_apply_run` for a cohort that frees blocks behind its windows: the blocks taken
        and freed step by step (:meth:`DecodeCohort.run_pool`), applied as the frees then the
        takes (the same blocks leave the queue: it is taken from the front), the peak use
        right after each decision."""
        cohort, pool = self.cohort, self.kv.pool
        n = len(ends) - 1
        free, zombie_blocks, _, admit = room
        steps, taken, freed, peak_first, peak_rest = cohort.run_pool(n, free, zombie_blocks, admit)
        assert steps == n
        used = pool.num_used
        peak = used + peak_first
        if self.zombies:
            first, first_freed = cohort.blocks_next(), cohort.frees_next()
            pool.take(first)
            self.kv.give_back(first_freed)
            taken, freed = taken - first, freed - first_freed
            self.release_zombies()
        if n > 1:  # peak_rest: the later decisions' (-inf for a one-step run)
            peak = max(peak, used - zombie_blocks + int(peak_rest))
        self.kv.give_back(freed)
        pool.take(taken)
        if peak > self.peak_blocks_used:
            self.peak_blocks_used = peak
        return self._record_run(ends, finish_at)

    def _record_run(self, ends: list[float], finish_at: int) -> tuple[float, int]:
        """Record a run's steps (its blocks applied) and advance the cohort; ``(end, finished)``."""
        cohort, rec, n = self.cohort, self.recorder, len(ends) - 1
        assert rec is not None
        rec.step_gaps(ends, cohort.size)
        self.launch.last_end = ends[-1]
        rec.num_steps += n
        self.step_index += n
        self.last_start = ends[-2]
        end = ends[-1]
        cohort.advance(n, end, self.step_index)
        if n < finish_at:
            return end, 0
        return end, self._retire(cohort.pop_finished(), end)

    def _run_ends(self, start: float, cost: CostModel, k: int, steps: tuple[int, int], arrivals: tuple[float, float],
                  horizon: float) -> list[float]:
        """``[start, end of step 1, ...]`` for the steps of the run that may go ahead (:meth:`advance`).

        Steps are priced in batches whose first size is the number of steps predicted to be
        decided before the arrival (from the latest decode step's duration), so that short
        runs -- most of them -- cost one or two ``step_time`` calls rather than one
        ``decode_run``.
        """
        (n_max, finish_at), (unseen, future) = steps, arrivals  # finish_at: the step finishing a member
        lag = self.limits.async_scheduling
        ends, end, done = [start], start, 0
        cut = -math.inf if lag else start  # when the next step is decided
        kv0, sq0 = self._cohort_kv(k)
        if cost.coreads is not None and self.cohort.readers:
            kv0, sq0 = discounted_kv(kv0, sq0, k, coread_tokens(cost.coreads, k, self.cohort.readers))
        dt = self._decode_dt
        want = n_max
        if lag and unseen <= start:
            want = 1  # only the step decided before the call
        elif dt > 0.0 and unseen - start < dt * n_max:
            want = int((unseen - start) / dt) + (2 if lag else 1)
        while done < n_max:
            if cut >= unseen or end > horizon or (end >= future and (done + 1 == finish_at or not lag)):
                break  # checked before pricing the next batch
            m = want if want > 1 else 1
            if m > n_max - done:
                m = n_max - done
            for t in _decode_times(cost, k, kv0 + done * k, m, squares_after(k, kv0, sq0, done)):
                if cut >= unseen or end > horizon or (end >= future and (len(ends) == finish_at or not lag)):
                    return ends
                cut = end if lag else end + t
                end = end + t
                ends.append(end)
                self._decode_dt = t
            done, want = done + m, RUN_CHUNK << (done // RUN_CHUNK).bit_length()
        return ends

    # -- bookkeeping ------------------------------------------------------------------------

    def _retire(self, finished: list[Req], now: float) -> int:
        """Retire finished requests in running order (:meth:`VllmScheduler.retire`); how many."""
        if len(finished) > 1:
            finished.sort(key=_seq_of)
        self.retire(finished, now)
        return len(finished)


def _seq_of(req: Req) -> int:
    return req.seq


def _decode_times(cost: CostModel, k: int, kv_tokens: int, steps: int, kv_sq: int) -> list[float]:
    """Durations of ``steps`` decode-only steps of ``k`` requests (``CostModel.decode_run``)."""
    if steps == 1:
        return [cost.step_time(BatchShape(decode_seqs=k, decode_kv_tokens=kv_tokens, decode_kv_sq=kv_sq))]
    if steps <= SCALAR_STEPS:
        return [cost.step_time(BatchShape(decode_seqs=k, decode_kv_tokens=kv_tokens + i * k,
                                          decode_kv_sq=squares_after(k, kv_tokens, kv_sq, i))) for i in range(steps)]
    return cost.decode_run(k, kv_tokens, steps, kv_sq).tolist()
