"""The shipped surrogate: found in the package, vectorised, monotone in load, and its bad-input errors."""

from __future__ import annotations

import json
import shutil
from importlib.resources import files
from typing import ClassVar

import numpy as np
import pandas as pd
import pytest

from latsim.predict import load_surrogate
from latsim.predict.features import GRID_COLUMNS
from latsim.predict.recipe import LATENCY_TARGETS, TARGETS

DEPLOYMENTS = [
    {"model": "llama-3.1-8b", "device": "h200", "tp": 1, "replicas": 1, "weight_dtype": "bf16"},
    {"model": "qwen3-30b-a3b", "device": "h100", "tp": 2, "replicas": 2, "weight_dtype": "fp8"},
    {"model": "llama-3.1-70b", "device": "a100", "tp": 4, "replicas": 1, "weight_dtype": "bf16"},
]
WORKLOAD = {"kv_dtype": "bf16", "max_num_seqs": np.nan, "max_num_batched_tokens": np.nan, "input_median": 600.0,
            "input_sigma": 0.8, "output_median": 150.0, "output_sigma": 0.6, "prefix_share": 0.0}


@pytest.fixture(scope="module")
def surrogate():
    return load_surrogate()


def _grid(rates: np.ndarray) -> pd.DataFrame:
    return pd.DataFrame([{**d, **WORKLOAD, "qps": float(q), "deployment": i}
                         for i, d in enumerate(DEPLOYMENTS) for q in rates])


def test_the_installed_package_ships_the_surrogate_as_json():
    folder = files("latsim") / "data" / "surrogate"
    manifest = json.loads((folder / "surrogate.json").read_text())
    total = 0
    for name in manifest["files"].values():
        text = (folder / name).read_text()
        assert json.loads(text)["learner"]  # xgboost's JSON model format, not pickle
        total += len(text.encode())
    # 400 trees of depth 6 per target take about 2 MiB of JSON each (about 0.5 MiB compressed, as git
    # and the wheel store them), TTFT P99's of depth 8 about 4.4 MiB; 100 of depth 4 took 0.2 MiB but
    # missed by 2 points more (models/recipe/README.md)
    assert total <= 26 * 2**20


def test_predict_is_vectorised_over_the_grid_columns(surrogate):
    grid = _grid(np.array([1.0, 5.0, 20.0]))
    pred = surrogate.predict(grid)
    assert list(pred.index) == list(grid.index)
    assert set(TARGETS) | {"stable", "stable_probability", "in_domain"} <= set(pred.columns)
    assert (pred[list(TARGETS)] > 0).all().all()
    assert (pred["ttft_ms_p99"] >= pred["ttft_ms_p50"] * 0.999).all()


def test_latency_is_non_decreasing_in_load(surrogate):
    rates = np.geomspace(0.2, 400.0, 60)
    pred = surrogate.predict(_grid(rates))
    for i in range(len(DEPLOYMENTS)):
        rows = pred.iloc[i * len(rates):(i + 1) * len(rates)]
        for target in LATENCY_TARGETS:
            assert np.all(np.diff(rows[target].to_numpy()) >= -1e-9 * rows[target].to_numpy()[1:]), (i, target)
        assert np.all(np.diff(rows["stable_probability"].to_numpy()) <= 1e-12)


def test_low_load_is_stable_and_far_past_capacity_is_not(surrogate):
    pred = surrogate.predict(_grid(np.array([0.2, 5000.0])))
    assert pred["stable"].iloc[0::2].all()
    assert not pred["stable"].iloc[1::2].any()
    assert not pred["in_domain"].iloc[1::2].any()  # and far past capacity is outside the trained loads
    assert pred["out_of_domain"].iloc[1].startswith("load=")


def test_a_missing_column_is_named(surrogate):
    grid = _grid(np.array([1.0])).drop(columns="prefix_share")
    with pytest.raises(ValueError, match="missing column 'prefix_share'"):
        surrogate.predict(grid)


def test_out_of_domain_values_are_named_per_column(surrogate):
    grid = _grid(np.array([1.0])).assign(input_median=50000.0, prefix_share=0.99)
    reasons = surrogate.predict(grid)["out_of_domain"].iloc[0]
    assert "input_median=5e+04 outside" in reasons and "prefix_share=0.99 outside" in reasons


@pytest.fixture
def copy(tmp_path):
    dst = tmp_path / "surrogate"
    shutil.copytree(str(files("latsim") / "data" / "surrogate"), dst)
    return dst


def test_a_corrupted_booster_is_named_with_how_to_rebuild(copy):
    (copy / "tpot_ms_p99.json").write_text('{"learner": ')
    with pytest.raises(ValueError, match=r"tpot_ms_p99\.json is corrupted.*rebuild with"):
        load_surrogate(copy)


def test_a_missing_booster_is_named(copy):
    (copy / "stable.json").unlink()
    with pytest.raises(ValueError, match=r"stable\.json is missing"):
        load_surrogate(copy)


def test_another_format_version_is_refused(copy):
    manifest = json.loads((copy / "surrogate.json").read_text())
    manifest["format"] = "latsim-surrogate/0"
    (copy / "surrogate.json").write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match="has format 'latsim-surrogate/0', this latsim reads 'latsim-surrogate/5'"):
        load_surrogate(copy)


def test_a_manifest_that_is_not_json_is_named(copy):
    (copy / "surrogate.json").write_text("not json")
    with pytest.raises(ValueError, match=r"surrogate\.json is corrupted"):
        load_surrogate(copy)


def test_grid_columns_are_what_the_card_says(surrogate, copy):
    manifest = json.loads((copy / "surrogate.json").read_text())
    assert tuple(manifest["grid_columns"]) == GRID_COLUMNS
    assert manifest["card"]["sample_size"] > 0 and manifest["card"]["simulator_commit"]


def test_package_data_globs_ship_every_surrogate_file():
    import fnmatch
    from pathlib import Path

    import tomllib

    root = Path(__file__).resolve().parents[2]
    globs = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["latsim"]
    shipped = sorted((root / "latsim" / "data" / "surrogate").iterdir())
    assert len(shipped) >= 13
    for path in shipped:
        rel = path.relative_to(root / "latsim").as_posix()
        assert any(fnmatch.fnmatch(rel, g) for g in globs), rel


def test_the_overload_wait_is_a_fluid_queue_past_the_saturated_capacity():
    from latsim.predict.surrogate import baseline_ms, overload_wait_ms

    rho = np.array([0.5, 1.0, 1.25, 2.0, 4.0])
    feats = pd.DataFrame({"load_saturated": rho, "log_saturated_rps": np.log(10.0),
                          "log_step_at_load_ms": np.log(20.0), "log_first_token_ms": np.log(50.0),
                          "log_first_token_p50_ms": np.log(40.0), "log_first_token_at_load_p50_ms": np.log(40.0),
                          "out_p50": 100.0})
    wait = overload_wait_ms(feats, 0.5, 1600)
    # request 800 arrives at 800 / qps and starts at 800 / 10 req/s: at 12.5 req/s it waits 16 s
    np.testing.assert_allclose(wait, [0.0, 0.0, 16_000.0, 40_000.0, 60_000.0])
    for target in ("ttft_ms_p50", "e2e_ms_p50"):
        without = baseline_ms(feats, target)
        np.testing.assert_allclose(baseline_ms(feats, target, 1600) - without, wait)
        assert np.all(np.diff(baseline_ms(feats, target, 1600)) >= 0)  # non-decreasing in the rate
    np.testing.assert_allclose(baseline_ms(feats, "tpot_ms_p50", 1600), baseline_ms(feats, "tpot_ms_p50"))


def test_the_ttft_baseline_prices_the_prompt_beside_the_batch_at_the_load():
    from latsim.predict.surrogate import baseline_ms

    feats = pd.DataFrame({"log_step_at_load_ms": np.log(20.0), "log_first_token_p50_ms": np.log(40.0),
                          "log_first_token_at_load_p50_ms": np.log([40.0, 55.0]), "load_saturated": 0.5,
                          "log_saturated_rps": np.log(10.0)})
    np.testing.assert_allclose(baseline_ms(feats, "ttft_ms_p50", 1600), [60.0, 75.0])
    # E2E's mean prompt (an idle 50 ms) is scaled as the median prompt is: 50 x 55 / 40
    feats = feats.assign(log_first_token_ms=np.log(50.0), out_p50=10.0)
    np.testing.assert_allclose(baseline_ms(feats, "e2e_ms_p50", 1600), [50.0 + 200.0, 50.0 * 55.0 / 40.0 + 200.0])


def test_a_surrogate_fitted_without_a_run_length_keeps_its_baseline(copy):
    manifest = json.loads((copy / "surrogate.json").read_text())
    manifest.pop("run_requests", None)
    (copy / "surrogate.json").write_text(json.dumps(manifest))
    assert load_surrogate(copy).run_requests == 0


def test_training_rows_of_two_run_lengths_are_refused():
    from latsim.predict.surrogate import run_length

    assert run_length(pd.DataFrame({"num_requests": [1600, 1600]})) == 1600
    with pytest.raises(ValueError, match="2 run lengths"):
        run_length(pd.DataFrame({"num_requests": [400, 1600]}))


def test_the_two_sided_monotone_envelope_is_non_decreasing_and_less_biased_on_a_flat_noisy_curve():
    from latsim.predict.surrogate import non_decreasing

    rng = np.random.default_rng(0)
    flat = 10.0 + rng.normal(0, 0.5, size=(200, 27))  # a flat curve plus the trees' wiggle
    for two_sided in (False, True):
        assert np.all(np.diff(non_decreasing(flat, two_sided), axis=1) >= 0)
    bias_max = np.median(non_decreasing(flat) - 10.0)
    bias_two = np.median(non_decreasing(flat, two_sided=True) - 10.0)
    assert bias_max > 0.5 and abs(bias_two) < bias_max / 2
    rising = np.cumsum(np.abs(flat), axis=1)  # already non-decreasing: both leave it as it is
    np.testing.assert_array_equal(non_decreasing(rising, two_sided=True), rising)


class _Fitted:
    """Records the settings a regressor or classifier was built with; fits nothing."""

    made: ClassVar[list[dict]] = []

    def __init__(self, **settings) -> None:
        _Fitted.made.append(settings)

    def fit(self, X, y):
        return self


def test_target_trees_change_only_the_target_they_name(monkeypatch):
    from latsim.predict import surrogate as S
    from latsim.predict.features import FEATURES
    from latsim.predict.recipe import TARGETS

    _Fitted.made = []
    monkeypatch.setattr(S, "MonotoneBoostedRegressor", _Fitted)
    monkeypatch.setattr(S, "BoostedStabilityClassifier", _Fitted)
    monkeypatch.setattr(S, "baseline_ms", lambda feats, target, run_requests=0: np.ones(len(feats)))
    monkeypatch.setattr(S, "training_domain", lambda frame, feats: {})
    frame = pd.DataFrame({**{t: [1.0, 2.0] for t in TARGETS}, "stable": [True, False], "num_requests": 10})
    feats = pd.DataFrame({f: [0.0, 1.0] for f in FEATURES})
    S.fit_surrogate(frame, feats, max_depth=6, target_trees={"ttft_ms_p99": {"max_depth": 8}})
    depths = dict(zip(TARGETS, (m["max_depth"] for m in _Fitted.made), strict=False))
    assert depths.pop("ttft_ms_p99") == 8 and set(depths.values()) == {6}
    with pytest.raises(ValueError, match="target_trees names ttft_ms_p42: the targets are ttft_ms_p50"):
        S.fit_surrogate(frame, feats, target_trees={"ttft_ms_p42": {"max_depth": 8}})
    with pytest.raises(ValueError, match=r"target_trees names depth: .* and the settings n_estimators, max_depth"):
        S.fit_surrogate(frame, feats, target_trees={"ttft_ms_p99": {"depth": 8}})


def test_the_shipped_fit_names_known_targets_and_settings():
    from latsim.predict.recipe import TARGETS
    from latsim.predict.surrogate import TARGET_TREES, TREES
    from latsim.predict.train import FIT

    assert set(TARGET_TREES) <= set(TARGETS) and all(set(s) <= set(TREES) for s in TARGET_TREES.values())
    assert FIT["target_trees"] is TARGET_TREES and FIT["max_depth"] == TREES["max_depth"]
