"""Fit the engine's host time (``HostOverhead``) on measured runs; report held-out runs.

The GPU side of every step comes from the calibrated (or roofline) cost model and is not
touched.  Up to ten parameters are fitted (any subset, the rest held): host seconds per step
and per sequence, the front-end latency of a request, the in-engine GPU-time scale, the
per-layer cost of a step run without CUDA graphs and its extra per mixture-of-experts layer,
and that step's launch (per layer, per MoE layer, the GPU's tail after it, and its spread), by minimising
the mean absolute log-ratio of predicted to measured p50 and p99 of TTFT and TPOT over the
training runs (Nelder-Mead on log-parameters).
Runs are replayed exactly as ``latsim validate`` does, at a given host speed or each at its probe's.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from scipy.optimize import minimize

from latsim.costmodel.batch import StepPricer
from latsim.costmodel.factory import gpu_cost_model
from latsim.costmodel.host import TERMS, HostOverhead
from latsim.deployment import Deployment, resolve_engine
from latsim.measure.records import load_run
from latsim.metrics.per_request import add_latencies
from latsim.validate.compare import replay_deployment
from latsim.workload.trace import RequestTrace

TARGETS = (("ttft_s", 50), ("ttft_s", 99), ("tpot_s", 50), ("tpot_s", 99))


@dataclass
class Replay:
    """One measured run ready to be replayed many times."""

    name: str
    deployment: Deployment
    trace: RequestTrace
    gpu: StepPricer
    measured: np.ndarray


def _percentiles(records) -> np.ndarray:
    ok = add_latencies(records[records["status"] == "ok"])
    return np.array([np.nanpercentile(ok[col].to_numpy(dtype=float), q) for col, q in TARGETS])


def load_replays(run_dirs: list[Path], device: str, kind: str = "auto",
                 host_speed: float | str = 1.0) -> list[Replay]:
    """The runs ready to replay, each on a host of ``host_speed``
    (:func:`latsim.validate.compare.run_host_speed`: ``"probe"`` replays a run at the speed its
    host probe measured, so that terms fitted on it are in the reference host's units)."""
    cache: dict[str, StepPricer] = {}
    replays = []
    for run in run_dirs:
        m = load_run(run)
        dep = replay_deployment(m.meta, device, host_speed)
        key = f"{dep.model.name}/{dep.tp}"
        if key not in cache:
            cache[key] = gpu_cost_model(dep.model, dep.device, dep.tp, dep.weight_dtype, dep.kv_dtype, kind)
        replays.append(Replay(str(run), dep, m.to_trace(), cache[key], _percentiles(m.records_frame())))
    return replays


def predict(replay: Replay, host: HostOverhead):
    """The replay's simulated records under ``host`` (with the replayed model's measured launch,
    :func:`~latsim.engines.vllm.host_terms.for_model`, as ``latsim validate`` prices it)."""
    from latsim.engines.vllm.host_terms import for_model
    from latsim.sim.simulate import default_cost_model, simulate

    host = for_model(host, replay.deployment.model.name)
    cost = default_cost_model(replay.deployment, resolve_engine(replay.deployment), host=host, gpu=replay.gpu)
    return simulate(replay.deployment, replay.trace, cost_model=cost).records


def errors(replay: Replay, host: HostOverhead) -> np.ndarray:
    """Log-ratios predicted/measured for :data:`TARGETS`."""
    return np.log(_percentiles(predict(replay, host)) / replay.measured)


FIELDS = TERMS
DENSE_FIELDS = ("gpu_scale", "eager_layer_s")
"""The terms a dense model's Poisson runs are fitted for; the host time per step and per sequence
and the launch terms are measured (``scripts/host_steps.py``, ``scripts/launch_gaps.py``).
``frontend_s`` is held: freed beside ``eager_layer_s`` the two trade against each other (one
start's fit moves it 1-5 ms, ``scripts/dense_fit_stability.py``), and the engine's own stamps
measure it (``scripts/frontend_path.py``)."""


def fit_host(replays: list[Replay], start: HostOverhead,
             free: tuple[str, ...] = DENSE_FIELDS) -> tuple[HostOverhead, float]:
    """Nelder-Mead over the logs of the ``free`` :class:`HostOverhead` terms (the others keep
    ``start``'s values); returns the fit and its loss."""
    unknown = sorted(set(free) - set(FIELDS))
    if unknown or not free:
        raise ValueError(f"free={free!r}: choose from {FIELDS}")
    base = {name: float(getattr(start, name)) for name in FIELDS}
    base.update({name: max(base[name], 1e-8) for name in free})  # logs: a free term starts above 0

    def unpack(z: np.ndarray) -> HostOverhead:
        values = {**base, **dict(zip(free, np.exp(z).tolist(), strict=True))}
        values["gpu_scale"] = min(values["gpu_scale"], 9.9)
        return replace(start, source="fit", **values)

    def loss(z: np.ndarray) -> float:
        host = unpack(z)
        return float(np.mean([np.abs(errors(r, host)).mean() for r in replays]))

    z0 = np.log([base[name] for name in free])
    steps = np.diag([0.2 if name == "gpu_scale" else 1.0 for name in free])
    simplex = np.vstack([z0] + [z0 + step for step in steps])
    res = minimize(loss, z0, method="Nelder-Mead",
                   options={"initial_simplex": simplex, "xatol": 0.02, "fatol": 1e-4, "maxfev": 200})
    return unpack(res.x), float(res.fun)
