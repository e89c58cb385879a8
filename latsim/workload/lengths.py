"""Token-length distributions for prompts and outputs.

Spec grammar (see :func:`parse_lengths`; names are case-insensitive)::

    200 | fixed:200                          always 200 tokens
    uniform:min=10,max=100                   integers in [min, max], both ends included
    lognormal:median=600,sigma=0.8[,min=16][,max=4096]
                                             exp(N(ln median, sigma^2)), rounded, clipped
    normal:mean=500,std=100[,min=1][,max=2000]
                                             N(mean, std^2), rounded, clipped
    choice:128,512,2048                      one of the values, each equally likely
    empirical:PATH[#COLUMN]                  resampled with replacement from a file of
                                             lengths (see ``latsim.workload.empirical``)

Every sample is an int64 array with all entries >= 1: continuous draws are rounded to the
nearest integer and then clipped to ``[min, max]`` (``min`` defaults to 1, ``max`` to
``MAX_LENGTH`` = 2**53, i.e. no practical bound).  ``mean()`` is exact for the discrete
families; for ``lognormal`` and ``normal`` it is the mean of the clipped continuous law,
which differs from the mean of the rounded samples by less than half a token.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from latsim.workload.empirical import read_lengths_file
from latsim.workload.spec import Spec, format_number, format_spec, keyword_args, positional_args, split_spec


@runtime_checkable
class LengthDistribution(Protocol):
    """A law over token counts >= 1.

    ``sample(n, rng)`` returns an int64 array of ``n`` draws taken only from ``rng``;
    ``mean()`` is the expected value where known (``None`` otherwise); ``describe()`` returns
    a spec string that :func:`parse_lengths` maps back to an equal distribution.
    """

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray: ...

    def mean(self) -> float | None: ...

    def describe(self) -> str: ...


def _check_n(n: int) -> None:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise ValueError(f"number of samples must be an integer >= 0, got {n!r}")


def _require_count(family: str, key: str, value: float) -> int:
    """``value`` as an int, or ValueError unless it is a whole number >= 1."""
    if not float(value).is_integer() or value < 1:
        raise ValueError(f"{family}: {key} must be an integer >= 1, got {format_number(value)}")
    return int(value)


def _check_bounds(family: str, lo: int, hi: int | None) -> None:
    _require_count(family, "min", lo)
    if hi is not None and (_require_count(family, "max", hi) < lo):
        raise ValueError(f"{family}: max must be >= min, got min={lo}, max={hi}")


MAX_LENGTH = 2**53
"""Cap applied when ``max`` is not given, so float draws convert to int64 exactly."""


def _round_clip(x: np.ndarray, lo: int, hi: int | None) -> np.ndarray:
    return np.clip(np.rint(x), lo, hi if hi is not None else MAX_LENGTH).astype(np.int64)


def _phi_cdf(z: float) -> float:
    return 0.5 * (1.0 + math.erf(z / math.sqrt(2.0))) if math.isfinite(z) else float(z > 0)


def _phi_pdf(z: float) -> float:
    return math.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi) if math.isfinite(z) else 0.0


@dataclass(frozen=True)
class Fixed:
    """Every request has exactly ``value`` tokens."""

    value: int

    def __post_init__(self) -> None:
        _require_count("fixed", "value", self.value)

    @classmethod
    def from_spec(cls, spec: Spec) -> Fixed:
        values = positional_args(spec)
        if len(values) != 1:
            raise ValueError(f"fixed: expected one value, got {spec.args!r}")
        return cls(_require_count("fixed", "value", values[0]))

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        _check_n(n)
        return np.full(n, self.value, dtype=np.int64)

    def mean(self) -> float:
        return float(self.value)

    def describe(self) -> str:
        return f"fixed:{self.value}"


@dataclass(frozen=True)
class Uniform:
    """Integers uniform on ``[min, max]`` inclusive."""

    min: int
    max: int

    def __post_init__(self) -> None:
        _check_bounds("uniform", self.min, self.max)

    @classmethod
    def from_spec(cls, spec: Spec) -> Uniform:
        kw = keyword_args(spec, required=("min", "max"))
        return cls(_require_count("uniform", "min", kw["min"]), _require_count("uniform", "max", kw["max"]))

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        _check_n(n)
        return rng.integers(self.min, self.max, size=n, endpoint=True, dtype=np.int64)

    def mean(self) -> float:
        return (self.min + self.max) / 2.0

    def describe(self) -> str:
        return format_spec("uniform", {"min": self.min, "max": self.max})


@dataclass(frozen=True)
class LogNormal:
    """``exp(N(ln median, sigma^2))`` rounded and clipped to ``[min, max]``."""

    median: float
    sigma: float
    min: int = 1
    max: int | None = None

    def __post_init__(self) -> None:
        if not self.median > 0:
            raise ValueError(f"lognormal: median must be > 0, got {format_number(self.median)}")
        if not self.sigma > 0:
            raise ValueError(f"lognormal: sigma must be > 0, got {format_number(self.sigma)}")
        _check_bounds("lognormal", self.min, self.max)

    @classmethod
    def from_spec(cls, spec: Spec) -> LogNormal:
        kw = keyword_args(spec, required=("median", "sigma"), optional=("min", "max"))
        return cls(kw["median"], kw["sigma"], *_bounds("lognormal", kw))

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        _check_n(n)
        return _round_clip(rng.lognormal(math.log(self.median), self.sigma, n), self.min, self.max)

    def mean(self) -> float:
        mu, s = math.log(self.median), self.sigma
        ln_a = math.log(self.min)
        ln_b = math.log(self.max) if self.max is not None else math.inf
        mass = _phi_cdf((ln_b - mu - s * s) / s) - _phi_cdf((ln_a - mu - s * s) / s)
        body = math.exp(mu + s * s / 2) * mass
        top = self.max * (1.0 - _phi_cdf((ln_b - mu) / s)) if self.max is not None else 0.0
        return self.min * _phi_cdf((ln_a - mu) / s) + body + top

    def describe(self) -> str:
        lo = self.min if self.min != 1 else None
        params = {"median": self.median, "sigma": self.sigma, "min": lo, "max": self.max}
        return format_spec("lognormal", params)


@dataclass(frozen=True)
class Normal:
    """``N(mean, std^2)`` rounded and clipped to ``[min, max]`` (``min`` defaults to 1)."""

    mu: float
    std: float
    min: int = 1
    max: int | None = None

    def __post_init__(self) -> None:
        if not math.isfinite(self.mu):
            raise ValueError(f"normal: mean must be finite, got {self.mu!r}")
        if not self.std > 0:
            raise ValueError(f"normal: std must be > 0, got {format_number(self.std)}")
        _check_bounds("normal", self.min, self.max)

    @classmethod
    def from_spec(cls, spec: Spec) -> Normal:
        kw = keyword_args(spec, required=("mean", "std"), optional=("min", "max"))
        return cls(kw["mean"], kw["std"], *_bounds("normal", kw))

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        _check_n(n)
        return _round_clip(rng.normal(self.mu, self.std, n), self.min, self.max)

    def mean(self) -> float:
        alpha = (self.min - self.mu) / self.std
        beta = (self.max - self.mu) / self.std if self.max is not None else math.inf
        inside = _phi_cdf(beta) - _phi_cdf(alpha)
        top = self.max * (1.0 - _phi_cdf(beta)) if self.max is not None else 0.0
        tails = self.min * _phi_cdf(alpha) + top
        return tails + self.mu * inside + self.std * (_phi_pdf(alpha) - _phi_pdf(beta))

    def describe(self) -> str:
        lo = self.min if self.min != 1 else None
        return format_spec("normal", {"mean": self.mu, "std": self.std, "min": lo, "max": self.max})


@dataclass(frozen=True)
class Choice:
    """One of ``values``, each with probability ``1 / len(values)`` (repeats add weight)."""

    values: tuple[int, ...]

    def __post_init__(self) -> None:
        if not self.values:
            raise ValueError("choice: needs at least one value, e.g. choice:128,512")
        for v in self.values:
            _require_count("choice", "every value", v)

    @classmethod
    def from_spec(cls, spec: Spec) -> Choice:
        return cls(tuple(_require_count("choice", "every value", v) for v in positional_args(spec)))

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        _check_n(n)
        return np.asarray(self.values, dtype=np.int64)[rng.integers(0, len(self.values), size=n)]

    def mean(self) -> float:
        return float(np.mean(self.values))

    def describe(self) -> str:
        return "choice:" + ",".join(str(v) for v in self.values)


@dataclass(frozen=True, eq=False)
class Empirical:
    """Resamples ``values`` (int64, all >= 1) with replacement; ``source`` is the spec's PATH."""

    values: np.ndarray
    source: str = "<array>"

    def __post_init__(self) -> None:
        if len(self.values) == 0:
            raise ValueError(f"empirical: {self.source} holds no lengths")
        if np.min(self.values) < 1:
            raise ValueError(f"empirical: every length must be >= 1, got {int(np.min(self.values))}")

    @classmethod
    def from_spec(cls, spec: Spec) -> Empirical:
        """Reads the file named in the spec (``PATH`` or ``PATH#COLUMN``)."""
        if not spec.args:
            raise ValueError("empirical: expected a file after ':', e.g. empirical:lengths.txt")
        path, _, column = spec.args.partition("#")
        return cls(read_lengths_file(path.strip(), column.strip() or None), source=spec.args)

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        _check_n(n)
        return np.asarray(self.values, dtype=np.int64)[rng.integers(0, len(self.values), size=n)]

    def mean(self) -> float:
        return float(np.mean(self.values))

    def describe(self) -> str:
        return f"empirical:{self.source}"


def _bounds(family: str, kw: dict[str, float]) -> tuple[int, int | None]:
    lo = _require_count(family, "min", kw.get("min", 1))
    hi = _require_count(family, "max", kw["max"]) if "max" in kw else None
    return lo, hi


class LengthFamily(Protocol):
    """A class in :data:`LENGTHS`: builds its distribution from a lexed spec, or raises ValueError."""

    @classmethod
    def from_spec(cls, spec: Spec) -> LengthDistribution: ...


LENGTHS: dict[str, type[LengthFamily]] = {
    "fixed": Fixed,
    "uniform": Uniform,
    "lognormal": LogNormal,
    "normal": Normal,
    "choice": Choice,
    "empirical": Empirical,
}
"""Length-family name -> class; ``from_spec`` parses the arguments (``empirical`` reads its file)."""

ACCEPTED_FORMS = (
    "N, fixed:N, uniform:min=A,max=B, lognormal:median=M,sigma=S[,min=A][,max=B], "
    "normal:mean=M,std=S[,min=A][,max=B], choice:N1,N2,..., empirical:PATH[#COLUMN]"
)


def parse_lengths(spec: str | int | LengthDistribution) -> LengthDistribution:
    """Build the length distribution named by ``spec``; a distribution is returned as is.

    A bare integer (``200`` or ``"200"``) means ``fixed:200``.  ``empirical:`` specs read
    their file here (never later, never in a constructor).  Raises ValueError naming the bad
    part and listing the accepted forms (OSError if an empirical file cannot be opened).
    """
    if isinstance(spec, LengthDistribution):
        return spec
    if isinstance(spec, bool):
        raise ValueError(f"length spec must be a string or an integer, got {spec!r}")
    if isinstance(spec, (int, np.integer)):
        return Fixed(_require_count("fixed", "value", float(spec)))
    lexed = split_spec(spec, "length")
    if lexed.args is None and _is_number(lexed.name):
        return Fixed(_require_count("fixed", "value", float(lexed.name)))
    family = LENGTHS.get(lexed.name)
    if family is None:
        raise ValueError(
            f"unknown length distribution {lexed.name!r} in {lexed.text!r}; accepted: {ACCEPTED_FORMS}")
    try:
        return family.from_spec(lexed)
    except ValueError as err:
        raise ValueError(f"{err} (in length spec {lexed.text!r})") from None


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
