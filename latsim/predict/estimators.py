"""Gradient-boosted trees with the scikit-learn API and monotone constraints.

:class:`MonotoneBoostedRegressor` and :class:`BoostedStabilityClassifier` wrap xgboost's
booster: ``fit`` returns ``self``, learned state ends in ``_`` (``booster_``,
``n_features_in_``, ``classes_``), and a fitted booster round-trips through xgboost's JSON
format (:func:`save_booster`, :func:`load_booster`), never pickle.  ``monotone`` gives one
sign per feature (+1 non-decreasing, -1 non-increasing, 0 free); an empty tuple leaves every
feature free.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import numpy.typing as npt
import xgboost as xgb
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from latsim.atomic import atomic_write_bytes


def _params(est: BaseEstimator, n_features: int, objective: str) -> dict:
    monotone = tuple(est.monotone)
    if monotone and len(monotone) != n_features:
        raise ValueError(f"monotone has {len(monotone)} signs for {n_features} features")
    params = {"objective": objective, "max_depth": est.max_depth,
              "eta": est.learning_rate, "seed": est.random_state,
              "min_child_weight": getattr(est, "min_child_weight", 1.0),
              "tree_method": "hist", "nthread": 1, "verbosity": 0}
    if monotone and any(monotone):
        params["monotone_constraints"] = "(" + ",".join(str(int(s)) for s in monotone) + ")"
    return params


REGRESSION_OBJECTIVES = {"squared_error": "reg:squarederror", "absolute_error": "reg:absoluteerror"}
"""The regressor's losses and xgboost's names for them."""


class MonotoneBoostedRegressor(RegressorMixin, BaseEstimator):
    """Boosted trees of squared or absolute error (``objective``: ``"squared_error"``, a mean fit,
    or ``"absolute_error"``, a median fit, robust to heavy-tailed targets); ``predict`` is
    non-decreasing in every feature whose ``monotone`` sign is +1 (non-increasing for -1).
    ``min_child_weight``: the least number of rows a leaf may hold (xgboost's hessian sum, one
    per row for either loss)."""

    def __init__(self, n_estimators: int = 80, max_depth: int = 4, learning_rate: float = 0.1,
                 monotone: tuple[int, ...] = (), random_state: int = 0, min_child_weight: float = 1.0,
                 objective: str = "squared_error") -> None:
        self.n_estimators = n_estimators
        self.max_depth = max_depth
        self.learning_rate = learning_rate
        self.min_child_weight = min_child_weight
        self.monotone = monotone
        self.random_state = random_state
        self.objective = objective

    def fit(self, X: npt.ArrayLike, y: npt.ArrayLike) -> MonotoneBoostedRegressor:
        Xv, yv = validate_data(self, X, y, y_numeric=True)
        Xa = np.asarray(Xv, dtype=np.float64)
        data = xgb.DMatrix(Xa, label=np.asarray(yv, dtype=np.float64))
        if self.objective not in REGRESSION_OBJECTIVES:
            raise ValueError(f"objective must be one of {', '.join(REGRESSION_OBJECTIVES)}, got {self.objective!r}")
        params = _params(self, Xa.shape[1], REGRESSION_OBJECTIVES[self.objective])
        self.booster_ = xgb.train(params, data, num_boost_round=self.n_estimators)
        return self

    def predict(self, X: npt.ArrayLike) -> np.ndarray:
        check_is_fitted(self, "booster_")
        Xa = np.asarray(validate_data(self, X, reset=False), dtype=np.float64)
        return np.asarray(self.booster_.inplace_predict(Xa), dtype=np.float64)


class BoostedStabilityClassifier(ClassifierMixin, BaseEstimator):
    """Binary logistic boosted trees (``classes_`` holds the two labels seen in ``fit``; one
    label only: that label is always predicted)."""

    def __init__(self, n_estimators: int = 60, max_depth: int = 3, learning_rate: float = 0.2,
                 monotone: tuple[int, ...] = (), random_state: int = 0) -> None:
        self.n_estimators = n_estimators
        self.max_depth = max_depth
        self.learning_rate = learning_rate
        self.monotone = monotone
        self.random_state = random_state

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        assert tags.classifier_tags is not None
        tags.classifier_tags.multi_class = False
        return tags

    def fit(self, X: npt.ArrayLike, y: npt.ArrayLike) -> BoostedStabilityClassifier:
        Xv, yv = validate_data(self, X, y)
        Xa = np.asarray(Xv, dtype=np.float64)
        check_classification_targets(yv)
        self.classes_, encoded = np.unique(yv, return_inverse=True)
        if len(self.classes_) > 2:
            raise ValueError(f"Only binary classification is supported; got {len(self.classes_)} classes")
        data = xgb.DMatrix(Xa, label=encoded.astype(np.float64))
        params = _params(self, Xa.shape[1], "binary:logistic")
        self.booster_ = xgb.train(params, data, num_boost_round=self.n_estimators if len(self.classes_) == 2 else 1)
        return self

    def predict_proba(self, X: npt.ArrayLike) -> np.ndarray:
        check_is_fitted(self, "booster_")
        Xa = np.asarray(validate_data(self, X, reset=False), dtype=np.float64)
        if len(self.classes_) == 1:
            return np.ones((Xa.shape[0], 1))
        p = np.asarray(self.booster_.inplace_predict(Xa), dtype=np.float64)
        return np.column_stack([1.0 - p, p])

    def predict(self, X: npt.ArrayLike) -> np.ndarray:
        proba = self.predict_proba(X)
        return np.asarray(self.classes_[np.argmax(proba, axis=1)])


def save_booster(booster: xgb.Booster, path: str | Path) -> None:
    """Write ``booster`` as xgboost JSON, atomically."""
    atomic_write_bytes(path, bytes(booster.save_raw(raw_format="json")))


def load_booster(path: str | Path) -> xgb.Booster:
    """Read an xgboost JSON booster; ValueError names the file when it is missing or unreadable."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise ValueError(f"surrogate model file {p} is missing") from None
    booster = xgb.Booster()
    try:
        booster.load_model(bytearray(raw))
    except xgb.core.XGBoostError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else "unreadable"
        raise ValueError(f"surrogate model file {p} is corrupted ({first[:120]})") from None
    return booster
