"""``--engine vllm-exact``: vLLM's own scheduler, stepped by latsim's clock and cost model.

:class:`ExactVllmScheduler` has the interface of the reference stepping path of
:mod:`latsim.sim.replica` (``add_request``, ``has_work``, ``schedule``, ``update``,
``zombies``, ``num_preemptions``, ``peak_blocks_used``, ``recorder``) but every decision is
taken by vLLM's ``Scheduler`` (or ``AsyncScheduler``) of the installed version, driven through
:class:`latsim.oracle.vllm_exact.VllmCore` as vLLM's engine core drives it, with a fake model
runner. Use it when the exact semantics of that vLLM version matter more than speed: it is
slower, about 0.5 ms of CPU per step with ~30 running requests and ~3.5 ms with ~200 (vLLM's
``schedule`` and ``update_from_output``; vLLM 0.25.1), against tens of microseconds for
latsim's reference scheduler and less for its fast engine (the default ``--engine vllm``),
and it never fast-forwards. The first one built in a process imports vLLM (a few seconds).

Mapping. Each latsim :class:`Req` becomes a vLLM ``Request`` named ``str(req.idx)`` whose
prompt ids share the first ``prefix_blocks * block_size`` tokens within its prefix group (the
blocks latsim's prefix cache can share) and are private otherwise; it asks for exactly
``target`` tokens (``max_tokens = min_tokens``, EOS ignored).

Timing. ``update(plan, now)`` stamps token times from the plan (a request samples in a step
whose scheduled tokens reach the end of its known tokens, as vLLM's model runner does) at once,
while vLLM's ``update_from_output`` runs when its engine core would run it: in the same step
synchronously, after the next ``schedule()`` with asynchronous scheduling. Requests that
finished in a step whose output is still in flight are ``zombies`` (they hold their seat and
blocks in vLLM), as with :class:`~latsim.engines.vllm.scheduler.VllmScheduler`. When an output is
applied, the requests vLLM reports finished must be those latsim counted; a mismatch raises
``RuntimeError``.
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING

from latsim.engines.vllm.launch import LaunchClock
from latsim.engines.vllm.scheduler import SchedulerLimits
from latsim.oracle.steprecord import StreamRequest
from latsim.sim.request import FINISHED, PREEMPTED, RUNNING, Req
from latsim.sim.step import StepPlan

if TYPE_CHECKING:
    from latsim.oracle.vllm_exact import InFlight, VllmCore
    from latsim.sim.recorder import Recorder

MISSING_VLLM = (
    "--engine vllm-exact needs vLLM importable (pip install latsim[vllm]; without a GPU: "
    "pip install -r .ci/vllm-ref-requirements.txt && pip install --no-deps vllm==0.25.1), "
    "or use --engine vllm"
)


def vllm_available() -> bool:
    """Whether ``import vllm`` can succeed (checked without importing it)."""
    return importlib.util.find_spec("vllm") is not None


class ExactVllmScheduler:
    """vLLM's own v1 scheduler behind latsim's scheduler interface (slower: ~0.5 ms per step and up).

    ``num_blocks`` is vLLM's ``num_gpu_blocks`` (its null block included). ``seed`` draws the
    token ids of prompts and sampled tokens (any seed gives the same schedule); the KV-cache
    groups are the limits' (``kv_layout``: sliding-window layers in their own groups). Raises
    ``ValueError`` when vLLM is not importable or would refuse to start with this pool (fewer
    than one ``max_model_len`` request's blocks).
    """

    name = "vllm-exact"

    def __init__(self, limits: SchedulerLimits, num_blocks: int, seed: int = 0) -> None:
        if not vllm_available():
            raise ValueError(MISSING_VLLM)
        from latsim.oracle.vllm_exact import vllm_core

        self.limits = limits
        self.core: VllmCore = vllm_core(
            seed=seed,
            num_gpu_blocks=num_blocks,
            block_size=limits.block_size,
            max_num_seqs=limits.max_num_seqs,
            max_num_batched_tokens=limits.max_num_batched_tokens,
            max_model_len=limits.max_model_len,
            enable_chunked_prefill=limits.enable_chunked_prefill,
            enable_prefix_caching=limits.enable_prefix_caching,
            async_scheduling=limits.async_scheduling,
            num_kv_heads=8,
            head_dim=128,
            long_prefill_token_threshold=limits.long_prefill_token_threshold,
            scheduler_reserve_full_isl=limits.scheduler_reserve_full_isl,
            watermark=0.0,
            kv_full_groups=limits.kv_layout.full,
            kv_sliding_groups=limits.kv_layout.sliding,
            sliding_window=limits.kv_layout.window,
        )
        self.reqs: dict[str, Req] = {}
        self.zombies: list[Req] = []
        self.launch = LaunchClock.for_executor(limits.executor)
        self.step_index = 0
        self.recorder: Recorder | None = None
        self._last: tuple[StepPlan, InFlight] | None = None  # the latest non-empty plan, not yet updated
        self._finished: dict[int, tuple[str, ...]] = {}  # id(item) -> what latsim counted finished

    @property
    def async_scheduling(self) -> bool:
        return self.limits.async_scheduling

    @property
    def num_preemptions(self) -> int:
        return self.core.num_preemptions

    @property
    def peak_blocks_used(self) -> int:
        return self.core.peak_blocks_used

    def add_request(self, req: Req) -> None:
        """Queue ``req`` in vLLM (the router has already refused what vLLM's front end refuses)."""
        rid = str(req.idx)
        self.reqs[rid] = req
        bs = self.limits.block_size
        shared = req.prefix_blocks * bs if req.group >= 0 else 0
        self.core.add(StreamRequest(rid, 0, req.prompt, req.target, req.group, shared))

    def has_work(self) -> bool:
        return bool(self.core.scheduler.has_requests())

    def schedule(self) -> StepPlan:
        """One engine-core iteration; the plan lists vLLM's decision in its schedule order."""
        from latsim.oracle.vllm_exact import Draft

        self.step_index += 1
        item, applied = self.core.engine_step(Draft(self.step_index))
        if applied is not None:
            self._check(applied)
            self.zombies = []
        plan = StepPlan()
        if item is None:
            return plan
        reqs, draft = self.reqs, item.draft
        for rid in draft.preempted:
            req = reqs[rid]
            req.num_computed = 0
            req.preemptions += 1
            if req.state != FINISHED:
                req.state = PREEMPTED
            plan.preempted.append(req)
        for rid in draft.new:
            req = reqs[rid]
            if req.state != PREEMPTED:
                req.cached_tokens = draft.cached_tokens.get(rid, 0)
            req.state = RUNNING
            plan.new.append(req)
        computed = item.computed
        for rid, n in draft.scheduled:
            req = reqs[rid]
            req.num_computed = computed[rid] - n  # prefix-cache hits included: the step's context
            plan.scheduled.append((req, n))
        if plan.scheduled:
            self._last = (plan, item)
        return plan

    def update(self, plan: StepPlan, now: float) -> list[Req]:
        """Stamp the tokens of ``plan`` at ``now``; the requests it finished.

        ``plan`` must be the latest non-empty plan of :meth:`schedule`, updated once (else
        ``ValueError``).
        """
        if self._last is None or self._last[0] is not plan:
            raise ValueError("update() takes the latest plan of schedule() that scheduled something, once")
        item = self._last[1]
        self._last = None
        sampling, computed = item.sampling, item.computed
        gap = self.recorder.gap if self.recorder is not None else None
        finished: list[Req] = []
        for req, _ in plan.scheduled:
            rid = str(req.idx)
            req.num_computed = computed[rid]
            if rid not in sampling:
                continue
            req.generated += 1
            if req.generated == 1:
                req.first_token = now
            elif gap is not None:
                gap(req.last_token, now)
            req.last_token = now
            if req.generated >= req.target:
                finished.append(req)
        for req in finished:
            req.finish = now
            req.state = FINISHED
        self._finished[id(item)] = tuple(sorted(str(r.idx) for r in finished))
        if item.applied:
            self._check(item)
        else:
            self.zombies.extend(finished)
        return finished

    def _check(self, item: InFlight) -> None:
        """vLLM's finished requests for ``item`` must be latsim's (once both are known)."""
        counted = self._finished.pop(id(item), None)
        if counted is None:
            return
        reported = tuple(sorted(item.draft.finished))
        if reported != counted:
            raise RuntimeError(f"vLLM finished {list(reported)} in a step where latsim counted {list(counted)}")
        for rid in reported:
            self.reqs.pop(rid, None)
