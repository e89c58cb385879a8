"""The highest request rate a deployment sustains under an SLO (a bisection over the rate).

Each probe is a :func:`latsim.plan.evaluate.screened` evaluation of the workload at that rate; it passes
when the run is stable and ``p_meet`` reaches ``min_p_meet``.  The bisection is geometric and
assumes that meeting the SLO is monotone in the rate (more load never lowers latency), which
holds up to simulation noise; the answer is the highest rate that passed, so within a factor
``(hi / lo) ** (1 / 2 ** steps)`` of the boundary.

:func:`max_rate_at_live_edge` asks the same with a stricter probe: the SLO must also hold were the
live engine at the slow edge of the measured error band (:mod:`latsim.validate.error_band`), which
reaches loads up to 0.95 of capacity only.  A :class:`RateProbe` keeps every evaluation it made,
so the second search reuses the first's probes where they coincide.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from latsim.config import Settings
from latsim.deployment import Deployment
from latsim.plan.evaluate import at_live_edge, meets, screened
from latsim.plan.slo import PlanSLO

STEPS = 4
SPAN = 8.0
"""Rates searched: from ``qps / SPAN`` to ``min(qps * SPAN, roofline bound)``."""


@dataclass
class RateProbe:
    """Evaluations of one deployment under the workload of ``settings`` at other rates, kept by rate."""

    deployment: Deployment
    settings: Settings
    slo: PlanSLO
    replications: int
    seed: int
    min_p_meet: float
    seen: dict[float, dict[str, Any]] = field(default_factory=dict)

    def summary(self, rate: float) -> dict[str, Any]:
        if rate not in self.seen:
            self.seen[rate] = screened(self.deployment, replace(self.settings, qps=rate), self.slo,
                                       self.replications, self.seed, self.min_p_meet)
        return self.seen[rate]

    def meets(self, rate: float) -> bool:
        """The SLO met at ``rate`` (:func:`latsim.plan.evaluate.meets`)."""
        return meets(self.summary(rate), self.min_p_meet)

    def meets_at_live_edge(self, rate: float) -> bool:
        """:meth:`meets`, and every target the error band covers met at its slow edge (False where
        the band does not reach this load or pace)."""
        return self.meets(rate) and at_live_edge(self.deployment, self.summary(rate), self.slo)["meets"] is True


def max_rate_at_slo(probe: RateProbe, qps: float, bound: float, steps: int = STEPS) -> float | None:
    """Highest rate (req/s) at which ``probe``'s deployment meets its SLO under its workload (the
    lengths and arrival process at other rates), searched from ``qps / SPAN`` to ``min(qps * SPAN,
    bound)``; 0.0 when even ``qps / SPAN`` fails, None for a trace-driven workload (its rate is the
    trace's)."""
    if probe.settings.trace:
        return None
    passes = probe.meets
    if passes(qps):
        lo, hi = qps, min(qps * SPAN, bound)
        if hi <= lo or passes(hi):
            return max(lo, hi)
    else:
        lo, hi = qps / SPAN, qps
        if not passes(lo):
            return 0.0
    return _bisect(passes, lo, hi, steps)


def max_rate_at_live_edge(probe: RateProbe, qps: float, at_slo: float | None, steps: int = STEPS) -> float | None:
    """Highest rate at which the SLO also holds at the error band's slow edge
    (:meth:`RateProbe.meets_at_live_edge`), at most ``at_slo`` (:func:`max_rate_at_slo`'s answer);
    None with no ``at_slo``, 0.0 when even ``qps / SPAN`` fails.  The caller checks that the band
    describes the deployment's kind (:func:`latsim.validate.error_band.deployment_why`)."""
    if at_slo is None or at_slo <= 0.0:
        return at_slo
    passes = probe.meets_at_live_edge
    if passes(at_slo):
        return at_slo
    lo = min(qps, at_slo)
    if not passes(lo):
        lo = qps / SPAN
        if lo >= at_slo or not passes(lo):
            return 0.0
    return _bisect(passes, lo, at_slo, steps)


def _bisect(passes: Callable[[float], bool], lo: float, hi: float, steps: int) -> float:
    """The highest rate found passing between ``lo`` (passes) and ``hi`` (fails), geometric halving."""
    for _ in range(steps):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if passes(mid) else (lo, mid)
    return lo
