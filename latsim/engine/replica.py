"""One engine replica as a SimPy process: schedule a step, price it, advance the clock.

Design note.  The replica keeps its own float clock and advances it by exactly the priced
step times; SimPy orders the replica against the router (arrivals) and other replicas.  A
step is computed (scheduled, priced and applied) at the simulated time it starts, and the
process then sleeps until it ends, so whatever the router reads at an arrival reflects every
step that started before it.

Two drivers share this loop.  A scheduler with an ``advance`` method (the fast vLLM engine,
:mod:`latsim.engine.fastsched`) drives itself: one call runs one step or a whole decode run
that stops before the next arrival anywhere.  Any other scheduler (the reference
:class:`VllmScheduler`, static batching) is stepped one ``schedule``/``update`` at a time.
Both give identical results; tests compare them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator

import simpy

from latsim.costmodel.batch import CostModel
from latsim.engine.recorder import Recorder
from latsim.engine.shape import step_shape


class Replica:
    """A serving engine instance: a scheduler, a cost model and a clock."""

    def __init__(self, env: simpy.Environment, index: int, scheduler, cost: CostModel, recorder: Recorder,
                 next_arrival: Callable[[], float], horizon_s: float, fast_forward: bool = True) -> None:
        self.env = env
        self.index = index
        self.scheduler = scheduler
        self.cost = cost
        self.recorder = recorder
        self.next_arrival = next_arrival
        self.horizon_s = horizon_s
        self.fast_forward = fast_forward
        self.clock = 0.0
        self.outstanding = 0
        self.peak_blocks_used = 0
        self._wake: simpy.Event | None = None

    def submit(self, req) -> None:
        """Hand an arriving request to this replica (called by the router at its arrival time)."""
        req.replica = self.index
        self.scheduler.add_request(req)
        self.outstanding += 1
        if self._wake is not None and not self._wake.triggered:
            self._wake.succeed()

    def process(self) -> Generator[simpy.Event, None, None]:
        env, sched = self.env, self.scheduler
        advance = getattr(sched, "advance", None) if self.fast_forward else None
        while True:
            if not sched.has_work():
                self._wake = env.event()
                yield self._wake
                self._wake = None
                self.clock = env.now
            if self.clock > self.horizon_s:
                break
            if advance is not None:
                self.clock, done = advance(self.clock, self.cost, self.next_arrival(), self.horizon_s)
                self.outstanding -= done
                self.peak_blocks_used = sched.peak_blocks_used
            else:
                self._one_step()
            delay = self.clock - env.now
            yield env.timeout(delay if delay > 0.0 else 0.0)
        if advance is not None:
            sched.settle()

    def _one_step(self) -> None:
        sched = self.scheduler
        plan = sched.schedule()
        start = self.clock
        for req in plan.new:
            if math.isnan(req.first_scheduled):
                req.first_scheduled = start
        self.peak_blocks_used = max(self.peak_blocks_used, sched.kv.pool.num_used)
        if not plan.scheduled:
            return
        end = start + self.cost.step_time(step_shape(plan))
        self.clock = end
        self.recorder.num_steps += 1
        self.outstanding -= len(sched.update(plan, end))

