"""vLLM's :class:`~latsim.sim.engine_spec.EngineSpec`: continuous batching, vLLM v1 semantics."""

from __future__ import annotations

from latsim.deployment import EngineConfig
from latsim.engines.vllm.defaults import cudagraph_limit, server_defaults
from latsim.engines.vllm.fastsched import FastVllmScheduler
from latsim.engines.vllm.host_terms import default_host_overhead
from latsim.engines.vllm.memory import plan_memory
from latsim.engines.vllm.scheduler import SchedulerLimits, VllmScheduler
from latsim.sim.engine_spec import EngineSpec, KvPlan


def limits_for(engine: EngineConfig, memory: KvPlan) -> SchedulerLimits:
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


def graph_tokens(engine: EngineConfig) -> int:
    """The CUDA-graph limit of a resolved ``engine``."""
    if engine.max_num_seqs is None or engine.max_num_batched_tokens is None:
        raise ValueError("graph_tokens needs a resolved engine (see latsim.deployment.resolve_engine)")
    return cudagraph_limit(engine.max_num_seqs, engine.max_num_batched_tokens)


SPEC = EngineSpec(
    name="vllm",
    server_defaults=server_defaults,
    plan_memory=plan_memory,
    make_scheduler=lambda engine, memory: VllmScheduler(limits_for(engine, memory), memory.num_blocks),
    make_fast=lambda engine, memory: FastVllmScheduler(limits_for(engine, memory), memory.num_blocks),
    graph_tokens=graph_tokens,
    overlaps_host=lambda engine: engine.async_scheduling,
    host_terms=default_host_overhead,
)
