"""Held-out error of the surrogate against the simulator, split three honest ways.

- ``configuration``: 5-fold cross-validation over whole configurations (each row is one
  simulated configuration, so no configuration is in both sides);
- ``model_family``: leave one model family out (every size of Llama, of Qwen2, ... at once);
- ``gpu``: leave one GPU out.

The error of a latency or throughput prediction is ``|predicted / simulated - 1|``; the
summary is its median (and 90th percentile) over every held-out row, and its median over the
rows the simulator found stable (past saturation a short run's latencies grow with its length,
which no per-configuration figure can capture), over the rows whose estimated load is below
``1 - BOUNDARY`` (``load``: the rate over the mean-value capacity, the design's, so that the
columns compare across surrogate versions), and over the rows the surrogate itself predicts stable (where its latencies
are steady-state figures: the ones a user should read; a simulator-unstable row it calls stable
counts there with its error).  Stability is scored as
the share classified right, over all rows and over rows away from the boundary (load over the
estimated capacity outside ``[1 - BOUNDARY, 1 + BOUNDARY]``; also with ``load_saturated``, the
rate over the saturated capacity, the closer estimate).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from latsim.predict.recipe import TARGETS

BOUNDARY = 0.25
FOLDS = 5


def _family(model: str) -> str:
    from latsim import load_model

    return str(load_model(model).family)


def groups(frame: pd.DataFrame, split: str, seed: int = 0) -> np.ndarray:
    """The held-out group of every row under ``split`` (configuration, model_family or gpu)."""
    if split == "configuration":
        return np.random.default_rng(seed).permutation(len(frame)) % FOLDS
    if split == "model_family":
        return frame["model"].map(_family).to_numpy()
    if split == "gpu":
        return frame["device"].to_numpy()
    raise ValueError(f"split must be configuration, model_family or gpu, got {split!r}")


def cross_predict(frame: pd.DataFrame, static: pd.DataFrame, split: str,
                  extra: tuple[pd.DataFrame, pd.DataFrame] | None = None, **fit_args: Any) -> pd.DataFrame:
    """Every row predicted by a surrogate fitted without its group (index of ``frame``);
    ``static`` holds the rows' :func:`latsim.predict.features.static_features`.

    ``extra``: ``(rows, their static features)`` that only ever train (a sample concentrated
    where the error is, ``train --train-only``): they join every fold's training rows, except,
    under the model family and GPU splits, those of the family or GPU held out; they are never
    predicted, so the score stays over ``frame``'s rows alone."""
    from latsim.predict.features import features_at
    from latsim.predict.surrogate import fit_surrogate

    qps = frame["qps"].to_numpy(dtype=float)
    feats = features_at(static, qps)
    g = groups(frame, split)
    if extra is not None:
        extra_frame, extra_static = extra
        extra_feats = features_at(extra_static, extra_frame["qps"].to_numpy(dtype=float))
        extra_g = None if split == "configuration" else groups(extra_frame, split)
    parts = []
    for value in pd.unique(g):
        test = g == value
        train_frame, train_feats = frame[~test], feats[~test]
        if extra is not None:
            keep = np.ones(len(extra_frame), dtype=bool) if extra_g is None else extra_g != value
            train_frame = pd.concat([train_frame, extra_frame[keep]], ignore_index=True)
            train_feats = pd.concat([train_feats, extra_feats[keep]], ignore_index=True)
        model = fit_surrogate(train_frame, train_feats, **fit_args)
        parts.append(model.predict_static(static[test], qps[test]))
    return pd.concat(parts).loc[frame.index]


def score(frame: pd.DataFrame, feats: pd.DataFrame, predicted: pd.DataFrame) -> dict:
    """Median and P90 relative error per target, and stability accuracy (all, away from the boundary)."""
    errors = {}
    light_load = feats["load"].to_numpy() < 1.0 - BOUNDARY
    said_stable = predicted["stable"].to_numpy(dtype=bool)
    for target in TARGETS:
        truth = frame[target].to_numpy(dtype=float)
        ok = np.isfinite(truth) & (truth > 0)
        rel = np.abs(predicted[target].to_numpy()[ok] / truth[ok] - 1.0)
        stable = frame["stable"].to_numpy(dtype=bool)[ok]
        light = light_load[ok]
        said = said_stable[ok]
        errors[target] = {"median": float(np.median(rel)), "p90": float(np.quantile(rel, 0.9)), "n": int(ok.sum()),
                          "median_stable": float(np.median(rel[stable])), "n_stable": int(stable.sum()),
                          "median_light": float(np.median(rel[light])), "n_light": int(light.sum()),
                          "median_said_stable": float(np.median(rel[said])) if said.any() else float("nan"),
                          "p90_said_stable": float(np.quantile(rel[said], 0.9)) if said.any() else float("nan"),
                          "n_said_stable": int(said.sum())}
    right = predicted["stable"].to_numpy() == frame["stable"].to_numpy(dtype=bool)
    away = np.abs(feats["load"].to_numpy() - 1.0) > BOUNDARY
    away_saturated = np.abs(feats["load_saturated"].to_numpy() - 1.0) > BOUNDARY
    errors["stable"] = {"accuracy": float(right.mean()), "accuracy_away_from_boundary": float(right[away].mean()),
                        "n": len(right), "n_away": int(away.sum()),
                        "accuracy_away_from_saturated_boundary": float(right[away_saturated].mean()),
                        "n_away_saturated": int(away_saturated.sum()),
                        "said_stable_share": float(predicted["stable"].to_numpy(dtype=bool).mean())}
    return errors
