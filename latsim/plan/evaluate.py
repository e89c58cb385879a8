"""One deployment under one workload, replicated: the summary the planner ranks on.

:func:`evaluate` runs the replications ``predict`` runs (:func:`latsim.plan.replicate.replicate`:
independent replications, pooled steady-state percentiles with sectioning intervals across them,
the pooled stability verdict of :mod:`latsim.metrics.stability`, saturation against the
burst-replay capacity; one replication: batch means of one run, :func:`~latsim.plan.replicate.replay`)
and adds what the planner needs:

- ``p_meet``: the confidence that every target of the :class:`~latsim.plan.slo.PlanSLO` holds in
  the long run (per target, the sectioning t-distribution of the pooled statistic: centre the
  estimate, scale its standard error from the 95 % interval, ``n - 1`` degrees of freedom; a
  statistic without an interval, such as a mean, counts as met or missed outright), the smallest
  over the targets; 0 when the deployment is unstable (its percentiles grow with the run).
- ``p99_replications``: each replication's own P99 per metric (its section estimates).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from scipy import stats

from latsim.config import Settings
from latsim.deployment import Deployment
from latsim.plan.slo import PlanSLO

BLOCKS = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "queue_ms")
RATES = ("throughput_rps", "output_tokens_per_s", "input_tokens_per_s")


def evaluate(deployment: Deployment, workload_settings: Settings, slo: PlanSLO | None, replications: int,
             seed: int) -> dict[str, Any]:
    """Replicated summary of ``deployment`` under the workload of ``workload_settings`` (module
    docstring).  ValueError for ``replications < 1``."""
    from latsim.plan.replicate import replay, replicate, synthetic_traces
    from latsim.scenario import DEFAULT_NUM_REQUESTS, build_trace

    if isinstance(replications, bool) or not isinstance(replications, int) or replications < 1:
        raise ValueError(f"--replications must be an integer >= 1, got {replications!r}")
    ws = replace(workload_settings, seed=seed)
    if ws.trace or replications == 1:
        summary = dict(replay(deployment, build_trace(ws), seed=seed).summary)
    else:
        inputs = ws.input_len if ws.input_len is not None else ws.input_dist
        outputs = ws.output_len if ws.output_len is not None else ws.output_dist
        assert ws.qps is not None and inputs is not None and outputs is not None
        make = synthetic_traces(ws.qps, ws.num_requests or DEFAULT_NUM_REQUESTS, ws.arrival or "poisson",
                                inputs, outputs, seed)
        summary = dict(replicate(deployment, make, replications, seed).summary)
    summary["p_meet"] = p_meet(summary, slo) if slo is not None else None
    return summary


def p_meet(summary: dict[str, Any], slo: PlanSLO) -> float:
    """The confidence that every target of ``slo`` holds in the long run (module docstring)."""
    if not summary.get("stable", True):
        return 0.0
    return min(_confidence(summary.get(t.block) or {}, t.stat, t.limit_ms) for t in slo.targets)


def _confidence(block: dict[str, Any], stat: str, limit: float) -> float:
    point = block.get(stat)
    if point is None or not math.isfinite(point):
        return 0.0
    interval = (block.get("ci95") or {}).get(stat)
    n = block.get("ci_n") or 0
    if not interval or None in interval or n < 2:
        return 1.0 if point <= limit else 0.0
    half = (interval[1] - interval[0]) / 2.0
    se = half / float(stats.t.ppf(0.975, n - 1))
    if not se > 0:
        return 1.0 if point <= limit else 0.0
    return float(stats.t.cdf((limit - point) / se, n - 1))


def meets(summary: dict[str, Any], min_p_meet: float) -> bool:
    """Whether an evaluation meets its SLO: stable, with ``p_meet`` at least ``min_p_meet``."""
    return bool(summary["stable"] and (summary["p_meet"] or 0.0) >= min_p_meet)


def at_live_edge(deployment: Deployment, summary: dict[str, Any], slo: PlanSLO,
                 values: dict[str, float | None] | None = None) -> dict[str, Any]:
    """``slo`` were the live engine at the slow edge of the live error band that describes
    ``deployment`` at ``summary``'s operating point
    (:func:`latsim.validate.error_band.targets_at_slow_edge`; ``meets`` None where no band does);
    ``values``: ``slo.values(summary)`` when the caller has them."""
    from latsim.validate.error_band import for_prediction, targets_at_slow_edge

    return targets_at_slow_edge(for_prediction(deployment, summary),
                                slo.values(summary) if values is None else values, slo.as_dict())


def screened(deployment: Deployment, workload_settings: Settings, slo: PlanSLO, replications: int, seed: int,
             min_p_meet: float) -> dict[str, Any]:
    """:func:`evaluate`, but first one replication alone when ``min_p_meet`` > 0.5: if that run is
    unstable or its estimates miss a target (then its ``p_meet`` is below 0.5, below what the
    candidate needs), its one-replication summary is returned (``replications`` says 1);
    otherwise all ``replications`` are run.  Saves most of the time a search spends on failing
    candidates."""
    if replications > 1 and min_p_meet > 0.5:
        first = evaluate(deployment, workload_settings, slo, 1, seed)
        if not (first["stable"] and slo.met(first)):
            return first
    return evaluate(deployment, workload_settings, slo, replications, seed)
