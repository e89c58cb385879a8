"""From user settings (flags and/or a deployment file) to a Deployment and a RequestTrace.

This is the one place where defaults for an unspecified prediction live, so the CLI, the
Python API and examples agree on them.
"""

from __future__ import annotations

from dataclasses import MISSING, fields

import numpy as np
from pydantic import BaseModel

from latsim.catalog.lookup import load_device, load_model
from latsim.config import Settings, file_settings, setting_flag
from latsim.deployment import Deployment, EngineConfig
from latsim.sim.footprint import check_fits_in_memory
from latsim.workload.generate import synthesize
from latsim.workload.io import read_trace
from latsim.workload.trace import RequestTrace


def _defaults() -> Settings:
    """The default of every setting: a Deployment or EngineConfig field's default, else the
    ``default`` declared with the setting (:func:`latsim.config.setting`)."""
    declared = {f.name: f.default for f in fields(Deployment) if f.default is not MISSING}
    declared.update({f.name: f.default for f in fields(EngineConfig) if f.default is not MISSING})
    return Settings(**{f.name: declared.get(f.name, f.metadata["default"]) for f in fields(Settings)})


DEFAULTS = _defaults()
"""What an unspecified prediction uses (engine knobs left None take the engine's own defaults)."""
DEFAULT_NUM_REQUESTS = 1000


def merge(flags: Settings, file: BaseModel | None) -> Settings:
    """Flags win over the file (a validated :data:`~latsim.config.DeploymentFile`), the file over
    :data:`DEFAULTS`."""
    from_file = file_settings(file) if file is not None else {}
    merged = {}
    for f in fields(Settings):
        for source in (getattr(flags, f.name), from_file.get(f.name), getattr(DEFAULTS, f.name)):
            if source is not None:
                merged[f.name] = source
                break
        else:
            merged[f.name] = None
    _lengths_given_together(flags, merged)
    _trace_alone(flags, from_file, merged)
    return Settings(**merged)


SYNTHETIC_KEYS = ("qps", "arrival", "input_len", "input_dist", "output_len", "output_dist")
"""Workload settings that describe synthesized requests; a trace file gives its own instead."""


def _trace_alone(flags: Settings, from_file: dict, merged: dict) -> None:
    """A trace replaces the synthetic workload: refuse settings it would silently override.

    A ``--trace`` flag replaces the file's synthetic workload (flags win over the file); a trace
    given together with synthetic settings from the same source, or a file's trace with
    synthetic flags, is an error naming them.
    """
    if merged["trace"] is None:
        return
    flagged = [k for k in SYNTHETIC_KEYS if getattr(flags, k) is not None]
    filed = [k for k in SYNTHETIC_KEYS if from_file.get(k) is not None]
    clash = ", ".join(setting_flag(k) for k in flagged) if flagged else ""
    if not clash and flags.trace is None and filed:
        clash = "the deployment file's workload " + ", ".join(filed)
    if clash:
        raise ValueError(f"--trace gives the arrivals and lengths, so {clash} would be ignored; "
                         "give a trace or the synthetic workload settings, not both")
    for k in SYNTHETIC_KEYS:
        merged[k] = None


def _lengths_given_together(flags: Settings, merged: dict) -> None:
    """A fixed length given by flag replaces the default distribution, and vice versa."""
    for kind in ("input", "output"):
        length, dist = f"{kind}_len", f"{kind}_dist"
        if getattr(flags, length) is not None and getattr(flags, dist) is not None:
            raise ValueError(f"give --{kind}-len or --{kind}-dist, not both")
        if merged[length] is not None:
            merged[dist] = None


ENGINE_KEYS = tuple(f.name for f in fields(EngineConfig) if f.name in {s.name for s in fields(Settings)})
DEPLOYMENT_KEYS = tuple(f.name for f in fields(Deployment) if f.name in {s.name for s in fields(Settings)}
                        and f.name not in ("model", "device", "engine"))


def build_deployment(s: Settings) -> Deployment:
    """The deployment of ``s``; anything still unset takes :data:`DEFAULTS` (one place)."""
    s = merge(s, None)
    engine = EngineConfig(**{k: getattr(s, k) for k in ENGINE_KEYS})
    return Deployment(model=load_model(s.model or ""), device=load_device(s.device or ""), engine=engine,
                      **{k: getattr(s, k) for k in DEPLOYMENT_KEYS})


def build_trace(s: Settings) -> RequestTrace:
    """The workload of ``s``: its trace file, or requests synthesized from its workload settings."""
    if s.seed is not None and s.seed < 0:
        raise ValueError(f"--seed must be an integer >= 0, got {s.seed}")
    if s.trace:
        if s.num_requests is not None and s.num_requests < 1:
            raise ValueError(f"--num-requests must be >= 1, got {s.num_requests}")
        return read_trace(s.trace, max_requests=s.num_requests)
    num = DEFAULT_NUM_REQUESTS if s.num_requests is None else s.num_requests
    if num < 1:
        raise ValueError(f"--num-requests must be >= 1, got {num}")
    if s.qps is None:
        raise ValueError("give --qps or --trace")
    check_fits_in_memory(num)  # before minutes go into synthesizing what cannot be simulated
    rng = np.random.default_rng(s.seed or 0)
    inputs = s.input_len if s.input_len is not None else s.input_dist
    outputs = s.output_len if s.output_len is not None else s.output_dist
    assert inputs is not None and outputs is not None
    return synthesize(s.qps, num, s.arrival or "poisson", inputs, outputs, rng)
