"""From user settings (flags and/or a deployment file) to a Deployment and a RequestTrace.

This is the one place where defaults for an unspecified prediction live, so the CLI, the
Python API and examples agree on them.
"""

from __future__ import annotations

from dataclasses import fields

import numpy as np
from pydantic import BaseModel

from latsim.catalog.lookup import load_device, load_model
from latsim.config import Settings
from latsim.deployment import Deployment, EngineConfig
from latsim.workload.generate import synthesize
from latsim.workload.io import read_trace
from latsim.workload.trace import RequestTrace

DEFAULTS = Settings(
    model="llama-3.1-8b", device="h100", tp=1, replicas=1, router="round-robin", weight_dtype="auto",
    kv_dtype="auto", engine="vllm", block_size=16, gpu_memory_utilization=0.92, enable_chunked_prefill=True,
    enable_prefix_caching=True, async_scheduling=True, host_speed=1.0, qps=8.0, arrival="poisson",
    input_dist="lognormal:median=600,sigma=0.8,min=16,max=4096",
    output_dist="lognormal:median=150,sigma=0.6,min=8,max=1024",
    num_requests=None, seed=0,
)
DEFAULT_NUM_REQUESTS = 1000


def merge(flags: Settings, file: BaseModel | None) -> Settings:
    """Flags win over the file (a validated :data:`~latsim.config.DeploymentFile`), the file over
    :data:`DEFAULTS`."""
    from_file: dict = {}
    if file is not None:
        from_file = file.model_dump()
        from_file.update(from_file.pop("engine"), **from_file.pop("workload"))
    merged = {}
    for f in fields(Settings):
        for source in (getattr(flags, f.name), from_file.get(f.name), getattr(DEFAULTS, f.name)):
            if source is not None:
                merged[f.name] = source
                break
        else:
            merged[f.name] = None
    _lengths_given_together(flags, merged)
    return Settings(**merged)


def _lengths_given_together(flags: Settings, merged: dict) -> None:
    """A fixed length given by flag replaces the default distribution, and vice versa."""
    for kind in ("input", "output"):
        length, dist = f"{kind}_len", f"{kind}_dist"
        if getattr(flags, length) is not None and getattr(flags, dist) is not None:
            raise ValueError(f"give --{kind}-len or --{kind}-dist, not both")
        if merged[length] is not None:
            merged[dist] = None


ENGINE_KEYS = tuple(f.name for f in fields(EngineConfig) if f.name != "static_batch_size")
DEPLOYMENT_KEYS = ("tp", "replicas", "router", "weight_dtype", "kv_dtype")


def build_deployment(s: Settings) -> Deployment:
    """The deployment of ``s``; anything still unset takes :data:`DEFAULTS` (one place)."""
    s = merge(s, None)
    engine = EngineConfig(**{k: getattr(s, k) for k in ENGINE_KEYS})
    return Deployment(model=load_model(s.model or ""), device=load_device(s.device or ""), engine=engine,
                      **{k: getattr(s, k) for k in DEPLOYMENT_KEYS})


def build_trace(s: Settings) -> RequestTrace:
    if s.trace:
        if s.num_requests is not None and s.num_requests < 1:
            raise ValueError(f"--num-requests must be >= 1, got {s.num_requests}")
        return read_trace(s.trace, max_requests=s.num_requests)
    num = DEFAULT_NUM_REQUESTS if s.num_requests is None else s.num_requests
    if num < 1:
        raise ValueError(f"--num-requests must be >= 1, got {num}")
    if s.qps is None:
        raise ValueError("give --qps or --trace")
    rng = np.random.default_rng(s.seed or 0)
    inputs = s.input_len if s.input_len is not None else s.input_dist
    outputs = s.output_len if s.output_len is not None else s.output_dist
    assert inputs is not None and outputs is not None
    return synthesize(s.qps, num, s.arrival or "poisson", inputs, outputs, rng)
