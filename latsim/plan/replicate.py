"""Predictions with honest intervals: independent replications, or batch means of one run.

:func:`replicate` runs the simulator ``replications`` times, replication ``i`` on its own
trace ``make_trace(i)`` (draw it from ``np.random.default_rng([seed, i])``, as
:func:`synthetic_traces` does), and summarises them: every latency percentile is the pooled
estimate over the replications' steady-state requests with a sectioning interval across the
replications (:mod:`latsim.metrics.intervals` says what it covers); the stability verdict pools
the replications' (:func:`latsim.metrics.stability.pooled_verdict`); the saturation is the
offered rate over the burst-replay capacity (:mod:`latsim.plan.capacity`).  :func:`replay`
does the same for one fixed trace with batch means.

Steady-state samples: the latency percentiles describe the long run, so each run's requests
arriving before its warm-up ends (a run starts with an empty server) or in its drain (after
the last arrival the batch empties and late requests finish early) are left out
(:func:`latsim.metrics.stability.steady_latency_window_s`); counts, rates and the SLO
attainment cover every request.  Inter-token latencies carry no arrival time, so their
percentiles use the whole run.

``p_meet``: the SLO *holds* when the long-run ``slo_percentile`` (P99 by default) of every
constrained metric is within its target.  For each target the sectioning t-distribution of
the estimate (centre: the pooled percentile, scale: its standard error, ``n - 1`` degrees of
freedom) gives the confidence that the long-run percentile is at most the target;
``p_meet`` is the smallest of these (the weakest target; it bounds the joint probability from
above and equals it when one target dominates).  ``slo["meet_fraction"]`` is the share of
replications whose own percentiles met every target: the chance that one run of this length
passes, a different and noisier number.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from latsim.deployment import Deployment
from latsim.metrics.intervals import (
    MIN_TAIL_CLUSTERS_PER_SECTION,
    Sample,
    batch_sections,
    percentile_block,
    section_percentiles,
    standard_error,
)
from latsim.metrics.per_request import add_latencies
from latsim.metrics.stability import (
    StabilityVerdict,
    pooled_verdict,
    stability_verdict,
    steady_latency_window_s,
)
from latsim.metrics.stats import DESCRIBE_PERCENTILES
from latsim.metrics.summary import SLO
from latsim.plan.capacity import capacity_or_none, saturation
from latsim.workload.generate import synthesize
from latsim.workload.trace import RequestTrace

DEFAULT_REPLICATIONS = 5
"""Default replications.  Coverage is limited by run length, not by the number of replications:
at equal run length 10 replications covered no better than 5 in the M/M/1 and simulator studies
(``tests/metrics/test_intervals.py``, ``scripts/interval_coverage.py``), and 5 keep a prediction
at five simulations.  ``summary["intervals"]`` says when the runs are too short."""
MAX_AUTO_REQUESTS = 6000
"""The most requests per replication :func:`replicate_long_enough` runs (the CPU cost grows with it)."""
METRICS = {"ttft_ms": "ttft_s", "tpot_ms": "tpot_s", "e2e_ms": "e2e_s", "queue_ms": "queue_s"}
SLO_METRICS = {"ttft_ms": "ttft_ms", "tpot_ms": "tpot_ms", "e2e_ms": "e2e_ms"}


@dataclass(frozen=True)
class ReplicatedPrediction:
    """``summary``: ``simulate()``'s summary keys plus ``replications``, ``stable``, ``saturation``,
    ``capacity_rps``, ``stability``, ``intervals`` (:func:`interval_advice`) and, with an SLO,
    ``slo`` (:func:`slo_check`); ``stability``: the pooled verdict; ``records``: each
    replication's per-request records."""

    summary: dict[str, Any]
    stability: StabilityVerdict
    capacity_rps: float | None
    saturation: float | None
    p_meet: float | None
    records: tuple[pd.DataFrame, ...]


def synthetic_traces(qps: float, num_requests: int, arrival: str, input_dist: str | int, output_dist: str | int,
                     seed: int) -> Callable[[int], RequestTrace]:
    """``make_trace`` for :func:`replicate`: replication ``i`` draws from ``default_rng([seed, i])``."""
    return lambda i: synthesize(qps, num_requests, arrival, input_dist, output_dist, np.random.default_rng([seed, i]))


def replicate(deployment: Deployment, make_trace: Callable[[int], RequestTrace],
              replications: int = DEFAULT_REPLICATIONS, seed: int = 0, slo: SLO | None = None,
              slo_percentile: str = "p99") -> ReplicatedPrediction:
    """Run ``replications`` (>= 2) independent simulations and summarise them (module docstring).

    Raises ValueError for ``replications`` < 2 (use :func:`replay` for one run) or an unknown
    ``slo_percentile`` (accepted: p50, p90, p95, p99).
    """
    if isinstance(replications, bool) or not isinstance(replications, (int, np.integer)) or replications < 2:
        raise ValueError(f"replications must be an integer >= 2, got {replications!r}")
    _check_percentile(slo_percentile)
    from latsim import simulate

    results = []
    for i in range(int(replications)):
        results.append(simulate(deployment, make_trace(i), seed=_run_seed(seed, i), slo=slo))
        if not len(results[-1].records):
            raise ValueError(f"replication {i} has no requests")
    capacity = capacity_or_none(deployment, make_trace(0), seed)
    verdicts = [stability_verdict(r.records, r.summary["offered_rps"]) for r in results]
    steady = [_steady(r.records) for r in results]
    blocks = {key: percentile_block([(_ms(s, col), None) for s in steady], "replications")
              for key, col in METRICS.items()}
    blocks["itl_ms"] = percentile_block([(r.itl_values_s * 1e3, r.itl_weights) for r in results], "replications")
    summary = _pooled_summary([r.summary for r in results])
    return _finish(summary, blocks, pooled_verdict(verdicts), capacity, steady, slo, slo_percentile,
                   tuple(r.records for r in results))


def replay(deployment: Deployment, trace: RequestTrace, seed: int = 0, slo: SLO | None = None,
           slo_percentile: str = "p99") -> ReplicatedPrediction:
    """One run of a fixed ``trace`` with batch-means intervals (sections: contiguous batches of
    its steady-state requests in arrival order; :func:`latsim.metrics.intervals.batch_sections`).

    Percentiles without enough requests for two batches get ``None`` intervals.  ITL
    intervals are ``None`` (its samples carry no arrival order).
    """
    _check_percentile(slo_percentile)
    from latsim import simulate

    result = simulate(deployment, trace, seed=seed, slo=slo)
    capacity = capacity_or_none(deployment, trace, seed)
    steady = _steady(result.records).sort_values("arrival_s", kind="stable")
    blocks: dict[str, dict] = {}
    sections: dict[str, list[Sample]] = {}
    for key, col in METRICS.items():
        ms = _ms(steady, col)
        sections[key] = batch_sections(ms)
        blocks[key] = percentile_block(sections[key] or [(ms, None)], "batch_means")
    blocks["itl_ms"] = dict(result.summary["itl_ms"], p99_ci95=[None, None], ci_method="none", ci_n=0,
                            ci_covers="no interval: inter-token gaps carry no arrival order")
    verdict = stability_verdict(result.records, result.summary["offered_rps"])
    return _finish(dict(result.summary), blocks, verdict, capacity, None, slo, slo_percentile, (result.records,),
                   sections=sections)


def _finish(summary: dict, blocks: dict, verdict: StabilityVerdict, capacity: float | None, steady: list | None,
            slo: SLO | None, slo_percentile: str, records: tuple, sections: dict | None = None
            ) -> ReplicatedPrediction:
    sat = saturation(summary.get("offered_rps"), capacity)
    for block in blocks.values():
        block["steady_state"] = verdict.stable
    summary.update(blocks)
    summary.update(replications=verdict.replications, stable=verdict.stable, saturation=sat, capacity_rps=capacity,
                   stability=verdict.to_dict(), intervals=interval_advice(blocks, len(records[0])))
    p_meet = None
    if slo is not None:
        if sections is None:
            assert steady is not None
            sections = {key: [(_ms(s, METRICS[key]), None) for s in steady] for key in SLO_METRICS}
        summary["slo"] = slo_check(slo, blocks, sections, slo_percentile)
        p_meet = summary["slo"]["p_meet"]
    return ReplicatedPrediction(summary, verdict, capacity, sat, p_meet, records)


def interval_advice(blocks: dict, requests_per_run: int) -> dict:
    """Whether the P99 intervals of TTFT, TPOT and E2E rest on enough independent tail episodes
    (``ci_tail_clusters``, :func:`latsim.metrics.intervals.tail_clusters`), and if not, about how
    many requests per run would give each section ``MIN_TAIL_CLUSTERS_PER_SECTION`` (episodes
    grow about in proportion to run length; see :mod:`latsim.metrics.intervals`)."""
    per_section = [b["ci_tail_clusters"] / b["ci_n"] for k, b in blocks.items()
                   if k in SLO_METRICS and b.get("ci_tail_clusters") is not None and b["ci_n"]]
    reliable = all(x >= MIN_TAIL_CLUSTERS_PER_SECTION for x in per_section)
    out: dict[str, Any] = {"reliable": reliable, "tail_episodes_per_section": min(per_section, default=None)}
    if not reliable:
        scale = MIN_TAIL_CLUSTERS_PER_SECTION / max(min(per_section), 0.5)
        out["suggested_requests_per_run"] = int(math.ceil(requests_per_run * scale / 100.0) * 100)
        out["advice"] = ("the P99 intervals rest on few independent tail episodes and may be too narrow; "
                         f"run about {out['suggested_requests_per_run']} requests per replication")
    return out


def replicate_long_enough(deployment: Deployment, traces: Callable[[int], Callable[[int], RequestTrace]],
                          requests: int, replications: int = DEFAULT_REPLICATIONS, seed: int = 0,
                          slo: SLO | None = None, slo_percentile: str = "p99",
                          max_requests: int = MAX_AUTO_REQUESTS) -> ReplicatedPrediction:
    """:func:`replicate` with ``traces(requests)`` (a ``make_trace`` for that many requests per
    replication); when the pooled verdict is stable but :func:`interval_advice` finds the runs
    too short, once more with ``traces(longer)``, ``longer`` the suggestion capped at
    ``max_requests`` (only if that is longer).  ``summary["intervals"]["extended_from"]`` then
    holds ``requests``; the second prediction replaces the first.

    Once, not until the advice is satisfied: within one setting, runs that count more tail
    episodes cover *less* often (:mod:`latsim.metrics.intervals`), so stopping at the first run
    that passes keeps the worse ones.  In the coverage study (1B model at 0.8x capacity, 100
    experiments) rerunning up to twice lengthened the runs from 3,200 to 4,600 requests on
    average and covered no better (TTFT 0.86 against 0.88).
    """
    result = replicate(deployment, traces(requests), replications, seed, slo, slo_percentile)
    advice = result.summary["intervals"]
    longer = min(int(advice.get("suggested_requests_per_run") or 0), max_requests)
    if result.stability.stable and not advice["reliable"] and longer > requests:
        result = replicate(deployment, traces(longer), replications, seed, slo, slo_percentile)
        result.summary["intervals"]["extended_from"] = requests
    return result


def slo_check(slo: SLO, blocks: dict, sections: dict[str, list[Sample]], percentile: str = "p99") -> dict:
    """``p_meet`` and its parts for ``slo`` at ``percentile`` (see the module docstring).

    ``blocks`` are :func:`~latsim.metrics.intervals.percentile_block` outputs per metric and
    ``sections`` the samples they came from.  A target whose percentile is undefined (no
    samples, or too few sections) gets ``None``, and so does ``p_meet``.
    """
    _check_percentile(percentile)
    per_target: dict[str, float | None] = {}
    met_by_run: list[np.ndarray] = []
    for key in SLO_METRICS:
        target = getattr(slo, key)
        if target is None:
            continue
        estimates = section_percentiles(sections[key])[percentile] if len(sections[key]) >= 2 else np.array([])
        per_target[key] = _confidence_below(blocks[key][percentile], estimates, target)
        met_by_run.append(estimates <= target)
    probs = list(per_target.values())
    runs = np.logical_and.reduce(met_by_run) if met_by_run and all(len(m) for m in met_by_run) else None
    return {
        "percentile": percentile,
        "targets_ms": {k: getattr(slo, k) for k in per_target},
        "p_meet": None if any(p is None for p in probs) else min(p for p in probs if p is not None),
        "p_meet_by_target": per_target,
        "meet_fraction": None if runs is None else float(np.mean(runs)),
        "method": "sectioning t-distribution of the pooled percentile; p_meet = min over targets",
    }


def _confidence_below(point: float | None, estimates: np.ndarray, target: float) -> float | None:
    """Confidence, from the t-distribution of the sectioning estimate, that the true value <= target."""
    if point is None or len(estimates) < 2 or np.isnan(estimates).any():
        return None
    se = standard_error(estimates)
    if se == 0:
        return 1.0 if point <= target else 0.0
    return float(stats.t.cdf((target - point) / se, len(estimates) - 1))


def _ms(frame: pd.DataFrame, column: str) -> np.ndarray:
    """A latency column in milliseconds without its undefined (NaN) entries."""
    ms = frame[column].to_numpy(dtype=np.float64) * 1e3
    return ms[~np.isnan(ms)]


def _steady(records: pd.DataFrame) -> pd.DataFrame:
    """Completed requests arriving in the steady latency window, with latency columns."""
    frame = add_latencies(records)
    try:
        start, end = steady_latency_window_s(records)
    except ValueError:
        return frame.iloc[:0]
    arrival = frame["arrival_s"]
    return frame[(frame["status"] == "ok") & (arrival >= start) & (arrival <= end)]


def _pooled_summary(summaries: list[dict]) -> dict:
    """``simulate()``'s non-latency keys over replications: counts summed, rates averaged."""
    first = summaries[0]
    out: dict[str, Any] = {}
    for key, value in first.items():
        values = [s.get(key) for s in summaries]
        if key in ("kv_peak_utilization", "horizon_s"):
            out[key] = max((v for v in values if v is not None), default=None)
        elif key.startswith("num_") or key in ("preemptions", "engine_steps"):
            out[key] = int(sum(v for v in values if v is not None))
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and key not in (
                "kv_capacity_tokens", "kv_blocks", "max_model_len"):
            known = [v for v in values if v is not None]
            out[key] = float(np.mean(known)) if known else None
        else:
            out[key] = value
    return out


def _run_seed(seed: int, i: int) -> int:
    """The simulator seed of replication ``i`` (independent of the trace's stream)."""
    return int(np.random.SeedSequence([seed, i, 1]).generate_state(1)[0])


def _check_percentile(name: str) -> None:
    if name not in DESCRIBE_PERCENTILES:
        raise ValueError(f"slo_percentile must be one of {', '.join(DESCRIBE_PERCENTILES)}, got {name!r}")
