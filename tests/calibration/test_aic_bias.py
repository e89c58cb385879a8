"""The imported H100's bf16 GEMM rows corrected by the source harness's bias measured on the H200."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from latsim.calibration.aic_bias import CLIP, correct_imported, corrected_gemm, harness_factors
from latsim.catalog import load_device
from latsim.costmodel.profile.store import shipped_profile_dir


def _rows(shapes: list[tuple[str, int, int, int]]) -> pd.DataFrame:
    df = pd.DataFrame(shapes, columns=["dtype", "M", "K", "N"]).astype({"M": float, "K": float, "N": float})
    width = np.where(df["dtype"] == "fp8", 1.0, 2.0)
    return df.assign(flops=2 * df.M * df.K * df.N, bytes=width * (df.M * df.K + df.K * df.N) + 2 * df.M * df.N,
                     median_s=1e-4)


def test_factors_follow_the_h200_where_both_tables_reach_and_are_one_outside() -> None:
    rows = _rows([("bf16", 8, 8192, 57344), ("bf16", 1, 4096, 28672), ("bf16", 4, 64, 32), ("bf16", 2048, 4096, 4096)])
    f = harness_factors(rows)
    assert f[0] < 0.97 and f[1] < 0.97  # the source reads long on memory-bound layers of hundreds of MB
    assert f[2] == 1.0  # 32 columns: a shape latsim never measured, so no ratio is claimed
    assert ((f >= CLIP[0]) & (f <= CLIP[1])).all()


def test_correction_is_idempotent_keeps_the_source_and_leaves_fp8_alone() -> None:
    table = _rows([("bf16", 1, 5376, 43008), ("fp8", 1, 5376, 43008), ("bf16", 16, 8192, 8192)])
    once = corrected_gemm(table)
    twice = corrected_gemm(once)
    pd.testing.assert_frame_equal(once, twice)
    assert (once["source_median_s"] == table["median_s"]).all()
    assert once.loc[1, "median_s"] == table.loc[1, "median_s"]  # fp8: not the same operation
    assert once.loc[0, "median_s"] != table.loc[0, "median_s"]


def test_only_a_gpu_of_the_reference_chip_is_corrected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"b200: .* carries only to a GPU of its chip \(h100\)"):
        correct_imported(tmp_path, load_device("b200"))


def test_the_shipped_h100_import_holds_the_rule_applied_to_the_source_times() -> None:
    folder = shipped_profile_dir("h100-aic")  # the H100's own profile is measured; its import is kept
    table = pd.read_parquet(folder / "gemm.parquet")
    again = corrected_gemm(table.assign(median_s=table["source_median_s"]).drop(columns="source_median_s"))
    np.testing.assert_allclose(again["median_s"], table["median_s"], rtol=1e-12)
    record = json.loads((folder / "profile.json").read_text())["adjustments"]["gemm_harness"]
    assert record["rows"] == int((table["dtype"] == "bf16").sum()) and "aic_bias" in record["rule"]
