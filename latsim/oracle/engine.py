"""``--engine vllm-exact``: vLLM's own scheduler driven on latsim's clock (needs vLLM importable;
about 0.5 ms per step, never fast-forwarded).  Everything else is vLLM's spec."""

from __future__ import annotations

from dataclasses import replace

from latsim.deployment import EngineConfig
from latsim.engines.vllm.engine import SPEC as VLLM
from latsim.engines.vllm.engine import limits_for
from latsim.sim.engine_spec import KvPlan
from latsim.sim.protocols import Scheduler


def make_scheduler(engine: EngineConfig, memory: KvPlan) -> Scheduler:
    from latsim.oracle.vllm_exact_scheduler import ExactVllmScheduler

    return ExactVllmScheduler(limits_for(engine, memory), memory.num_blocks)


SPEC = replace(VLLM, name="vllm-exact", make_scheduler=make_scheduler, make_fast=lambda engine, memory: None)
