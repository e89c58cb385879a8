"""Live measurement: drive real engines with a trace, record what the client saw, load results.

Entry points (imported lazily, so ``import latsim.validate`` costs nothing and never needs
vLLM): :func:`run_http` / :func:`run_http_async` (an OpenAI-compatible server),
:func:`run_vllm` / :func:`run_levels` (vLLM in-process), :func:`load_run` / :func:`write_run`
(the run-directory format), :func:`import_vllm_bench` and :func:`import_aiperf`; with
:class:`LoadSpec` (open loop, burst, fixed concurrency) and :class:`Measurement`.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_EXPORTS = {
    "run_http": "http_driver", "run_http_async": "http_driver", "HttpOptions": "http_driver",
    "run_vllm": "vllm_driver", "run_levels": "vllm_driver", "EngineSettings": "vllm_driver",
    "EngineSession": "vllm_driver", "Level": "vllm_driver", "RunOptions": "vllm_driver",
    "load_run": "records", "write_run": "records", "RequestRecord": "records",
    "import_vllm_bench": "importers", "import_aiperf": "importers",
    "LoadSpec": "loadgen", "Measurement": "measurement",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'latsim.validate' has no attribute {name!r}")
    return getattr(import_module(f"latsim.validate.{_EXPORTS[name]}"), name)
