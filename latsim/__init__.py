"""latsim: predict LLM serving latency with a vLLM-faithful discrete-event simulator.

The public API is imported lazily so that light sub-packages (workload, validate) can be used
where the simulator's dependencies are absent (for example on a GPU box running measurements).
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

__version__ = "0.1.0"

_EXPORTS = {
    "Deployment": "latsim.deployment",
    "EngineConfig": "latsim.deployment",
    "load_model": "latsim.catalog.lookup",
    "load_device": "latsim.catalog.lookup",
    "list_models": "latsim.catalog.lookup",
    "list_devices": "latsim.catalog.lookup",
    "RequestTrace": "latsim.workload.trace",
    "synthesize": "latsim.workload.generate",
    "read_trace": "latsim.workload.io",
    "write_trace": "latsim.workload.io",
    "simulate": "latsim.sim.simulate",
    "SimulationResult": "latsim.sim.simulate",
    "SLO": "latsim.metrics.summary",
}

__all__ = [*_EXPORTS, "__version__"]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'latsim' has no attribute {name!r}")
    return getattr(import_module(module), name)
