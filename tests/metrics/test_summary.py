"""summarize() on a hand-made run with known answers, goodput, and Little's law on M/D/1."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from latsim.metrics.summary import SLO, littles_law, summarize

NAN = np.nan
SPAN = 2.7  # last finish (2.7) - first arrival (0.0)
ITL = (np.array([0.01, 0.02, 0.05]), np.array([5, 3, 2]))


def run() -> pd.DataFrame:
    """Three completed requests, one rejected, one cut off by the horizon."""
    return pd.DataFrame(
        {
            "request_id": [0, 1, 2, 3, 4],
            "replica": [0, 0, 0, 0, 0],
            "arrival_s": [0.0, 1.0, 2.0, 3.0, 3.5],
            "first_scheduled_s": [0.0, 1.5, 2.0, NAN, 3.6],
            "first_token_s": [0.1, 1.7, 2.3, NAN, 3.9],
            "finish_s": [1.1, 2.7, 2.3, NAN, NAN],
            "input_tokens": [100, 200, 50, 5000, 10],
            "output_tokens": [11, 6, 1, 100, 50],
            "cached_tokens": [0, 50, 0, 0, 0],
            "preemptions": [0, 1, 0, 0, 2],
            "status": ["ok", "ok", "ok", "rejected", "unfinished"],
        }
    )


def summary(**kwargs) -> dict:
    return summarize(run(), *ITL, rng=np.random.default_rng(0), **kwargs)


def test_counts_and_rates() -> None:
    s = summary()
    assert (s["num_requests"], s["num_completed"], s["num_rejected"], s["num_unfinished"]) == (5, 3, 1, 1)
    assert s["preemptions"] == 3
    assert s["duration_s"] == pytest.approx(SPAN)
    assert s["throughput_rps"] == pytest.approx(3 / SPAN)
    assert s["input_tokens_per_s"] == pytest.approx(350 / SPAN)
    assert s["output_tokens_per_s"] == pytest.approx(18 / SPAN)
    assert s["cached_token_fraction"] == pytest.approx(50 / 350)
    assert "goodput_rps" not in s


def test_latency_blocks() -> None:
    s = summary()
    expected: dict[str, dict[str, float]] = {
        "ttft_ms": {"mean": 1100 / 3, "p50": 300, "p90": 700, "p95": 700, "p99": 700, "count": 3},
        "tpot_ms": {"mean": 150, "p50": 100, "p90": 200, "p95": 200, "p99": 200, "count": 2},
        "e2e_ms": {"mean": 3100 / 3, "p50": 1100, "p90": 1700, "p95": 1700, "p99": 1700, "count": 3},
        "queue_ms": {"mean": 500 / 3, "p50": 0, "p90": 500, "p95": 500, "p99": 500, "count": 3},
        "itl_ms": {"mean": 21, "p50": 10, "p90": 50, "p95": 50, "p99": 50, "count": 10},
    }
    for key, block in expected.items():
        got = {k: s[key][k] for k in block}
        assert got == pytest.approx(block, abs=1e-9), key
        lo, hi = s[key]["p99_ci95"]
        assert 0 <= lo <= hi <= block["p99"] + 1e-9  # bootstrap maxima never exceed the sample max


def test_summary_is_strict_json_and_deterministic() -> None:
    text = json.dumps(summary(slo=SLO(ttft_ms=500)), allow_nan=False, sort_keys=True)
    assert text == json.dumps(summary(slo=SLO(ttft_ms=500)), allow_nan=False, sort_keys=True)


def test_goodput_and_attainment() -> None:
    s = summary(slo=SLO(ttft_ms=500, tpot_ms=150))  # request 0 and the single-token request 2 meet it
    assert s["goodput_rps"] == pytest.approx(2 / SPAN)
    assert s["slo_attainment"] == pytest.approx(2 / 5)
    e2e = summary(slo=SLO(e2e_ms=1000))
    assert e2e["goodput_rps"] == pytest.approx(1 / SPAN) and e2e["slo_attainment"] == pytest.approx(0.2)
    assert summary(slo=SLO(tpot_ms=100))["slo_attainment"] == pytest.approx(2 / 5)


def test_duration_overrides_the_span() -> None:
    s = summary(duration_s=10.0, slo=SLO(ttft_ms=1e6))
    assert s["throughput_rps"] == pytest.approx(0.3) and s["goodput_rps"] == pytest.approx(0.3)


def test_run_without_completions_gives_nulls() -> None:
    frame = run()
    frame["status"] = "unfinished"
    s = summarize(frame, [], [], rng=np.random.default_rng(0))
    assert s["num_completed"] == 0 and s["throughput_rps"] is None
    assert s["ttft_ms"]["p99"] is None and s["ttft_ms"]["p99_ci95"] == [None, None]
    assert s["itl_ms"]["count"] == 0
    json.dumps(s, allow_nan=False)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: SLO(), "SLO needs at least one of ttft_ms, tpot_ms, e2e_ms"),
        (lambda: SLO(ttft_ms=0), "SLO ttft_ms must be None or a finite number > 0, got 0"),
        (lambda: SLO(e2e_ms=float("inf")), "SLO e2e_ms must be None or a finite number > 0"),
        (lambda: summary(duration_s=0.0), "duration_s must be None or a finite number > 0, got 0.0"),
        (lambda: summarize(run(), [0.1], [1, 2], rng=np.random.default_rng(0)), "itl_weights have shape"),
        (lambda: summarize(run(), [0.1], [0.5], rng=np.random.default_rng(0)), "whole-number frequencies"),
    ],
)
def test_errors(make, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make()


def md1_records(n: int, rho: float, service_s: float, seed: int) -> pd.DataFrame:
    """FIFO single server, Poisson arrivals, deterministic service: an M/D/1 queue."""
    arrival = np.cumsum(np.random.default_rng(seed).exponential(service_s / rho, n))
    finish = np.empty(n)
    free_at = 0.0
    for i, a in enumerate(arrival):
        free_at = max(a, free_at) + service_s
        finish[i] = free_at
    start = finish - service_s
    return pd.DataFrame(
        {
            "request_id": np.arange(n), "replica": 0, "arrival_s": arrival, "first_scheduled_s": start,
            "first_token_s": start, "finish_s": finish, "input_tokens": 1, "output_tokens": 1,
            "cached_tokens": 0, "preemptions": 0, "status": "ok",
        }
    )


def test_littles_law_on_md1() -> None:
    rho, service = 0.5, 1.0
    frame = md1_records(50_000, rho, service, seed=1)
    time_average, rate_times_wait = littles_law(frame)
    assert time_average == pytest.approx(rate_times_wait, rel=1e-9)
    # Pollaczek-Khinchine: W = D + rho D / (2 (1 - rho)) = 1.5 s, lambda = 0.5/s, so L = 0.75.
    assert time_average == pytest.approx(0.75, rel=0.05)
    s = summarize(frame, [], [], rng=np.random.default_rng(0))
    assert s["e2e_ms"]["mean"] == pytest.approx(1500, rel=0.05)
    assert s["queue_ms"]["mean"] == pytest.approx(500, rel=0.1)


def test_littles_law_ignores_incomplete_requests_and_handles_empty() -> None:
    assert littles_law(run()) == pytest.approx((3.1 / SPAN, 3.1 / SPAN))  # e2e 1.1 + 1.7 + 0.3
    frame = run()
    frame["status"] = "rejected"
    assert all(np.isnan(x) for x in littles_law(frame))
