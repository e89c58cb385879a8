"""Confidence intervals for latency percentiles that respect how a queue's samples behave.

A bootstrap over one run's requests treats them as independent; in a queue they are not
(requests in one busy period all wait long), and the arrival process itself is random, so
such an interval is far too narrow.  The intervals here come from *sections*: independent
replications (runs with other seeds of the arrival and length processes) or, for one long run
of a fixed trace, contiguous batches of it in arrival order (batch means).

Estimator (sectioning; Asmussen and Glynn, *Stochastic Simulation*, 2007, III.5a; Nakayama,
"Confidence intervals for quantiles using sectioning", 2014).  With ``n`` sections:

- the point estimate is the percentile of all sections' samples pooled, which has the bias of
  one run ``n`` times as long (a short run's percentile is biased low: a run of a few hundred
  requests rarely holds the rare long busy periods that set the tail);
- its standard error is ``s / sqrt(n)``, ``s`` the standard deviation of the ``n`` sections'
  own percentiles;
- the interval is ``point +- t_{n-1, (1 + level) / 2} * s / sqrt(n)`` (Student t with ``n - 1``
  degrees of freedom).

What it covers: the *long-run* (steady-state) percentile of the latency distribution of the
workload's process on this deployment (arrivals and lengths drawn afresh), at ``level``
confidence, provided the sections are independent and each long enough for its percentile to
be roughly normal.  It does not cover model error (simulator versus a real engine).  For
batch means the sections are only nearly independent (neighbouring batches share a busy
period at their boundary), and the interval is conditional on the one trace replayed.

When it fails, and how to tell.  A percentile is only as well estimated as the number of
*independent* tail episodes behind it.  At high load a queue's slowest requests come in
clusters (one busy period delays many neighbours), and a run of a few hundred requests may
hold one or two such episodes or none: its P99 is then low *and* its spread across sections
small, and the interval misses high.  The telling number is how many separate episodes each
section holds: maximal runs of consecutive requests (in arrival order) above the pooled P99,
per section.  A study on M/M/1 (exact long-run P99, nominal 95 %, ``tests/metrics``) measured
coverage against it: 1.1 episodes per section covered 35-47 % (load 0.9, 1,000 requests per
section, 5 or 10 sections), 1.3 covered 65-76 % (0.8, 1,000), 2.8 covered 89-93 % (0.5, 1,000)
and 4.0 covered 86 % (0.8, 4,000).  Each block reports the total as ``ci_tail_clusters`` and
``ci_reliable = ci_tail_clusters / ci_n >= MIN_TAIL_CLUSTERS_PER_SECTION``; when it is false,
longer runs (more requests per replication) are the remedy, not more replications.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import stats

from latsim.metrics.stats import DESCRIBE_PERCENTILES, describe, weighted_percentiles

LEVEL = 0.95
MIN_BATCH_REQUESTS = 100
"""Fewest requests per batch for batch means (each batch's P99 needs about 100 samples)."""
MAX_BATCHES = 20
MIN_SECTIONS = 2
MIN_TAIL_CLUSTERS_PER_SECTION = 2.0
"""Fewest separate P99 exceedance episodes per section for ``ci_reliable`` (module docstring)."""

COVERS = {
    "replications": "the long-run percentile of this workload's process on this deployment "
                    "(independent replications, sectioning t-interval)",
    "batch_means": "the long-run percentile of this trace's replay (contiguous batches of one run, "
                   "sectioning t-interval; batches are only nearly independent)",
}

Sample = tuple[np.ndarray, np.ndarray | None]
"""Values (milliseconds) and their whole-number weights (``None``: one each)."""


def sectioning_interval(point: float, estimates: Sequence[float] | np.ndarray,
                        level: float = LEVEL) -> tuple[float, float]:
    """``point +- t_{n-1} * sd(estimates) / sqrt(n)``; ``(nan, nan)`` if any input is NaN.

    ``estimates`` are the sections' own estimates (at least 2); ``point`` the pooled one.
    """
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    est = np.asarray(estimates, dtype=np.float64)
    if est.ndim != 1 or est.size < MIN_SECTIONS:
        raise ValueError(f"need at least {MIN_SECTIONS} section estimates, got {est.size}")
    if math.isnan(point) or np.isnan(est).any():
        return math.nan, math.nan
    half = float(stats.t.ppf((1 + level) / 2, est.size - 1)) * float(np.std(est, ddof=1)) / math.sqrt(est.size)
    return point - half, point + half


def standard_error(estimates: Sequence[float] | np.ndarray) -> float:
    """``sd(estimates) / sqrt(n)``: the sectioning standard error of the pooled estimate."""
    est = np.asarray(estimates, dtype=np.float64)
    return float(np.std(est, ddof=1)) / math.sqrt(est.size)


def section_percentiles(sections: Sequence[Sample]) -> dict[str, np.ndarray]:
    """``{"p50": [one per section], ...}``: each section's own percentiles (NaN when empty)."""
    table = np.array([weighted_percentiles(v, w, list(DESCRIBE_PERCENTILES.values())) for v, w in sections])
    return {k: table[:, j] for j, k in enumerate(DESCRIBE_PERCENTILES)}


def percentile_block(sections: Sequence[Sample], method: str, level: float = LEVEL) -> dict:
    """Pooled mean and percentiles with a sectioning interval for each percentile.

    The block has the keys of ``latsim.metrics.summary``'s latency blocks (``mean``, ``p50``,
    ``p90``, ``p95``, ``p99``, ``p99_ci95``, ``count``) plus ``ci95`` (an interval per
    percentile), ``ci_method`` (``method``: a key of :data:`COVERS`), ``ci_n`` (sections) and
    ``ci_covers`` (what the interval covers), ``ci_tail_clusters`` and ``ci_reliable`` (see the
    module docstring; ``None`` for weighted samples).  Undefined numbers are ``None``, and so
    are the intervals of fewer than 2 sections.
    """
    if method not in COVERS:
        raise ValueError(f"method must be one of {', '.join(COVERS)}, got {method!r}")
    values = np.concatenate([np.asarray(v, dtype=np.float64) for v, _ in sections])
    weights = np.concatenate([np.ones(len(v)) if w is None else np.asarray(w, dtype=np.float64)
                              for v, w in sections])
    block: dict = {k: _json(x) for k, x in describe(values, weights).items()}
    per_section = section_percentiles(sections)
    ci: dict[str, list[float | None]] = {k: [None, None] for k in DESCRIBE_PERCENTILES}
    if len(sections) >= MIN_SECTIONS:
        ci = {k: [_json(x) for x in sectioning_interval(_nan(block[k]), per_section[k], level)]
              for k in DESCRIBE_PERCENTILES}
    clusters = tail_clusters(sections, block["p99"])
    reliable = None if clusters is None else clusters >= MIN_TAIL_CLUSTERS_PER_SECTION * len(sections)
    block.update({"p99_ci95": ci["p99"], "count": int(weights.sum()), "ci95": ci, "ci_method": method,
                  "ci_n": len(sections), "ci_covers": COVERS[method], "ci_tail_clusters": clusters,
                  "ci_reliable": reliable})
    return block


def tail_clusters(sections: Sequence[Sample], threshold: float | None) -> int | None:
    """Maximal runs of consecutive samples above ``threshold``, summed over the sections.

    Samples are taken in their order (arrival order); ``None`` for weighted sections (their
    order means nothing) or without a threshold.
    """
    if threshold is None or any(w is not None for _, w in sections):
        return None
    count = 0
    for values, _ in sections:
        above = np.asarray(values, dtype=np.float64) > threshold
        count += int(np.count_nonzero(above[1:] & ~above[:-1])) + int(above[:1].sum())
    return count


def batch_sections(values: np.ndarray, max_batches: int = MAX_BATCHES,
                   min_size: int = MIN_BATCH_REQUESTS) -> list[Sample]:
    """Contiguous batches of ``values`` (one run's samples in arrival order) for batch means.

    As many batches as fit ``min_size`` samples each, at most ``max_batches``; an empty list
    when fewer than 2 fit (the run is too short for an interval).
    """
    count = min(max_batches, len(values) // min_size)
    if count < MIN_SECTIONS:
        return []
    return [(part, None) for part in np.array_split(np.asarray(values, dtype=np.float64), count)]


def _nan(x: float | None) -> float:
    return math.nan if x is None else float(x)


def _json(x: float) -> float | None:
    return None if math.isnan(x) else float(x)
