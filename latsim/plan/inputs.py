"""What produced a prediction, so that a result file explains itself (the ``inputs`` object).

``predict --json`` and ``summary.json`` carry it: the model and device as given, the
parallelism and dtypes, the engine settings as resolved (the engine's defaults filled in, and
the ``max_model_len`` the memory plan settled on), and the workload: the trace file, or the
settings the requests were synthesized from.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from latsim.config import Settings
from latsim.deployment import Deployment, resolve_engine

SYNTHETIC = ("qps", "arrival", "input_len", "input_dist", "output_len", "output_dist")


def describe_inputs(settings: Settings, deployment: Deployment, num_requests: int, sorted_by_arrival: bool,
                    max_model_len: int) -> dict[str, Any]:
    """The ``inputs`` object of a prediction from merged ``settings`` (flags, file, defaults):
    ``num_requests`` per run, whether a trace was sorted by arrival, the memory plan's
    ``max_model_len``."""
    engine = asdict(resolve_engine(deployment))
    engine["max_model_len"] = max_model_len
    return {
        "model": settings.model,
        "model_name": deployment.model.name,
        "device": deployment.device.name,
        "tp": deployment.tp,
        "replicas": deployment.replicas,
        "router": deployment.router,
        "weight_dtype": deployment.weight_dtype,
        "kv_dtype": deployment.kv_dtype,
        "engine": engine,
        "workload": _workload(settings, num_requests, sorted_by_arrival),
    }


def _workload(settings: Settings, num_requests: int, sorted_by_arrival: bool) -> dict[str, Any]:
    common = {"num_requests": num_requests, "seed": settings.seed or 0}
    if settings.trace:
        return {"trace": str(settings.trace), "max_requests": settings.num_requests,
                "sorted_by_arrival": sorted_by_arrival, **common}
    given = {k: getattr(settings, k) for k in SYNTHETIC if getattr(settings, k) is not None}
    return {**given, **common}
