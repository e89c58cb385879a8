"""The fitted surrogate: physical features in, P50/P90/P99 latencies, throughput and stability out.

Each target is learned as ``log(metric / baseline)``, where the baseline is the same
configuration's physics at its rate (:func:`baseline_ms`): the time per decode token at the
batch Little's law implies at that load for TPOT, the first token of the prompt at the
target's quantile of the input lengths, its chunks priced beside that batch, plus one such step
for TTFT, the mean prompt's first
token plus the output lengths' quantile times that step for E2E, the offered rate up to the
saturated capacity for throughput; past the saturated capacity TTFT and E2E also carry the wait
of a run of the training length whose queue grows (:func:`overload_wait_ms`).  The trees only
learn the correction, which carries over to a model or GPU never seen.  The correction is
fitted without constraints (absolute loss: a median fit); monotonicity in load is built into
:meth:`Surrogate.predict`: each target is evaluated on a fixed grid of loads
(:data:`LOAD_GRID`, times the deployment's saturated capacity), made non-decreasing along it
(running maximum; TPOT: :func:`non_decreasing`'s two-sided mean) and interpolated linearly
at the configuration's own load, so every latency and the throughput are non-decreasing in
the rate, and P50 <= P90 <= P99.  The probability of a stable run is made non-increasing the
same way (running minimum).

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
from latsim.predict.features import (
    FEATURES,
    GRID_COLUMNS,
    LOAD_FEATURES,
    features_at,
    mean_value_load,
    static_features,
)
from latsim.predict.recipe import TARGETS

FORMAT = "latsim-surrogate/5"
REBUILD = "rebuild with `python -m latsim.predict.train` (models/recipe/README.md)"
NUMERIC_DOMAIN = ("tp", "replicas", "input_median", "input_sigma", "output_median", "output_sigma", "prefix_share",
                  "max_num_seqs", "max_num_batched_tokens")
FEATURE_DOMAIN = ("load", "log_params_active", "log_bw_per_gpu", "log_flops_per_gpu", "log_kv_bytes_token")
"""Grid columns and features whose training range bounds the domain (a GPU or model never seen
is in the domain when its physics lies inside the trained range)."""
LOAD_GRID = np.round(np.concatenate([np.arange(0.0, 0.8, 0.1), np.arange(0.8, 1.5, 0.05), [1.6, 1.8, 2.0, 2.5, 3.0]]),
                     3)
"""Loads (offered rate over the saturated capacity, ``load_saturated``) at which :meth:`Surrogate.predict` evaluates
every target before taking the running maximum; flat past the last one."""
TREES: dict[str, Any] = {"n_estimators": 400, "max_depth": 6, "learning_rate": 0.05, "min_child_weight": 20,
                         "objective": "absolute_error"}
"""Boosting rounds, depth, learning rate, least rows per leaf and loss of every regressor (the
shipped fit's, in :mod:`latsim.predict.train`).  Size chosen by cross-validation inside training
folds (three inner folds in each of two outer folds of the configuration split,
models/recipe/README.md): every candidate larger than 100 trees of depth 4 scored 6-11 % better
than it; this one is the cheapest within 2 % of the best (600 trees of depth 8).  The absolute
loss (on the log-ratio, so a median fit) because the card scores the median error and the
targets near saturation are heavy-tailed: on the card's 5 folds it took TTFT P50 from 8.2 to
7.2 %, E2E P50 from 6.1 to 5.6 % over the squared loss (models/recipe/README.md).  At least 20
rows per leaf rather than 5: every target 0.0-0.4 points better on the card's folds (each within
the folds' spread, in two training sets) and a sixth smaller; 40 rows, depth 7, row and column
subsampling did not help."""


TARGET_TREES: dict[str, dict[str, Any]] = {"ttft_ms_p99": {"max_depth": 8}}
"""Where a target's trees differ from :data:`TREES` (the shipped fit's, :mod:`latsim.predict.train`).
TTFT P99 at depth 8: on the card's 5 folds of 20,497 rows (with the seed-3 rows training only) its
median error went 10.14 -> 9.74 %, better in every fold (-0.21 to -0.60 points); 600 trees of depth
7 scored the same (9.75 %), 800 trees of depth 6 none better (models/recipe/README.md, seventh pass).
Its booster is about twice the size (4.4 against 2.0 MiB)."""


STABILITY_TREES: dict[str, Any] = {"n_estimators": 200, "max_depth": 4, "learning_rate": 0.1}
"""Boosting rounds, depth and learning rate of the stability classifier (5-fold cross-validation
on the training rows: 60 trees of depth 3 were right 0.4 points less often away from the boundary)."""


def monotone_signs(sign: int) -> tuple[int, ...]:
    """``sign`` on every load feature, 0 elsewhere, in :data:`FEATURES` order."""
    return tuple(sign if f in LOAD_FEATURES else 0 for f in FEATURES)


def overload_wait_ms(feats: pd.DataFrame, quantile: float, run_requests: int) -> np.ndarray:
    """The queueing wait of the ``quantile`` request of a run of ``run_requests`` arrivals at a
    rate ``qps`` past the saturated capacity ``mu`` (``exp(log_saturated_rps)``), in ms: a fluid
    queue, the ``k``-th request arrives at ``k / qps`` and starts at ``k / mu``, so the one at
    quantile ``q`` of the run waits ``q x run_requests x (1 / mu - 1 / qps)``; 0 at or below the
    capacity.  Non-decreasing in the rate.  A run past saturation never reaches a steady state,
    its latencies grow with its length (the surrogate predicts those of a run of the training
    length, :attr:`Surrogate.run_requests`)."""
    rho = feats["load_saturated"].to_numpy()
    capacity = np.exp(feats["log_saturated_rps"].to_numpy())
    with np.errstate(divide="ignore"):
        excess = np.maximum(0.0, 1.0 - 1.0 / rho)
    return quantile * run_requests / capacity * excess * 1e3


_QUANTILE_OF = {"p50": 0.5, "p90": 0.9, "p99": 0.99}


def baseline_ms(feats: pd.DataFrame, target: str, run_requests: int = 0) -> np.ndarray:
    """The physical figure each target is learned relative to, at the row's rate.  With ``q`` the
    target's quantile (P50, P90, P99) and ``step`` the time per decode token at the batch the
    load implies (``log_step_at_load_ms``): TPOT ``step``; TTFT the first token of the prompt at
    the input lengths' ``q`` quantile with its chunks beside that batch
    (``log_first_token_at_load_<q>_ms``: front end, its uncached tokens beside the running
    decodes, at least the launch; :func:`latsim.predict.features.first_token_at_load`) plus one
    ``step``; E2E the first token of the mean prompt (on an idle deployment, times the median
    prompt's first token beside that batch over its idle one) plus the ``q`` quantile of the
    output lengths (``out_<q>``) times ``step``; TTFT and E2E plus, past the saturated capacity,
    the ``q`` request's wait in a run of ``run_requests`` (:func:`overload_wait_ms`; none when 0,
    the baseline of surrogates fitted before it); throughput the offered rate up to the saturated
    capacity.  Every one is non-decreasing in the rate."""
    step = np.exp(feats["log_step_at_load_ms"].to_numpy())
    metric, _, q = target.rpartition("_")
    queued = run_requests and metric in ("ttft_ms", "e2e_ms")
    wait = overload_wait_ms(feats, _QUANTILE_OF[q], run_requests) if queued else 0.0
    if metric == "ttft_ms":
        return np.exp(feats[f"log_first_token_at_load_{q}_ms"].to_numpy()) + step + wait
    if metric == "tpot_ms":
        return step
    if metric == "e2e_ms":
        loaded = np.exp(feats["log_first_token_at_load_p50_ms"].to_numpy() - feats["log_first_token_p50_ms"].to_numpy())
        first = np.exp(feats["log_first_token_ms"].to_numpy()) * loaded
        return first + np.maximum(feats[f"out_{q}"].to_numpy(), 1.0) * step + wait
    return np.minimum(feats["load_saturated"].to_numpy(), 1.0) * np.exp(feats["log_saturated_rps"].to_numpy())


@dataclass
class Surrogate:
    """Fitted regressors per target plus the stability classifier; :meth:`predict` is vectorised."""

    regressors: dict[str, MonotoneBoostedRegressor]
    classifier: BoostedStabilityClassifier
    domain: dict[str, Any]
    card: dict[str, Any] = field(default_factory=dict)
    run_requests: int = 0
    """Requests per simulated run of the training rows: the run length of :func:`overload_wait_ms`
    in the baseline (0: no overload term, as fitted before it existed)."""

    def predict(self, frame: pd.DataFrame) -> pd.DataFrame:
        """One row per configuration of ``frame`` (the grid's columns): every target, ``stable``,
        ``stable_probability`` and ``in_domain`` (with ``out_of_domain``: the columns outside)."""
        static = static_features(frame)
        qps = frame["qps"].to_numpy(dtype=float)
        out = self.predict_static(static, qps)
        reasons = outside_domain(frame, domain_features(static, qps), self.domain)
        out["in_domain"] = [not r for r in reasons]
        out["out_of_domain"] = ["; ".join(r) for r in reasons]
        return out

    def predict_static(self, static: pd.DataFrame, qps: np.ndarray) -> pd.DataFrame:
        """Every target, ``stable_probability`` and ``stable`` of the rows of ``static``
        (:func:`latsim.predict.features.static_features`) at rates ``qps``."""
        qps = np.asarray(qps, dtype=float)
        out = pd.DataFrame(index=static.index)
        if len(static) == 0:
            return out.assign(**{t: [] for t in TARGETS}, stable_probability=[], stable=[])
        codes, first = _distinct(static)
        distinct = static.iloc[first]
        capacity = distinct["capacity_rps"].to_numpy()
        loads = np.tile(LOAD_GRID, len(distinct))
        grid = features_at(distinct.iloc[np.repeat(np.arange(len(distinct)), len(LOAD_GRID))],
                           loads * np.repeat(capacity, len(LOAD_GRID)))
        X = grid[list(FEATURES)].to_numpy(dtype=np.float64)
        load = qps / capacity[codes]
        for target, reg in self.regressors.items():
            raw = (baseline_ms(grid, target, self.run_requests) * np.exp(reg.predict(X))).reshape(len(distinct),
                                                                                                 len(LOAD_GRID))
            out[target] = _interp_rows(non_decreasing(raw, two_sided=target.startswith("tpot_ms"))[codes], load)
        for metric in ("ttft_ms", "tpot_ms", "e2e_ms"):
            out[f"{metric}_p90"] = np.maximum(out[f"{metric}_p90"], out[f"{metric}_p50"])
            out[f"{metric}_p99"] = np.maximum(out[f"{metric}_p99"], out[f"{metric}_p90"])
        out["stable_probability"] = self._stable_probability(X, len(distinct), codes, load)
        out["stable"] = out["stable_probability"] >= 0.5
        return out

    def _stable_probability(self, X: np.ndarray, distinct: int, codes: np.ndarray, load: np.ndarray) -> np.ndarray:
        """The classifier's probability of a stable run on the load grid's rows ``X``, made
        non-increasing along each deployment's grid (running minimum) and interpolated at ``load``."""
        classes = list(self.classifier.classes_)
        if True not in classes:
            return np.zeros(len(load))
        proba = self.classifier.predict_proba(X)[:, classes.index(True)].reshape(distinct, len(LOAD_GRID))
        return _interp_rows(np.minimum.accumulate(proba, axis=1)[codes], load)


def non_decreasing(values: np.ndarray, two_sided: bool = False) -> np.ndarray:
    """Each row of ``values`` made non-decreasing: its running maximum, or (``two_sided``) the mean
    of its running maximum and its running minimum from the right, both non-decreasing, so their
    mean is too.  The running maximum alone is biased up where a row is flat and noisy (the
    trees' wiggle at light load is kept at its highest): the time per output token is flat over
    most loads, and the two-sided mean took its held-out P99 error from 9.4 to 8.5 % (TPOT P90
    6.4 to 6.0 %); TTFT rises steeply near saturation, where the minimum from the right pulls the
    rise early and it cost TTFT P50 0.3 points, so TTFT, E2E and throughput keep the running
    maximum (models/recipe/README.md)."""
    rising = np.maximum.accumulate(values, axis=1)
    if not two_sided:
        return rising
    return 0.5 * (rising + np.minimum.accumulate(values[:, ::-1], axis=1)[:, ::-1])


def _distinct(static: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """``(code of every row, first row of every code)``: rows of equal static features share a code."""
    hashes = pd.util.hash_pandas_object(static, index=False).to_numpy()
    codes, uniques = pd.factorize(hashes)
    first = np.zeros(len(uniques), dtype=np.int64)
    first[codes[::-1]] = np.arange(len(codes))[::-1]
    return codes, first


def _interp_rows(values: np.ndarray, load: np.ndarray) -> np.ndarray:
    """Row ``i`` of ``values`` (one column per :data:`LOAD_GRID` load) interpolated linearly at
    ``load[i]``; flat outside the grid.  Monotone in ``load`` when every row is, the same way."""
    x = np.clip(load, LOAD_GRID[0], LOAD_GRID[-1])
    hi = np.clip(np.searchsorted(LOAD_GRID, x), 1, len(LOAD_GRID) - 1)
    lo = hi - 1
    w = (x - LOAD_GRID[lo]) / (LOAD_GRID[hi] - LOAD_GRID[lo])
    rows = np.arange(len(x))
    return values[rows, lo] * (1.0 - w) + values[rows, hi] * w


def fit_surrogate(frame: pd.DataFrame, feats: pd.DataFrame, *, n_estimators: int = 100, max_depth: int = 4,
                  learning_rate: float = 0.1, min_child_weight: float = 1.0, objective: str = "squared_error",
                  target_trees: dict[str, dict[str, Any]] | None = None) -> Surrogate:
    """Fit every target on simulated rows (the recipe's output: grid columns, targets, ``stable``,
    ``num_requests``) whose :func:`latsim.predict.features.features` are ``feats``.  The rows'
    run length (one value; ValueError for a mix) sets the baseline's overload wait.
    ``target_trees``: per target, tree settings that replace the ones given (as :data:`TARGET_TREES`);
    ValueError for a target or a setting it does not know."""
    run_requests = run_length(frame)
    X = feats[list(FEATURES)].to_numpy(dtype=np.float64)
    base = {"n_estimators": n_estimators, "max_depth": max_depth, "learning_rate": learning_rate,
            "min_child_weight": min_child_weight, "objective": objective}
    overrides = target_trees or {}
    unknown = sorted(set(overrides) - set(TARGETS)) + sorted(k for o in overrides.values() for k in o if k not in base)
    if unknown:
        raise ValueError(f"target_trees names {', '.join(map(str, unknown))}: the targets are {', '.join(TARGETS)} "
                         f"and the settings {', '.join(base)}")
    regressors = {}
    for target in TARGETS:
        y = frame[target].to_numpy(dtype=float)
        keep = np.isfinite(y) & (y > 0)
        label = np.log(y[keep] / baseline_ms(feats, target, run_requests)[keep])
        reg = MonotoneBoostedRegressor(**{**base, **overrides.get(target, {})})
        regressors[target] = reg.fit(X[keep], label)
    clf = BoostedStabilityClassifier(monotone=monotone_signs(-1), **STABILITY_TREES)
    clf.fit(X, frame["stable"].to_numpy(dtype=bool))
    return Surrogate(regressors, clf, training_domain(frame, feats), run_requests=run_requests)


def run_length(frame: pd.DataFrame) -> int:
    """The requests per simulated run of the rows of ``frame`` (its ``num_requests``); ValueError
    when they differ (latencies past saturation grow with the run's length: one model, one length)."""
    lengths = pd.unique(frame["num_requests"])
    if len(lengths) != 1:
        raise ValueError(f"training rows of {len(lengths)} run lengths ({', '.join(map(str, sorted(lengths)))} "
                         "requests): simulate every folder with the same --num-requests")
    return int(lengths[0])


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


def domain_features(static: pd.DataFrame, qps: np.ndarray) -> pd.DataFrame:
    """The :data:`FEATURE_DOMAIN` features of the rows of ``static`` at rates ``qps``: the static
    ones and ``load``, without the rest of :func:`latsim.predict.features.features_at` (its
    prompt-queue replay is most of a prediction's time)."""
    out = static[[f for f in FEATURE_DOMAIN if f != "load"]].copy()
    out["load"] = mean_value_load(static, qps)
    return out


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
                "run_requests": surrogate.run_requests, "domain": surrogate.domain, "card": surrogate.card}
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
    # a manifest written before the overload wait has no run_requests: its baseline had none
    return Surrogate(regressors, classifier, manifest["domain"], manifest.get("card", {}),
                     run_requests=int(manifest.get("run_requests", 0)))


def _regressor(booster: Any) -> MonotoneBoostedRegressor:
    reg = MonotoneBoostedRegressor()
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
