"""The surrogate's estimators: scikit-learn's estimator checks, and monotonicity that the data would break."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.utils.estimator_checks import parametrize_with_checks

from latsim.predict.estimators import BoostedStabilityClassifier, MonotoneBoostedRegressor


@parametrize_with_checks([MonotoneBoostedRegressor(n_estimators=8),
                          MonotoneBoostedRegressor(n_estimators=8, objective="absolute_error"),
                          BoostedStabilityClassifier(n_estimators=8)])
def test_scikit_learn_estimator_checks(estimator, check):
    check(estimator)


def _data(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.uniform(0, 1, size=(400, 3))
    # y falls with feature 0 over half its range: an unconstrained fit would follow it down
    y = np.where(X[:, 0] < 0.5, X[:, 0], 1.0 - X[:, 0]) + 0.3 * X[:, 1] + rng.normal(0, 0.01, 400)
    return X, y


def test_regressor_is_non_decreasing_in_a_constrained_feature_even_when_the_data_falls():
    X, y = _data()
    free = MonotoneBoostedRegressor(n_estimators=60).fit(X, y)
    bound = MonotoneBoostedRegressor(n_estimators=60, monotone=(1, 0, 0)).fit(X, y)
    sweep = np.column_stack([np.linspace(0, 1, 200), np.full(200, 0.4), np.full(200, 0.7)])
    assert np.any(np.diff(free.predict(sweep)) < -1e-6)  # the data does fall
    assert np.all(np.diff(bound.predict(sweep)) >= 0)


def test_classifier_is_non_increasing_in_a_constrained_feature():
    X, _ = _data(1)
    label = (X[:, 0] + 0.2 * np.sin(12 * X[:, 0]) < 0.6).astype(int)
    clf = BoostedStabilityClassifier(monotone=(-1, 0, 0)).fit(X, label)
    sweep = np.column_stack([np.linspace(0, 1, 200), np.full(200, 0.4), np.full(200, 0.7)])
    assert np.all(np.diff(clf.predict_proba(sweep)[:, 1]) <= 0)


def test_wrong_number_of_monotone_signs_is_refused():
    X, y = _data()
    with pytest.raises(ValueError, match="2 signs for 3 features"):
        MonotoneBoostedRegressor(monotone=(1, 0)).fit(X, y)


def test_the_absolute_loss_fits_the_median_where_the_squared_loss_follows_the_outliers():
    rng = np.random.default_rng(2)
    X = rng.uniform(0, 1, size=(600, 2))
    # a fifth of the rows far above the rest (the heavy tail of runs near saturation): the median is 0
    y = np.where(rng.uniform(size=600) < 0.2, 5.0, 0.0) + rng.normal(0, 0.01, 600)
    mean_fit = MonotoneBoostedRegressor(n_estimators=200, max_depth=2).fit(X, y).predict(X)
    median_fit = MonotoneBoostedRegressor(n_estimators=200, max_depth=2, objective="absolute_error").fit(X, y)
    assert np.median(mean_fit) > 0.5  # pulled toward the mean, 1.0
    assert np.median(np.abs(median_fit.predict(X))) < 0.1


def test_an_unknown_objective_is_refused():
    X, y = _data()
    with pytest.raises(ValueError, match="objective must be one of squared_error, absolute_error"):
        MonotoneBoostedRegressor(objective="huber").fit(X, y)
