"""The rate searches of ``plan``: the highest rate meeting the SLO, and meeting it at the live edge."""

from __future__ import annotations

import json
from typing import Any

import pytest

from latsim.plan.rate import SPAN, RateProbe, max_rate_at_live_edge, max_rate_at_slo
from latsim.plan.slo import parse_slo


class ThresholdProbe(RateProbe):
    """A probe whose SLO holds up to ``limit`` req/s and at the live edge up to ``live_limit``;
    counts its evaluations."""

    def __init__(self, limit: float, live_limit: float, trace: str | None = None) -> None:
        from latsim.config import Settings

        super().__init__(deployment=None, settings=Settings(trace=trace), slo=parse_slo("ttft_p99_ms=1"),  # type: ignore[arg-type]
                         replications=1, seed=0, min_p_meet=0.8)
        self.limit, self.live_limit = limit, live_limit
        self.asked: list[float] = []

    def summary(self, rate: float) -> dict[str, Any]:
        if rate not in self.seen:
            self.asked.append(rate)
            self.seen[rate] = {"stable": True, "p_meet": 1.0 if rate <= self.limit else 0.0}
        return self.seen[rate]

    def meets_at_live_edge(self, rate: float) -> bool:
        return self.meets(rate) and rate <= self.live_limit


def test_the_live_edge_rate_lies_between_the_last_passing_and_first_failing_probe() -> None:
    probe = ThresholdProbe(limit=20.0, live_limit=13.0)
    at_slo = max_rate_at_slo(probe, qps=10.0, bound=1e9)
    assert at_slo is not None and 20.0 / 1.2 < at_slo <= 20.0
    live = max_rate_at_live_edge(probe, 10.0, at_slo)
    assert live is not None and 10.0 <= live <= 13.0
    assert live > 13.0 / (at_slo / 10.0) ** (1 / 2 ** 4)  # within the bisection's resolution


def test_the_live_edge_search_reuses_the_first_searchs_probes() -> None:
    probe = ThresholdProbe(limit=20.0, live_limit=20.0)
    at_slo = max_rate_at_slo(probe, qps=10.0, bound=1e9)
    asked = len(probe.asked)
    assert max_rate_at_live_edge(probe, 10.0, at_slo) == at_slo
    assert len(probe.asked) == asked  # the answer's own probe, already made


@pytest.mark.parametrize(("live_limit", "expected"), [(5.0, "between"), (0.5, 0.0)])
def test_below_the_offered_rate_the_live_edge_search_goes_down_to_a_span_under_it(live_limit, expected) -> None:
    probe = ThresholdProbe(limit=20.0, live_limit=live_limit)
    live = max_rate_at_live_edge(probe, 10.0, max_rate_at_slo(probe, qps=10.0, bound=1e9))
    if expected == "between":
        assert live is not None and 10.0 / SPAN <= live <= live_limit
    else:
        assert live == expected


def test_no_live_edge_rate_without_a_rate_at_the_slo() -> None:
    probe = ThresholdProbe(limit=20.0, live_limit=20.0)
    assert max_rate_at_live_edge(probe, 10.0, None) is None
    assert max_rate_at_live_edge(probe, 10.0, 0.0) == 0.0
    assert probe.asked == []
    assert max_rate_at_slo(ThresholdProbe(1.0, 1.0, trace="t.csv"), 10.0, 1e9) is None


def test_plan_reports_the_live_edge_rate_where_the_band_describes_the_candidate(cli) -> None:
    code, out, _ = cli("plan", "--model", "llama-3.2-1b", "--num-requests", "120", "--input-len", "200",
                       "--output-len", "40", "--tps", "1", "--weight-dtypes", "bf16", "--replications", "2",
                       "--qps", "4", "--devices", "h200,a100", "--max-replicas", "1", "--slo", "ttft_p50_ms=200",
                       "--json")
    assert code == 0
    by_device = {c["device"]: c for c in json.loads(out)["candidates"]}
    h200, a100 = by_device["h200"], by_device["a100"]
    assert h200["max_rps_at_slo"] is not None
    assert h200["max_rps_at_slo_live_edge"] is not None
    assert 0.0 < h200["max_rps_at_slo_live_edge"] <= h200["max_rps_at_slo"]
    assert a100["max_rps_at_slo"] is not None and a100["max_rps_at_slo_live_edge"] is None
