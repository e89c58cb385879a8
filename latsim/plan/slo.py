"""Latency targets for planning: ``ttft_p99_ms=1000,tpot_p99_ms=80``.

A target is ``<metric>_<statistic>_ms=<limit>``: metric one of :data:`METRICS` (``ttft``,
``tpot``, ``itl``, ``e2e``, ``queue``), statistic one of :data:`STATS` (``p50`` ... ``p99``,
``mean``).  A run meets the SLO when every target's statistic is at most its limit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from latsim.flagvalues import positive_number

METRICS = ("ttft", "tpot", "itl", "e2e", "queue")
STATS = ("p50", "p90", "p95", "p99", "mean")
EXAMPLE = "ttft_p99_ms=1000,tpot_p99_ms=80"


@dataclass(frozen=True)
class Target:
    """``stat`` of ``metric`` (milliseconds) must be at most ``limit_ms``."""

    metric: str
    stat: str
    limit_ms: float

    @property
    def name(self) -> str:
        return f"{self.metric}_{self.stat}_ms"

    @property
    def block(self) -> str:
        """The summary block holding the metric (``ttft_ms``)."""
        return f"{self.metric}_ms"


@dataclass(frozen=True)
class PlanSLO:
    """One or more :class:`Target`; parse with :func:`parse_slo`."""

    targets: tuple[Target, ...]

    def as_dict(self) -> dict[str, float]:
        return {t.name: t.limit_ms for t in self.targets}

    def values(self, summary: dict[str, Any]) -> dict[str, float | None]:
        """Each target's statistic in a summary (``summary[block][stat]``), None when undefined."""
        out: dict[str, float | None] = {}
        for t in self.targets:
            value = (summary.get(t.block) or {}).get(t.stat)
            out[t.name] = None if value is None or not math.isfinite(value) else float(value)
        return out

    def ratios(self, summary: dict[str, Any]) -> dict[str, float]:
        """value / limit per target (``inf`` when undefined: nothing completed)."""
        return {t.name: (v / t.limit_ms if v is not None else math.inf)
                for t, v in zip(self.targets, self.values(summary).values(), strict=True)}

    def met(self, summary: dict[str, Any]) -> bool:
        return all(r <= 1.0 for r in self.ratios(summary).values())

    def binding(self, summary: dict[str, Any]) -> tuple[str, float]:
        """``(target name, headroom)``: the target closest to (or furthest past) its limit and
        ``1 - value/limit`` for it (negative: missed by that share)."""
        name, ratio = max(self.ratios(summary).items(), key=lambda kv: kv[1])
        return name, 1.0 - ratio


def parse_slo(spec: str) -> PlanSLO:
    """Parse ``"ttft_p99_ms=1000,tpot_p99_ms=80"``; ValueError names the bad part and what is accepted."""
    targets: dict[str, Target] = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        key, sep, value = part.partition("=")
        if not sep:
            raise ValueError(f"--slo {part!r}: expected NAME=MILLISECONDS, e.g. {EXAMPLE}")
        pieces = key.strip().lower().split("_")
        if len(pieces) != 3 or pieces[0] not in METRICS or pieces[1] not in STATS or pieces[2] != "ms":
            raise ValueError(f"--slo: metric {key.strip()!r} does not exist; accepted: <metric>_<stat>_ms with "
                             f"metric in {', '.join(METRICS)} and stat in {', '.join(STATS)}, e.g. {EXAMPLE}")
        limit = positive_number(value, f"--slo {part!r}: {value.strip()!r} is not a number of milliseconds",
                                f"--slo {part!r}: the limit must be a finite number of milliseconds > 0")
        target = Target(pieces[0], pieces[1], limit)
        targets[target.name] = target
    if not targets:
        raise ValueError(f"--slo is empty; give at least one target, e.g. {EXAMPLE}")
    return PlanSLO(tuple(targets.values()))
