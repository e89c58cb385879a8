"""Arrival processes: moments, conventions, determinism and spec errors."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from latsim.workload.arrivals import Burst, Constant, Gamma, Poisson, parse_arrival

N = 20_000


def gaps(spec: str, qps: float, seed: int = 0, n: int = N) -> np.ndarray:
    return np.diff(parse_arrival(spec).sample(qps, n, np.random.default_rng(seed)))


def test_poisson_mean_gap_is_one_over_qps() -> None:
    g = gaps("poisson", qps=4.0)
    assert g.mean() == pytest.approx(0.25, rel=0.03)
    assert g.std() / g.mean() == pytest.approx(1.0, rel=0.05)


@pytest.mark.parametrize("cv", [0.5, 2.0, 3.0])
def test_gamma_has_requested_mean_and_cv(cv: float) -> None:
    g = gaps(f"gamma:cv={cv}", qps=10.0, n=100_000)
    assert g.mean() == pytest.approx(0.1, rel=0.03)
    assert g.std() / g.mean() == pytest.approx(cv, rel=0.06)


def test_constant_is_evenly_spaced_and_burst_all_at_zero() -> None:
    rng = np.random.default_rng(0)
    np.testing.assert_allclose(parse_arrival("constant").sample(2.0, 4, rng), [0.0, 0.5, 1.0, 1.5])
    np.testing.assert_array_equal(parse_arrival("burst").sample(123.0, 3, rng), np.zeros(3))


@pytest.mark.parametrize("spec", ["poisson", "gamma:cv=2", "constant", "burst"])
def test_first_arrival_at_zero_and_sorted(spec: str) -> None:
    t = parse_arrival(spec).sample(5.0, 1000, np.random.default_rng(1))
    assert t.shape == (1000,) and t.dtype == np.float64
    assert t[0] == 0.0 and np.all(np.diff(t) >= 0)


@pytest.mark.parametrize("spec", ["poisson", "gamma:cv=2", "constant", "burst"])
def test_zero_and_one_request(spec: str) -> None:
    process = parse_arrival(spec)
    assert process.sample(1.0, 0, np.random.default_rng(0)).shape == (0,)
    np.testing.assert_array_equal(process.sample(1.0, 1, np.random.default_rng(0)), [0.0])


@pytest.mark.parametrize("spec", ["poisson", "gamma:cv=0.7"])
def test_same_seed_same_arrivals(spec: str) -> None:
    a = parse_arrival(spec).sample(3.0, 500, np.random.default_rng(42))
    b = parse_arrival(spec).sample(3.0, 500, np.random.default_rng(42))
    c = parse_arrival(spec).sample(3.0, 500, np.random.default_rng(43))
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("poisson", Poisson()),
        ("  Poisson ", Poisson()),
        ("gamma:cv=2", Gamma(cv=2.0)),
        ("GAMMA: cv = 0.5", Gamma(cv=0.5)),
        ("constant", Constant()),
        ("burst", Burst()),
    ],
)
def test_parse_arrival(spec: str, expected: object) -> None:
    assert parse_arrival(spec) == expected


@pytest.mark.parametrize("process", [Poisson(), Gamma(cv=1.5), Constant(), Burst()])
def test_describe_round_trips(process: object) -> None:
    assert parse_arrival(process.describe()) == process  # type: ignore[attr-defined]


def test_process_instance_passes_through() -> None:
    process = Gamma(cv=3.0)
    assert parse_arrival(process) is process


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("weibull", r"unknown arrival process 'weibull'.*accepted: poisson, gamma:cv=<cv > 0>, constant"),
        ("gamma", r"gamma: missing cv"),
        ("gamma:cv=0", r"gamma: cv must be > 0, got 0"),
        ("gamma:cv=-2", r"gamma: cv must be > 0, got -2"),
        ("gamma:cv=abc", r"gamma: cv must be a number, got 'abc'"),
        ("gamma:cv=nan", r"gamma: cv must be finite"),
        ("gamma:shape=2", r"gamma: unknown key 'shape'; accepted keys: cv"),
        ("gamma:cv=1,cv=2", r"key 'cv' given twice"),
        ("gamma:2", r"gamma: expected KEY=VALUE, got '2'"),
        ("poisson:rate=3", r"poisson takes no arguments, got 'rate=3'"),
        ("", r"arrival spec '' has no name"),
        (":cv=2", r"has no name"),
    ],
)
def test_bad_spec_names_the_bad_part(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_arrival(spec)


def test_non_string_spec_is_rejected() -> None:
    with pytest.raises(ValueError, match="arrival spec must be a string, got 3"):
        parse_arrival(3)  # type: ignore[arg-type]


@pytest.mark.parametrize("qps", [0.0, -1.0, float("nan"), float("inf"), True])
def test_bad_qps(qps: float) -> None:
    with pytest.raises(ValueError, match="qps must be a finite number > 0"):
        Poisson().sample(qps, 3, np.random.default_rng(0))


def test_bad_count() -> None:
    with pytest.raises(ValueError, match="number of requests must be an integer >= 0, got -1"):
        Constant().sample(1.0, -1, np.random.default_rng(0))


@settings(max_examples=50, deadline=None)
@given(
    spec=st.sampled_from(["poisson", "gamma:cv=0.3", "gamma:cv=4", "constant", "burst"]),
    qps=st.floats(1e-3, 1e4),
    n=st.integers(0, 300),
    seed=st.integers(0, 2**32 - 1),
)
def test_arrivals_are_sorted_nonnegative_and_start_at_zero(spec: str, qps: float, n: int, seed: int) -> None:
    t = parse_arrival(spec).sample(qps, n, np.random.default_rng(seed))
    assert len(t) == n and np.all(np.isfinite(t)) and np.all(np.diff(t) >= 0)
    assert n == 0 or t[0] == 0.0
