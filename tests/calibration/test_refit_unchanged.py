"""Re-fitting a profile writes a file only when its content changed (up to rounding)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from latsim.calibration.fit import fit_profile
from latsim.calibration.unchanged import REL_TOL, same_json, write_json_if_changed
from latsim.catalog import load_device


def stamps(folder: Path) -> dict[str, tuple[int, int]]:
    """(inode, mtime) of every fitted file: an atomic rewrite changes the inode."""
    return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in sorted(folder.glob("*.json"))
            if p.name != "profile.json"}


def test_refitting_the_same_tables_rewrites_nothing(profile_copy: Path) -> None:
    device = load_device("h200")
    fit_profile(profile_copy, device)
    before = stamps(profile_copy)
    assert "fit_report.json" in before and any(name.startswith("model_") for name in before)
    fit_profile(profile_copy, device)
    assert stamps(profile_copy) == before


def test_a_last_digit_difference_is_no_change_but_a_real_one_is(tmp_path: Path) -> None:
    path = tmp_path / "fit_report.json"
    doc = {"families": {"gemm": {"mape": 4.123456789, "n_test": 10, "held_out_shapes": ["a"]}}, "v": "3.0.1"}
    assert write_json_if_changed(path, doc)
    nudged = json.loads(json.dumps(doc))
    nudged["families"]["gemm"]["mape"] *= 1 + REL_TOL / 100
    assert not write_json_if_changed(path, nudged) and json.loads(path.read_text()) == doc
    moved = json.loads(json.dumps(doc))
    moved["families"]["gemm"]["mape"] *= 1.01
    assert write_json_if_changed(path, moved) and json.loads(path.read_text()) == moved


@pytest.mark.parametrize(("a", "b", "same"), [
    ({"x": "1.0000000001E0"}, {"x": "1E0"}, True),  # numbers written as strings, as XGBoost does
    ({"x": [1, 2]}, {"x": [1, 2, 3]}, False),
    ({"x": True}, {"x": 1}, False),
    ({"x": "abc"}, {"x": "abd"}, False),
    ({"x": 1}, {"y": 1}, False),
])
def test_same_json(a, b, same) -> None:
    assert same_json(a, b) is same
