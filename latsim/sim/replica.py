"""One engine replica as a SimPy process: schedule a step, price it, advance the clock.

Design note.  The replica keeps its own float clock and advances it by exactly the priced
step times; SimPy orders the replica against the router (arrivals) and other replicas.  A
step is computed (scheduled, priced and applied) at the simulated time it starts, and the
process then sleeps until it ends, so whatever the router reads at an arrival reflects every
step that started before it.

When a decision is taken.  Synchronously, the decision for a step is taken at its start and
sees every arrival up to then.  With asynchronous scheduling (vLLM's default) the engine
schedules step N+1 when it launches step N, so that decision sees only the arrivals up to
step N's start (the *cutoff*): a request arriving during step N runs in step N+2 at the
earliest.  Requests that arrived after the cutoff wait in ``pending``, unseen by the
scheduler.  An idle engine decides on arrival; a decision that schedules nothing launches
nothing, so the next one is taken at once with the cutoff moved to now (what vLLM does when
the output of the step before arrives).  When such a decision could not change anything
(nothing released, every arrival seen) the replica sleeps until the next arrival.  Token
times are the step ends either way, and step durations are the cost model's (deciding takes
no simulated time here: the cost model's host term prices the CPU's work).  A request's
``first_scheduled`` is the start of the first step that runs it (with asynchronous
scheduling, one step after the decision; vLLM's own SCHEDULED timestamp is the decision's).

Two drivers share this loop.  A :class:`~latsim.sim.protocols.FastForward` scheduler (the fast
vLLM engine, :mod:`latsim.engines.vllm.fastsched`) drives itself: one call runs steps and
decode runs until a decision could see a new arrival.  Any other
:class:`~latsim.sim.protocols.Scheduler` (the reference vLLM one, static batching) is stepped
one ``schedule``/``update`` at a time.
Both give identical results; tests compare them.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Generator

import simpy

from latsim.costmodel.batch import CostModel
from latsim.sim.protocols import FastForward, Scheduler
from latsim.sim.recorder import Recorder
from latsim.sim.request import Req
from latsim.sim.shape import plan_coreads, step_shape


class Replica:
    """A serving engine instance: a scheduler, a cost model and a clock."""

    def __init__(self, env: simpy.Environment, index: int, scheduler: Scheduler, fast: FastForward | None,
                 cost: CostModel, recorder: Recorder, next_arrival: Callable[[], float], horizon_s: float) -> None:
        """``fast`` is ``scheduler`` itself when it fast-forwards (``None``: step one by one)."""
        self.env = env
        self.index = index
        self.scheduler = scheduler
        self.fast = fast
        self.cost = cost
        self.recorder = recorder
        self.next_arrival = next_arrival
        self.horizon_s = horizon_s
        self.clock = 0.0
        self.outstanding = 0
        self.peak_blocks_used = 0
        self.pending: deque[Req] = deque()  # arrived after the cutoff (asynchronous scheduling)
        self._lagged = scheduler.async_scheduling
        self.launch = scheduler.launch
        self._cutoff = 0.0
        self._wake: simpy.Event | None = None

    def submit(self, req: Req) -> None:
        """Hand an arriving request to this replica (called by the router at its arrival time)."""
        req.replica = self.index
        if self._lagged:
            self.pending.append(req)
        else:
            self.scheduler.add_request(req)
        self.outstanding += 1
        if self._wake is not None and not self._wake.triggered:
            self._wake.succeed()

    def process(self) -> Generator[simpy.Event, None, None]:
        env, sched = self.env, self.scheduler
        fast = self.fast
        stuck = False
        while True:
            if stuck or not (sched.has_work() or self.pending):
                self._wake = env.event()
                yield self._wake
                self._wake = None
                self.clock = self._cutoff = env.now
            if self.clock > self.horizon_s:
                break
            stuck = not self._decide(fast)
            delay = self.clock - env.now
            yield env.timeout(delay if delay > 0.0 else 0.0)
        if fast is not None:
            fast.settle()

    def _decide(self, fast: FastForward | None) -> bool:
        """Take the decision due at ``clock`` and run what it launched; False when stuck.

        Stuck: nothing was launched, and deciding again before an arrival would not change
        that (every arrival was seen, no finished request was waiting to be released, and
        nothing was preempted).
        """
        sched, start, lagged = self.scheduler, self.clock, self._lagged
        releases, preemptions = False, sched.num_preemptions
        if lagged:
            if self.pending:
                self._reveal(self._cutoff)
            releases = bool(sched.zombies)
        steps = self.recorder.num_steps
        if fast is not None:
            future = self.next_arrival()
            unseen = self.pending[0].ready if self.pending else future
            self.clock, done = fast.advance(start, self.cost, future, self.horizon_s, unseen,
                                            self._reveal if self.pending else None)
            self.outstanding -= done
            last_start = fast.last_start
        else:
            last_start = self._one_step()
        self.peak_blocks_used = sched.peak_blocks_used
        if self.recorder.num_steps == steps:
            stuck = self._cutoff >= start and not releases and sched.num_preemptions == preemptions
            self._cutoff = start
            return not stuck
        self._cutoff = last_start if lagged else self.clock
        return True

    def _reveal(self, cutoff: float) -> float:
        """Hand the scheduler the pending arrivals up to ``cutoff``; the earliest arrival it has not seen."""
        pending, sched = self.pending, self.scheduler
        while pending and pending[0].ready <= cutoff:
            sched.add_request(pending.popleft())
        return pending[0].ready if pending else self.next_arrival()

    def _one_step(self) -> float:
        """Run one step; return when the step after it is decided (asynchronous scheduling)."""
        sched = self.scheduler
        plan = sched.schedule()
        start = self.clock
        for req in plan.new:
            if math.isnan(req.first_scheduled):
                req.first_scheduled = start
        if not plan.scheduled:
            return start
        shape = plan_coreads(step_shape(plan), plan, self.cost.coreads)
        end, decision = self.launch.step(self.cost, shape, self._cutoff, start, start + self.cost.step_time(shape))
        self.clock = end
        self.recorder.num_steps += 1
        self.outstanding -= len(sched.update(plan, end))
        return decision
