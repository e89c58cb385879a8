"""Drive vLLM's own v1 scheduler on the CPU and record what it decides, step by step.

This is the oracle for latsim's scheduler: the same step-indexed request stream goes through
vLLM's ``Scheduler`` (or ``AsyncScheduler``) with a fake model runner, and every ``schedule()``
becomes a :class:`StepRecord`. vLLM is an optional dependency imported only when a scheduler
is built (:func:`build_vllm_scheduler`); the semantics it exhibits are written up in
``docs/vllm-v1-scheduling.md``. The same pieces (:func:`build_vllm_scheduler`,
:class:`VllmCore`) drive ``--engine vllm-exact`` on latsim's clock
(:mod:`latsim.oracle.vllm_exact_scheduler`). This module imports nothing from latsim but
:mod:`latsim.oracle.steprecord` and :mod:`latsim.oracle.vllm_build` (which builds the scheduler):
the oracle runs it in vLLM's reference python.

Design note on the loop (:meth:`VllmCore.engine_step`): it mirrors the engine core's
``EngineCore.step`` (synchronous) and ``EngineCore.step_with_batch_queue`` (asynchronous, two
batches in flight) in ``vllm/v1/engine/core.py``: a step is scheduled only when the scheduler
``has_requests()``; with async scheduling the output of step N is applied right *after* step
N+1 has been scheduled. Arrivals of step N are added just before step N is scheduled.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from latsim.oracle.steprecord import StepRecord, StreamRequest
from latsim.oracle.vllm_build import VOCAB_SIZE, block_hasher, build_vllm_scheduler, check_pool, oracle_layout


def rejected_by_front_end(prompt_tokens: int, output_tokens: int, max_model_len: int) -> bool:
    """Whether vLLM 0.25.1 refuses the request before it reaches the scheduler.

    The engine's ``InputProcessor._validate_prompt_len`` (``vllm/v1/engine/input_processor.py``)
    rejects an empty prompt and any prompt of ``max_model_len`` tokens or more; the OpenAI
    server's ``TokenizeParams._token_len_check`` (``vllm/renderers/params.py``, built with
    ``max_output_tokens=max_tokens`` by ``CompletionRequest.build_tok_params``) rejects
    ``prompt + max_tokens > max_model_len``.
    """
    return (
        prompt_tokens <= 0 or prompt_tokens >= max_model_len or prompt_tokens + output_tokens > max_model_len
    )


def run_vllm_scheduler(
    stream: Sequence[StreamRequest],
    *,
    num_gpu_blocks: int,
    block_size: int = 16,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    max_model_len: int,
    enable_chunked_prefill: bool = True,
    enable_prefix_caching: bool = True,
    async_scheduling: bool = False,
    num_kv_heads: int = 8,
    head_dim: int = 128,
    long_prefill_token_threshold: int = 0,
    scheduler_reserve_full_isl: bool = True,
    watermark: float = 0.0,
    kv_full_groups: int = 1,
    kv_sliding_groups: int = 0,
    sliding_window: int = 0,
    seed: int = 0,
    max_steps: int = 100_000,
) -> list[StepRecord]:
    """Run ``stream`` through vLLM's scheduler and return one record per step.

    Records are contiguous: ``records[i].step == i``; a step in which the engine had nothing
    to schedule has ``scheduled == ()``. The run stops once every request has finished or
    been rejected (in-flight async outputs are applied first), or after ``max_steps`` steps.
    ``num_gpu_blocks`` counts the pool as vLLM does, including its reserved null block, so
    ``num_gpu_blocks - 1`` blocks are usable. Each request asks for exactly
    ``output_tokens`` tokens (``max_tokens = min_tokens``, EOS ignored). Requests the front
    end refuses (:func:`rejected_by_front_end`) appear in ``rejected`` of their arrival step.
    In ``finished`` a request is listed on the step whose output completed it (with async
    scheduling that output is applied one step later). ``cached_tokens`` holds the
    prefix-cache hits (> 0 only) of the requests admitted in that step.

    Raises ``ValueError`` for an invalid stream or a KV pool vLLM would refuse to start with
    (fewer than ``ceil(max_model_len / block_size)`` blocks), and ``ImportError`` when vLLM
    is not installed.  ``kv_full_groups`` / ``kv_sliding_groups`` / ``sliding_window`` lay the
    KV cache out in groups as a model with sliding-window layers has them
    (:mod:`latsim.sim.kvlayout`; default one full-attention group).
    """
    _check_stream(stream)
    core = vllm_core(
        seed=seed,
        num_gpu_blocks=num_gpu_blocks,
        block_size=block_size,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        max_model_len=max_model_len,
        enable_chunked_prefill=enable_chunked_prefill,
        enable_prefix_caching=enable_prefix_caching,
        async_scheduling=async_scheduling,
        num_kv_heads=num_kv_heads,
        head_dim=head_dim,
        long_prefill_token_threshold=long_prefill_token_threshold,
        scheduler_reserve_full_isl=scheduler_reserve_full_isl,
        watermark=watermark,
        kv_full_groups=kv_full_groups,
        kv_sliding_groups=kv_sliding_groups,
        sliding_window=sliding_window,
    )
    return _Driver(core, stream).run(max_steps)


def vllm_core(*, seed: int, **scheduler_kw: Any) -> VllmCore:
    """A :class:`VllmCore` around vLLM's scheduler built from ``scheduler_kw`` (the keywords of
    :func:`~latsim.oracle.vllm_build.build_vllm_scheduler`), once :func:`check_pool` accepts the
    pool; two steps in flight with asynchronous scheduling, one without."""
    check_pool(scheduler_kw["num_gpu_blocks"], scheduler_kw["block_size"], scheduler_kw["max_model_len"],
               oracle_layout(scheduler_kw))
    return VllmCore(build_vllm_scheduler(**scheduler_kw), scheduler_kw["max_model_len"], seed,
                    in_flight=2 if scheduler_kw["async_scheduling"] else 1)


def _check_stream(stream: Sequence[StreamRequest]) -> None:
    ids = [r.request_id for r in stream]
    if len(set(ids)) != len(ids):
        raise ValueError("request_id values in the stream must be unique")
    for r in stream:
        if r.arrival_step < 0:
            raise ValueError(f"{r.request_id}: arrival_step {r.arrival_step} must be >= 0")
        if r.output_tokens < 1:
            raise ValueError(f"{r.request_id}: output_tokens {r.output_tokens} must be >= 1")
        if not 0 <= r.prefix_tokens <= max(r.prompt_tokens, 0):
            raise ValueError(f"{r.request_id}: prefix_tokens {r.prefix_tokens} must be in [0, prompt_tokens]")


def prompt_token_ids(req: StreamRequest, seed: int) -> list[int]:
    """Deterministic prompt ids: a group-wide prefix, then ids private to the request."""
    prefix_rng = random.Random(f"{seed}:group:{req.prefix_group}")
    own_rng = random.Random(f"{seed}:request:{req.request_id}")
    shared = req.prefix_tokens if req.prefix_group >= 0 else 0
    ids = [prefix_rng.randrange(1, VOCAB_SIZE) for _ in range(shared)]
    ids += [own_rng.randrange(1, VOCAB_SIZE) for _ in range(req.prompt_tokens - shared)]
    return ids


@dataclass
class Draft:
    """A step's record while it is being filled in (``finished`` may arrive a step later)."""

    step: int
    scheduled: tuple[tuple[str, int], ...] = ()
    new: tuple[str, ...] = ()
    preempted: tuple[str, ...] = ()
    finished: tuple[str, ...] = ()
    rejected: tuple[str, ...] = ()
    cached_tokens: dict[str, int] = field(default_factory=dict)

    def freeze(self) -> StepRecord:
        return StepRecord(
            step=self.step,
            scheduled=self.scheduled,
            new=self.new,
            preempted=self.preempted,
            finished=self.finished,
            rejected=self.rejected,
            cached_tokens=self.cached_tokens,
        )


@dataclass
class InFlight:
    """A scheduled step whose model output may not have been applied yet.

    ``sampling`` are the requests that sample a token in it, ``computed`` each scheduled
    request's ``num_computed_tokens`` once the step has run; ``applied`` turns true once
    ``update_from_output`` has consumed it (``draft.finished`` is then final).
    """

    draft: Draft
    output: Any
    sampling: frozenset[str]
    computed: dict[str, int] = field(default_factory=dict)
    applied: bool = False


class VllmCore:
    """vLLM's engine-core loop around a scheduler, with a fake model runner.

    :meth:`engine_step` is one iteration of ``EngineCore.step`` (``in_flight=1``) or
    ``EngineCore.step_with_batch_queue`` (``in_flight=2``): schedule when the scheduler has
    requests, then apply the oldest output once the batch queue is full (or nothing more can
    be scheduled). Sampled token ids come from a ``random.Random`` seeded by ``seed``.
    ``peak_blocks_used`` is the most KV blocks in use right after a ``schedule()`` (before the
    output of the step before is applied), out of ``num_gpu_blocks - 1``.
    """

    def __init__(self, scheduler: Any, max_model_len: int, seed: int, in_flight: int) -> None:
        self.scheduler = scheduler
        self.max_model_len = max_model_len
        self.seed = seed
        self.in_flight = in_flight
        self.token_rng = random.Random(f"{seed}:sampled")
        self.queue: deque[InFlight] = deque()
        self.peak_blocks_used = 0
        self.num_preemptions = 0
        self._hasher = block_hasher(scheduler)
        self._pool = scheduler.kv_cache_manager.block_pool
        self._usable = self._pool.num_gpu_blocks - 1  # block 0 is vLLM's null block

    def add(self, req: StreamRequest) -> None:
        """Hand ``req`` to the scheduler (the caller has checked the front end accepts it)."""
        self.scheduler.add_request(self.make_request(req))

    def make_request(self, req: StreamRequest) -> Any:
        from vllm.sampling_params import SamplingParams
        from vllm.v1.request import Request

        params = SamplingParams(max_tokens=req.output_tokens, min_tokens=req.output_tokens, ignore_eos=True)
        return Request(
            request_id=req.request_id,
            prompt_token_ids=prompt_token_ids(req, self.seed),
            sampling_params=params,
            pooling_params=None,
            arrival_time=float(req.arrival_step),
            block_hasher=self._hasher,
        )

    def engine_step(self, draft: Draft) -> tuple[InFlight | None, InFlight | None]:
        """One engine-core iteration: ``(item scheduled or None, item applied or None)``."""
        item = None
        if self.scheduler.has_requests():
            item = self.schedule(draft)
            self.queue.appendleft(item)
            executed = item.output.total_num_scheduled_tokens > 0
            if len(self.queue) < self.in_flight and (executed or self.scheduler.has_requests()):
                return item, None
        elif not self.queue:
            return None, None
        done = self.queue.pop()
        self.apply(done)
        return item, done

    def drain(self) -> None:
        """Apply every output still in flight, oldest first."""
        while self.queue:
            self.apply(self.queue.pop())

    def schedule(self, draft: Draft) -> InFlight:
        running_before = [r.request_id for r in self.scheduler.running]
        out = self.scheduler.schedule()
        used = self._usable - self._pool.get_num_free_blocks()
        if used > self.peak_blocks_used:
            self.peak_blocks_used = used
        requests = self.scheduler.requests
        draft.scheduled = tuple(out.num_scheduled_tokens.items())
        admitted = {d.req_id for d in out.scheduled_new_reqs}
        admitted |= set(out.scheduled_cached_reqs.resumed_req_ids)
        draft.new = tuple(rid for rid, _ in draft.scheduled if rid in admitted)
        computed = {rid: requests[rid].num_computed_tokens for rid, _ in draft.scheduled}
        for rid, n in draft.scheduled:
            hits = computed[rid] - n
            if rid in admitted and hits > 0:
                draft.cached_tokens[rid] = hits
        draft.preempted = _preemption_order(running_before, out.preempted_req_ids)
        self.num_preemptions += len(draft.preempted)
        # The model runner samples for a request whose scheduled tokens reach the end of its
        # known tokens (prefill done, or decoding); a partial prefill chunk samples nothing.
        sampling = frozenset(rid for rid, _ in draft.scheduled if not requests[rid].is_prefill_chunk)
        return InFlight(draft, out, sampling, computed)

    def apply(self, item: InFlight) -> None:
        """``update_from_output`` with one sampled token per sampling request."""
        from vllm.v1.outputs import ModelRunnerOutput

        ids = list(item.output.num_scheduled_tokens)
        tokens = [[self.token_rng.randrange(1, VOCAB_SIZE)] if r in item.sampling else [] for r in ids]
        runner_output = ModelRunnerOutput(
            req_ids=ids, req_id_to_index={r: i for i, r in enumerate(ids)}, sampled_token_ids=tokens
        )
        engine_outputs = self.scheduler.update_from_output(item.output, runner_output)
        item.draft.finished = tuple(
            o.request_id
            for outs in engine_outputs.values()
            for o in outs.outputs
            if o.finish_reason is not None
        )
        item.applied = True


class _Driver:
    """Feeds a step-indexed stream's arrivals to a :class:`VllmCore` and keeps the drafts."""

    def __init__(self, core: VllmCore, stream: Sequence[StreamRequest]) -> None:
        self.core = core
        self.arrivals: dict[int, list[StreamRequest]] = {}
        for req in stream:
            self.arrivals.setdefault(req.arrival_step, []).append(req)
        self.outstanding = {r.request_id for r in stream}
        self.drafts: list[Draft] = []

    def run(self, max_steps: int) -> list[StepRecord]:
        for step in range(max_steps):
            if not self.outstanding:
                break
            draft = Draft(step)
            self.drafts.append(draft)
            draft.rejected = self.add_arrivals(step)
            _, applied = self.core.engine_step(draft)
            if applied is not None:
                self.outstanding.difference_update(applied.draft.finished)
        self.core.drain()
        return [d.freeze() for d in self.drafts]

    def add_arrivals(self, step: int) -> tuple[str, ...]:
        rejected = []
        for req in self.arrivals.get(step, ()):
            if rejected_by_front_end(req.prompt_tokens, req.output_tokens, self.core.max_model_len):
                rejected.append(req.request_id)
                self.outstanding.discard(req.request_id)
            else:
                self.core.add(req)
        return tuple(rejected)


def _preemption_order(running_before: list[str], preempted_ids: set[str]) -> tuple[str, ...]:
    """Victims in the order chosen: FCFS pops them one by one off the tail of ``running``."""
    order = tuple(rid for rid in reversed(running_before) if rid in preempted_ids)
    if len(order) != len(preempted_ids) or set(running_before[len(running_before) - len(order) :]) != set(
        order
    ):
        raise RuntimeError(f"unexpected preemption set {sorted(preempted_ids)} for FCFS")
    return order
