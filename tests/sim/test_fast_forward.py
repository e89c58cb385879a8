"""Decode runs (clock jumps between events) give exactly the results of stepping one by one."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from latsim.sim.simulate import simulate
from latsim.workload.generate import synthesize
from tests.sim.conftest import LinearCost, small_deployment


def both_ways(deployment, trace):
    cost = LinearCost()
    fast = simulate(deployment, trace, cost_model=cost, fast_forward=True)
    slow = simulate(deployment, trace, cost_model=cost, fast_forward=False)
    return fast, slow


def assert_same(fast, slow):
    pd.testing.assert_frame_equal(fast.records, slow.records)
    expand = lambda r: np.sort(np.repeat(r.itl_values_s, r.itl_weights.astype(int)))  # noqa: E731
    np.testing.assert_array_equal(expand(fast), expand(slow))
    assert fast.summary["preemptions"] == slow.summary["preemptions"]
    assert fast.summary["engine_steps"] == slow.summary["engine_steps"]


def test_decode_runs_match_single_steps_on_a_poisson_workload():
    trace = synthesize(20.0, 300, "poisson", "lognormal:median=400,sigma=0.8,min=8,max=2000",
                       "lognormal:median=100,sigma=0.6,min=2,max=400", np.random.default_rng(1))
    fast, slow = both_ways(small_deployment(), trace)
    assert_same(fast, slow)
    assert fast.summary["num_completed"] == 300


@pytest.mark.parametrize("asynchronous", [True, False])
def test_decode_runs_match_under_kv_pressure_with_preemptions(asynchronous):
    trace = synthesize(50.0, 120, "poisson", 300, 200, np.random.default_rng(2))
    fast, slow = both_ways(small_deployment(num_gpu_blocks=200, async_scheduling=asynchronous), trace)
    assert slow.summary["preemptions"] > 0
    assert_same(fast, slow)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), qps=st.floats(1.0, 200.0), blocks=st.integers(60, 2000),
       max_seqs=st.integers(1, 64), caching=st.booleans(), replicas=st.integers(1, 3), asynchronous=st.booleans())
def test_decode_runs_match_single_steps_property(seed, qps, blocks, max_seqs, caching, replicas, asynchronous):
    rng = np.random.default_rng(seed)
    trace = synthesize(qps, 60, "gamma:cv=3", "uniform:min=1,max=600", "uniform:min=1,max=300", rng)
    dep = small_deployment(num_gpu_blocks=blocks, max_num_seqs=max_seqs, enable_prefix_caching=caching,
                           async_scheduling=asynchronous)
    dep = type(dep)(**{**dep.__dict__, "replicas": replicas, "router": "least-outstanding"})
    fast, slow = both_ways(dep, trace)
    assert_same(fast, slow)
