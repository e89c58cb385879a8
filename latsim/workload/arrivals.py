"""Arrival processes: when requests reach the server.

Spec grammar (see :func:`parse_arrival`)::

    poisson            exponential inter-arrivals, mean 1/qps
    gamma:cv=C         gamma inter-arrivals, mean 1/qps, coefficient of variation C > 0
                       (C = 1 is Poisson; C > 1 is burstier, C < 1 smoother)
    constant           inter-arrivals of exactly 1/qps
    burst              every request at t = 0 (qps is ignored)

Convention for every process: the first request arrives at ``t = 0`` and ``n - 1``
inter-arrival gaps follow, so a trace never starts with idle time and the arrival times of
``n`` requests span ``n - 1`` gaps.  Adding a process means one class with ``name``,
``from_spec``, ``sample`` and ``describe`` plus one entry in ``ARRIVALS``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Protocol, runtime_checkable

import numpy as np

from latsim.workload.spec import Spec, format_number, format_spec, keyword_args, no_args, split_spec


@runtime_checkable
class ArrivalProcess(Protocol):
    """Draws arrival times for ``n`` requests at a mean rate of ``qps`` requests per second.

    ``sample`` returns a non-decreasing float64 array of length ``n`` whose first entry is 0.
    Implementations are immutable and draw only from the ``rng`` passed in.
    """

    @property
    def name(self) -> str: ...

    def sample(self, qps: float, n: int, rng: np.random.Generator) -> np.ndarray: ...

    def describe(self) -> str: ...


class ArrivalFamily(Protocol):
    """A class in :data:`ARRIVALS`: builds its process from a lexed spec, or raises ValueError."""

    @classmethod
    def from_spec(cls, spec: Spec) -> ArrivalProcess: ...


def check_rate(qps: float, n: int) -> None:
    """Raise ValueError unless ``qps`` is a finite number > 0 and ``n`` an integer >= 0."""
    if isinstance(qps, bool) or not isinstance(qps, (int, float)) or not math.isfinite(qps) or qps <= 0:
        raise ValueError(f"qps must be a finite number > 0, got {qps!r}")
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise ValueError(f"number of requests must be an integer >= 0, got {n!r}")


def _from_gaps(gaps: np.ndarray) -> np.ndarray:
    """Arrival times ``[0, g0, g0 + g1, ...]`` from ``n - 1`` gaps."""
    return np.concatenate(([0.0], np.cumsum(gaps, dtype=np.float64)))


@dataclass(frozen=True)
class Poisson:
    """Memoryless arrivals: exponential gaps with mean ``1 / qps``."""

    name: ClassVar[str] = "poisson"

    @classmethod
    def from_spec(cls, spec: Spec) -> Poisson:
        no_args(spec)
        return cls()

    def sample(self, qps: float, n: int, rng: np.random.Generator) -> np.ndarray:
        check_rate(qps, n)
        if not n:
            return np.empty(0)
        return _from_gaps(rng.exponential(1.0 / qps, n - 1))

    def describe(self) -> str:
        return "poisson"


@dataclass(frozen=True)
class Gamma:
    """Gamma gaps with mean ``1 / qps`` and coefficient of variation ``cv`` (shape ``1/cv^2``)."""

    cv: float
    name: ClassVar[str] = "gamma"

    @classmethod
    def from_spec(cls, spec: Spec) -> Gamma:
        return cls(cv=keyword_args(spec, required=("cv",))["cv"])

    def __post_init__(self) -> None:
        if not math.isfinite(self.cv) or self.cv <= 0:
            raise ValueError(f"gamma: cv must be > 0, got {format_number(self.cv)}")

    def sample(self, qps: float, n: int, rng: np.random.Generator) -> np.ndarray:
        check_rate(qps, n)
        if not n:
            return np.empty(0)
        shape = 1.0 / self.cv**2
        return _from_gaps(rng.gamma(shape, 1.0 / (qps * shape), n - 1))

    def describe(self) -> str:
        return format_spec("gamma", {"cv": self.cv})


@dataclass(frozen=True)
class Constant:
    """Evenly spaced arrivals, exactly ``1 / qps`` apart (draws nothing from ``rng``)."""

    name: ClassVar[str] = "constant"

    @classmethod
    def from_spec(cls, spec: Spec) -> Constant:
        no_args(spec)
        return cls()

    def sample(self, qps: float, n: int, rng: np.random.Generator) -> np.ndarray:
        check_rate(qps, n)
        return np.arange(n, dtype=np.float64) / qps

    def describe(self) -> str:
        return "constant"


@dataclass(frozen=True)
class Burst:
    """Every request arrives at ``t = 0``; ``qps`` is validated but otherwise ignored."""

    name: ClassVar[str] = "burst"

    @classmethod
    def from_spec(cls, spec: Spec) -> Burst:
        no_args(spec)
        return cls()

    def sample(self, qps: float, n: int, rng: np.random.Generator) -> np.ndarray:
        check_rate(qps, n)
        return np.zeros(n, dtype=np.float64)

    def describe(self) -> str:
        return "burst"


ARRIVALS: dict[str, type[ArrivalFamily]] = {
    "poisson": Poisson,
    "gamma": Gamma,
    "constant": Constant,
    "burst": Burst,
}
"""Arrival-process name -> class; ``from_spec`` checks the spec's arguments and builds it."""

ACCEPTED_FORMS = "poisson, gamma:cv=<cv > 0>, constant, burst"


def parse_arrival(spec: str | ArrivalProcess) -> ArrivalProcess:
    """Build the arrival process named by ``spec`` (an existing process is returned as is).

    Raises ValueError naming the bad part of the spec and listing the accepted forms.
    """
    if isinstance(spec, ArrivalProcess):
        return spec
    lexed = split_spec(spec, "arrival")
    family = ARRIVALS.get(lexed.name)
    if family is None:
        raise ValueError(
            f"unknown arrival process {lexed.name!r} in {lexed.text!r}; accepted: {ACCEPTED_FORMS}")
    try:
        return family.from_spec(lexed)
    except ValueError as err:
        raise ValueError(f"{err} (in arrival spec {lexed.text!r}; accepted: {ACCEPTED_FORMS})") from None
