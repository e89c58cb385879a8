"""Narrow GEMMs (MoE routers, a shared expert's gate) priced at the ``narrow`` grid's rows, and the
shared expert's gate in the step's operators."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from latsim import load_device
from latsim.catalog.lookup import load_model
from latsim.costmodel.profile.floor import without_floor
from latsim.costmodel.profile.regressors import load_predictors
from latsim.costmodel.profile.tabulate import per_token, step_gemms
from latsim.costmodel.shard import shard_model
from latsim.paths import CALIBRATION

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "data" / "kernels" / "h100-narrow" / "gemm.parquet"


@pytest.fixture(scope="module")
def h100():
    return load_predictors(CALIBRATION / "h100")


def _floored(predictors, k: int, n: int) -> pd.Series:
    rows = pd.read_parquet(RUN)
    rows = rows[(rows["K"] == k) & (rows["N"] == n) & (rows["status"] == "ok")]
    rows = without_floor(rows, predictors.report["timer_floor_s"], predictors.report["graph_gap_s"])
    return rows.set_index("M")["median_s"].sort_index()


def test_a_narrow_shape_is_priced_at_its_measured_rows_on_its_own_gpu(h100) -> None:
    device = load_device("h100")
    for k, n in ((2048, 1), (2048, 60), (2048, 128), (4096, 8)):
        want = _floored(h100, k, n)
        got = h100.gemm_s(want.index.to_numpy(dtype=np.float64), k, n, device, "bf16", 2.0)
        assert np.allclose(got, want.to_numpy(), rtol=1e-9)
    # between two measured rows: between their times (log-log)
    gate = _floored(h100, 2048, 1)
    mid = float(h100.gemm_s(np.array([700.0]), 2048, 1, device, "bf16", 2.0)[0])
    assert min(gate[512], gate[1024]) <= mid <= max(gate[512], gate[1024])
    # the regressor (rows set aside: the profile as if timed on another GPU), extrapolating below
    # its grid's widths, gives a fraction of the kernel
    elsewhere = replace(h100, profile={**h100.profile, "device": "another"})
    regressor = float(elsewhere.gemm_s(np.array([64.0]), 2048, 1, device, "bf16", 2.0)[0])
    assert regressor < 0.5 * gate[64]


def test_narrow_rows_are_not_used_for_another_gpu_another_dtype_or_past_the_rows(h100) -> None:
    assert (2048, 1) in h100.narrow_measured
    assert load_predictors(CALIBRATION / "h200").narrow_measured == {}
    m = np.array([64.0])
    h200 = load_device("h200")
    cols = h100.gemm_s(m, 2048, 1, load_device("h100"), "bf16", 2.0)
    assert h100.gemm_s(m, 2048, 1, h200, "bf16", 2.0)[0] != pytest.approx(cols[0])
    assert h100.gemm_s(m, 2048, 128, load_device("h100"), "fp8", 1.0)[0] != pytest.approx(
        h100.gemm_s(m, 2048, 128, load_device("h100"), "bf16", 2.0)[0])
    # past the largest measured row the regressor prices it
    past = h100.gemm_s(np.array([8192.0, 32768.0]), 2048, 60, load_device("h100"), "bf16", 2.0)
    assert past[1] > past[0] > 0


def test_a_shared_experts_gate_is_a_bf16_gemm_of_one_column_per_moe_layer() -> None:
    shared = shard_model(load_model("qwen1.5-moe-a2.7b"), 1, "fp8")
    gates = [g for g in step_gemms(shared) if g.op == "shared_expert_gate"]
    assert [(g.k, g.n, g.layers, g.dtype, g.weight_bytes) for g in gates] == [(2048, 1, 24, "bf16", 2.0)]
    routed_only = step_gemms(shard_model(load_model("qwen3-30b-a3b"), 1, "bf16"))
    assert not [g for g in routed_only if g.op == "shared_expert_gate"]


def test_the_gate_and_its_gating_lengthen_a_shared_expert_models_step(h100) -> None:
    """Qwen1.5-MoE's per-token operators at 64 rows, with and without the shared expert: the gate's
    GEMM and its sigmoid and product add what their rows and the memory regressor give."""
    device = load_device("h100")
    model = load_model("qwen1.5-moe-a2.7b")
    s = shard_model(model, 1, "bf16")
    t = np.array([64.0])
    with_gate, _ = per_token(h100, s, device, t)
    gate = h100.gemm_s(t, 2048, 1, device, "bf16", 2.0)
    assert gate[0] > 2e-6  # the measured kernel, a few microseconds
    without = replace(s, shared_width=0)
    bare, _ = per_token(h100, without, device, t)
    # the shared expert's GEMMs, SiLU, gate, sigmoid and product: more than the gate's GEMM alone
    assert with_gate[0] - bare[0] > 24 * gate[0]
