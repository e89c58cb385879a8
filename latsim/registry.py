"""Engine name -> the module whose ``SPEC`` describes it (one line per engine).

Modules are imported on first use, so :mod:`latsim.sim` imports no engine and an engine with
optional dependencies (``vllm-exact`` needs vLLM) costs nothing until it is asked for.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from latsim.sim.engine_spec import EngineSpec

ENGINE_MODULES = {
    "vllm": "latsim.engines.vllm.engine",
    "static": "latsim.engines.static.engine",
    "vllm-exact": "latsim.oracle.engine",
}
ENGINE_NAMES = tuple(ENGINE_MODULES)


def check_engine_name(name: object) -> None:
    """ValueError naming the accepted engines unless ``name`` is one."""
    if name not in ENGINE_MODULES:
        raise ValueError(f"engine must be one of {', '.join(ENGINE_NAMES)}, got {name!r}")


def engine_spec(name: str) -> EngineSpec:
    """The :class:`~latsim.sim.engine_spec.EngineSpec` of engine ``name``."""
    check_engine_name(name)
    spec: EngineSpec = import_module(ENGINE_MODULES[name]).SPEC
    return spec
