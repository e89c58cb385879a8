"""replicate() / replay(): output shape, determinism, bad input, p_meet, capacity, the issue's A100 case,
and the coverage study of the replication intervals on the simulator (light and heavy load)."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from latsim import simulate, synthesize
from latsim.metrics.summary import SLO
from latsim.plan.capacity import estimate_capacity, saturation
from latsim.plan.replicate import interval_advice, replay, replicate, synthetic_traces
from latsim.scenario import DEFAULTS, build_deployment
from latsim.workload.trace import RequestTrace
from tests.script_module import load_script

STUDY = load_script(Path("interval_coverage.py"))
CHEAP = STUDY.CONFIGS["cheap"]
LATENCY_KEYS = ("ttft_ms", "tpot_ms", "e2e_ms", "queue_ms", "itl_ms")


def traces(qps: float, n: int = 400, seed: int = 0):
    return synthetic_traces(qps, n, "poisson", CHEAP.input_dist, CHEAP.output_dist, seed)


@pytest.fixture(scope="module")
def light() -> dict:
    qps = 0.5 * CHEAP.capacity()
    return {"qps": qps, "prediction": replicate(CHEAP.deployment(), traces(qps), 4, seed=3, slo=SLO(ttft_ms=1e6))}


def test_summary_keeps_simulate_keys_and_adds_the_statistics(light) -> None:
    one = simulate(CHEAP.deployment(), traces(light["qps"])(0)).summary
    summary = light["prediction"].summary
    assert set(one) <= set(summary)
    assert summary["replications"] == 4 and summary["stable"] is True
    assert summary["saturation"] == pytest.approx(light["qps"] / summary["capacity_rps"], rel=0.1)
    assert summary["stability"]["replications"] == 4 and "Mann-Kendall" in summary["stability"]["test"]
    for key in LATENCY_KEYS:
        block = summary[key]
        assert block["steady_state"] is True and block["ci_n"] == 4 and block["ci_method"] == "replications"
        assert set(block["ci95"]) == {"p50", "p90", "p95", "p99"}
    assert summary["num_requests"] == 4 * 400
    json.dumps(summary, allow_nan=False)  # strict JSON


def test_same_seed_same_prediction_other_seed_other(light) -> None:
    again = replicate(CHEAP.deployment(), traces(light["qps"]), 4, seed=3, slo=SLO(ttft_ms=1e6))
    assert again.summary == light["prediction"].summary
    other = replicate(CHEAP.deployment(), traces(light["qps"], seed=1), 4, seed=3)
    assert other.summary["ttft_ms"]["p99"] != light["prediction"].summary["ttft_ms"]["p99"]


def test_replications_draw_their_own_traces(light) -> None:
    records = light["prediction"].records
    assert len(records) == 4
    assert not np.array_equal(records[0]["arrival_s"].to_numpy(), records[1]["arrival_s"].to_numpy())


@pytest.mark.parametrize("bad", [1, 0, -2, True, 2.5, "3"])
def test_bad_replications_are_a_value_error(bad) -> None:
    with pytest.raises(ValueError, match="replications must be an integer >= 2"):
        replicate(CHEAP.deployment(), traces(10.0), bad)


def test_bad_slo_percentile_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="slo_percentile must be one of p50, p90, p95, p99, got 'p42'"):
        replicate(CHEAP.deployment(), traces(10.0), 2, slo=SLO(ttft_ms=100), slo_percentile="p42")


def test_p_meet_follows_the_target(light) -> None:
    deployment, make = CHEAP.deployment(), traces(light["qps"])
    p99 = light["prediction"].summary["ttft_ms"]["p99"]
    probs = [replicate(deployment, make, 4, seed=3, slo=SLO(ttft_ms=f * p99)).p_meet for f in (0.5, 1.0, 2.0)]
    assert probs[0] < 0.05 and probs[2] > 0.95 and 0.2 < probs[1] < 0.8  # the point estimate is the median
    slo = replicate(deployment, make, 4, seed=3, slo=SLO(ttft_ms=2 * p99, tpot_ms=1e-3)).summary["slo"]
    assert slo["p_meet"] == slo["p_meet_by_target"]["tpot_ms"] < 0.01  # the weakest target decides
    assert slo["meet_fraction"] == 0.0 and slo["percentile"] == "p99"


def test_replay_gives_batch_means_intervals() -> None:
    trace = traces(0.5 * CHEAP.capacity(), n=3000)(0)
    summary = replay(CHEAP.deployment(), trace, slo=SLO(tpot_ms=1e6)).summary
    assert summary["ttft_ms"]["ci_method"] == "batch_means" and summary["ttft_ms"]["ci_n"] >= 10
    lo, hi = summary["ttft_ms"]["ci95"]["p99"]
    assert lo <= summary["ttft_ms"]["p99"] <= hi
    assert summary["itl_ms"]["p99_ci95"] == [None, None]
    assert summary["slo"]["p_meet"] > 0.99
    short = replay(CHEAP.deployment(), traces(10.0, n=100)(0)).summary
    assert short["ttft_ms"]["ci95"]["p99"] == [None, None] and short["ttft_ms"]["ci_n"] == 1


def test_capacity_matches_the_throughput_of_an_overloaded_run() -> None:
    """The burst replay's rate is what the deployment completes when arrivals outrun it."""
    deployment = CHEAP.deployment()
    make = traces(1.0, n=3000)
    capacity = estimate_capacity(deployment, make(0))
    overloaded = simulate(deployment, traces(2.0 * capacity, n=3000)(1)).records
    finish = np.sort(overloaded.loc[overloaded["status"] == "ok", "finish_s"].to_numpy())
    lo, hi = len(finish) // 4, 3 * len(finish) // 4
    assert (hi - lo) / (finish[hi] - finish[lo]) == pytest.approx(capacity, rel=0.1)
    assert estimate_capacity(deployment, make(0)) == capacity  # deterministic (and cached)
    assert saturation(2 * capacity, capacity) == pytest.approx(2.0) and saturation(None, capacity) is None


def test_capacity_of_an_empty_trace_is_a_value_error() -> None:
    empty = RequestTrace.from_arrays([], [], [])
    with pytest.raises(ValueError, match="the workload has no requests"):
        estimate_capacity(CHEAP.deployment(), empty)


def test_issue_a100_case_through_replicate() -> None:
    """Default model on an A100: --qps 20 is about twice capacity and unstable, --qps 5 stable."""
    deployment = build_deployment(replace(DEFAULTS, device="a100"))
    out = {}
    for qps in (20.0, 5.0):
        make = synthetic_traces(qps, 600, "poisson", DEFAULTS.input_dist, DEFAULTS.output_dist, 0)
        out[qps] = replicate(deployment, make, 2).summary
    assert out[20.0]["stable"] is False and out[20.0]["saturation"] > 1.5
    assert out[20.0]["ttft_ms"]["steady_state"] is False
    assert any("served fraction" in r for r in out[20.0]["stability"]["reasons"])
    assert out[5.0]["stable"] is True and out[5.0]["saturation"] < 0.6


FLOOR_40 = 0.9 - 2.33 * math.sqrt(0.09 / 40)
"""A true coverage of 0.9 measured over 40 experiments falls below this (0.79) with probability 1 %."""


def check_study(out: dict) -> None:
    """Every P99 interval covers at least about 90 %, and the reference is accurate enough to judge
    it (its standard error under a quarter of the narrowest mean half-width)."""
    assert all(c >= FLOOR_40 for c in out["coverage"].values()), out
    assert max(out["reference_rel_se"].values()) < 0.25 * min(out["half_width"].values()), out


@pytest.mark.slow
def test_coverage_study_light_load() -> None:
    """The nominal 95 % P99 intervals of TTFT, TPOT and E2E cover the long-run P99 at least ~90 % of the
    time at half capacity: 40 predictions as ``latsim predict`` makes them (5 replications of 600
    requests, rerun longer when they hold too few tail episodes).  The fuller study
    (``scripts/interval_coverage.py``) is in the README."""
    out = STUDY.coverage(CHEAP, 0.5, experiments=40, replications=5, num_requests=600,
                         ref_runs=4, ref_requests=15000)
    check_study(out)


@pytest.mark.slow
def test_coverage_study_heavy_load() -> None:
    """The same at 0.7x capacity, for llama-3.1-8b on an A100 with the CLI's default workload
    (5 replications of 1,000 requests; nearly every prediction is rerun longer there, its TPOT
    spells being long), with the same floor."""
    out = STUDY.coverage(STUDY.CONFIGS["default"], 0.7, experiments=40, replications=5, num_requests=1000,
                         ref_runs=3, ref_requests=20000)
    check_study(out)
    assert out["lengthened"] >= 0.5 and out["mean_requests"] > 1500, out


def test_single_token_outputs_have_no_tpot_and_do_not_fail() -> None:
    def make(i: int) -> RequestTrace:
        return synthesize(10.0, 300, "poisson", 100, 1, np.random.default_rng([5, i]))

    summary = replicate(CHEAP.deployment(), make, 2, slo=SLO(tpot_ms=10)).summary
    assert summary["tpot_ms"]["p99"] is None and summary["tpot_ms"]["ci95"]["p99"] == [None, None]
    assert summary["ttft_ms"]["p99"] is not None
    assert summary["slo"]["p_meet"] is None  # no TPOT sample: the target's percentile is undefined


def test_interval_advice_asks_for_longer_runs_when_tail_episodes_are_few() -> None:
    few = {"ttft_ms": {"ci_tail_clusters": 5, "ci_n": 5}, "tpot_ms": {"ci_tail_clusters": 20, "ci_n": 5},
           "itl_ms": {"ci_tail_clusters": None, "ci_n": 5}}
    advice = interval_advice(few, 1000)
    assert advice["reliable"] is False and advice["tail_episodes_per_section"] == 1.0
    assert advice["suggested_requests_per_run"] == 3000 and "3000 requests per replication" in advice["advice"]
    enough = interval_advice({"ttft_ms": {"ci_tail_clusters": 15.0, "ci_n": 5}}, 1000)
    assert enough == {"reliable": True, "tail_episodes_per_section": 3.0}
