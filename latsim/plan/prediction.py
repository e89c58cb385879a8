"""One prediction as ``latsim predict`` makes it: settings in, a replicated summary out.

A synthetic workload runs ``replications`` independent replications (other seeds of the
arrival and length processes, :func:`latsim.plan.replicate.replicate`); a trace is replayed once
with batch-means intervals (:func:`latsim.plan.replicate.replay`).  When the replications were
too short for their P99 intervals (``intervals.reliable`` false:
:func:`latsim.plan.replicate.interval_advice`) and the user did not fix the request count, they
are run once more at the suggested length (:func:`latsim.plan.replicate.replicate_long_enough`:
at most 6,000 requests per replication); ``intervals.extended_from`` then says so.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pandas as pd

from latsim.config import Settings
from latsim.deployment import Deployment, resolve_engine
from latsim.metrics.summary import SLO
from latsim.plan.inputs import describe_inputs
from latsim.plan.replicate import (
    DEFAULT_REPLICATIONS,
    ReplicatedPrediction,
    replay,
    replicate,
    replicate_long_enough,
    synthetic_traces,
)
from latsim.registry import engine_spec
from latsim.scenario import DEFAULT_NUM_REQUESTS, build_deployment, build_trace
from latsim.workload.trace import RequestTrace


@dataclass(frozen=True)
class Prediction:
    """The deployment, the replicated summary, every request of every replication (with a
    ``replication`` column), the memory plan of one replica, what produced them (``inputs``:
    :func:`latsim.plan.inputs.describe_inputs`), and whether a replayed trace had to be sorted
    by arrival (its records' ``request_id`` is then each request's position in the file)."""

    deployment: Deployment
    summary: dict[str, Any]
    records: pd.DataFrame
    memory: dict[str, Any]
    inputs: dict[str, Any]
    trace_sorted: bool = False


def predict_settings(settings: Settings, *, slo: SLO | None = None,
                     replications: int = DEFAULT_REPLICATIONS) -> Prediction:
    """Predict ``settings`` (already merged with the defaults, :func:`latsim.scenario.merge`).

    ``replications``: independent runs of a synthetic workload (>= 1; 1 gives batch-means
    intervals of one run).  ValueError for bad settings, with the setting named."""
    if isinstance(replications, bool) or not isinstance(replications, int) or replications < 1:
        raise ValueError(f"--replications must be an integer >= 1, got {replications!r}")
    deployment = build_deployment(settings)
    seed = settings.seed or 0
    engine = resolve_engine(deployment)
    memory = engine_spec(engine.engine).plan_memory(deployment, engine)
    trace = build_trace(settings)  # a synthetic one validates the workload settings with their messages
    if settings.trace:
        result = replay(deployment, trace, seed=seed, slo=slo)
    else:
        result = _replicated(deployment, settings, slo, replications, seed)
    records = _records(result)
    sorted_trace = bool(settings.trace) and trace.source_index is not None
    inputs = describe_inputs(settings, deployment, len(result.records[0]), sorted_trace, memory.max_model_len)
    inputs["replications"] = result.summary["replications"]
    return Prediction(deployment, result.summary, records, memory.as_dict(), inputs, sorted_trace)


def _replicated(deployment: Deployment, s: Settings, slo: SLO | None, replications: int,
                seed: int) -> ReplicatedPrediction:
    requests = s.num_requests or DEFAULT_NUM_REQUESTS
    if replications == 1:  # one synthetic run: batch means, as for a trace
        return replay(deployment, _traces(s, seed)(requests)(0), seed=seed, slo=slo)
    if s.num_requests is not None:  # the user fixed the length
        return replicate(deployment, _traces(s, seed)(requests), replications, seed, slo)
    return replicate_long_enough(deployment, _traces(s, seed), requests, replications, seed, slo)


def _traces(s: Settings, seed: int) -> Callable[[int], Callable[[int], RequestTrace]]:
    """``requests -> make_trace`` for the settings' synthetic workload."""
    inputs = s.input_len if s.input_len is not None else s.input_dist
    outputs = s.output_len if s.output_len is not None else s.output_dist
    assert s.qps is not None and inputs is not None and outputs is not None
    qps, arrival = s.qps, s.arrival or "poisson"
    return lambda requests: synthetic_traces(qps, requests, arrival, inputs, outputs, seed)


def _records(result: ReplicatedPrediction) -> pd.DataFrame:
    frames = [r.assign(replication=i) for i, r in enumerate(result.records)]
    return pd.concat(frames, ignore_index=True)
