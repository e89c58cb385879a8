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

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class EngineSection(_Strict):
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


class WorkloadSection(_Strict):
    qps: float | None = None
    trace: str | None = None
    arrival: str | None = None
    input_len: int | None = None
    input_dist: str | None = None
    output_len: int | None = None
    output_dist: str | None = None
    num_requests: int | None = None
    seed: int | None = None


class DeploymentFile(_Strict):
    model: str | None = None
    device: str | None = None
    tp: int | None = None
    replicas: int | None = None
    router: str | None = None
    weight_dtype: str | None = None
    kv_dtype: str | None = None
    engine: EngineSection = EngineSection()
    workload: WorkloadSection = WorkloadSection()


def load_deployment_file(path: str | Path) -> DeploymentFile:
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
