"""Weighted percentiles, summaries and bootstrap confidence intervals.

Percentile convention: the inverted empirical CDF (Hyndman-Fan type 1, numpy's
``method="inverted_cdf"``).  With values ``v`` and weights ``w`` (total ``W``), the q-th
percentile is the smallest ``v[i]`` whose cumulative weight reaches ``q / 100 * W``; it is
always one of the observed values, never an interpolation.  With unit weights it equals
``numpy.percentile(v, q, method="inverted_cdf")`` exactly, and integer weights behave exactly
like repeating each value that many times.  Weights are frequencies (e.g. how many
inter-token gaps had this length); zero-weight values are ignored.

Empty inputs (or zero total weight) give NaN rather than an error, so a run with no finished
request still summarises; NaN or infinite *values* are an error (filter them first).
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike

DESCRIBE_PERCENTILES = {"p50": 50.0, "p90": 90.0, "p95": 95.0, "p99": 99.0}


def _samples(values: ArrayLike, weights: ArrayLike | None) -> tuple[np.ndarray, np.ndarray]:
    """Validated 1-D ``(values, weights)`` as float64 with zero-weight entries dropped."""
    v = np.asarray(values, dtype=np.float64)
    if v.ndim != 1:
        raise ValueError(f"values must be one-dimensional, got shape {v.shape}")
    if not np.all(np.isfinite(v)):
        raise ValueError("values must be finite; drop NaN (unreached) entries before summarising")
    if weights is None:
        return v, np.ones_like(v)
    w = np.asarray(weights, dtype=np.float64)
    if w.shape != v.shape:
        raise ValueError(f"weights have shape {w.shape}, values have shape {v.shape}")
    if not np.all(np.isfinite(w)) or np.any(w < 0):
        raise ValueError("weights must be finite and >= 0")
    keep = w > 0
    return v[keep], w[keep]


def _check_q(q: np.ndarray) -> None:
    if not np.all((q >= 0) & (q <= 100)):
        raise ValueError(f"percentiles must be in [0, 100], got {q.tolist()}")


def _sorted(v: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Values in ascending order and their cumulative weights."""
    order = np.argsort(v, kind="stable")
    return v[order], np.cumsum(w[order])


def _inverse_cdf(sorted_v: np.ndarray, cum_w: np.ndarray, probs: np.ndarray) -> np.ndarray:
    """Smallest value whose cumulative weight reaches ``probs * total`` (inverted CDF)."""
    idx = np.searchsorted(cum_w, probs * cum_w[-1], side="left")
    return sorted_v[np.minimum(idx, len(sorted_v) - 1)]


def weighted_percentiles(values: ArrayLike, weights: ArrayLike | None, qs: ArrayLike) -> np.ndarray:
    """Inverted-CDF percentiles ``qs`` (in [0, 100]) of weighted samples; shape of ``qs``.

    ``weights=None`` means unit weights.  Returns NaN for every q when there are no samples.
    """
    q = np.asarray(qs, dtype=np.float64)
    _check_q(q)
    v, w = _samples(values, weights)
    if v.size == 0:
        return np.full(q.shape, np.nan)
    sorted_v, cum_w = _sorted(v, w)
    return _inverse_cdf(sorted_v, cum_w, np.true_divide(q, 100))


def describe(values: ArrayLike, weights: ArrayLike | None = None) -> dict[str, float]:
    """``{"mean", "p50", "p90", "p95", "p99"}`` of (weighted) samples; NaN when empty."""
    v, w = _samples(values, weights)
    if v.size == 0:
        return {"mean": math.nan, **{k: math.nan for k in DESCRIBE_PERCENTILES}}
    pct = weighted_percentiles(v, w, list(DESCRIBE_PERCENTILES.values()))
    out = {"mean": float(np.average(v, weights=w))}
    out.update({k: float(p) for k, p in zip(DESCRIBE_PERCENTILES, pct, strict=True)})
    return out


def bootstrap_replicates(
    values: ArrayLike,
    q: float,
    rng: np.random.Generator,
    n_boot: int = 1000,
    weights: ArrayLike | None = None,
) -> np.ndarray:
    """``n_boot`` bootstrap replicates of the q-th percentile; empty array without samples.

    Design note.  A replicate is the inverted-CDF percentile of ``N`` draws with replacement
    (``N`` = number of values, or the total of the integer ``weights``), i.e. their k-th
    smallest with ``k = max(1, ceil(q/100 * N))``.  Drawing from the empirical CDF ``F`` is
    ``F^-1(U)`` with ``U`` uniform, and ``F^-1`` is monotone, so the k-th smallest draw is
    ``F^-1(U_(k))`` where the k-th smallest of ``N`` uniforms is ``Beta(k, N + 1 - k)``.
    Hence each replicate costs one Beta draw and one binary search after a single sort:
    O(n log n + n_boot log n) time, O(n + n_boot) memory, with the same distribution as
    naive resampling.  Deterministic for a seeded ``rng``.
    """
    if isinstance(n_boot, bool) or not isinstance(n_boot, (int, np.integer)) or n_boot < 1:
        raise ValueError(f"n_boot must be an integer >= 1, got {n_boot!r}")
    _check_q(np.asarray(q, dtype=np.float64))
    v, w = _samples(values, weights)
    if weights is not None and not np.all(w == np.floor(w)):
        raise ValueError("bootstrap weights must be whole-number frequencies")
    if v.size == 0:
        return np.empty(0)
    sorted_v, cum_w = _sorted(v, w)
    total = int(cum_w[-1])
    k = min(max(1, math.ceil(total * (q / 100))), total)
    return _inverse_cdf(sorted_v, cum_w, rng.beta(k, total + 1 - k, size=n_boot))


def bootstrap_ci(
    values: ArrayLike,
    q: float,
    rng: np.random.Generator,
    n_boot: int = 1000,
    level: float = 0.95,
    weights: ArrayLike | None = None,
) -> tuple[float, float]:
    """Percentile-bootstrap ``level`` confidence interval ``(lo, hi)`` for the q-th percentile.

    ``lo``/``hi`` are the linear-interpolated ``(1 -+ level) / 2`` quantiles of
    :func:`bootstrap_replicates`.  ``(nan, nan)`` when there are no samples.
    """
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    reps = bootstrap_replicates(values, q, rng, n_boot, weights)
    if reps.size == 0:
        return math.nan, math.nan
    lo, hi = np.quantile(reps, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)
