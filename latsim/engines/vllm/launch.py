"""Launching a step that runs without CUDA graphs, under asynchronous scheduling.

vLLM 0.25.1's asynchronous engine loop with the model in the engine-core process (its
uniprocess executor, the default on one GPU), once step N-1's outputs have gone out: decide step
N+1, launch it, wait for step N to finish, send out step N's outputs, decide step N+2, ...
Launching a graph step is one replay (cheap; the cost model's host term covers the CPU time);
a step too large for the captured graphs is launched kernel by kernel from Python, which takes
``HostOverlapCostModel.launch_s`` (about 0.5 ms per dense layer on an H200 host, measured).
Three things follow, all seen in the streamed token times of live runs
(``docs/step-time-model.md``):

- the outputs of the step before a graph-less step go out only when its launch ends, not when
  that step ends (``held``: first tokens and finishes are re-stamped after the simulation,
  :meth:`LaunchClock.release`, and inter-token gaps counted from the release,
  :meth:`~latsim.sim.recorder.Recorder.itl_samples`);
- the next decision waits for them, so a request that arrives during the launch still makes
  the step after it (the decision time returned by :meth:`LaunchClock.step`);
- a graph-less step ends no earlier than ``launch_tail_s`` after its launch ends (the GPU runs
  its kernels as they are launched and finishes the last ones after).

The launch starts when the step was decided.  Its duration varies from step to step (the
launch gaps of one run spread over about +-30 % around their median): with ``launch_sigma`` > 0
each launch is the priced one times ``exp(launch_sigma x Z)``, Z standard normal from the
clock's own generator (seeded per replica, drawn in step order: the fast and the reference
engine draw the same numbers).  Without a launch term (a plain cost model,
synchronous scheduling, graph steps) nothing changes.

With vLLM's multiprocess executor (``in_worker``; its default above one GPU), a worker process
runs the model and launches the kernels while the engine-core process schedules, and a
separate thread of the worker sends each step's outputs as soon as its tokens are on the host:
the step before is not held and the next decision does not wait for the launch (seen in the
TP=2 runs' streamed tokens: the long gap falls before the prompt's first token, not before
the step preceding it).  The worker launches one step at a time, so a launch starts when its
step was decided or when the worker's previous launch ended, whichever is later.

Before any of this, the replica's :class:`~latsim.costmodel.power.PowerClock` moves the priced
end of a heavy step by the GPU's clock under its power cap (a no-op without power data).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from latsim.costmodel.batch import BatchShape, CostModel
from latsim.costmodel.power import PowerClock
from latsim.deployment import EXECUTORS
from latsim.sim.request import Req


@dataclass
class LaunchClock:
    """One replica's graph-less launches: the step end each step starts from, and the held outputs
    (``in_worker``: launched by a worker process, nothing held; see the module note)."""

    in_worker: bool = False
    """The model runs in worker processes (vLLM's multiprocess executor), not in the engine core."""

    held: dict[float, float] = field(default_factory=dict)
    """Step end -> when that step's outputs went out (only steps whose outputs were held)."""
    last_end: float = -math.inf
    worker_free: float = -math.inf
    """When the worker's last launch ended (``in_worker`` only)."""
    rng: np.random.Generator = field(default_factory=lambda: np.random.default_rng(0))
    power: PowerClock = field(default_factory=PowerClock)
    """The GPU's power state (the same replica's GPU)."""

    @classmethod
    def for_executor(cls, executor: str) -> LaunchClock:
        """The clock of an engine whose model runs under vLLM's ``executor`` (``mp``: in worker
        processes; ``uni``: in the engine-core process); ValueError for another."""
        if executor not in EXECUTORS:
            raise ValueError(f"executor {executor!r}: accepted {', '.join(map(repr, EXECUTORS))}")
        return cls(in_worker=executor == "mp")

    def seed(self, seed: int, replica: int) -> None:
        """Restart the launch-time generator for ``replica`` of a simulation seeded ``seed``."""
        self.rng = np.random.default_rng([seed, replica, 0x1A])
        self.power = PowerClock()

    def step(self, cost: CostModel, shape: BatchShape, decided: float, start: float, end: float) -> tuple[float, float]:
        """``(end, next decision)`` of a step decided at ``decided`` and run from ``start`` to
        ``end`` as the cost model priced it; records a held release of the step before (in the
        engine-core process only)."""
        end = self.power.end(cost, shape, start, end)
        launch = cost.launch_s(shape)
        if launch <= 0.0:
            self.last_end = end
            return end, start
        sigma = cost.launch_sigma
        if sigma > 0.0:
            launch *= math.exp(sigma * float(self.rng.standard_normal()))
        if self.in_worker:
            launch_end = max(decided, self.worker_free) + launch
            self.worker_free = launch_end
        else:
            launch_end = decided + launch
        tail_end = launch_end + cost.launch_tail_s
        if tail_end > end:
            end = tail_end
        decision = start
        if launch_end > start and not self.in_worker:
            decision = launch_end
            if self.last_end == start:  # outputs of the step just before, stamped at ``start``
                self.held[start] = launch_end
        self.last_end = end
        return end, decision

    def release(self, requests: Sequence[Req]) -> None:
        """Re-stamp the first-token and finish times of ``requests`` (this replica's) that ended
        a step whose outputs were held."""
        held = self.held
        if not held:
            return
        for req in requests:
            first = held.get(req.first_token)
            if first is not None:
                req.first_token = first
            finish = held.get(req.finish)
            if finish is not None:
                req.finish = finish
