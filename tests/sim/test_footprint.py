"""The memory check before a simulation: a lower bound of what it takes, and a clear refusal."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from latsim import Deployment, load_device, load_model, simulate, synthesize
from latsim.sim import footprint
from latsim.sim.footprint import bytes_per_request, check_fits_in_memory
from tests.test_cli import run


def test_the_estimate_is_a_lower_bound_of_what_a_simulation_holds():
    n = 2000
    deployment = Deployment(load_model("llama-3.2-1b"), load_device("h100"))
    tracemalloc.start()
    try:
        trace = synthesize(50.0, n, "poisson", 20, 4, np.random.default_rng(0))
        result = simulate(deployment, trace)
        held, _ = tracemalloc.get_traced_memory()  # with the result (records) still alive
    finally:
        tracemalloc.stop()
    assert len(result.records) == n and held / n >= bytes_per_request() > 0


def test_a_workload_above_the_available_memory_is_refused_with_the_limit():
    per = bytes_per_request()
    check_fits_in_memory(1000, available=1000 * per)
    with pytest.raises(ValueError, match=r"1001 requests need .* room for at most 1000;"):
        check_fits_in_memory(1001, available=1000 * per)


def test_no_check_where_the_available_memory_is_unknown(monkeypatch):
    monkeypatch.setattr(footprint, "available_bytes", lambda: None)
    check_fits_in_memory(10**12)


def test_the_cli_refuses_before_synthesizing(monkeypatch, capsys):
    monkeypatch.setattr(footprint, "available_bytes", lambda: 100 * bytes_per_request())
    code, _, err = run(["predict", "--num-requests", "5000"], monkeypatch, capsys)
    assert code == 2 and "5000 requests need at least" in err and "room for at most 100;" in err
