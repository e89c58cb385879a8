"""``scripts/aic_crosscheck.py``'s table of the bf16 GEMMs by row count (the shipped H200 profiles)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from latsim.costmodel.profile.store import SHIPPED_DIR
from tests.script_module import load_script


def test_gemm_rows_by_row_count_cover_every_large_bf16_row_once() -> None:
    script = load_script(Path("aic_crosscheck.py"))
    native, imported = SHIPPED_DIR / "h200", SHIPPED_DIR / "h200-aic"
    rows = script.gemm_by_rows(native, imported)
    table = pd.read_parquet(native / "gemm.parquet")
    large = table[(table["status"] == "ok") & (table["dtype"] == "bf16") & (table["K"] * table["N"] >= 4096 * 4096)]
    assert sum(int(r["shapes"]) for r in rows) == len(large)
    labels = [r["rows (M)"] for r in rows]
    assert "512" in labels and labels.index("512") == labels.index("385-511") + 1
    for r in rows:
        assert float(r["p25_pct"]) <= float(r["median_signed_pct"]) <= float(r["p75_pct"])
