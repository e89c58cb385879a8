"""Profile loading refuses missing, corrupt and mismatched files with a clear message."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from latsim.catalog import load_device, load_model
from latsim.costmodel.calibrated import load_calibrated
from latsim.costmodel.profile.store import check_device, load_table, read_profile


def test_missing_profile_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"profile\.json: calibration profile missing"):
        read_profile(tmp_path)


def test_corrupt_profile_names_the_file(profile_copy: Path) -> None:
    (profile_copy / "profile.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"profile\.json: corrupt calibration profile"):
        read_profile(profile_copy)


def test_profile_missing_keys(profile_copy: Path) -> None:
    (profile_copy / "profile.json").write_text(json.dumps({"gpu_name": "NVIDIA H200"}))
    with pytest.raises(ValueError, match="missing key"):
        read_profile(profile_copy)


def test_corrupt_table_names_the_file(profile_copy: Path) -> None:
    (profile_copy / "gemm.parquet").write_bytes(b"garbage")
    with pytest.raises(ValueError, match=r"gemm\.parquet: not a readable parquet table"):
        load_table(profile_copy, "gemm")


def test_mismatched_gpu_name(profile_copy: Path) -> None:
    prof = read_profile(profile_copy)
    with pytest.raises(ValueError, match="measured on GPU 'NVIDIA H200', which is not device 'a100'"):
        check_device(prof, profile_copy, "a100", ("a100-sxm",))
    check_device(prof, profile_copy, "h200")


def test_calibrated_model_refuses_other_gpus_profile(fitted_profile: Path) -> None:
    with pytest.raises(ValueError, match="not device 'h100'"):
        load_calibrated(load_model("llama-3.1-8b"), load_device("h100"), profile=fitted_profile)


def test_calibrated_model_refuses_unfitted_profile(profile_copy: Path) -> None:
    with pytest.raises(ValueError, match=r"fit_report\.json"):
        load_calibrated(load_model("llama-3.1-8b"), load_device("h200"), profile=profile_copy)
