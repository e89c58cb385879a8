"""scripts/gemm_heldout.py: a calibration run's GEMM rows priced by a profile's regressor, against
the measurement less the timer floor the fit took off its own rows."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from latsim import load_device
from latsim.costmodel.profile.regressors import load_predictors
from latsim.paths import CALIBRATION
from tests.script_module import load_script

ROOT = Path(__file__).resolve().parents[2]
LIVE_STEPS = ROOT / "data" / "kernels" / "h200-live-steps" / "gemm.parquet"


@pytest.fixture(scope="module")
def heldout():
    return load_script(Path("gemm_heldout.py"))


@pytest.fixture(scope="module")
def predictors():
    return load_predictors(CALIBRATION / "h200")


def test_the_floor_comes_off_each_row_by_its_timer(heldout, predictors):
    raw = heldout.ok_rows(LIVE_STEPS)
    less = heldout.kernel_rows(LIVE_STEPS, predictors)
    taken = (raw["median_s"] - less["median_s"]).to_numpy()
    graph = (raw["timer"] == "cuda-graph").to_numpy()
    assert graph.any() and (~graph).any()
    assert np.allclose(taken[graph], predictors.report["graph_gap_s"])
    assert np.allclose(taken[~graph], predictors.report["timer_floor_s"])


def test_each_row_is_priced_as_the_cost_model_prices_its_gemm(heldout, predictors):
    rows = heldout.ok_rows(LIVE_STEPS).head(30)
    device = load_device("h200")
    priced = heldout.predicted_s(predictors, rows, device)
    first = rows.iloc[0]
    direct = predictors.gemm_s(np.array([float(first["M"])]), float(first["K"]), float(first["N"]), device, "bf16", 2.0)
    assert priced[0] == pytest.approx(float(direct[0]))
    assert np.all(np.isfinite(priced)) and np.all(priced > 0)
