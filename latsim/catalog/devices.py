"""GPU and accelerator specifications, read from ``data/catalog/devices.yaml``.

Every figure in the data file carries a source note; this module only parses and validates.
The file states units in its key names (``memory_gib``: 2**30 bytes; ``*_gb_s``: 1e9 bytes per
second; ``peak_tflops_dense``: 1e12 FLOP/s without 2:4 sparsity) and :func:`parse_devices`
converts them to the SI bytes and FLOP/s that :class:`DeviceSpec` holds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

FLOPS_DTYPES = ("bf16", "fp16", "fp8", "int8", "fp32")
MEMORY_BASES = ("runtime", "nvidia-smi", "rocm-smi", "nominal")
REQUIRED_SOURCES = (
    "memory", "hbm_bandwidth", "peak_flops", "interconnect_bw", "max_gpus_per_node", "price_per_hour",
)


@dataclass(frozen=True)
class DeviceSpec:
    """One accelerator as the roofline sees it.

    ``peak_flops`` maps a dtype name (``bf16``, ``fp16``, ``fp8``, ``int8``, ``fp32``) to dense
    (non-sparse) peak FLOP/s.  ``interconnect_bw`` is the per-GPU unidirectional bandwidth in B/s
    of the link used by tensor-parallel collectives (NVLink, PCIe, Infinity Fabric, ...).

    ``memory_bytes`` is the capacity the runtime reports where known (``memory_basis`` says
    which figure it is: ``runtime`` = what torch/vLLM report as total GPU memory, ``nvidia-smi``
    / ``rocm-smi`` = the management tool's total, slightly above the runtime figure,
    ``nominal`` = the datasheet capacity).  ``sources`` maps each figure to where it came from.
    """

    name: str
    display_name: str
    vendor: str
    memory_bytes: float
    hbm_bandwidth: float
    peak_flops: dict[str, float]
    interconnect: str
    interconnect_bw: float
    max_gpus_per_node: int
    price_per_hour: float
    aliases: tuple[str, ...] = ()
    sources: dict[str, str] = field(default_factory=dict)
    memory_basis: str = "nominal"
    arch: str | None = None
    """The compute architecture (``sm90`` for Hopper) where a kernel's dispatch depends on it."""
    sm_count: int | None = None
    """Streaming multiprocessors (compute units), where a kernel's dispatch depends on them."""

    def __hash__(self) -> int:
        return hash((self.name, self.memory_bytes, self.hbm_bandwidth, tuple(sorted(self.peak_flops.items())),
                     self.interconnect_bw))

    @property
    def memory_gib(self) -> float:
        return self.memory_bytes / 2**30

    def flops_for(self, dtype: str) -> float:
        """Dense peak FLOP/s for ``dtype``; falls back to bf16 where the chip has no such unit."""
        return self.peak_flops.get(dtype) or self.peak_flops["bf16"]


class _DeviceEntry(BaseModel):
    """Schema of one entry of ``devices.yaml`` (units in the field names)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    display_name: str = Field(min_length=1)
    vendor: str = Field(min_length=1)
    aliases: tuple[str, ...] = ()
    memory_gib: float = Field(gt=0)
    memory_basis: str
    hbm_bandwidth_gb_s: float = Field(gt=0)
    peak_tflops_dense: dict[str, float]
    interconnect: str = Field(min_length=1)
    interconnect_gb_s: float = Field(gt=0)
    max_gpus_per_node: int = Field(ge=1)
    price_usd_per_hour: float = Field(gt=0)
    arch: str | None = Field(default=None, pattern=r"^sm[0-9]{2,3}$")
    sm_count: int | None = Field(default=None, ge=1)
    sources: dict[str, str]

    @field_validator("memory_basis")
    @classmethod
    def _basis_known(cls, value: str) -> str:
        if value not in MEMORY_BASES:
            raise ValueError(f"must be one of {', '.join(MEMORY_BASES)}, got {value!r}")
        return value

    @field_validator("peak_tflops_dense")
    @classmethod
    def _flops_valid(cls, value: dict[str, float]) -> dict[str, float]:
        unknown = sorted(set(value) - set(FLOPS_DTYPES))
        if unknown:
            raise ValueError(f"unknown dtype(s) {unknown}; accepted: {', '.join(FLOPS_DTYPES)}")
        if "bf16" not in value:
            raise ValueError("must include 'bf16' (the fallback for dtypes the chip lacks)")
        bad = {k: v for k, v in value.items() if not v > 0}
        if bad:
            raise ValueError(f"TFLOP/s must be > 0, got {bad}")
        return value

    @field_validator("sources")
    @classmethod
    def _sources_complete(cls, value: dict[str, str]) -> dict[str, str]:
        missing = [key for key in REQUIRED_SOURCES if not str(value.get(key, "")).strip()]
        if missing:
            raise ValueError(f"missing source for figure(s) {missing}; every figure needs one")
        return value

    def to_spec(self, name: str) -> DeviceSpec:
        return DeviceSpec(
            name=name,
            display_name=self.display_name,
            vendor=self.vendor,
            memory_bytes=self.memory_gib * 2**30,
            hbm_bandwidth=self.hbm_bandwidth_gb_s * 1e9,
            peak_flops={k: v * 1e12 for k, v in self.peak_tflops_dense.items()},
            interconnect=self.interconnect,
            interconnect_bw=self.interconnect_gb_s * 1e9,
            max_gpus_per_node=self.max_gpus_per_node,
            price_per_hour=self.price_usd_per_hour,
            aliases=tuple(a.lower() for a in self.aliases),
            sources=dict(self.sources),
            memory_basis=self.memory_basis,
            arch=self.arch,
            sm_count=self.sm_count,
        )


def parse_devices(text: str, source: str = "devices.yaml") -> list[DeviceSpec]:
    """Parse and validate a devices YAML document; ``source`` names it in error messages.

    The document is ``{"devices": {name: entry, ...}}``.  Raises ``ValueError`` naming the
    device and field for any bad entry, and for names or aliases used twice.
    """
    devices = _devices_mapping(_load_yaml(text, source), source)
    specs = [_parse_entry(name, entry, source) for name, entry in devices.items()]
    _check_unique_names(specs, source)
    return specs


def _load_yaml(text: str, source: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark is not None else ""
        raise ValueError(f"{source}: invalid YAML{where}: {exc}") from exc


def _devices_mapping(doc: Any, source: str) -> dict[str, Any]:
    devices = doc.get("devices") if isinstance(doc, dict) else None
    if not isinstance(devices, dict) or not devices:
        raise ValueError(f"{source}: expected a top-level 'devices:' mapping of name -> entry")
    return devices


def _parse_entry(name: Any, entry: Any, source: str) -> DeviceSpec:
    if not isinstance(name, str) or name != name.lower() or not name:
        raise ValueError(f"{source}: device name {name!r} must be a non-empty lower-case string")
    try:
        return _DeviceEntry.model_validate(entry).to_spec(name)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "<entry>"
        raise ValueError(f"{source}: device {name!r}, field {where!r}: {first['msg']}") from exc


def _check_unique_names(specs: list[DeviceSpec], source: str) -> None:
    owner: dict[str, str] = {}
    for spec in specs:
        for key in (spec.name, *spec.aliases):
            if key in owner and owner[key] != spec.name:
                raise ValueError(
                    f"{source}: name or alias {key!r} used by both {owner[key]!r} and {spec.name!r}"
                )
            owner[key] = spec.name
