"""What an engine gives the simulator: one :class:`EngineSpec` per engine, built in the
engine's own folder (``latsim/engines/<name>/engine.py``) and found through
:mod:`latsim.registry`.  Adding an engine is a folder with a ``SPEC`` and one registry line.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from latsim.catalog.devices import DeviceSpec
    from latsim.costmodel.host import HostOverhead
    from latsim.deployment import Deployment, EngineConfig
    from latsim.sim.kvlayout import KvLayout
    from latsim.sim.protocols import FastForward, Scheduler


class KvPlan(Protocol):
    """The memory plan the simulator needs: how many KV blocks of which size, the longest request."""

    @property
    def num_blocks(self) -> int: ...

    @property
    def usable_blocks(self) -> int: ...

    @property
    def block_size(self) -> int: ...

    @property
    def max_model_len(self) -> int: ...

    @property
    def kv_capacity_tokens(self) -> int: ...

    @property
    def kv_tokens_unwindowed(self) -> int: ...

    def kv_tokens_at(self, tokens: int) -> int:
        """The context the pool holds in requests of ``tokens`` each."""

    def kv_layout(self, max_num_batched_tokens: int) -> KvLayout:
        """How the blocks are grouped when some layers slide (:class:`~latsim.sim.kvlayout.KvLayout`)."""

    def as_dict(self) -> dict[str, float]:
        """The plan's figures, for reports."""


@dataclass(frozen=True)
class EngineSpec:
    """An engine's contract with the simulator (every field a function of resolved settings).

    - ``server_defaults(device)``: ``(max_num_batched_tokens, max_num_seqs)`` when unset.
    - ``plan_memory(deployment, engine)``: the KV-block plan of one replica (``engine`` resolved).
    - ``make_scheduler(engine, memory)``: the reference scheduler, stepped one step at a time.
    - ``make_fast(engine, memory)``: a :class:`~latsim.sim.protocols.FastForward` twin with the
      same decisions, or ``None`` when the engine has none.
    - ``graph_tokens(engine)``: the most tokens a step may have and replay a CUDA graph
      (``None``: every step is priced as a graph replay).
    - ``default_executor(tp)``: where the model runs when the deployment does not say, for an
      engine of ``tp`` GPUs (:data:`latsim.deployment.EXECUTORS`).
    - ``overlaps_host(engine)``: whether the engine's CPU work overlaps the GPU's.
    - ``host_terms(kind, model)``: the engine's fitted CPU-side terms for a GPU model of ``kind``,
      serving the catalog model named ``model`` (``None``: any; a model's own measured terms,
      such as its graph-less launch, where the engine has them).
    """

    name: str
    server_defaults: Callable[[DeviceSpec], tuple[int, int]]
    plan_memory: Callable[[Deployment, EngineConfig], KvPlan]
    make_scheduler: Callable[[EngineConfig, KvPlan], Scheduler]
    make_fast: Callable[[EngineConfig, KvPlan], FastForward | None]
    graph_tokens: Callable[[EngineConfig], int | None]
    default_executor: Callable[[int], str]
    overlaps_host: Callable[[EngineConfig], bool]
    host_terms: Callable[[str, str | None], HostOverhead]
