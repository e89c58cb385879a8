"""vLLM v1 continuous batching: one token budget per step, running requests first.

Design note (the hot function is :meth:`VllmScheduler.schedule`).  A step visits the running
requests in admission order, giving each what it still needs (a decode needs 1; a chunked or
recomputed prefill needs the rest of its tokens) until the budget is spent; when a request's
blocks cannot be allocated the *last* running request is preempted (recompute: blocks freed,
progress lost, put back at the front of the waiting queue), possibly the request itself.  Only
when no preemption happened are waiting requests admitted, in FCFS order, while the budget,
``max_num_seqs`` and the KV blocks allow; an admission that cannot be allocated stops the loop.
``docs/vllm-v1-scheduling.md`` lists the vLLM 0.25.1 rules this follows.

This is the readable reference, stepped one ``schedule``/``update`` at a time by
:mod:`latsim.engine.stream` and ``simulate(..., fast_forward=False)``; simulations use
:class:`~latsim.engine.fastsched.FastVllmScheduler`, which makes the same decisions with
O(1) work per decoding request.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from latsim.engine.kvmanager import KVManager
from latsim.engine.request import FINISHED, PREEMPTED, RUNNING, Req

if TYPE_CHECKING:
    from latsim.engine.recorder import Recorder


@dataclass(frozen=True)
class SchedulerLimits:
    """The knobs a scheduler obeys (resolved: no ``None``)."""

    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int
    block_size: int = 16
    enable_chunked_prefill: bool = True
    enable_prefix_caching: bool = True
    long_prefill_token_threshold: int = 0

    def __post_init__(self) -> None:
        if not self.enable_chunked_prefill and self.max_num_batched_tokens < self.max_model_len:
            raise ValueError(
                f"without chunked prefill max_num_batched_tokens ({self.max_num_batched_tokens}) must be "
                f">= max_model_len ({self.max_model_len}), as vLLM requires"
            )


@dataclass
class StepPlan:
    """One step's decision: ``(request, tokens)`` in schedule order, plus what changed."""

    scheduled: list[tuple[Req, int]] = field(default_factory=list)
    new: list[Req] = field(default_factory=list)
    preempted: list[Req] = field(default_factory=list)
    admission_blocked: bool = False

    @property
    def num_tokens(self) -> int:
        return sum(n for _, n in self.scheduled)


class VllmScheduler:
    """vLLM v1 scheduling policy (FCFS) over a :class:`KVManager`."""

    name = "vllm"

    def __init__(self, limits: SchedulerLimits, num_blocks: int) -> None:
        self.limits = limits
        self.kv = KVManager(num_blocks, limits.block_size, limits.max_model_len, limits.enable_prefix_caching)
        self.running: list[Req] = []
        self.waiting: deque[Req] = deque()
        self.num_preemptions = 0
        self.recorder: Recorder | None = None

    def add_request(self, req: Req) -> None:
        self.waiting.append(req)

    def has_work(self) -> bool:
        return bool(self.running or self.waiting)

    def schedule(self) -> StepPlan:
        plan = StepPlan()
        budget = self._schedule_running(plan, self.limits.max_num_batched_tokens)
        if not plan.preempted:
            self._schedule_waiting(plan, budget)
        return plan

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
            num_new = self._new_tokens(req, budget)
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
        self.kv.free(req, preempted=True)
        req.num_computed = 0
        req.state = PREEMPTED
        req.preemptions += 1
        self.num_preemptions += 1
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
            num_new = min(num_new, budget)
            if not kv.allocate(req, num_new, hits):
                plan.admission_blocked = True
                return
            self.waiting.popleft()
            self.running.append(req)
            if req.state != PREEMPTED:
                req.cached_tokens = hits * limits.block_size
            req.state = RUNNING
            plan.scheduled.append((req, num_new))
            plan.new.append(req)
            budget -= num_new

    def head_admissible(self, budget: int) -> bool:
        """Whether the next step could admit the waiting head, given ``budget`` spare tokens.

        Side-effect free.  Answers True (maybe) whenever a prefix-cache hit could change the
        answer, so callers that fast-forward stay exact.
        """
        if not self.waiting or budget <= 0 or len(self.running) >= self.limits.max_num_seqs:
            return False
        head = self.waiting[0]
        if self.kv.prefix_caching and (head.prefix_blocks or head.preemptions):
            return True
        num_new = head.num_tokens
        threshold = self.limits.long_prefill_token_threshold
        if 0 < threshold < num_new:
            num_new = threshold
        if not self.limits.enable_chunked_prefill and num_new > budget:
            return False
        return self.kv.blocks_needed(head, min(num_new, budget)) <= self.kv.num_free

    def update(self, plan: StepPlan, now: float) -> list[Req]:
        """Apply a finished step at time ``now``: advance, sample tokens, retire finished requests."""
        finished: list[Req] = []
        gap = self.recorder.gap if self.recorder is not None else None
        for req, n in plan.scheduled:
            req.num_computed += n
            if req.num_computed < req.num_tokens:
                continue
            req.generated += 1
            if req.generated == 1:
                req.first_token = now
            elif gap is not None:
                gap(now - req.last_token)
            req.last_token = now
            if req.generated >= req.target:
                finished.append(req)
        if finished:
            self.retire(finished, now)
        return finished

    def retire(self, finished: list[Req], now: float) -> None:
        """Free and drop finished requests from the running list."""
        done = set()
        for req in finished:
            req.finish = now
            req.state = FINISHED
            self.kv.free(req, preempted=False)
            done.add(id(req))
        self.running = [r for r in self.running if id(r) not in done]
