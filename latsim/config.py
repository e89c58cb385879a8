"""Deployment files (``--config deployment.yaml``): validated with pydantic, merged with flags.

A file holds the same settings as ``latsim predict``'s flags, grouped::

    model: llama-3.1-70b
    device: h100
    tp: 4
    engine: {max_num_seqs: 256, enable_prefix_caching: false}
    workload: {qps: 8, input_dist: "lognormal:median=600,sigma=0.8", output_len: 200}

Flags given on the command line win over the file.  Errors name the file, the field and what
is accepted.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, get_type_hints

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError, create_model


@dataclass
class Settings:
    """Every prediction setting; ``None`` means "not given" (a file or the default fills it)."""

    model: str | None = None
    device: str | None = None
    tp: int | None = None
    replicas: int | None = None
    router: str | None = None
    weight_dtype: str | None = None
    kv_dtype: str | None = None
    engine: str | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    block_size: int | None = None
    gpu_memory_utilization: float | None = None
    max_model_len: int | None = None
    enable_chunked_prefill: bool | None = None
    enable_prefix_caching: bool | None = None
    async_scheduling: bool | None = None
    num_gpu_blocks: int | None = None
    host_speed: float | None = None
    qps: float | None = None
    trace: str | None = None
    arrival: str | None = None
    input_len: int | None = None
    input_dist: str | None = None
    output_len: int | None = None
    output_dist: str | None = None
    num_requests: int | None = None
    seed: int | None = None



ENGINE_KEYS = ("engine", "max_num_seqs", "max_num_batched_tokens", "block_size", "gpu_memory_utilization",
               "max_model_len", "enable_chunked_prefill", "enable_prefix_caching", "async_scheduling",
               "num_gpu_blocks", "host_speed")
WORKLOAD_KEYS = ("qps", "trace", "arrival", "input_len", "input_dist", "output_len", "output_dist",
                 "num_requests", "seed")
"""Settings grouped under ``engine:`` and ``workload:`` in a file; the others sit at the top."""

_STRICT = ConfigDict(extra="forbid")


def _section(name: str, keys: tuple[str, ...], **extra: Any) -> type[BaseModel]:
    """A strict pydantic model with ``keys`` of :class:`Settings` (same types, default None)."""
    hints = get_type_hints(Settings)
    spec: dict[str, Any] = {k: (hints[k], None) for k in keys}
    return create_model(name, __config__=_STRICT, **spec, **extra)


EngineSection = _section("EngineSection", ENGINE_KEYS)
WorkloadSection = _section("WorkloadSection", WORKLOAD_KEYS)
_TOP_KEYS = tuple(f.name for f in fields(Settings) if f.name not in ENGINE_KEYS + WORKLOAD_KEYS)
DeploymentFile = _section("DeploymentFile", _TOP_KEYS, engine=(EngineSection, EngineSection()),
                          workload=(WorkloadSection, WorkloadSection()))


def load_deployment_file(path: str | Path) -> Any:
    """Parse and validate a deployment file; ValueError names the file and the bad field."""
    p = Path(path)
    try:
        raw: Any = yaml.safe_load(p.read_text())
    except FileNotFoundError:
        raise ValueError(f"deployment file {p} does not exist") from None
    except yaml.YAMLError as exc:
        raise ValueError(f"deployment file {p} is not valid YAML: {exc}") from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ValueError(f"deployment file {p} must hold a mapping of settings, got {type(raw).__name__}")
    try:
        return DeploymentFile.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first["loc"])
        raise ValueError(f"deployment file {p}: {where}: {first['msg']}") from None
