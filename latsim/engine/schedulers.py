"""Scheduler selection: engine name -> scheduler class (one place to add engines)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from latsim.deployment import EngineConfig
from latsim.engine.fastsched import FastVllmScheduler
from latsim.engine.memory import MemoryPlan
from latsim.engine.scheduler import SchedulerLimits, VllmScheduler
from latsim.engine.static import StaticBatchScheduler


def limits_for(engine: EngineConfig, memory: MemoryPlan) -> SchedulerLimits:
    """Resolved scheduler limits (``engine`` must come from ``resolve_engine``).

    ``async_scheduling`` follows the deployment (vLLM 0.25.1 turns it on by default);
    ``scheduler_reserve_full_isl`` keeps vLLM's default (on).
    """
    assert engine.max_num_seqs is not None and engine.max_num_batched_tokens is not None
    tokens = engine.max_num_batched_tokens
    if not engine.enable_chunked_prefill:
        tokens = max(tokens, memory.max_model_len)
    return SchedulerLimits(
        max_num_seqs=engine.max_num_seqs,
        max_num_batched_tokens=tokens,
        max_model_len=memory.max_model_len,
        block_size=engine.block_size,
        enable_chunked_prefill=engine.enable_chunked_prefill,
        enable_prefix_caching=engine.enable_prefix_caching,
        async_scheduling=engine.async_scheduling,
    )


def _vllm(engine: EngineConfig, memory: MemoryPlan, fast: bool):
    cls = FastVllmScheduler if fast else VllmScheduler
    return cls(limits_for(engine, memory), memory.num_blocks)


def _static(engine: EngineConfig, memory: MemoryPlan, fast: bool):
    del fast  # stepped one step at a time either way
    limits = replace(limits_for(engine, memory), async_scheduling=False)  # a vLLM feature
    return StaticBatchScheduler(limits, memory.num_blocks, engine.static_batch_size or limits.max_num_seqs)


def _vllm_exact(engine: EngineConfig, memory: MemoryPlan, fast: bool):
    """vLLM's own scheduler (needs vLLM importable; ~0.5 ms per step, never fast-forwarded)."""
    del fast  # no fast engine: every step goes through vLLM's schedule()/update_from_output()
    from latsim.engine.vllm_exact_scheduler import ExactVllmScheduler

    return ExactVllmScheduler(limits_for(engine, memory), memory.num_blocks)


SCHEDULERS: dict[str, Callable] = {"vllm": _vllm, "static": _static, "vllm-exact": _vllm_exact}


def make_scheduler(engine: EngineConfig, memory: MemoryPlan, fast: bool = True):
    """The scheduler of ``engine.engine``; ``fast`` picks the fast engine where one exists.

    The fast engine makes the same decisions as the reference one (tests compare them).
    """
    try:
        return SCHEDULERS[engine.engine](engine, memory, fast)
    except KeyError:
        raise ValueError(f"engine must be one of {', '.join(SCHEDULERS)}, got {engine.engine!r}") from None
