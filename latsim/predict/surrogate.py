"""The fitted surrogate: physical features in, P50/P90/P99 latencies, throughput and stability out.

Each latency target is learned as ``log(metric / baseline)``, where the baseline is a
rate-independent figure of the same configuration from its cost model (:func:`baseline_ms`),
so the trees
only learn how queueing and batching stretch the physics, which carries over to a model or GPU
never seen.  Every latency regressor is non-decreasing in the load features (monotone
constraints), and the stability classifier non-increasing in them.

On disk (:func:`save` / :func:`load_surrogate`): a folder with ``surrogate.json`` (format
version, feature and target names, training domain, provenance, held-out errors) and one
xgboost JSON booster per target; never pickle.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from latsim.atomic import atomic_write_text
from latsim.predict.estimators import BoostedStabilityClassifier, MonotoneBoostedRegressor, load_booster, save_booster
from latsim.predict.features import FEATURES, GRID_COLUMNS, LOAD_FEATURES, features
from latsim.predict.recipe import LATENCY_TARGETS, TARGETS

FORMAT = "latsim-surrogate/1"
REBUILD = "rebuild with `python -m latsim.predict.train` (models/recipe/README.md)"
NUMERIC_DOMAIN = ("tp", "replicas", "input_median", "input_sigma", "output_median", "output_sigma", "prefix_share",
                  "max_num_seqs", "max_num_batched_tokens")
FEATURE_DOMAIN = ("load", "log_params_active", "log_bw_per_gpu", "log_flops_per_gpu", "log_kv_bytes_token")
"""Grid columns and features whose training range bounds the domain (a GPU or model never seen
is in the domain when its physics lies inside the trained range)."""


def monotone_signs(sign: int) -> tuple[int, ...]:
    """``sign`` on every load feature, 0 elsewhere, in :data:`FEATURES` order."""
    return tuple(sign if f in LOAD_FEATURES else 0 for f in FEATURES)


def baseline_ms(feats: pd.DataFrame, target: str) -> np.ndarray:
    """The rate-independent physical figure each target is learned relative to: TPOT one decode
    step at batch 1, TTFT the mean prompt's prefill plus one such step, E2E TTFT's plus
    ``mean_out`` steps, throughput the estimated capacity.  (A baseline that grew with load
    would force the learned ratio to grow too, under the monotone constraint, and underfit.)"""
    prefill = np.exp(feats["log_prefill_ms"].to_numpy())
    step = np.exp(feats["log_decode_step_ms"].to_numpy())
    if target.startswith("ttft"):
        return prefill + step
    if target.startswith("tpot"):
        return step
    if target.startswith("e2e"):
        return prefill + (1.0 + feats["mean_out"].to_numpy()) * step
    return np.exp(feats["log_capacity_rps"].to_numpy())


@dataclass
class Surrogate:
    """Fitted regressors per target plus the stability classifier; :meth:`predict` is vectorised."""

    regressors: dict[str, MonotoneBoostedRegressor]
    classifier: BoostedStabilityClassifier
    domain: dict[str, Any]
    card: dict[str, Any] = field(default_factory=dict)

    def predict(self, frame: pd.DataFrame) -> pd.DataFrame:
        """One row per configuration of ``frame`` (the grid's columns): every target, ``stable``,
        ``stable_probability`` and ``in_domain`` (with ``out_of_domain``: the columns outside)."""
        feats = features(frame)
        X = feats[list(FEATURES)].to_numpy(dtype=np.float64)
        out = pd.DataFrame(index=frame.index)
        for target, reg in self.regressors.items():
            out[target] = baseline_ms(feats, target) * np.exp(reg.predict(X))
        proba = self.classifier.predict_proba(X)
        stable_col = list(self.classifier.classes_).index(True) if True in self.classifier.classes_ else None
        out["stable_probability"] = proba[:, stable_col] if stable_col is not None else 0.0
        out["stable"] = out["stable_probability"] >= 0.5
        reasons = outside_domain(frame, feats, self.domain)
        out["in_domain"] = [not r for r in reasons]
        out["out_of_domain"] = ["; ".join(r) for r in reasons]
        return out


def fit_surrogate(frame: pd.DataFrame, feats: pd.DataFrame | None = None, *, n_estimators: int = 80,
                  max_depth: int = 4) -> Surrogate:
    """Fit every target on simulated rows (the recipe's output: grid columns, targets, ``stable``)."""
    feats = features(frame) if feats is None else feats
    X = feats[list(FEATURES)].to_numpy(dtype=np.float64)
    regressors = {}
    for target in TARGETS:
        y = frame[target].to_numpy(dtype=float)
        keep = np.isfinite(y) & (y > 0)
        label = np.log(y[keep] / baseline_ms(feats, target)[keep])
        sign = 1 if target in LATENCY_TARGETS or target == "throughput_rps" else 0
        reg = MonotoneBoostedRegressor(n_estimators=n_estimators, max_depth=max_depth, monotone=monotone_signs(sign))
        regressors[target] = reg.fit(X[keep], label)
    clf = BoostedStabilityClassifier(monotone=monotone_signs(-1)).fit(X, frame["stable"].to_numpy(dtype=bool))
    return Surrogate(regressors, clf, training_domain(frame, feats))


def training_domain(frame: pd.DataFrame, feats: pd.DataFrame) -> dict[str, Any]:
    """The box the design sampled (:data:`latsim.predict.design.DOMAIN`, TP and replicas; load
    from 0, as an idle deployment is as easy as a lightly loaded one), the sampled range of the
    physical :data:`FEATURE_DOMAIN` features, and the models and devices seen."""
    from latsim.predict.design import DOMAIN, REPLICAS, TPS

    ranges = {c: [float(DOMAIN[c][0]), float(DOMAIN[c][1])] for c in NUMERIC_DOMAIN if c in DOMAIN}
    ranges.update(tp=[float(min(TPS)), float(max(TPS))], replicas=[float(min(REPLICAS)), float(max(REPLICAS))])
    ranges.update({f: [float(feats[f].min()), float(feats[f].max())] for f in FEATURE_DOMAIN})
    ranges["load"] = [0.0, float(DOMAIN["load"][1])]
    return {"ranges": ranges, "models": sorted(set(frame["model"])), "devices": sorted(set(frame["device"]))}


def outside_domain(frame: pd.DataFrame, feats: pd.DataFrame, domain: dict[str, Any]) -> list[list[str]]:
    """Per row, ``"column=value outside [lo, hi]"`` for every bounded column or feature out of range."""
    reasons: list[list[str]] = [[] for _ in range(len(frame))]
    for name, (lo, hi) in domain["ranges"].items():
        values = (feats[name] if name in feats.columns else frame[name]).to_numpy(dtype=float)
        if name in ("max_num_seqs", "max_num_batched_tokens"):
            values = np.where(np.isnan(values), lo, values)  # the engine's default is in the domain
        for i in np.flatnonzero(~((values >= lo) & (values <= hi))):
            reasons[i].append(f"{name}={values[i]:.4g} outside [{lo:.4g}, {hi:.4g}]")
    return reasons


def save(surrogate: Surrogate, folder: str | Path) -> None:
    """Write ``surrogate.json`` and one ``<target>.json`` booster per target into ``folder``."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    files = {}
    for target, reg in surrogate.regressors.items():
        files[target] = f"{target}.json"
        save_booster(reg.booster_, folder / files[target])
    files["stable"] = "stable.json"
    save_booster(surrogate.classifier.booster_, folder / files["stable"])
    manifest = {"format": FORMAT, "features": list(FEATURES), "grid_columns": list(GRID_COLUMNS),
                "files": files, "stable_classes": [bool(c) for c in surrogate.classifier.classes_],
                "domain": surrogate.domain, "card": surrogate.card}
    atomic_write_text(folder / "surrogate.json", json.dumps(manifest, indent=1) + "\n")


def load_surrogate(folder: str | Path | None = None) -> Surrogate:
    """The surrogate shipped with latsim (``latsim/data/surrogate/``) or the one in ``folder``.

    ValueError names the file, says what is wrong (missing, corrupted, another format version,
    other features) and how to rebuild.
    """
    from latsim.paths import DATA

    folder = Path(folder) if folder is not None else DATA / "surrogate"
    path = folder / "surrogate.json"
    try:
        manifest = json.loads(path.read_text())
    except FileNotFoundError:
        raise ValueError(f"surrogate model file {path} is missing; {REBUILD}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"surrogate model file {path} is corrupted ({exc}); {REBUILD}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        found = manifest.get("format") if isinstance(manifest, dict) else type(manifest).__name__
        raise ValueError(f"surrogate model file {path} has format {found!r}, this latsim reads {FORMAT!r}; {REBUILD}")
    if manifest.get("features") != list(FEATURES):
        raise ValueError(f"surrogate model file {path} was fitted on other features than this latsim computes; "
                         f"{REBUILD}")
    try:
        regressors = {t: _regressor(load_booster(folder / manifest["files"][t])) for t in TARGETS}
        classifier = _classifier(load_booster(folder / manifest["files"]["stable"]), manifest["stable_classes"])
    except ValueError as exc:
        raise ValueError(f"{exc}; {REBUILD}") from None
    except KeyError as exc:
        raise ValueError(f"surrogate model file {path} lists no file for {exc}; {REBUILD}") from None
    return Surrogate(regressors, classifier, manifest["domain"], manifest.get("card", {}))


def _regressor(booster: Any) -> MonotoneBoostedRegressor:
    reg = MonotoneBoostedRegressor(monotone=monotone_signs(1))
    reg.booster_ = booster
    reg.n_features_in_ = len(FEATURES)
    _check_width(booster)
    return reg


def _classifier(booster: Any, classes: list[bool]) -> BoostedStabilityClassifier:
    clf = BoostedStabilityClassifier(monotone=monotone_signs(-1))
    clf.booster_ = booster
    clf.classes_ = np.asarray(classes, dtype=bool)
    clf.n_features_in_ = len(FEATURES)
    _check_width(booster)
    return clf


def _check_width(booster: Any) -> None:
    if booster.num_features() != len(FEATURES):
        raise ValueError(f"a booster expects {booster.num_features()} features, this latsim computes {len(FEATURES)}")
