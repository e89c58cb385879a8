"""The planner's replicated evaluation: intervals across replications, p_meet from them, the verdict."""

from __future__ import annotations

import pytest

from latsim.config import Settings
from latsim.plan.evaluate import evaluate, p_meet, screened
from latsim.plan.slo import parse_slo
from latsim.scenario import build_deployment


def test_p_meet_is_the_weakest_targets_confidence_from_the_interval() -> None:
    block = {"p99": 100.0, "ci95": {"p99": [90.0, 110.0]}, "ci_n": 5, "mean": 50.0}
    summary = {"stable": True, "ttft_ms": block, "tpot_ms": {"p99": 10.0, "ci95": {"p99": [9.0, 11.0]}, "ci_n": 5}}
    assert p_meet(summary, parse_slo("ttft_p99_ms=100")) == pytest.approx(0.5)
    assert p_meet(summary, parse_slo("ttft_p99_ms=110")) == pytest.approx(0.975)  # the interval's upper end
    both = p_meet(summary, parse_slo("ttft_p99_ms=110,tpot_p99_ms=10"))
    assert both == pytest.approx(0.5)  # the weaker target sets it
    assert p_meet(summary, parse_slo("ttft_mean_ms=60")) == 1.0  # no interval: met or missed outright
    assert p_meet({**summary, "stable": False}, parse_slo("ttft_p99_ms=1000")) == 0.0


def _settings(**kw) -> Settings:
    base = {"model": "qwen2.5-7b", "device": "l40s", "input_len": 256, "output_len": 64, "num_requests": 300}
    return Settings(**{**base, **kw})


def test_light_load_is_stable_and_seeds_differ() -> None:
    s = _settings(qps=1.0)
    summary = evaluate(build_deployment(s), s, parse_slo("ttft_p99_ms=5000"), 3, 0)
    assert summary["stable"] is True and summary["replications"] == 3
    assert summary["p_meet"] > 0.99
    assert summary["ttft_ms"]["ci_method"] == "replications" and summary["ttft_ms"]["ci_n"] == 3
    lo, hi = summary["ttft_ms"]["p99_ci95"]
    assert lo < summary["ttft_ms"]["p99"] < hi  # replications differ: a real interval
    strict = evaluate(build_deployment(s), s, parse_slo("ttft_p99_ms=1"), 3, 0)
    assert strict["p_meet"] < 0.01


def test_overload_is_not_stable() -> None:
    s = _settings(qps=60.0)
    summary = evaluate(build_deployment(s), s, None, 1, 0)
    assert summary["stable"] is False and summary["p_meet"] is None


def test_screening_stops_after_one_failing_run() -> None:
    s = _settings(qps=1.0)
    d = build_deployment(s)
    assert screened(d, s, parse_slo("ttft_p99_ms=1"), 3, 0, 0.8)["replications"] == 1
    assert screened(d, s, parse_slo("ttft_p99_ms=5000"), 3, 0, 0.8)["replications"] == 3
    assert screened(d, s, parse_slo("ttft_p99_ms=1"), 3, 0, 0.5)["replications"] == 3  # p_meet 0.5: no early stop
    with pytest.raises(ValueError, match="--replications must be an integer >= 1, got 0"):
        evaluate(d, s, None, 0, 0)
