"""Percentile convention vs numpy, weights as repetitions, and the bootstrap CI."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as sps

from latsim.metrics.stats import bootstrap_ci, bootstrap_replicates, describe, weighted_percentiles

small_ints = st.lists(st.integers(-5, 5), min_size=1, max_size=40)
floats = st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=1, max_size=60)
percents = st.lists(st.floats(0, 100), min_size=1, max_size=10)
GRID = np.linspace(0, 100, 1001)


@settings(max_examples=200, deadline=None)
@given(values=st.one_of(small_ints, floats), qs=percents)
def test_unit_weights_equal_numpy_inverted_cdf(values: list[float], qs: list[float]) -> None:
    expected = np.percentile(values, qs, method="inverted_cdf")
    np.testing.assert_array_equal(weighted_percentiles(values, None, qs), expected)
    np.testing.assert_array_equal(weighted_percentiles(values, np.ones(len(values)), qs), expected)


@pytest.mark.parametrize("n", [1, 2, 3, 7, 100, 1001])
def test_unit_weights_equal_numpy_on_a_fine_grid(n: int) -> None:
    values = np.random.default_rng(n).normal(size=n)
    expected = np.percentile(values, GRID, method="inverted_cdf")
    np.testing.assert_array_equal(weighted_percentiles(values, None, GRID), expected)


@settings(max_examples=200, deadline=None)
@given(
    pairs=st.lists(st.tuples(st.integers(-20, 20), st.integers(0, 6)), min_size=1, max_size=30),
    qs=percents,
)
def test_integer_weights_equal_repeated_values(pairs: list[tuple[int, int]], qs: list[float]) -> None:
    values = np.array([v for v, _ in pairs], dtype=float)
    weights = np.array([w for _, w in pairs])
    if weights.sum() == 0:
        assert np.all(np.isnan(weighted_percentiles(values, weights, qs)))
        return
    repeated = np.repeat(values, weights)
    np.testing.assert_array_equal(
        weighted_percentiles(values, weights, qs), np.percentile(repeated, qs, method="inverted_cdf")
    )
    assert describe(values, weights) == pytest.approx(describe(repeated))


def test_scalar_q_and_empty_input() -> None:
    assert weighted_percentiles([3.0, 1.0, 2.0], None, 50).shape == ()
    assert float(weighted_percentiles([3.0, 1.0, 2.0], None, 50)) == 2.0
    assert np.isnan(weighted_percentiles([], None, [50, 99])).all()
    assert all(np.isnan(x) for x in describe([]).values())


def test_describe_known_values() -> None:
    d = describe(np.arange(1, 101, dtype=float))
    assert d == {"mean": 50.5, "p50": 50.0, "p90": 90.0, "p95": 95.0, "p99": 99.0}
    w = describe([10.0, 20.0, 50.0], [5, 3, 2])
    assert w == {"mean": 21.0, "p50": 10.0, "p90": 50.0, "p95": 50.0, "p99": 50.0}


def seeded() -> np.random.Generator:
    return np.random.default_rng(0)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: weighted_percentiles([1.0, np.nan], None, 50), "values must be finite"),
        (lambda: weighted_percentiles([[1.0]], None, 50), "one-dimensional"),
        (lambda: weighted_percentiles([1.0, 2.0], [1.0], 50), r"weights have shape \(1,\), values .* \(2,\)"),
        (lambda: weighted_percentiles([1.0, 2.0], [1.0, -1.0], 50), "weights must be finite and >= 0"),
        (lambda: weighted_percentiles([1.0], None, [50, 101]), r"must be in \[0, 100\], got \[50.0, 101.0\]"),
        (lambda: bootstrap_ci([1.0], 99, seeded(), n_boot=0), "n_boot must be an integer >= 1"),
        (lambda: bootstrap_ci([1.0], 99, seeded(), level=1.0), r"level must be in \(0, 1\)"),
        (lambda: bootstrap_ci([1.0], 99, seeded(), weights=[0.5]), "whole-number frequencies"),
        (lambda: bootstrap_ci([1.0], -1, seeded()), "percentiles must be in"),
    ],
)
def test_errors(call, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()


def test_bootstrap_is_deterministic_for_a_seed() -> None:
    values = np.random.default_rng(0).lognormal(size=5000)
    a = bootstrap_ci(values, 99, np.random.default_rng(1))
    b = bootstrap_ci(values, 99, np.random.default_rng(1))
    c = bootstrap_ci(values, 99, np.random.default_rng(2))
    assert a == b != c
    assert a[0] <= float(weighted_percentiles(values, None, 99)) <= a[1]


def test_bootstrap_weighted_equals_expanded() -> None:
    values, weights = np.array([0.01, 0.02, 0.05, 0.3]), np.array([500, 300, 150, 7])
    weighted = bootstrap_replicates(values, 99, np.random.default_rng(5), 2000, weights)
    expanded = bootstrap_replicates(np.repeat(values, weights), 99, np.random.default_rng(5), 2000)
    np.testing.assert_array_equal(weighted, expanded)


@pytest.mark.parametrize("q", [50.0, 90.0, 99.0])
def test_bootstrap_matches_naive_resampling_in_distribution(q: float) -> None:
    values = np.random.default_rng(3).normal(size=15)
    fast = bootstrap_replicates(values, q, np.random.default_rng(4), 40_000)
    resamples = np.random.default_rng(5).choice(values, size=(40_000, values.size))
    naive = np.percentile(resamples, q, axis=1, method="inverted_cdf")
    support = np.sort(values)
    freq = lambda reps: np.array([np.mean(reps == v) for v in support])  # noqa: E731
    np.testing.assert_allclose(freq(fast), freq(naive), atol=0.015)


def test_bootstrap_ci_covers_true_p99_most_of_the_time() -> None:
    rng = np.random.default_rng(2024)
    true_p99 = float(np.exp(sps.norm.ppf(0.99)))
    hits = 0
    trials = 200
    for _ in range(trials):
        lo, hi = bootstrap_ci(rng.lognormal(size=3000), 99, rng, n_boot=500)
        hits += lo <= true_p99 <= hi
    assert 0.88 <= hits / trials <= 0.995


def test_bootstrap_without_samples() -> None:
    lo, hi = bootstrap_ci([], 99, np.random.default_rng(0))
    assert np.isnan(lo) and np.isnan(hi)
