"""vLLM's :class:`~latsim.sim.engine_spec.EngineSpec`: continuous batching, vLLM v1 semantics."""

from __future__ import annotations

from latsim.deployment import Deployment, EngineConfig, resolve_engine
from latsim.engines.vllm.defaults import cudagraph_limit, server_defaults
from latsim.engines.vllm.fastsched import FastVllmScheduler
from latsim.engines.vllm.host_terms import default_host_overhead
from latsim.engines.vllm.memory import plan_memory
from latsim.engines.vllm.scheduler import SchedulerLimits, VllmScheduler
from latsim.sim.engine_spec import EngineSpec, KvPlan


def limits_for(engine: EngineConfig, memory: KvPlan) -> SchedulerLimits:
    """Resolved scheduler limits (``engine`` must come from ``resolve_engine``).

    ``async_scheduling`` and ``executor`` follow the deployment (vLLM 0.25.1 turns the first on by
    default and picks the second by the GPUs of an engine: :func:`default_executor`);
    ``scheduler_reserve_full_isl`` keeps vLLM's default (on).
    """
    assert engine.max_num_seqs is not None and engine.max_num_batched_tokens is not None and engine.executor is not None
    tokens = engine.max_num_batched_tokens
    if not engine.enable_chunked_prefill:  # a defaulted budget only: a given one is checked by plan_checked
        tokens = max(tokens, memory.max_model_len)
    return SchedulerLimits(
        max_num_seqs=engine.max_num_seqs,
        max_num_batched_tokens=tokens,
        max_model_len=memory.max_model_len,
        block_size=engine.block_size,
        enable_chunked_prefill=engine.enable_chunked_prefill,
        enable_prefix_caching=engine.enable_prefix_caching,
        async_scheduling=engine.async_scheduling,
        executor=engine.executor,
        kv_layout=memory.kv_layout(tokens),
    )


def plan_checked(deployment: Deployment, engine: EngineConfig | None = None) -> KvPlan:
    """vLLM's memory plan, after the token-budget checks vLLM 0.25.1 makes at start-up.

    As ``vllm serve`` does (``EngineArgs`` and ``SchedulerConfig.verify_max_model_len``): a
    defaulted ``max_num_batched_tokens`` without chunked prefill is raised to
    ``max_model_len`` (:func:`limits_for`), but a given one below ``max_model_len`` without
    chunked prefill is an error, and so is a budget below a given ``max_num_seqs`` (a defaulted
    one is lowered to the budget: :func:`~latsim.deployment.resolve_engine`).
    """
    memory = plan_memory(deployment, engine)
    check_token_budget(deployment, memory.max_model_len)
    return memory


def check_token_budget(deployment: Deployment, max_model_len: int) -> None:
    """ValueError for a token budget vLLM 0.25.1 refuses to start with (see :func:`plan_checked`)."""
    given, engine = deployment.engine.max_num_batched_tokens, resolve_engine(deployment)
    tokens, seqs = engine.max_num_batched_tokens, engine.max_num_seqs
    assert tokens is not None and seqs is not None
    if given is not None and not engine.enable_chunked_prefill and given < max_model_len:
        raise ValueError(
            f"max_num_batched_tokens {given} is below max_model_len {max_model_len} without chunked "
            "prefill, which vLLM 0.25.1 refuses to start with; give --max-num-batched-tokens >= "
            f"{max_model_len}, a smaller --max-model-len, or --chunked-prefill")
    if deployment.engine.max_num_seqs is not None and tokens < seqs:
        raise ValueError(
            f"max_num_batched_tokens {tokens} is below max_num_seqs {seqs}, which vLLM 0.25.1 refuses to "
            f"start with; give --max-num-batched-tokens >= {seqs} or --max-num-seqs <= {tokens}")


def graph_tokens(engine: EngineConfig) -> int:
    """The CUDA-graph limit of a resolved ``engine``."""
    if engine.max_num_seqs is None or engine.max_num_batched_tokens is None:
        raise ValueError("graph_tokens needs a resolved engine (see latsim.deployment.resolve_engine)")
    return cudagraph_limit(engine.max_num_seqs, engine.max_num_batched_tokens)


def default_executor(tp: int) -> str:
    """vLLM 0.25.1's executor for an engine of ``tp`` GPUs on one host (``ParallelConfig``): the
    model in the engine-core process (``uni``) on one GPU, worker processes (``mp``) above."""
    return "mp" if tp > 1 else "uni"


SPEC = EngineSpec(
    name="vllm",
    server_defaults=server_defaults,
    plan_memory=plan_checked,
    make_scheduler=lambda engine, memory: VllmScheduler(limits_for(engine, memory), memory.num_blocks),
    make_fast=lambda engine, memory: FastVllmScheduler(limits_for(engine, memory), memory.num_blocks),
    graph_tokens=graph_tokens,
    default_executor=default_executor,
    overlaps_host=lambda engine: engine.async_scheduling,
    host_terms=default_host_overhead,
)
