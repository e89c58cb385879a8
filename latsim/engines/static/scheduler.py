"""Static batching: a fixed batch is admitted, prefilled together, and decoded until every
member is done; nothing joins a running batch.  Finished members keep their slot as padding
(their decode still costs compute), as in engines without continuous batching.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from latsim.engines.vllm.launch import LaunchClock
from latsim.engines.vllm.scheduler import SchedulerLimits
from latsim.sim.kvmanager import kv_manager
from latsim.sim.request import FINISHED, RUNNING, Req
from latsim.sim.step import StepPlan

if TYPE_CHECKING:
    from latsim.sim.recorder import Recorder


class StaticBatchScheduler:
    """Admit up to ``batch_size`` waiting requests only when the previous batch has drained.

    A batch takes requests in FCFS order while their whole prompt + output fits in the free KV
    blocks (static engines reserve the full sequence), so it never preempts.  ``num_blocks``
    counts as vLLM's does (the memory plan's): one of them is reserved, as in vLLM.
    """

    name = "static"
    async_scheduling = False  # a vLLM feature

    def __init__(self, limits: SchedulerLimits, num_blocks: int, batch_size: int) -> None:
        self.limits = limits
        self.batch_size = batch_size
        self.kv = kv_manager(num_blocks - 1, limits.block_size, limits.max_model_len, prefix_caching=False,
                             layout=limits.kv_layout)
        self.batch: list[Req] = []
        self.running: list[Req] = []
        self.waiting: deque[Req] = deque()
        self.num_preemptions = 0
        self.peak_blocks_used = 0
        self.recorder: Recorder | None = None
        self.zombies: list[Req] = []  # never any: nothing finishes early under synchronous stepping
        self.launch = LaunchClock()

    def add_request(self, req: Req) -> None:
        self.waiting.append(req)

    def has_work(self) -> bool:
        return bool(self.batch or self.waiting)

    def schedule(self) -> StepPlan:
        plan = StepPlan()
        if not self.batch:
            self._admit(plan)
            self.peak_blocks_used = max(self.peak_blocks_used, self.kv.pool.num_used)
            return plan
        for req in self.batch:
            plan.scheduled.append((req, 1))
        return plan

    def _admit(self, plan: StepPlan) -> None:
        while self.waiting and len(self.batch) < self.batch_size:
            req = self.waiting[0]
            if not self.kv.allocate(req, req.prompt + req.target):
                break
            self.waiting.popleft()
            req.state = RUNNING
            self.batch.append(req)
            plan.scheduled.append((req, req.prompt))
            plan.new.append(req)
        self.running = list(self.batch)

    def update(self, plan: StepPlan, now: float) -> list[Req]:
        """Advance every batch member; padding members (already done) only cost time."""
        finished: list[Req] = []
        for req, n in plan.scheduled:
            if req.state == FINISHED:
                continue
            req.num_computed += n
            req.generated += 1
            if req.generated == 1:
                req.first_token = now
            elif self.recorder is not None:
                self.recorder.gap(req.last_token, now)
            req.last_token = now
            if req.generated >= req.target:
                req.finish = now
                req.state = FINISHED
                finished.append(req)
        self.running = [r for r in self.batch if r.state != FINISHED]
        if not self.running:
            for req in self.batch:
                self.kv.free(req, preempted=False)
            self.batch = []
        return finished
