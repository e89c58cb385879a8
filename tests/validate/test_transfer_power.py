"""scripts/transfer_power.py: the H200's power-cap terms referred to another profile's prices."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from latsim.costmodel.power import load_power_cap
from latsim.costmodel.profile.store import SHIPPED_DIR

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "transfer_power.py"
PROBES = ROOT / "data" / "power" / "h200"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), str(PROBES), *args], capture_output=True, text=True,
                          cwd=ROOT, check=False)


@pytest.fixture(scope="module")
def onto_itself(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The H200's terms referred to a copy of the H200's own profile (no power.json in it)."""
    target = tmp_path_factory.mktemp("profiles") / "h200-copy"
    shutil.copytree(SHIPPED_DIR / "h200", target, ignore=shutil.ignore_patterns("power.json"))
    done = _run("--to", str(target), "--write")
    assert done.returncode == 0, done.stderr
    assert load_power_cap(target) is not None  # the cost model reads it
    return json.loads((target / "power.json").read_text())


def test_on_the_measured_profile_the_ratios_come_back_near_the_fitted_ones(onto_itself: dict) -> None:
    # the same measurements over the same GPU's regressors instead of its rows: a few percent apart
    measured = json.loads((SHIPPED_DIR / "h200" / "power.json").read_text())
    for cls in ("bf16", "fp8", "int4"):
        for key in ("full_clock_ratio", "capped_ratio"):
            assert onto_itself["gemms"][cls][key] == pytest.approx(measured["gemms"][cls][key], rel=0.06)
    assert onto_itself["capped_ratio"] == pytest.approx(measured["capped_ratio"], rel=0.06)
    # the capped ratio stays above the full-clock one in every class: the cap is slower
    for g in onto_itself["gemms"].values():
        assert g["capped_ratio"] > g["full_clock_ratio"]


def test_the_physical_terms_are_kept_and_the_transfer_is_recorded(onto_itself: dict) -> None:
    measured = json.loads((SHIPPED_DIR / "h200" / "power.json").read_text())
    for key in ("budget_s", "refill", "heavy_tokens"):
        assert onto_itself[key] == measured[key]
    for key in ("decode_onset_tflops", "decode_full_tflops", "decode_tau_s", "rate_weights"):
        assert onto_itself["decode_cap"][key] == measured["decode_cap"][key]
    assert onto_itself["decode_cap"]["light_ratios_measured"] == measured["decode_cap"]["light_ratios"]
    assert "assumes" in onto_itself["transferred"] and onto_itself["transferred"]["from_sha256"]


def test_bad_targets_exit_2_with_the_reason(tmp_path: Path) -> None:
    missing = _run("--to", str(tmp_path))
    assert missing.returncode == 2 and "profile.json not found" in missing.stderr
    itself = _run("--to", str(SHIPPED_DIR / "h200"))
    assert itself.returncode == 2 and "fitted by scripts/fit_power.py" in itself.stderr
