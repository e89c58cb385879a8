"""Pick the cost model for a deployment: a name -> builder mapping.

``kind="auto"`` prefers a model calibrated on the device and falls back to the roofline;
an explicit ``kind`` must name one of :data:`BUILDERS`.  New cost models register a builder
here (one entry, no subclassing).  Builders return GPU-only models (no host time); the engine's
host time per step and its overlap with the GPU are added by :mod:`latsim.costmodel.host`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from latsim.catalog.devices import DeviceSpec
from latsim.catalog.models import ModelSpec
from latsim.costmodel.batch import CostModel, StepPricer
from latsim.costmodel.coreads import coreads_for
from latsim.costmodel.host import HostOverhead, HostOverlapCostModel
from latsim.costmodel.roofline import RooflineCostModel
from latsim.costmodel.roofline_params import default_roofline_params

NO_HOST = HostOverhead(step_s=0.0, seq_s=0.0, frontend_s=0.0, source="none")
"""No CPU-side terms: the cost model of a GPU alone."""

Builder = Callable[[ModelSpec, DeviceSpec, int, str, str], StepPricer]


def _build_roofline(model: ModelSpec, device: DeviceSpec, tp: int, weight_dtype: str,
                    kv_dtype: str) -> StepPricer:
    gpu_only = replace(default_roofline_params(), step_overhead_s=0.0, seq_overhead_s=0.0)
    return RooflineCostModel(model, device, tp=tp, weight_dtype=weight_dtype, kv_dtype=kv_dtype, params=gpu_only)


def _build_calibrated(model: ModelSpec, device: DeviceSpec, tp: int, weight_dtype: str,
                      kv_dtype: str) -> StepPricer:
    from latsim.costmodel.calibrated import load_calibrated

    return load_calibrated(model, device, tp, weight_dtype, kv_dtype, kind="calibrated", step_s=0.0, per_seq_s=0.0)


def _build_transferred(model: ModelSpec, device: DeviceSpec, tp: int, weight_dtype: str,
                       kv_dtype: str) -> StepPricer:
    from latsim.costmodel.calibrated import load_calibrated

    return load_calibrated(model, device, tp, weight_dtype, kv_dtype, kind="transferred", step_s=0.0,
                           per_seq_s=0.0)


BUILDERS: dict[str, Builder] = {
    "roofline": _build_roofline,
    "calibrated": _build_calibrated,
    "transferred": _build_transferred,
}


def _calibrated_builder(device: DeviceSpec) -> Builder | None:
    """The calibrated builder when a fitted profile ships for ``device`` (or an alias), else None."""
    from latsim.costmodel.profile.store import has_profile

    return BUILDERS["calibrated"] if has_profile(device.name, device.aliases) else None


def calibration_status(device: DeviceSpec) -> str:
    """Where ``device``'s kernel costs come from, as :func:`gpu_cost_model` picks them (``auto``):
    ``measured here (...)``, ``imported (...)`` when a fitted profile ships for the device or an
    alias, else ``roofline``.  (``transferred`` is never picked: only asked for by ``kind``.)"""
    from latsim.costmodel.profile.origin import status
    from latsim.costmodel.profile.store import has_profile, read_profile

    folder = has_profile(device.name, device.aliases)
    return status(read_profile(folder) if folder is not None else None)


def build_cost_model(model: ModelSpec, device: DeviceSpec, tp: int = 1, weight_dtype: str = "bf16",
                     kv_dtype: str = "bf16", kind: str = "auto", asynchronous: bool = True,
                     host: HostOverhead | None = None, graph_tokens: int | None = None,
                     gpu: StepPricer | None = None, host_speed: float = 1.0) -> CostModel:
    """The cost model of ``kind`` for this deployment (``auto``: calibrated if available, else roofline).

    The GPU-side model is wrapped with the engine's host time (``host``, the engine's fitted
    terms; default: none), overlapped with the GPU when ``asynchronous``.  Raises
    ValueError for an unknown ``kind`` and whatever the chosen model raises for an invalid
    deployment (unknown dtype, ``tp`` that does not shard the model).  ``graph_tokens`` is the
    engine's CUDA-graph limit (:func:`~latsim.engines.vllm.defaults.cudagraph_limit`); steps above it
    pay the eager-launch term, ``None`` prices every step as a graph replay.  ``gpu`` reuses a
    GPU-only model already built for this deployment (fitting replays one many times).
    ``host_speed`` is the serving host's CPU speed relative to the one the host terms describe
    (:meth:`~latsim.costmodel.host.HostOverhead.at_speed`).
    """
    gpu = gpu or gpu_cost_model(model, device, tp, weight_dtype, kv_dtype, kind)
    host = (host or NO_HOST).at_speed(host_speed)
    coreads = coreads_for(device, model, tp, kv_dtype)
    shared = model.num_moe_layers if model.shared_expert_intermediate_size else 0
    return HostOverlapCostModel(gpu, host, asynchronous, layers=model.num_layers, moe_layers=model.num_moe_layers,
                                shared_layers=shared, graph_tokens=graph_tokens, coreads=coreads)


_CACHE: dict[tuple[object, ...], StepPricer] = {}
_CACHE_SIZE = 32


def cached_gpu_cost_model(model: ModelSpec, device: DeviceSpec, tp: int = 1, weight_dtype: str = "bf16",
                          kv_dtype: str = "bf16", kind: str = "auto") -> StepPricer:
    """:func:`gpu_cost_model`, built once per process and reused (the calibrated model tabulates
    its regressors on construction, about 0.4 s; a search simulates one deployment many times).

    Keyed on the model, device, ``tp``, dtypes, ``kind`` and the shipped profile's modification
    time, so a profile rewritten in the process is re-read.  The priced models hold no state that
    a simulation changes, so sharing one is safe.  Keeps the last :data:`_CACHE_SIZE` models.
    """
    from latsim.costmodel.profile.store import PROFILE, has_profile

    folder = has_profile(device.name, device.aliases)
    stamp = (folder / PROFILE).stat().st_mtime_ns if folder is not None else None
    key = (model, device, tp, weight_dtype, kv_dtype, kind, folder, stamp)
    found = _CACHE.get(key)
    if found is None:
        found = gpu_cost_model(model, device, tp, weight_dtype, kv_dtype, kind)
        if len(_CACHE) >= _CACHE_SIZE:
            _CACHE.pop(next(iter(_CACHE)))
        _CACHE[key] = found
    return found


def gpu_cost_model(model: ModelSpec, device: DeviceSpec, tp: int = 1, weight_dtype: str = "bf16",
                   kv_dtype: str = "bf16", kind: str = "auto") -> StepPricer:
    """The GPU-only cost model of ``kind`` (no host time), for fitting and reports."""
    if kind == "auto":
        builder = _calibrated_builder(device) or BUILDERS["roofline"]
    elif kind in BUILDERS:
        builder = BUILDERS[kind]
    else:
        raise ValueError(f"kind={kind!r} is not a cost model; accepted: auto, {', '.join(sorted(BUILDERS))}")
    return builder(model, device, tp, weight_dtype, kv_dtype)
