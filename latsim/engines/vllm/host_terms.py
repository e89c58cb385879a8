"""vLLM 0.25.1's fitted host-side step terms (``latsim/data/engines/vllm/host.yaml``).

The file is written by the scripts that fit or measure its terms (``scripts/fit_engine_host.py``,
``scripts/host_steps.py``, ``scripts/launch_gaps.py --write``), each entry with the inputs,
command, commit and date that produced it; ``docs/step-time-model.md`` explains the model.
"""

from __future__ import annotations

import json
from dataclasses import replace
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from latsim.costmodel.host import TERMS, HostOverhead
from latsim.paths import engine_data

HOST_TERMS_KEY = "vllm-0.25.1"
"""The entry of ``host.yaml`` that describes the engine latsim models."""

LAUNCH_FIELDS = ("launch_layer_s", "launch_moe_layer_s", "launch_shared_layer_s", "launch_tail_s", "launch_sigma")
CPU_FIELDS = ("step_s", "seq_s", "frontend_s", "output_seq_s", "input_s", "input_window_s", *LAUNCH_FIELDS)
"""The engine's CPU-side terms: they do not depend on the GPU model, so an entry may take them
from another (``cpu_terms_from: <kind>``) rather than repeat them."""
REQUIRED_FIELDS = ("step_s", "seq_s", "frontend_s")
"""The terms an entry must have (the others default to :class:`HostOverhead`'s)."""


LAUNCH_BY_MODEL = engine_data("vllm", "launch_by_model.json")
"""Measured ratios of a model's graph-less launch per layer to the fitted model's (written by
``scripts/launch_by_model.py --write``, with its provenance)."""


@lru_cache(maxsize=32)
def default_host_overhead(kind: str, model: str | None = None, engine: str = HOST_TERMS_KEY) -> HostOverhead:
    """The fitted host terms of ``engine`` for a GPU model of ``kind`` (``host.yaml``), with
    ``model``'s graph-less launch (:func:`launch_ratio`) when a ratio was measured for it.

    ``transferred`` uses the ``calibrated`` entry; a kind without an entry raises ValueError.
    An entry with ``cpu_terms_from: OTHER`` takes :data:`CPU_FIELDS` from entry ``OTHER``.
    """
    host = host_overhead_in(_host_yaml(), kind, engine)
    return host if model is None else for_model(host, model)


def for_model(host: HostOverhead, model: str) -> HostOverhead:
    """``host`` with ``model``'s graph-less launch: ``launch_layer_s`` times :func:`launch_ratio`
    (``host`` itself where the ratio is 1 or no launch is priced); the source says so."""
    ratio = launch_ratio(model)
    if ratio == 1.0 or host.launch_layer_s <= 0.0:
        return host
    return replace(host, launch_layer_s=host.launch_layer_s * ratio,
                   source=f"{host.source}; launch x{ratio:g} measured for {model} ({LAUNCH_BY_MODEL.name})")


def launch_ratio(model: str) -> float:
    """``model``'s measured graph-less launch per layer over the fitted model's (1.0 where none
    was shipped: the launch of a model not measured, or not told apart from the fitted one's)."""
    return float(_launch_ratios().get(model, 1.0))


@lru_cache(maxsize=1)
def _launch_ratios() -> dict[str, float]:
    if not LAUNCH_BY_MODEL.exists():
        return {}
    ratios = json.loads(LAUNCH_BY_MODEL.read_text()).get("ratios", {})
    bad = {k: v for k, v in ratios.items() if not isinstance(v, (int, float)) or not 0.1 <= v <= 10.0}
    if bad:
        raise ValueError(f"{LAUNCH_BY_MODEL}: launch ratios must be numbers in [0.1, 10], got {bad}")
    return {str(k): float(v) for k, v in ratios.items()}


def read_host_terms(path: str | Path, kind: str, engine: str = HOST_TERMS_KEY) -> HostOverhead:
    """As :func:`default_host_overhead`, from the host-terms file at ``path``."""
    return host_overhead_in(yaml.safe_load(Path(path).read_text()), kind, engine, source=str(path))


def host_overhead_in(data: object, kind: str, engine: str = HOST_TERMS_KEY,
                     source: str = "engines/vllm/host.yaml") -> HostOverhead:
    """The terms of ``engine`` / ``kind`` in a parsed host-terms file ``data`` (see
    :func:`default_host_overhead`); ValueError when the entry is missing or incomplete."""
    key = "calibrated" if kind == "transferred" else kind
    entry = _entry(data, engine, key)
    if "cpu_terms_from" in entry:
        cpu = _entry(data, engine, str(entry["cpu_terms_from"]))
        entry = {**entry, **{name: cpu[name] for name in CPU_FIELDS if name in cpu}}
    missing = [name for name in REQUIRED_FIELDS if name not in entry]
    if missing:
        raise ValueError(f"host.yaml entry {engine!r} / {key!r} lacks {', '.join(missing)}")
    return HostOverhead(source=f"{source}:{engine}/{key}",
                        **{name: float(entry[name]) for name in TERMS if name in entry})


@lru_cache(maxsize=4)
def reference_probe_s(engine: str = HOST_TERMS_KEY) -> float:
    """The host probe's workload time (:func:`latsim.measure.hostprobe.time_workload`, seconds)
    on the host ``engine``'s CPU terms describe (``host_reference_probe_s`` in host.yaml):
    a host where it takes twice as long has ``host_speed`` 0.5."""
    try:
        return float(_host_yaml()["engines"][engine]["host_reference_probe_s"])
    except (KeyError, TypeError):
        raise ValueError(f"host.yaml has no host_reference_probe_s for {engine!r}") from None


def typical_host_speeds(engine: str = HOST_TERMS_KEY) -> tuple[float, float]:
    """The host speeds (to 0.01) the live runs' hosts spanned, 10th to 90th percentile of the
    probe time (``host_probe_p90_s`` / ``host_probe_p10_s`` in host.yaml, written by
    ``scripts/host_reference.py``): the range a prediction's host-speed sensitivity reports."""
    try:
        engine_terms = _host_yaml()["engines"][engine]
        slow, fast = float(engine_terms["host_probe_p90_s"]), float(engine_terms["host_probe_p10_s"])
    except (KeyError, TypeError):
        raise ValueError(f"host.yaml has no host_probe_p10_s / host_probe_p90_s for {engine!r}") from None
    ref = reference_probe_s(engine)
    return round(ref / slow, 2), round(ref / fast, 2)


@lru_cache(maxsize=1)
def _host_yaml() -> Any:
    """``host.yaml``, parsed once."""
    return yaml.safe_load(engine_data("vllm", "host.yaml").read_text())


def _entry(data: object, engine: str, key: str) -> dict:
    try:
        entry = data["engines"][engine][key]  # type: ignore[index]
    except (KeyError, TypeError):
        raise ValueError(f"host.yaml has no entry for {engine!r} / {key!r}") from None
    if not isinstance(entry, dict):
        raise ValueError(f"host.yaml entry {engine!r} / {key!r} is not a mapping")
    return entry
