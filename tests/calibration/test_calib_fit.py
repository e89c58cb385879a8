"""Fitting: held-out error with whole shapes held out, safe model files, fixed-cost tables."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from latsim.calibration.fit import fit_profile
from latsim.catalog import load_device


def test_report_has_held_out_error_per_family(fitted_profile: Path) -> None:
    report = json.loads((fitted_profile / "fit_report.json").read_text())
    fams = report["families"]
    for fam in ("gemm", "attn_prefill", "attn_decode", "memory", "moe"):
        rep = fams[fam]
        assert rep["n_test"] > 0 and rep["n_train"] > rep["n_test"]
        assert rep["held_out_shapes"], fam
        assert 0.0 <= rep["median_ape"] <= rep["p90_ape"]
        assert rep["mape"] < 100.0, (fam, rep["mape"])
    assert report["profile"]["gpu_name"] == "NVIDIA H200"


def test_gemm_held_out_shapes_are_whole_shapes(fitted_profile: Path) -> None:
    rep = json.loads((fitted_profile / "fit_report.json").read_text())["families"]["gemm"]
    assert rep["group_by"] == ["K", "N"]
    assert all("/" in shape for shape in rep["held_out_shapes"])


def test_models_are_xgboost_json_and_overheads_measured(fitted_profile: Path) -> None:
    for fam in ("gemm", "attn_prefill", "attn_decode", "memory", "moe"):
        doc = json.loads((fitted_profile / f"model_{fam}.json").read_text())
        assert "learner" in doc
    over = json.loads((fitted_profile / "overheads.json").read_text())
    assert 0.0 < over["graph_per_kernel_s"] < 1e-4
    assert not (fitted_profile / "allreduce.json").exists()  # comm rows were all skipped (1 GPU)


def test_fit_refuses_mismatched_gpu(profile_copy: Path) -> None:
    with pytest.raises(ValueError, match=r"NVIDIA H200.*not device 'h100'"):
        fit_profile(profile_copy, load_device("h100"))
