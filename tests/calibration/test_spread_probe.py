"""The spread probe in `latsim calibrate`: its cases, its file, and the fit that reads it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from rich.console import Console

from latsim.calibration import spread_probe
from latsim.calibration.fit import fit_profile
from latsim.calibration.spread_probe import SKEW_GRID_FILE, plan, run_spread_probe
from latsim.catalog import load_device, load_model
from latsim.costmodel.batch import BatchShape
from latsim.costmodel.calibrated import load_calibrated
from latsim.costmodel.spread import SPREAD_FILE, load_decode_spread

RECORDED = Path("data/kernels/h200-skew-probe/skew_grid.json")


def synthetic_gpu(heads: tuple[int, int, int], k_lens: list[int]) -> dict[str, float]:
    """A GPU whose decode call costs its total context, 25 % more when 64+ units decode a spread
    batch (the full excess at a coefficient of variation of 0.4 and above)."""
    units = len(k_lens) * heads[1]
    cv = float(np.std(k_lens) / np.mean(k_lens))
    us = 1e-3 * sum(k_lens) * (1.0 + (0.25 if units >= 64 else 0.0) * min(1.0, cv / 0.4))
    return {"us": us, "p10_us": us, "p90_us": us, "reps": 40}


def test_the_plan_is_the_h200_probe_that_was_recorded() -> None:
    recorded = json.loads(RECORDED.read_text())["cases"]
    cases = plan()
    assert len(cases) == len(recorded) == 296
    for (shape, k_lens, labels), rec in zip(cases, recorded, strict=True):
        assert (shape, k_lens, labels["case"], labels["sigma"], labels["draw"]) == (
            rec["shape"], rec["lens"], rec["case"], rec["sigma"], rec["draw"])
    assert all(sum(k) <= spread_probe.MAX_TOKENS * 1.001 for _, k, _ in cases)  # the cap, to rounding


def test_the_probe_file_pairs_each_spread_call_with_its_equal_one(tmp_path: Path) -> None:
    seen: list[dict[str, Any]] = []
    data = run_spread_probe(tmp_path / SKEW_GRID_FILE, synthetic_gpu, "test GPU", on_case=seen.append)
    assert json.loads((tmp_path / SKEW_GRID_FILE).read_text()) == json.loads(json.dumps(data))
    assert len(seen) == len(data["cases"]) == len(plan())
    for case in data["cases"]:
        equal = [round(sum(case["lens"]) / case["batch"])] * case["batch"]
        assert case["equal_us"] == pytest.approx(synthetic_gpu(tuple(data["shapes"][case["shape"]]), equal)["us"])
        assert case["us"] >= case["equal_us"] * 0.999


def test_the_fit_turns_the_probe_into_the_table_the_cost_model_reads(profile_copy: Path) -> None:
    run_spread_probe(profile_copy / SKEW_GRID_FILE, synthetic_gpu, "NVIDIA H200")
    report = fit_profile(profile_copy, load_device("h200"))
    assert report["decode_spread"]["cv_full"] == pytest.approx(0.4, abs=0.101)
    spread = load_decode_spread(profile_copy)
    assert spread is not None
    table = spread.table_for(8)
    assert table.excess_at(16, 2048) == pytest.approx(0.0, abs=0.01)  # 16 units: none
    assert table.excess_at(512, 2048) == pytest.approx(0.25, abs=0.03)
    written = json.loads((profile_copy / SPREAD_FILE).read_text())
    assert set(written["provenance"]["sources"]) == {SKEW_GRID_FILE}
    before = (profile_copy / SPREAD_FILE).stat().st_mtime_ns
    fit_profile(profile_copy, load_device("h200"))  # the same probe: the file is left alone
    assert (profile_copy / SPREAD_FILE).stat().st_mtime_ns == before
    cm = load_calibrated(load_model("llama-3.1-8b"), load_device("h200"), profile=profile_copy)
    equal = BatchShape.from_chunks([], [4000] * 32)
    spread_batch = BatchShape.from_chunks([], [1000] * 16 + [7000] * 16)
    assert cm.step_time(spread_batch) > cm.step_time(equal)


def test_a_profile_without_the_probe_gets_no_table(profile_copy: Path) -> None:
    report = fit_profile(profile_copy, load_device("h200"))
    assert "decode_spread" not in report and not (profile_copy / SPREAD_FILE).exists()


def test_a_damaged_probe_file_is_named(profile_copy: Path) -> None:
    (profile_copy / SKEW_GRID_FILE).write_text('{"cases": []')
    with pytest.raises(ValueError, match=r"skew_grid\.json: not a spread-probe file"):
        fit_profile(profile_copy, load_device("h200"))


class _Cuda:
    @staticmethod
    def get_device_name(index: int) -> str:
        return "NVIDIA H200"


class _Ctx:
    torch = type("torch", (), {"cuda": _Cuda})


def test_calibrate_runs_the_probe_after_the_paged_grid_and_keeps_it_on_resume(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import latsim.calibration.context as context
    from latsim.calibration import cli as calib_cli

    calls: list[int] = []

    def timer(ctx: object) -> spread_probe.TimeCall:
        calls.append(1)
        return synthetic_gpu

    monkeypatch.setattr(context, "make_context", lambda backend: _Ctx())
    monkeypatch.setattr(spread_probe, "device_time_call", timer)
    calib_cli._measure_spread(tmp_path, True, Console(quiet=True))
    assert calls == [1] and json.loads((tmp_path / SKEW_GRID_FILE).read_text())["gpu"] == "NVIDIA H200"
    calib_cli._measure_spread(tmp_path, True, Console(quiet=True))  # resumed: kept
    assert calls == [1]
    calib_cli._measure_spread(tmp_path, False, Console(quiet=True))  # --no-resume: timed again
    assert calls == [1, 1]
