"""Static batching's :class:`~latsim.sim.engine_spec.EngineSpec`.

It shares vLLM's memory plan, server defaults, CUDA-graph limit and host terms (the same
kernels and engine loop, without continuous batching), and runs synchronously: asynchronous
scheduling is a vLLM feature.
"""

from __future__ import annotations

from dataclasses import replace

from latsim.deployment import EngineConfig
from latsim.engines.static.scheduler import StaticBatchScheduler
from latsim.engines.vllm.engine import SPEC as VLLM
from latsim.engines.vllm.engine import limits_for
from latsim.sim.engine_spec import KvPlan


def make_scheduler(engine: EngineConfig, memory: KvPlan) -> StaticBatchScheduler:
    limits = replace(limits_for(engine, memory), async_scheduling=False)
    return StaticBatchScheduler(limits, memory.num_blocks, engine.static_batch_size or limits.max_num_seqs)


SPEC = replace(VLLM, name="static", make_scheduler=make_scheduler, make_fast=lambda engine, memory: None,
               overlaps_host=lambda engine: False)
