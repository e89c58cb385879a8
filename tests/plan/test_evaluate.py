"""The planner's replication adapter: intervals across seeds, p_meet, the stand-in stability verdict."""

from __future__ import annotations

import pytest

from latsim.config import Settings
from latsim.plan.evaluate import evaluate, screened, t_interval
from latsim.plan.slo import parse_slo
from latsim.scenario import build_deployment

T_975_2DF = 4.302652729911275  # Student t quantile, 2 degrees of freedom (tables)


def test_t_interval_across_replications() -> None:
    lo, hi = t_interval([10.0, 12.0, 14.0])
    half = T_975_2DF * 2.0 / 3 ** 0.5
    assert (lo, hi) == pytest.approx((12 - half, 12 + half))
    assert t_interval([5.0]) == [None, None]
    assert t_interval([1.0, None, 3.0]) == [None, None]
    assert t_interval([0.1, 5.0, 9.0])[0] == 0.0  # a latency interval does not go below zero


def _settings(**kw) -> Settings:
    base = {"model": "qwen2.5-7b", "device": "l40s", "input_len": 256, "output_len": 64, "num_requests": 300}
    return Settings(**{**base, **kw})


def test_light_load_is_stable_and_seeds_differ() -> None:
    s = _settings(qps=1.0)
    summary = evaluate(build_deployment(s), s, parse_slo("ttft_p99_ms=5000"), 3, 0)
    assert summary["stable"] is True and summary["replications"] == 3
    assert summary["p_meet"] == 1.0
    p99s = summary["ttft_ms"]["p99_replications"]
    assert len(set(p99s)) == 3  # independent replications, not one run three times
    lo, hi = summary["ttft_ms"]["p99_ci95"]
    assert lo <= summary["ttft_ms"]["p99"] <= hi
    strict = evaluate(build_deployment(s), s, parse_slo("ttft_p99_ms=1"), 3, 0)
    assert strict["p_meet"] == 0.0


def test_overload_is_not_stable() -> None:
    s = _settings(qps=60.0)
    summary = evaluate(build_deployment(s), s, None, 1, 0)
    assert summary["stable"] is False and summary["p_meet"] is None


def test_screening_stops_after_one_failing_run() -> None:
    s = _settings(qps=1.0)
    d = build_deployment(s)
    assert screened(d, s, parse_slo("ttft_p99_ms=1"), 3, 0, 0.8)["replications"] == 1
    assert screened(d, s, parse_slo("ttft_p99_ms=5000"), 3, 0, 0.8)["replications"] == 3
    assert screened(d, s, parse_slo("ttft_p99_ms=1"), 3, 0, 0.5)["replications"] == 3  # one miss is allowed
    with pytest.raises(ValueError, match="--replications must be >= 1, got 0"):
        evaluate(d, s, None, 0, 0)
