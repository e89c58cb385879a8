"""``simulate(deployment, trace)``: the whole prediction in one call.

Plans memory, builds one scheduler and replica per engine instance, replays the trace through
the router on a SimPy clock, and returns per-request records plus a summary.  Same inputs and
seed give identical results in any process (the only randomness is the bootstrap of the
confidence intervals, drawn from ``seed``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import simpy

from latsim.costmodel.batch import CostModel, StepPricer
from latsim.costmodel.host import HostOverhead
from latsim.deployment import Deployment, EngineConfig, resolve_engine
from latsim.metrics.summary import SLO, summarize
from latsim.registry import engine_spec
from latsim.sim.engine_spec import EngineSpec, KvPlan
from latsim.sim.footprint import check_fits_in_memory
from latsim.sim.frontend import engine_arrivals, window_of
from latsim.sim.protocols import FastForward, Scheduler
from latsim.sim.recorder import Recorder, canonical_samples
from latsim.sim.replica import Replica
from latsim.sim.request import FINISHED, REJECTED, Req
from latsim.sim.router import ArrivalFeed, make_router
from latsim.workload.trace import RequestTrace

STATUS = {FINISHED: "ok", REJECTED: "rejected"}


@dataclass
class SimulationResult:
    """Per-request records (one row per request), ITL samples, and the summary dict."""

    records: pd.DataFrame
    itl_values_s: np.ndarray
    itl_weights: np.ndarray
    summary: dict
    memory: KvPlan
    extra: dict = field(default_factory=dict)


def default_horizon(trace: RequestTrace) -> float:
    """Simulated seconds after which unfinished requests are reported instead of waited for."""
    if not len(trace):
        return 0.0
    last = float(trace.arrival_s[-1])
    return last + max(600.0, 10.0 * trace.duration_s)


def default_cost_model(deployment: Deployment, engine: EngineConfig, *, host: HostOverhead | None = None,
                       gpu: StepPricer | None = None) -> CostModel:
    """The deployment's cost model with the host terms of the resolved ``engine``: ``host``
    (default: the engine's fitted ones, with the model's own measured terms) at the engine's
    ``host_speed``, around ``gpu`` (default: built for the deployment once per process and
    reused)."""
    from latsim.costmodel.factory import build_cost_model, cached_gpu_cost_model

    spec = engine_spec(engine.engine)
    d = deployment
    gpu = gpu or cached_gpu_cost_model(d.model, d.device, d.tp, d.weight_dtype, d.kv_dtype)
    host = host or spec.host_terms(gpu.kind, d.model.name)
    return build_cost_model(d.model, d.device, d.tp, d.weight_dtype, d.kv_dtype,
                            asynchronous=spec.overlaps_host(engine), host=host,
                            graph_tokens=spec.graph_tokens(engine), gpu=gpu, host_speed=engine.host_speed)


def simulate(deployment: Deployment, trace: RequestTrace, *, seed: int = 0, cost_model: CostModel | None = None,
             slo: SLO | None = None, horizon_s: float | None = None, fast_forward: bool = True) -> SimulationResult:
    """Simulate ``trace`` served by ``deployment``; see :class:`SimulationResult`.

    ``fast_forward=False`` runs the reference engine, one ``schedule``/``update`` per step: the
    same results, several times slower (``tests/sim/test_fast_engine.py`` compares them).
    The engine's ``async_scheduling`` (vLLM's default) sets both the scheduling rules and,
    for the default cost model, whether host and GPU time overlap.
    """
    if not len(trace):
        raise ValueError("the workload has no requests")
    check_fits_in_memory(len(trace))
    engine = resolve_engine(deployment)
    spec = engine_spec(engine.engine)
    memory = spec.plan_memory(deployment, engine)
    if cost_model is None:
        cost_model = default_cost_model(deployment, engine)
    horizon = default_horizon(trace) if horizon_s is None else horizon_s
    requests = _requests(trace, memory.block_size)
    fed = _through_front_end(requests, getattr(cost_model, "input_s", 0.0), deployment.replicas,
                             getattr(cost_model, "input_window_s", 0.0))
    env = simpy.Environment()
    feed_holder: list[ArrivalFeed] = []
    replicas = []
    for index in range(deployment.replicas):
        scheduler, fast = _schedulers(spec, engine, memory, fast_forward)
        replica = Replica(env, index, scheduler, fast, cost_model, Recorder(), lambda: feed_holder[0].next_arrival(),
                          horizon)
        replica.scheduler.recorder = replica.recorder
        replica.launch.seed(seed, index)
        replicas.append(replica)
    feed = ArrivalFeed(env, fed, replicas, make_router(deployment.router), memory.max_model_len)
    feed_holder.append(feed)
    env.process(feed.process())
    for replica in replicas:
        env.process(replica.process())
    env.run()
    return _result(requests, replicas, memory, cost_model, trace, slo, seed, horizon)


def _schedulers(spec: EngineSpec, engine: EngineConfig, memory: KvPlan,
                fast_forward: bool) -> tuple[Scheduler, FastForward | None]:
    """``(scheduler, its fast-forward twin or None)`` of one replica."""
    fast = spec.make_fast(engine, memory) if fast_forward else None
    return (fast if fast is not None else spec.make_scheduler(engine, memory)), fast


def _requests(trace: RequestTrace, block_size: int) -> list[Req]:
    groups = trace.prefix_group if trace.prefix_group is not None else None
    prefix = trace.prefix_tokens if trace.prefix_tokens is not None else None
    arrival = trace.arrival_s.tolist()
    prompt = trace.input_tokens.tolist()
    target = trace.output_tokens.tolist()
    if groups is None:
        return [Req(i, arrival[i], prompt[i], target[i], block_size=block_size) for i in range(len(arrival))]
    g, p = groups.tolist(), (prefix.tolist() if prefix is not None else [0] * len(arrival))
    return [Req(i, arrival[i], prompt[i], target[i], g[i], p[i], block_size) for i in range(len(arrival))]


def _through_front_end(requests: list[Req], input_s: float, fronts: int, window_s: float = 0.0) -> list[Req]:
    """Set each request's ``ready`` (when the engine core receives it,
    :func:`~latsim.sim.frontend.engine_arrivals`; ``window_s`` 0: no window) and return the
    requests in that order."""
    if input_s <= 0.0:
        return requests
    ready = engine_arrivals([r.arrival for r in requests], input_s, fronts, window_of(window_s)).tolist()
    for req, t in zip(requests, ready, strict=True):
        req.ready = t
    return sorted(requests, key=lambda r: r.ready) if fronts > 1 else requests


def outputs_ahead(requests: list[Req]) -> np.ndarray:
    """Per request, how many other requests of its replica were running when its first token
    came out (first scheduled at or before it, finished at or after it): the outputs the front
    end hands on before a new request's first token, which comes last among its step's.  Zero
    for a request without a first token."""
    n = len(requests)
    ahead = np.zeros(n)
    first = np.array([r.first_token for r in requests], dtype=float)
    start = np.array([r.first_scheduled for r in requests], dtype=float)
    end = np.array([r.finish for r in requests], dtype=float)
    end[np.isnan(end)] = np.inf  # still running at the horizon
    replica = np.array([r.replica for r in requests])
    for rep in np.unique(replica):
        mine = np.flatnonzero(replica == rep)
        scheduled = ~np.isnan(start[mine])
        running = running_at(start[mine][scheduled], end[mine][scheduled], first[mine])
        ahead[mine] = np.where(np.isnan(first[mine]), 0.0, np.maximum(running - 1, 0))
    return ahead


def running_at(starts: np.ndarray, ends: np.ndarray, times: np.ndarray) -> np.ndarray:
    """How many of the intervals ``[starts[i], ends[i]]`` hold each of ``times`` (both ends
    included): the requests running at each instant, given when each was first scheduled and
    when it finished.  The simulator's :func:`outputs_ahead` and the live measurement of the
    output path (``scripts/output_lag.py``) count with it."""
    return np.searchsorted(np.sort(starts), times, side="right") - np.searchsorted(np.sort(ends), times, side="left")


def records_frame(requests: list[Req], frontend_s: float = 0.0, output_seq_s: float = 0.0) -> pd.DataFrame:
    """The per-request DataFrame (columns documented in ``latsim.metrics``).

    ``frontend_s`` (the cost model's front-end latency: handing a request to the engine and
    streaming its tokens back) delays every token a request receives; ``output_seq_s`` x
    :func:`outputs_ahead` delays its first token more (the front end's time for the outputs
    handed on before it).  Both are added here, after the simulation, because they do not change
    what the engine does.
    """
    status = [STATUS.get(r.state, "unfinished") for r in requests]
    first = np.array([r.first_token for r in requests], dtype=float) + frontend_s
    if output_seq_s > 0.0 and requests:
        first = first + output_seq_s * outputs_ahead(requests)
    return pd.DataFrame({
        "request_id": np.arange(len(requests)),
        "replica": [r.replica for r in requests],
        "arrival_s": [r.arrival for r in requests],
        "first_scheduled_s": [r.first_scheduled for r in requests],
        "first_token_s": first,
        "finish_s": [r.finish + frontend_s for r in requests],
        "input_tokens": [r.prompt for r in requests],
        "output_tokens": [r.target for r in requests],
        "cached_tokens": [r.cached_tokens for r in requests],
        "preemptions": [r.preemptions for r in requests],
        "status": status,
    })


def _result(requests, replicas, memory, cost_model, trace, slo, seed, horizon) -> SimulationResult:
    for replica in replicas:
        replica.launch.release([r for r in requests if r.replica == replica.index])
    records = records_frame(requests, cost_model.frontend_s, cost_model.output_seq_s)
    records["request_id"] = trace.request_ids  # the request's position in the trace's source
    # a gap runs between the times its tokens went out: held outputs count from their release
    itl_values, itl_weights = canonical_samples([r.recorder.itl_samples(r.launch.held) for r in replicas])
    rng = np.random.default_rng(seed)
    summary = summarize(records, itl_values, itl_weights, slo=slo, rng=rng)
    peak = max(r.peak_blocks_used for r in replicas)
    unfinished = int((records["status"] == "unfinished").sum())
    summary.update({
        "kv_capacity_tokens": memory.kv_capacity_tokens,
        "kv_blocks": memory.num_blocks,
        "kv_peak_utilization": peak / max(memory.usable_blocks, 1),
        "max_model_len": memory.max_model_len,
        "cost_model": getattr(cost_model, "label", cost_model.kind),
        "engine_steps": sum(r.recorder.num_steps for r in replicas),
        "offered_rps": _offered_rate(trace),
        "stable": unfinished == 0,
        "horizon_s": horizon if not math.isinf(horizon) else None,
    })
    return SimulationResult(records, itl_values, itl_weights, summary, memory,
                            {"cost_model": cost_model.describe()})


def _offered_rate(trace: RequestTrace) -> float | None:
    span = trace.duration_s
    return (len(trace) - 1) / span if span > 0 else None
