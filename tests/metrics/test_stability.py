"""The stability verdict: exact queues with known answers, bad input, the issue's A100 case, the boundary."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from latsim import simulate
from latsim.metrics.stability import (
    MIN_WINDOW_REQUESTS,
    TOLERANCE,
    pooled_verdict,
    stability_verdict,
    steady_latency_window_s,
    steady_start_s,
)
from latsim.scenario import DEFAULTS, build_deployment, build_trace
from tests.metrics.mm1 import mm1_records


def verdict(lam: float, mu: float, n: int = 2000, seed: int = 0, **kwargs):
    return stability_verdict(mm1_records(lam, mu, n, np.random.default_rng(seed), **kwargs), lam)


@pytest.mark.parametrize("load", [0.3, 0.7, 0.9])
def test_stable_queue_is_stable(load: float) -> None:
    v = verdict(load, 1.0)
    assert v.stable, v.reasons
    assert v.reasons == ()
    assert v.served_fraction == pytest.approx(1.0, abs=TOLERANCE)
    assert v.served_floor is not None and v.served_floor < 1 - TOLERANCE and v.in_system_sd > 0
    assert v.window_completed <= v.window_requests + 100


@pytest.mark.parametrize("load", [1.2, 1.5, 3.0])
def test_overloaded_queue_is_unstable_for_both_tests(load: float) -> None:
    v = verdict(load, 1.0)
    assert not v.stable
    # a fluid queue serves mu / lam of its arrivals and its backlog grows by 1 - mu / lam of them
    assert v.served_fraction == pytest.approx(1 / load, abs=0.08)
    assert v.trend_slope == pytest.approx(1 - 1 / load, abs=0.08)
    assert v.trend_p_value < 1e-6
    assert len([r for r in v.reasons if "served fraction" in r or "grow" in r]) == 2


def test_unfinished_requests_count_as_not_served() -> None:
    records = mm1_records(1.5, 1.0, 1000, np.random.default_rng(1), horizon_s=700.0)
    v = stability_verdict(records, 1.5)
    assert v.unfinished == int((records["status"] == "unfinished").sum()) > 0
    assert not v.stable
    assert any("unfinished" in r for r in v.reasons)


def test_burst_has_no_steady_state() -> None:
    records = mm1_records(1.0, 2.0, 50, np.random.default_rng(2))
    records["arrival_s"] = 0.0
    v = stability_verdict(records, None)
    assert v.stable and v.served_fraction is None and v.trend_p_value is None
    assert "no steady state" in v.reasons[0]


def test_too_few_requests_skip_the_tests_and_say_so() -> None:
    v = verdict(0.5, 1.0, n=MIN_WINDOW_REQUESTS)
    assert v.served_fraction is None and v.trend_slope is None
    assert any(r.startswith("skipped served-fraction") for r in v.reasons)
    assert any(r.startswith("skipped trend") for r in v.reasons)


def test_rejected_requests_are_left_out() -> None:
    records = mm1_records(0.5, 1.0, 1000, np.random.default_rng(3))
    with_rejected = records.copy()
    with_rejected.loc[::10, ["first_scheduled_s", "first_token_s", "finish_s"]] = math.nan
    with_rejected.loc[::10, "status"] = "rejected"
    v = stability_verdict(with_rejected, 0.5)
    assert v.stable
    assert v.window_requests < stability_verdict(records, 0.5).window_requests


def test_verdict_is_json_ready_and_names_its_test() -> None:
    v = verdict(1.5, 1.0)
    d = json.loads(json.dumps(v.to_dict(), allow_nan=False))
    assert d["stable"] is False and isinstance(d["reasons"], list)
    assert "Mann-Kendall" in d["test"] and "served fraction" in d["test"]


@pytest.mark.parametrize("bad", [0, -1.0, math.inf, math.nan, True, "5"])
def test_bad_offered_rate_is_a_value_error(bad) -> None:
    with pytest.raises(ValueError, match="offered_rps must be None or a finite number > 0"):
        stability_verdict(mm1_records(0.5, 1.0, 50, np.random.default_rng(0)), bad)


def test_records_without_a_column_are_a_value_error() -> None:
    with pytest.raises(ValueError, match="records lack column 'finish_s'"):
        stability_verdict(mm1_records(0.5, 1.0, 50, np.random.default_rng(0)).drop(columns="finish_s"), 0.5)


def test_steady_start_leaves_out_the_warm_up() -> None:
    records = mm1_records(0.5, 1.0, 1000, np.random.default_rng(4))
    start = steady_start_s(records)
    assert np.quantile(records["arrival_s"], 0.19) < start <= np.quantile(records["arrival_s"], 0.51)
    everything_rejected = records.assign(status="rejected")
    with pytest.raises(ValueError, match="every request was rejected"):
        steady_start_s(everything_rejected)


def test_latency_window_leaves_out_the_drain() -> None:
    """It ends one run-P99 sojourn before the last arrival: a request arriving by then either
    finished before the last arrival or had already waited longer than that P99."""
    records = mm1_records(0.7, 1.0, 3000, np.random.default_rng(5))
    start, end = steady_latency_window_s(records)
    sojourn = (records["finish_s"] - records["arrival_s"]).to_numpy()
    p99 = np.percentile(sojourn, 99, method="inverted_cdf")
    last = records["arrival_s"].max()
    assert start == steady_start_s(records) and end == pytest.approx(last - p99)
    kept = records[records["arrival_s"].between(start, end)]
    assert ((kept["finish_s"] <= last) | (kept["finish_s"] - kept["arrival_s"] >= p99)).all()


def test_latency_window_keeps_half_the_steady_window_of_an_overloaded_run() -> None:
    records = mm1_records(3.0, 1.0, 1000, np.random.default_rng(6))
    start, end = steady_latency_window_s(records)
    arrival = np.sort(records["arrival_s"].to_numpy())
    first = int(np.searchsorted(arrival, start))
    assert end == arrival[first + (len(arrival) - 1 - first) // 2]
    with pytest.raises(ValueError, match="every request was rejected"):
        steady_latency_window_s(records.assign(status="rejected"))


def test_pooled_verdict_sums_counts_and_keeps_the_thresholds() -> None:
    stable = [verdict(0.8, 1.0, seed=s) for s in range(3)]
    pooled = pooled_verdict(stable)
    assert pooled.stable and pooled.replications == 3
    assert pooled.window_requests == sum(v.window_requests for v in stable)
    assert pooled.served_fraction == pytest.approx(sum(v.window_completed for v in stable) / pooled.window_requests)
    assert not pooled_verdict([*stable[:2], verdict(2.0, 1.0)]).stable  # one overloaded run halves nothing
    with pytest.raises(ValueError, match="at least one verdict"):
        pooled_verdict([])


def test_issue_a100_overload_is_unstable_and_light_load_stable() -> None:
    """`latsim predict --device a100 --qps 20` (default model, about 2x capacity) is not stable; --qps 5 is."""
    verdicts = {}
    for qps in (20.0, 5.0):
        settings = replace(DEFAULTS, device="a100", qps=qps)
        result = simulate(build_deployment(settings), build_trace(settings))
        verdicts[qps] = stability_verdict(result.records, result.summary["offered_rps"])
    assert not verdicts[20.0].stable
    assert verdicts[20.0].served_fraction < 0.7 and verdicts[20.0].trend_slope > 0.3
    assert verdicts[5.0].stable, verdicts[5.0].reasons


def test_boundary_study_every_verdict_right() -> None:
    """0.5x, 0.8x capacity stable and 1.2x, 1.5x unstable, 4 seeds each (cheap configuration), and 0.8x / 1.2x
    for the default model and workload on an A100 (3 seeds each), which holds ~100 requests at once."""
    from tests.script_module import load_script

    study = load_script(Path("interval_coverage.py"))
    rows = study.boundary(study.CONFIGS["cheap"], (0.5, 0.8, 1.2, 1.5), seeds=4, num_requests=1000)
    rows += study.boundary(study.CONFIGS["default"], (0.8, 1.2), seeds=3, num_requests=1000)
    wrong = [r for r in rows if not r["right"]]
    assert len(rows) == 22 and not wrong, wrong
