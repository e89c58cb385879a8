"""4-bit Machete GEMMs priced at the rows the kernel computes (whole tiles of its schedule)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from latsim.catalog.lookup import load_device
from latsim.costmodel.profile import machete
from latsim.costmodel.profile.regressors import load_predictors

H200 = Path(__file__).resolve().parents[2] / "latsim" / "data" / "calibration" / "h200"
ROWS = np.array([1, 16, 17, 24, 32, 33, 40, 48, 49, 64, 65, 80, 96, 97, 128, 129, 300], dtype=float)


def test_rows_round_up_to_the_tile_of_each_schedule() -> None:
    big = machete.padded_rows(ROWS, 8192, 57344)     # the 70B's gate_up: tiles of 32, 64, 128
    assert big.tolist() == [1, 16, 32, 32, 32, 64, 64, 64, 64, 64, 128, 128, 128, 128, 128, 129, 300]
    small = machete.padded_rows(ROWS, 2048, 5120)    # K, N <= 6,144: 16-row tiles over 33-64 rows
    assert small[5:10].tolist() == [48, 48, 48, 64, 64]
    assert small[10:15].tolist() == [128, 128, 128, 128, 128]  # K <= 4,069, N <= 8,192: 64-row tiles
    tiny = machete.padded_rows(ROWS, 2048, 2048)     # K, N <= 4,069: 32-row tiles over 65-128 rows
    assert tiny[10:15].tolist() == [96, 96, 96, 128, 128]
    assert machete.padded_rows(ROWS, 4096, 4096)[10:15].tolist() == [128] * 5  # 4,096 > vLLM's 4,069


def test_a_shape_machete_does_not_take_keeps_its_rows() -> None:
    assert not machete.takes_shape(4096, 2752)       # N not a multiple of 128: Marlin
    assert machete.padded_rows(ROWS, 4096, 2752).tolist() == ROWS.tolist()


def test_the_grid_rows_are_whole_tiles_and_measure_flat_within_a_class() -> None:
    """What the rule rests on: on the 70B's layers the shipped 4-bit rows take as long at 24 as at
    32 rows, at 48 as at 64 and at 96 as at 128 (one schedule, one tile, per class)."""
    g = pd.read_parquet(H200 / "gemm.parquet")
    g = g[(g.dtype == "int4") & g.impl.str.contains("machete")]
    for k, n in ((8192, 10240), (8192, 8192), (8192, 57344), (28672, 8192)):
        t = g[(g["K"] == k) & (g["N"] == n)].groupby("M").median_s.median()
        for a, b in ((24, 32), (48, 64), (96, 128)):
            assert t[a] == pytest.approx(t[b], rel=0.05)
        assert t[48] > 1.1 * t[32] and t[96] > 1.1 * t[64]  # the steps the tiles make


def test_the_h200_profile_prices_rows_between_grid_rows_at_their_tile() -> None:
    p, dev = load_predictors(H200), load_device("h200")
    assert p.w4a16_machete()
    price = p.gemm_s(np.array([33.0, 40.0, 64.0, 72.0, 128.0]), 8192, 57344, dev, "bf16", 0.5, w4a16=True)
    assert price[0] == price[1] == price[2] and price[3] == price[4] and price[3] > 1.1 * price[2]
    marlin = replace(p, profile={**p.profile, "impl": {**p.profile["impl"], "gemm": ["vllm.marlin_gemm"]}})
    assert not marlin.w4a16_machete()
    unpadded = marlin.gemm_s(np.array([40.0, 64.0]), 8192, 57344, dev, "bf16", 0.5, w4a16=True)
    assert unpadded[0] < 0.95 * unpadded[1]  # the regressor alone puts the step between 32 and 48 rows
