"""scripts/launch_by_model.py and the measured launch ratios the host terms apply per model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from latsim.engines.vllm import host_terms
from latsim.engines.vllm.host_terms import LAUNCH_BY_MODEL, default_host_overhead, launch_ratio
from tests.script_module import load_script

lbm = load_script(Path("launch_by_model.py"))
ROOT = Path(__file__).resolve().parents[2]


def _model(ratio: float, starts: dict[str, float], share: float = 0.2) -> dict:
    return {"ratio": ratio, "starts": starts, "launch_bound_share": share, "held_launches": 100, "runs": []}


def test_a_ratio_ships_only_past_the_fitted_models_own_spread_on_launch_bound_starts() -> None:
    models = {lbm.FIT_MODEL: _model(1.0, {"a": 0.9, "b": 1.1}),
              "slow": _model(1.3, {"a": 1.2, "b": 1.3, "c": 1.4}),
              "inside": _model(1.05, {"a": 1.0, "b": 1.1}),            # within 0.9-1.1: not told apart
              "one-start": _model(1.5, {"a": 1.5}),
              "gpu-paced": _model(0.7, {"a": 0.7, "b": 0.7}, share=0.01)}
    kept = lbm.shipped(models)
    assert set(kept) == {"slow"}
    assert kept["slow"]["leave_one_start_out"] == pytest.approx({"a": 1.35, "b": 1.3, "c": 1.25})


def test_the_shipped_ratios_are_what_the_script_measures_on_their_runs() -> None:
    doc = json.loads(LAUNCH_BY_MODEL.read_text())
    runs = [ROOT / r for r in doc["provenance"]["inputs"]["runs"]]
    host = doc["provenance"]["inputs"]["host"]
    models = lbm.measure(runs, host["step_s"], host["seq_s"])
    kept = lbm.shipped(models)
    assert {k: round(m["ratio"], lbm.DIGITS) for k, m in kept.items()} == doc["ratios"]
    assert doc["ratios"], "no model's launch stands out: the file would be empty"


def test_a_measured_ratio_scales_that_models_launch_and_no_other() -> None:
    plain = default_host_overhead("calibrated")
    (name, ratio), *_ = json.loads(LAUNCH_BY_MODEL.read_text())["ratios"].items()
    own = default_host_overhead("calibrated", name)
    assert own.launch_layer_s == pytest.approx(plain.launch_layer_s * ratio)
    assert name in own.source and LAUNCH_BY_MODEL.name in own.source
    assert own.step_s == plain.step_s and own.launch_moe_layer_s == plain.launch_moe_layer_s
    assert default_host_overhead("calibrated", "llama-3.1-8b") == plain
    assert launch_ratio("a-model-never-measured") == 1.0


def test_a_bad_ratio_in_the_file_is_refused_by_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bad = tmp_path / "launch_by_model.json"
    bad.write_text(json.dumps({"ratios": {"qwen2.5-7b": -1}}))
    monkeypatch.setattr(host_terms, "LAUNCH_BY_MODEL", bad)
    host_terms._launch_ratios.cache_clear()
    try:
        with pytest.raises(ValueError, match=r"qwen2\.5-7b"):
            launch_ratio("qwen2.5-7b")
    finally:
        monkeypatch.undo()
        host_terms._launch_ratios.cache_clear()


def test_the_script_refuses_a_missing_folder(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        lbm.main(["no/such/folder"])
    assert exc.value.code == 2 and "no/such/folder" in capsys.readouterr().err
