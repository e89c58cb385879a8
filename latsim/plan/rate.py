"""The highest request rate a deployment sustains under an SLO (a bisection over the rate).

Each probe is a :func:`latsim.plan.evaluate.screened` evaluation of the workload at that rate; it passes
when the run is stable and ``p_meet`` reaches ``min_p_meet``.  The bisection is geometric and
assumes that meeting the SLO is monotone in the rate (more load never lowers latency), which
holds up to simulation noise; the answer is the highest rate that passed, so within a factor
``(hi / lo) ** (1 / 2 ** steps)`` of the boundary.
"""

from __future__ import annotations

import math
from dataclasses import replace

from latsim.config import Settings
from latsim.deployment import Deployment
from latsim.plan.evaluate import screened
from latsim.plan.slo import PlanSLO

STEPS = 4
SPAN = 8.0
"""Rates searched: from ``qps / SPAN`` to ``min(qps * SPAN, roofline bound)``."""


def max_rate_at_slo(deployment: Deployment, settings: Settings, slo: PlanSLO, qps: float, bound: float,
                    replications: int, seed: int, min_p_meet: float, steps: int = STEPS) -> float | None:
    """Highest rate (req/s) at which ``deployment`` meets ``slo`` under the workload of ``settings``
    (its lengths and arrival process at other rates); 0.0 when even ``qps / SPAN`` fails, None for
    a trace-driven workload (its rate is the trace's)."""
    if settings.trace:
        return None

    def passes(rate: float) -> bool:
        summary = screened(deployment, replace(settings, qps=rate), slo, replications, seed, min_p_meet)
        return bool(summary["stable"] and (summary["p_meet"] or 0.0) >= min_p_meet)

    if passes(qps):
        lo, hi = qps, min(qps * SPAN, bound)
        if hi <= lo or passes(hi):
            return max(lo, hi)
    else:
        lo, hi = qps / SPAN, qps
        if not passes(lo):
            return 0.0
    for _ in range(steps):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if passes(mid) else (lo, mid)
    return lo
