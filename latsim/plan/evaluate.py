"""One deployment under one workload, replicated: the summary the planner ranks on.

:func:`evaluate` simulates ``replications`` independent runs (seeds ``seed``, ``seed + 1``, ...;
each seed draws its own arrivals and lengths) and summarises them the way ``predict`` does, with
intervals across the replications instead of a bootstrap over one run's requests.

This is the planner's adapter over the replication machinery: it is to be switched to
:func:`latsim.plan.replicate.replicate` (and its stability verdict from
:mod:`latsim.metrics.stability`) once those land; until then it implements the same contract with
plain :func:`latsim.simulate` calls.  Contract of the returned dict:

- ``ttft_ms``, ``tpot_ms``, ``itl_ms``, ``e2e_ms``, ``queue_ms``: ``mean``/``p50``/``p90``/``p95``/
  ``p99`` averaged over the replications, ``p50_ci95`` and ``p99_ci95`` the 95 % Student-t
  interval of that percentile across the replications (``[None, None]`` with one replication),
  ``p99_replications`` the per-replication P99s.
- ``stable``: every replication finished every request and its latency shows no upward trend
  over the run (:func:`latency_trend_p`); ``saturation``: None until the capacity estimate lands.
- ``p_meet``: the share of replications that are stable and meet every SLO target (None without SLO).
- ``throughput_rps``, ``output_tokens_per_s``, ``input_tokens_per_s``: means over replications.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np

from latsim.config import Settings
from latsim.deployment import Deployment
from latsim.plan.slo import PlanSLO

BLOCKS = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "queue_ms")
STATS = ("mean", "p50", "p90", "p95", "p99")
RATES = ("throughput_rps", "output_tokens_per_s", "input_tokens_per_s")
TREND_P = 0.001
"""A run is unstable when its latency trend (:func:`latency_trend_p`) is this significant ..."""
MIN_GROWTH = 0.10
"""... and the median wait of the last third exceeds the middle third's by more than this share
(an overloaded queue's wait grows without bound; with near-constant lengths a rank test alone
would call a few-percent drift significant)."""


def evaluate(deployment: Deployment, workload_settings: Settings, slo: PlanSLO | None, replications: int,
             seed: int) -> dict[str, Any]:
    """Simulate ``replications`` runs of ``deployment`` under the workload of ``workload_settings``
    and summarise them (module docstring).  ValueError for ``replications < 1``."""
    from latsim.scenario import build_trace
    from latsim.sim.simulate import simulate

    if replications < 1:
        raise ValueError(f"--replications must be >= 1, got {replications}")
    runs = []
    for i in range(replications):
        trace = build_trace(replace(workload_settings, seed=seed + i))
        result = simulate(deployment, trace, seed=seed + i)
        runs.append((result.summary, latency_trend_p(result.records)))
    return _combine(runs, slo)


def latency_trend_p(records: Any) -> float:
    """One-sided p-value that requests arriving in the last third of the run wait longer than
    those of the middle third, for time to first token or time in the system, whichever is more
    significant (Mann-Whitney U test; Bonferroni over the two); 1.0 when the median wait grew by
    at most :data:`MIN_GROWTH`.

    Why this test: a queue that is offered more than it serves makes later requests wait longer,
    in TTFT when prompts queue for prefill, in time in the system when the batch keeps growing;
    the rank test needs no distribution and is not moved by a few long requests.  A run too short
    to reach steady state also trends upward, and is rightly not reported as steady.  Unfinished
    requests count as infinitely long."""
    order = np.argsort(records["arrival_s"].to_numpy(dtype=np.float64), kind="stable")
    arrival = records["arrival_s"].to_numpy(dtype=np.float64)[order]
    unfinished = (records["status"] != "ok").to_numpy()[order]
    p = 1.0
    for column in ("first_token_s", "finish_s"):
        wait = records[column].to_numpy(dtype=np.float64)[order] - arrival
        wait[unfinished] = np.inf
        p = min(p, 2.0 * _later_longer_p(wait))
    return min(p, 1.0)


def _later_longer_p(wait: np.ndarray) -> float:
    from scipy.stats import mannwhitneyu

    third = len(wait) // 3
    if third < 5:
        return 1.0
    middle, last = wait[third:2 * third], wait[2 * third:]
    if np.median(last) <= (1.0 + MIN_GROWTH) * np.median(middle):
        return 1.0
    return float(mannwhitneyu(last, middle, alternative="greater").pvalue)


def _combine(runs: list[tuple[dict[str, Any], float]], slo: PlanSLO | None) -> dict[str, Any]:
    summaries = [s for s, _ in runs]
    out: dict[str, Any] = {"replications": len(runs)}
    for block in BLOCKS:
        out[block] = _block([s[block] for s in summaries])
    for rate in RATES:
        out[rate] = _mean([s.get(rate) for s in summaries])
    stable = [not s["num_unfinished"] and p >= TREND_P for s, p in runs]
    out["stable"] = all(stable)
    out["saturation"] = None  # offered / estimated capacity: from latsim.plan.capacity once it lands
    out["num_unfinished"] = sum(s["num_unfinished"] for s in summaries)
    out["num_rejected"] = sum(s["num_rejected"] for s in summaries)
    out["offered_rps"] = _mean([s.get("offered_rps") for s in summaries])
    out["cost_model"] = summaries[0].get("cost_model")
    out["p_meet"] = (sum(ok and slo.met(s) for s, ok in zip(summaries, stable, strict=True)) / len(runs)
                     if slo is not None else None)
    return out


def _block(blocks: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for stat in STATS:
        out[stat] = _mean([b.get(stat) for b in blocks])
    for stat in ("p50", "p99"):
        out[f"{stat}_ci95"] = t_interval([b.get(stat) for b in blocks])
    out["p99_replications"] = [b.get("p99") for b in blocks]
    return out


def _finite(values: list[Any]) -> list[float]:
    return [float(v) for v in values if v is not None and math.isfinite(v)]


def _mean(values: list[Any]) -> float | None:
    finite = _finite(values)
    return float(np.mean(finite)) if finite and len(finite) == len(values) else None


def t_interval(values: list[Any], level: float = 0.95) -> list[float | None]:
    """Student-t interval of the mean of ``values`` (independent replications, latencies: the
    lower end is clipped at 0); ``[None, None]`` with fewer than two finite values."""
    from scipy.stats import t

    finite = _finite(values)
    if len(finite) < 2 or len(finite) != len(values):
        return [None, None]
    mean, sd = float(np.mean(finite)), float(np.std(finite, ddof=1))
    half = float(t.ppf(0.5 + level / 2.0, len(finite) - 1)) * sd / math.sqrt(len(finite))
    return [max(mean - half, 0.0), mean + half]  # latencies are never negative


def screened(deployment: Deployment, workload_settings: Settings, slo: PlanSLO, replications: int, seed: int,
             min_p_meet: float) -> dict[str, Any]:
    """:func:`evaluate`, but first one replication alone when a single miss already rules the
    candidate out (``min_p_meet * replications > replications - 1``): if that run is unstable or
    misses the SLO, its one-replication summary is returned (``replications`` says 1); otherwise
    all ``replications`` are run.  Saves most of the time a search spends on failing candidates."""
    if replications > 1 and min_p_meet * replications > replications - 1:
        first = evaluate(deployment, workload_settings, slo, 1, seed)
        if not (first["stable"] and first["p_meet"]):
            return first
    return evaluate(deployment, workload_settings, slo, replications, seed)
