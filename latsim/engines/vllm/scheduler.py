"""vLLM v1 continuous batching: one token budget per step, running requests first.

Design note (the hot function is :meth:`VllmScheduler.schedule`).  A step visits the running
requests in admission order, giving each what it still needs (a decode needs 1; a chunked or
recomputed prefill needs the rest of its tokens) until the budget is spent; when a request's
blocks cannot be allocated the *last* running request is preempted (recompute: blocks freed,
progress lost, put back at the front of the waiting queue), possibly the request itself.  Only
when no preemption happened are waiting requests admitted, in FCFS order, while the budget,
``max_num_seqs`` and the KV blocks allow -- with ``scheduler_reserve_full_isl`` only when the
whole prompt fits in the free blocks; an admission that cannot be allocated stops the loop.
The pool is ``num_gpu_blocks - 1`` blocks (vLLM's block 0 is its null block).
``docs/vllm-v1-scheduling.md`` lists the vLLM 0.25.1 rules this follows.

Asynchronous scheduling (``SchedulerLimits.async_scheduling``, vLLM's ``AsyncScheduler``).
vLLM schedules step N+1 before step N's output is applied, counting one output placeholder
per request that samples in step N.  This scheduler keeps the synchronous call order --
``update(N)`` before ``schedule()`` of step N+1 -- and defers exactly what vLLM's later
``update_from_output(N)`` would have changed for that decision:

- a request that finishes in step N (vLLM's skip rule: its last token is in flight) stays in
  ``running`` as a *zombie*, holding its seat and blocks, skipped, until the end of the next
  ``schedule()``; it can be that decision's preemption victim (counted, blocks freed), as in
  vLLM, where its in-flight token then finishes it in the waiting queue;
- a request preempted in step N+1 already has step N's token, which vLLM appends after the
  preemption: the end state is the same;
- its blocks that stay findable are those hashed when step N was scheduled: one token fewer
  when it also sampled in step N-1 (``Req.lag``).

Everything else the next decision reads is unchanged by applying step N's output first: a
running request's ``num_tokens + placeholders - num_computed``, blocks, hashes of prefix
blocks, and the waiting queue.  The differential tests check this against vLLM's own
``AsyncScheduler``.  When a step's decision is *taken* (one step earlier, so arrivals during
step N reach step N+2 at the earliest) is the replica's business (:mod:`latsim.sim.replica`).

This is the readable reference, stepped one ``schedule``/``update`` at a time by
:mod:`latsim.oracle.stream` and ``simulate(..., fast_forward=False)``; simulations use
:class:`~latsim.engines.vllm.fastsched.FastVllmScheduler`, which makes the same decisions with
O(1) work per decoding request.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

from latsim.engines.vllm.launch import LaunchClock
from latsim.sim.kvlayout import KvLayout
from latsim.sim.kvmanager import ONE_GROUP, kv_manager
from latsim.sim.request import FINISHED, PREEMPTED, RUNNING, Req, advance_request
from latsim.sim.step import StepPlan

if TYPE_CHECKING:
    from latsim.sim.recorder import Recorder


@dataclass(frozen=True)
class SchedulerLimits:
    """The knobs a scheduler obeys (resolved: no ``None``).

    ``scheduler_reserve_full_isl`` is vLLM's admission gate (default on, as in vLLM 0.25.1);
    ``async_scheduling`` defaults to off here, the setting of the step-indexed differential
    runs, while deployments default to vLLM's on (``EngineConfig.async_scheduling``);
    ``executor`` defaults to the engine-core process, vLLM's on one GPU.
    """

    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int
    block_size: int = 16
    enable_chunked_prefill: bool = True
    enable_prefix_caching: bool = True
    long_prefill_token_threshold: int = 0
    scheduler_reserve_full_isl: bool = True
    async_scheduling: bool = False
    executor: str = "uni"
    """Where the model runs: ``uni``, in the engine-core process; ``mp``, in worker processes
    (:data:`latsim.deployment.EXECUTORS`); sets how graph-less launches overlap
    (:class:`~latsim.engines.vllm.launch.LaunchClock`)."""
    kv_layout: KvLayout = ONE_GROUP
    """The KV-cache groups when some attention layers slide (default: one full-attention group)."""

    def __post_init__(self) -> None:
        if not self.enable_chunked_prefill and self.max_num_batched_tokens < self.max_model_len:
            raise ValueError(
                f"without chunked prefill max_num_batched_tokens ({self.max_num_batched_tokens}) must be "
                f">= max_model_len ({self.max_model_len}), as vLLM requires"
            )


class VllmScheduler:
    """vLLM v1 scheduling policy (FCFS) over a :class:`KVManager` of ``num_blocks - 1`` blocks.

    ``num_blocks`` is vLLM's ``num_gpu_blocks`` (what its log and the memory plan report).
    ``step_index`` counts ``schedule()`` calls, idle ones included; ``zombies`` are the
    requests finished by the latest ``update`` that keep their seat and blocks through the
    next ``schedule()`` (asynchronous scheduling only).
    """

    name = "vllm"

    def __init__(self, limits: SchedulerLimits, num_blocks: int) -> None:
        self.limits = limits
        self.kv = kv_manager(num_blocks - 1, limits.block_size, limits.max_model_len, limits.enable_prefix_caching,
                             limits.kv_layout)
        self.running: list[Req] = []
        self.waiting: deque[Req] = deque()
        self.zombies: list[Req] = []
        self.launch = LaunchClock.for_executor(limits.executor)  # graph-less launches (asynchronous)
        self.num_preemptions = 0
        self.num_admitted = 0  # admissions so far (Req.seq: running order)
        self.step_index = 0
        self.peak_blocks_used = 0
        self.recorder: Recorder | None = None

    @property
    def async_scheduling(self) -> bool:
        return self.limits.async_scheduling

    def add_request(self, req: Req) -> None:
        self.waiting.append(req)

    def has_work(self) -> bool:
        return bool(self.running or self.waiting)

    def schedule(self) -> StepPlan:
        self.step_index += 1
        plan = StepPlan()
        budget = self._schedule_running(plan, self.limits.max_num_batched_tokens)
        if not plan.preempted:
            self._schedule_waiting(plan, budget)
        self._note_peak()
        if self.zombies:
            self.release_zombies()
        return plan

    def _note_peak(self) -> None:
        """Track the most blocks in use, taken right after a decision (zombies' blocks included)."""
        used = self.kv.pool.num_used
        if used > self.peak_blocks_used:
            self.peak_blocks_used = used

    def _new_tokens(self, req: Req, budget: int) -> int:
        need = req.num_tokens - req.num_computed
        threshold = self.limits.long_prefill_token_threshold
        if 0 < threshold < need:
            need = threshold
        return min(need, budget, self.limits.max_model_len - 1 - req.num_computed)

    def _schedule_running(self, plan: StepPlan, budget: int) -> int:
        running = self.running
        i = 0
        while i < len(running) and budget > 0:
            req = running[i]
            num_new = self._new_tokens(req, budget) if req.state != FINISHED else 0
            if num_new <= 0:
                i += 1
                continue
            if not self._allocate_or_preempt(req, num_new, plan):
                break
            plan.scheduled.append((req, num_new))
            budget -= num_new
            i += 1
        return budget

    def _allocate_or_preempt(self, req: Req, num_new: int, plan: StepPlan) -> bool:
        """Allocate for ``req``, preempting from the tail of ``running`` until it fits."""
        while not self.kv.allocate(req, num_new):
            victim = self.running.pop()
            self._preempt(victim)
            plan.preempted.append(victim)
            if victim is req:
                return False
        return True

    def _preempt(self, req: Req) -> None:
        """Free ``req``'s blocks and requeue it at the front (a zombie is just freed: it is done)."""
        lag = req.lag if self.limits.async_scheduling and req.sampled_at == self.step_index - 1 else 0
        self.kv.free(req, preempted=True, lag=lag)
        req.num_computed = 0
        req.preemptions += 1
        self.num_preemptions += 1
        if req.state == FINISHED:
            self.zombies.remove(req)
            return
        req.state = PREEMPTED
        self.waiting.appendleft(req)

    def _schedule_waiting(self, plan: StepPlan, budget: int) -> None:
        limits = self.limits
        kv = self.kv
        while self.waiting and budget > 0:
            if len(self.running) >= limits.max_num_seqs:
                plan.admission_blocked = True
                return
            req = self.waiting[0]
            hits = kv.lookup(req)
            num_new = req.num_tokens - hits * limits.block_size
            threshold = limits.long_prefill_token_threshold
            if 0 < threshold < num_new:
                num_new = threshold
            if not limits.enable_chunked_prefill and num_new > budget:
                plan.admission_blocked = True
                return
            if num_new > budget:
                num_new = budget
            if not self._fits_whole(req, hits) or not kv.allocate(req, num_new, hits):
                plan.admission_blocked = True
                return
            self.waiting.popleft()
            self.running.append(req)
            req.seq = self.num_admitted
            self.num_admitted += 1
            if req.state != PREEMPTED:
                req.cached_tokens = hits * limits.block_size
            req.state = RUNNING
            plan.scheduled.append((req, num_new))
            plan.new.append(req)
            budget -= num_new

    def _fits_whole(self, req: Req, hits: int, extra_free: int = 0) -> bool:
        """The admission gate (``scheduler_reserve_full_isl``; always true when it is off)."""
        if not self.limits.scheduler_reserve_full_isl:
            return True
        if hits:
            return self.kv.full_sequence_fits(req, hits)
        return self._whole_need(req) <= self.kv.pool.num_free + extra_free

    def _whole_need(self, req: Req) -> int:
        """The free blocks the admission gate asks for a waiting request with no cache hit."""
        kv = self.kv
        if kv.grouped:
            return kv.admission_blocks(req)
        tokens = req.num_tokens if req.num_tokens < kv.max_model_len else kv.max_model_len
        return -(-tokens // kv.block_size)

    def head_admissible(self, budget: int, seats: int = 0, blocks: int = 0) -> bool:
        """Whether the next step could admit the waiting head, given ``budget`` spare tokens.

        ``seats`` and ``blocks`` are freed before it (zombies about to be released; more room
        never makes an admission impossible).  Side-effect free.  Answers True (maybe)
        whenever a prefix-cache hit could change the answer, so callers that fast-forward stay
        exact.
        """
        return self.head_block_need(budget, seats) <= self.kv.num_free + blocks

    def head_block_need(self, budget: int, seats: int = 0) -> float:
        """The free blocks the waiting head's admission needs with ``budget`` spare tokens and
        ``seats`` more seats (:meth:`head_admissible`): ``inf`` when no number of blocks admits
        it, 0 when a prefix-cache hit could (maybe now)."""
        if not self.waiting or budget <= 0 or len(self.running) - seats >= self.limits.max_num_seqs:
            return math.inf
        head = self.waiting[0]
        if self.kv.prefix_caching and (head.prefix_blocks or head.preemptions):
            return 0.0
        num_new = head.num_tokens
        threshold = self.limits.long_prefill_token_threshold
        if 0 < threshold < num_new:
            num_new = threshold
        if not self.limits.enable_chunked_prefill and num_new > budget:
            return math.inf
        if self.limits.scheduler_reserve_full_isl:  # implies room for the first chunk
            return self._whole_need(head)
        return self.kv.blocks_needed(head, min(num_new, budget))

    def update(self, plan: StepPlan, now: float) -> list[Req]:
        """Apply a finished step at time ``now``: advance, sample tokens, retire finished requests."""
        finished: list[Req] = []
        gap = self.recorder.gap if self.recorder is not None else None
        index, track = self.step_index, self.limits.async_scheduling  # Req.lag matters only then
        for req, n in plan.scheduled:
            if advance_request(req, n, now, index, track, gap) and req.generated >= req.target:
                finished.append(req)
        if finished:
            self.retire(finished, now)
        return finished

    def retire(self, finished: list[Req], now: float) -> None:
        """Mark finished requests; free them and drop them from ``running`` (async: next step)."""
        for req in finished:
            req.finish = now
            req.state = FINISHED
        if self.limits.async_scheduling:
            self.zombies.extend(finished)
        else:
            self._free_finished(finished)

    def release_zombies(self) -> None:
        """Free the requests kept by the previous step's ``update`` (asynchronous scheduling)."""
        zombies, self.zombies = self.zombies, []
        self._free_finished(zombies)

    def _free_finished(self, finished: list[Req]) -> None:
        for req in finished:
            self.kv.free(req, preempted=False)
        if len(finished) <= 4:
            for req in finished:
                self.running.remove(req)
        else:
            done = {id(r) for r in finished}
            self.running = [r for r in self.running if id(r) not in done]
