"""``latsim validate --profile``: replaying a run with another fitted profile pricing the GPU."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from latsim.cli import main
from latsim.costmodel.profile.store import SHIPPED_DIR
from latsim.validate.compare import compare_run

RUN = Path(__file__).resolve().parents[2] / "data" / "validation" / "h200" / "llama-2-7b-mix" / "f0.25"


def test_imported_profile_prices_the_replay_and_is_named() -> None:
    native = compare_run(RUN, "h200")
    imported = compare_run(RUN, "h200", profile=SHIPPED_DIR / "h200-aic")
    assert native.predicted["cost_model"] == "calibrated"
    assert imported.predicted["cost_model"].startswith("calibrated (imported")
    assert imported.predicted["tpot_ms"]["p50"] != native.predicted["tpot_ms"]["p50"]


def test_profile_of_another_gpu_is_refused_with_exit_2(monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "argv", ["latsim", "validate", str(RUN), "--profile", str(SHIPPED_DIR / "b200")])
    with pytest.raises(SystemExit) as exc:
        main()
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "NVIDIA B200" in err and err.count("\n") == 1


def test_a_broken_power_cap_file_is_named_with_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    import shutil

    profile = tmp_path / "h200"
    shutil.copytree(SHIPPED_DIR / "h200", profile)
    (profile / "power.json").write_text('{"full_clock_ratio": 0.9}')
    monkeypatch.setattr(sys, "argv", ["latsim", "validate", str(RUN), "--profile", str(profile)])
    with pytest.raises(SystemExit) as exc:
        main()
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "power.json" in err and "fit_power" in err and err.count("\n") == 1


def test_the_power_cap_file_is_what_moves_the_replay() -> None:
    """The shipped H200 carries ``power.json``; the same profile without it replays the run with
    the same kind of cost model and other step ends (this run has prefill steps of 2,048+ tokens)."""
    import shutil
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        bare = Path(tmp) / "h200"
        shutil.copytree(SHIPPED_DIR / "h200", bare)
        (bare / "power.json").unlink()
        without = compare_run(RUN, "h200", profile=bare)
    with_cap = compare_run(RUN, "h200")
    assert without.predicted["cost_model"] == with_cap.predicted["cost_model"] == "calibrated"
    assert without.predicted["ttft_ms"]["p99"] != with_cap.predicted["ttft_ms"]["p99"]
