"""The spread table and cv_full recovered from probe pairs (latsim.calibration.spread_fit and its script)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from latsim.calibration import spread_fit
from latsim.costmodel.spread import SPREAD_FILE, load_decode_spread
from tests.script_module import load_script

fit = load_script(Path("fit_decode_spread.py"))
SHAPES = {"a": [32, 8, 128], "b": [28, 4, 128]}
CV_FULL = 0.3


def true_excess(units: int, mean: float) -> float:
    """The synthetic GPU: no excess up to 32 units, 0.2 from 64 on, more at long contexts."""
    return 0.0 if units <= 32 else 0.2 + (0.1 if mean > 3000 else 0.0)


def lens(batch: int, mean: int, sigma: float, seed: int) -> list[int]:
    w = np.exp(sigma * np.random.default_rng([batch, mean, seed]).standard_normal(batch))
    return [max(1, round(mean * x)) for x in w / w.mean()]


def case(shape: str, batch: int, mean: int, sigma: float, seed: int, kind: str) -> dict:
    k = lens(batch, mean, sigma, seed)
    cv = float(np.std(k) / np.mean(k))
    ratio = 1.0 + true_excess(batch * SHAPES[shape][1], float(np.mean(k))) * min(1.0, cv / CV_FULL)
    return {"shape": shape, "batch": batch, "case": kind, "sigma": sigma, "lens": k, "mean": float(np.mean(k)),
            "cv": cv, "us": 100.0 * ratio, "equal_us": 100.0}


def probe_folder(tmp: Path, held_out: bool = True) -> Path:
    grid = [case(s, b, m, 0.8, d, "grid") for s in SHAPES for b in (2, 4, 8, 16, 32) for m in (1024, 4096)
            for d in (0, 1)]
    sweep = [case("a", b, m, sg, d, "sigma") for b in (16, 32) for m in (1024, 4096)
             for sg in (0.05, 0.1, 0.2, 0.4, 0.8) for d in (0, 1)]
    (tmp / "skew_grid.json").write_text(json.dumps({"shapes": SHAPES, "cases": grid + sweep}))
    if held_out:
        held = [{**case("a", b, 2048, 0.8, 7, "held"), "spread": "serving-0"} for b in (3, 6, 12, 24)]
        (tmp / "skew_probe.json").write_text(json.dumps({"shapes": SHAPES, "cases": held}))
    return tmp


def test_the_fit_recovers_the_table_and_the_spread_it_takes(tmp_path: Path) -> None:
    cases, shapes = spread_fit.load_pairs(probe_folder(tmp_path) / "skew_grid.json")
    spread, report = spread_fit.fit(cases, shapes)
    assert spread.cv_full == pytest.approx(CV_FULL, abs=0.051)
    table = spread.table_for(8)
    assert table.excess_at(16, 2048) == pytest.approx(0.0, abs=0.01)
    assert table.excess_at(128, 1024) == pytest.approx(0.2, abs=0.02)
    assert table.excess_at(256, 4096) == pytest.approx(0.3, abs=0.02)
    assert report["grid"]["median_abs_error"] < 0.01 < report["grid"]["median_abs_error_equal"]


def test_write_keeps_the_held_out_choice_and_its_provenance(tmp_path: Path) -> None:
    (tmp_path / "probe").mkdir()
    (tmp_path / "profile").mkdir()
    folder, profile = probe_folder(tmp_path / "probe"), tmp_path / "profile"
    assert fit.main([str(folder), "--profile", str(profile), "--write"]) == 0
    data = json.loads((profile / SPREAD_FILE).read_text())
    assert set(data["provenance"]["sources"]) == {str(folder / "skew_grid.json"), str(folder / "skew_probe.json")}
    assert "held_out_serving_pooled" in data["fit"] and "held_out_serving_per_kv_heads" in data["fit"]
    assert load_decode_spread(profile) is not None


def test_a_folder_without_the_grid_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert fit.main([str(tmp_path)]) == 2
    assert "skew_grid.json" in capsys.readouterr().err
