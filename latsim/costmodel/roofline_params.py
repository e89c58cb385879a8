"""Efficiency factors and overheads of the roofline cost model, and their data file.

The numbers live in ``data/costmodel/roofline.yaml`` with a ``provenance`` entry each; this
module only parses and validates them.  They are assumed defaults that a calibration profile
for the GPU replaces.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml

from latsim.paths import COSTMODEL

DEFAULT_PATH = COSTMODEL / "roofline.yaml"
COMPUTE_KINDS = ("attention", "memory")
MEMORY_KINDS = ("gemm", "attention", "memory")
MAX_OVERHEAD_S = 1.0
FILE_VERSION = 1
PROVENANCE_KEYS = (
    "status", "gemm.size_classes", "gemm.m_half",
    *(f"compute_efficiency.{k}" for k in COMPUTE_KINDS), *(f"memory_efficiency.{k}" for k in MEMORY_KINDS),
    "allreduce.latency_s", "allreduce.bus_efficiency",
    "overheads.kernel_launch_s", "overheads.step_s", "overheads.per_seq_s",
)


@dataclass(frozen=True)
class GemmEfficiency:
    """GEMM compute efficiency: ``eff_max(K*N) * M / (M + m_half)`` for ``M`` rows.

    ``size_classes`` are ``(max_weight_elems, eff_max)`` pairs with ascending limits, the last
    ``inf``; a ``K x N`` weight matrix on one GPU takes the first class whose limit it fits.
    """

    m_half: float
    size_classes: tuple[tuple[float, float], ...]

    def __post_init__(self) -> None:
        _check_range("gemm.m_half", self.m_half, 0.0, math.inf)
        limits = [c[0] for c in self.size_classes]
        if not limits or limits != sorted(limits) or limits[-1] != math.inf:
            raise ValueError(f"gemm.size_classes limits {limits} must ascend and end with .inf")
        for i, (_, eff) in enumerate(self.size_classes):
            _check_efficiency(f"gemm.size_classes[{i}].eff_max", eff)

    def eff_max(self, matrix_elems: float) -> float:
        """Large-M efficiency of a GEMM whose weight matrix has ``matrix_elems`` elements."""
        return next(eff for limit, eff in self.size_classes if matrix_elems <= limit)

    def efficiency(self, rows: float, matrix_elems: float) -> float:
        """Achieved fraction of peak at ``rows`` (M) rows."""
        return self.eff_max(matrix_elems) * rows / (rows + self.m_half)


@dataclass(frozen=True)
class RooflineParams:
    """Everything the roofline assumes about achieved performance (see the data file).

    Efficiencies are fractions in (0, 1]; times are seconds in [0, 1).  ``compute_efficiency``
    has the kinds :data:`COMPUTE_KINDS` (GEMMs use ``gemm``), ``memory_efficiency`` the kinds
    :data:`MEMORY_KINDS`.  ``source`` names the file the numbers came from.
    """

    gemm: GemmEfficiency
    compute_efficiency: Mapping[str, float]
    memory_efficiency: Mapping[str, float]
    allreduce_latency_s: float
    allreduce_efficiency: float
    kernel_launch_s: float
    step_overhead_s: float
    seq_overhead_s: float
    source: str = "built in code"
    provenance: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name, table, kinds in (("compute_efficiency", self.compute_efficiency, COMPUTE_KINDS),
                                   ("memory_efficiency", self.memory_efficiency, MEMORY_KINDS)):
            if set(table) != set(kinds):
                raise ValueError(f"{name} has kinds {sorted(table)}; expected exactly {list(kinds)}")
            for kind, eff in table.items():
                _check_efficiency(f"{name}.{kind}", eff)
        _check_efficiency("allreduce.bus_efficiency", self.allreduce_efficiency)
        for name, value in (("allreduce.latency_s", self.allreduce_latency_s),
                            ("overheads.kernel_launch_s", self.kernel_launch_s),
                            ("overheads.step_s", self.step_overhead_s),
                            ("overheads.per_seq_s", self.seq_overhead_s)):
            _check_range(name, value, 0.0, MAX_OVERHEAD_S)

    def as_dict(self) -> dict[str, object]:
        """The numbers as plain data (for ``describe()`` and reports)."""
        return {
            "gemm": {"m_half": self.gemm.m_half,
                     "size_classes": [{"max_weight_elems": lim, "eff_max": eff}
                                      for lim, eff in self.gemm.size_classes]},
            "compute_efficiency": dict(self.compute_efficiency),
            "memory_efficiency": dict(self.memory_efficiency),
            "allreduce": {"latency_s": self.allreduce_latency_s, "bus_efficiency": self.allreduce_efficiency},
            "overheads": {"kernel_launch_s": self.kernel_launch_s, "step_s": self.step_overhead_s,
                          "per_seq_s": self.seq_overhead_s},
        }


def _check_efficiency(name: str, value: float) -> None:
    if not 0.0 < value <= 1.0:
        raise ValueError(f"{name} = {value!r} is outside the accepted range (0, 1]")


def _check_range(name: str, value: float, lo: float, hi: float) -> None:
    if not lo <= value < hi:
        raise ValueError(f"{name} = {value!r} is outside the accepted range [{lo}, {hi})")


def load_roofline_params(path: str | Path | None = None) -> RooflineParams:
    """Read and validate a roofline parameter file (default: the shipped ``roofline.yaml``).

    Raises ValueError naming the file and the offending field when the file cannot be read,
    is not YAML, lacks a field or holds a value out of range.
    """
    path = Path(path) if path is not None else DEFAULT_PATH
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ValueError(f"{path}: cannot read roofline parameters: {exc}") from exc
    try:
        return _parse(raw, str(path))
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from exc


@functools.lru_cache(maxsize=1)
def default_roofline_params() -> RooflineParams:
    """The shipped defaults, read once per process."""
    return load_roofline_params()


def _parse(raw: object, source: str) -> RooflineParams:
    top = _mapping(raw, "top level")
    if _get(top, "version", "") != FILE_VERSION:
        raise ValueError(f"field 'version' = {top['version']!r}; this latsim reads version {FILE_VERSION}")
    gemm, overheads, allreduce = (_mapping(_get(top, k, ""), k) for k in ("gemm", "overheads", "allreduce"))
    classes = _get(gemm, "size_classes", "gemm")
    if not isinstance(classes, list):
        raise ValueError(f"field 'gemm.size_classes' = {classes!r} must be a list")
    return RooflineParams(
        gemm=GemmEfficiency(
            m_half=_number(gemm, "m_half", "gemm"),
            size_classes=tuple(_size_class(c, f"gemm.size_classes[{i}]") for i, c in enumerate(classes)),
        ),
        compute_efficiency=_efficiencies(top, "compute_efficiency"),
        memory_efficiency=_efficiencies(top, "memory_efficiency"),
        allreduce_latency_s=_number(allreduce, "latency_s", "allreduce"),
        allreduce_efficiency=_number(allreduce, "bus_efficiency", "allreduce"),
        kernel_launch_s=_number(overheads, "kernel_launch_s", "overheads"),
        step_overhead_s=_number(overheads, "step_s", "overheads"),
        seq_overhead_s=_number(overheads, "per_seq_s", "overheads"),
        source=source,
        provenance=_provenance(top),
    )


def _provenance(top: Mapping[str, Any]) -> Mapping[str, str]:
    """Every number must say where it comes from."""
    table = {str(k): str(v) for k, v in _mapping(_get(top, "provenance", ""), "provenance").items()}
    missing = [k for k in PROVENANCE_KEYS if not table.get(k, "").strip()]
    if missing:
        raise ValueError(f"field 'provenance' lacks entries for {missing}")
    return MappingProxyType(table)


def _get(table: Mapping[str, Any], key: str, where: str) -> Any:
    if key not in table:
        raise ValueError(f"field '{where + '.' if where else ''}{key}' is missing")
    return table[key]


def _mapping(value: object, name: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"field '{name}' must be a mapping, got {type(value).__name__}")
    return value


def _number(table: Mapping[str, Any], key: str, where: str) -> float:
    value = _get(table, key, where)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"field '{where}.{key}' = {value!r} must be a number")
    return float(value)


def _size_class(item: object, name: str) -> tuple[float, float]:
    table = _mapping(item, name)
    return _number(table, "max_weight_elems", name), _number(table, "eff_max", name)


def _efficiencies(top: Mapping[str, Any], key: str) -> Mapping[str, float]:
    table = _mapping(_get(top, key, ""), key)
    return MappingProxyType({str(k): _number(table, k, key) for k in table})
