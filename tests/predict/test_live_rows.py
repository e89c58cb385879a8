"""latsim.predict.live.live_rows: which live levels the surrogate is scored on."""

from __future__ import annotations

from pathlib import Path

from latsim.predict.live import live_rows

DATA = Path(__file__).resolve().parents[2] / "data" / "validation"


def test_levels_the_grid_cannot_describe_are_left_out() -> None:
    rows = live_rows(DATA)
    runs = rows["run"].tolist()
    assert not any("70b-fp8" in r for r in runs)  # an FP8 checkpoint's own config: no catalog name
    assert not any("prefix-len" in r for r in runs)  # prefix groups are not a prefix_share
    long = rows[rows["run"].str.contains("llama-3.1-8b-long/")]
    starts = long["run"].str.split("/").str[0].nunique()  # each engine start: its four Poisson levels
    assert starts >= 1 and len(long) == 4 * starts
    assert (long["input_sigma"] > 0).all() and (long["input_median"] == 4096).all()
    assert rows["qps"].gt(0).all() and rows["measured_ttft_ms_p50"].gt(0).all()


def test_each_level_is_priced_on_the_gpu_it_recorded() -> None:
    rows = live_rows(DATA)
    on_h100 = rows[rows["run"].str.startswith("h100-")]
    assert len(on_h100) > 0 and (on_h100["device"] == "h100").all()
    assert (rows[rows["run"].str.startswith("h200")]["device"] == "h200").all()
