"""FA3's key tile: found from the decode-tiles sweeps, fitted into the paged rows' contexts, and
priced by the cost model as half a tile more than a batch's mean context."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from latsim.calibration.fit import _tiled_decode
from latsim.calibration.grid import get_grid, points
from latsim.catalog import load_device
from latsim.costmodel.profile.regressors import load_predictors
from latsim.costmodel.profile.tables import shard_path
from latsim.costmodel.profile.tiles import MIN_POINTS, decode_tiles, expected_ctx, tile_for, tiled_ctx

ROOT = Path(__file__).resolve().parents[2]
H200 = ROOT / "latsim" / "data" / "calibration" / "h200"
TILES_RUN = ROOT / "data" / "kernels" / "h200-decode-tiles" / "attention.parquet"


def _sweep(d: int, tile: int | None, kv: float | str = np.nan, batch: int = 256, noise: float = 0.01,
           seed: int = 0) -> pd.DataFrame:
    """Equal-context rows every 16 tokens from 448 to 1,088: a slope plus a step per tile, noisy."""
    ctx = np.arange(448, 1089, 16)
    steps = np.ceil(ctx / tile) if tile else 0.0
    t = (20.0 + 0.05 * ctx + 15.0 * steps) * np.exp(np.random.default_rng(seed).normal(0.0, noise, len(ctx)))
    return pd.DataFrame({"phase": "decode", "impl": "vllm-fa3-paged", "mix": "uniform", "hq": 32, "hkv": 8, "d": d,
                         "kv": kv, "batch": batch, "ctx": ctx, "median_s": t * 1e-6})


@pytest.mark.parametrize("tile", [80, 96, 128, 192])
def test_the_tile_is_found_and_not_its_multiple_or_divisor(tile: int) -> None:
    rows = pd.concat([_sweep(128, tile, seed=s, batch=b) for s, b in ((0, 64), (1, 256))], ignore_index=True)
    (found,) = decode_tiles(rows)
    assert (found["d"], found["kv"], found["tile"], found["sweeps"]) == (128, "bf16", tile, 2)


def test_no_staircase_no_tile_and_the_powers_of_two_are_not_a_sweep() -> None:
    assert decode_tiles(_sweep(128, None, noise=0.02)) == []
    coarse = _sweep(128, 128)
    coarse = coarse[np.isin(coarse["ctx"], [512, 1024])]
    powers = pd.concat([coarse, coarse.assign(ctx=coarse["ctx"] * 2)], ignore_index=True)
    assert len(powers) < MIN_POINTS and decode_tiles(powers) == []


def test_tiles_by_head_dim_and_cache_dtype() -> None:
    rows = pd.concat([_sweep(64, 192), _sweep(128, 128), _sweep(128, 96, kv="fp8")], ignore_index=True)
    tiles = decode_tiles(rows)
    assert {(t["d"], t["kv"]): t["tile"] for t in tiles} == {(64, "bf16"): 192, (128, "bf16"): 128, (128, "fp8"): 96}
    assert tile_for(tiles, 64, "bf16") == 192
    assert tile_for(tiles, 80, "bf16") == 128  # the smallest measured head dim above it
    assert tile_for(tiles, 256, "bf16") == 1  # none above: contexts as they are
    assert tile_for(tiles, 96, "fp8") == 96
    assert tile_for([], 128, "bf16") == 1


def test_expected_context_is_half_a_tile_more_and_at_least_one_tile() -> None:
    assert expected_ctx(612.0, 128) == pytest.approx(675.5)
    assert expected_ctx(10.0, 128) == 128.0
    assert expected_ctx(612.0, 1) == 612.0
    # contexts spread over many tiles: the mean of their tiled contexts is half a tile more
    lens = np.random.default_rng(3).integers(200, 3000, 20000)
    assert float(np.mean(tiled_ctx(lens, 128))) == pytest.approx(expected_ctx(float(np.mean(lens)), 128), rel=0.002)


def test_fit_prices_paged_rows_at_whole_tiles_and_leaves_other_kernels() -> None:
    rows = pd.DataFrame({"impl": ["vllm-fa3-paged", "vllm-fa3-paged", "vllm-fa3"], "mix": "uniform",
                         "hq": 32, "hkv": 8, "d": 128, "batch": 256.0, "ctx": [612.0, 640.0, 612.0],
                         "flops": 1.0, "bytes": 1.0})
    out = _tiled_decode(rows, [{"d": 128, "kv": "bf16", "tile": 128}], "bf16")
    assert out["ctx"].tolist() == [640.0, 640.0, 612.0]
    assert out["bytes"].iloc[0] == out["bytes"].iloc[1] > 1.0 and out["bytes"].iloc[2] == 1.0
    assert _tiled_decode(rows, [], "bf16") is rows


def test_the_h200_run_reads_the_tiles_of_each_head_dim() -> None:
    tiles = {(t["d"], t["kv"]): t["tile"] for t in decode_tiles(pd.read_parquet(TILES_RUN))}
    assert tiles[(128, "bf16")] == 128 and tiles[(96, "bf16")] == 128 and tiles[(64, "bf16")] == 192
    assert tiles[(128, "fp8")] == 96


def test_shipped_h200_prices_a_live_batch_above_the_tile_exact_rows_interpolation() -> None:
    """The 8B's 256 decodes of about 612 tokens (live 192.7 us of FA3 + 7.0 of combine a layer,
    ``data/traces/h200/llama-3.1-8b-decode``) cost about five tiles, not 4.8."""
    p = load_predictors(H200)
    assert p.decode_tile(128) == 128 and p.decode_tile(128, "attn_decode_fp8kv") == 96
    rows = pd.read_parquet(H200 / "attention.parquet")
    exact = rows[(rows["impl"] == "vllm-fa3-paged") & (rows["hq"] == 32) & (rows["hkv"] == 8) & (rows["d"] == 128)
                 & (rows["batch"] == 256) & rows["ctx"].isin([512, 1024])].sort_values("ctx")["median_s"].to_numpy()
    linear = exact[0] + (exact[1] - exact[0]) * (612 - 512) / 512
    t = p.attn_decode_s(np.array([256.0]), np.array([612.0]), (32, 8, 128), 2.0, load_device("h200"))[0]
    assert t > 1.04 * linear
    assert 180e-6 < t < 210e-6


def test_decode_tiles_grid_steps_every_page_over_the_paged_shapes() -> None:
    pts = [p.kwargs for p in points(get_grid("decode-tiles"))]
    assert {p["phase"] for p in pts} == {"decode"} and {p["batch"] for p in pts} == {64, 256}
    assert sorted({p["ctx"] for p in pts}) == list(range(448, 1089, 16))
    paged = {(p["hq"], p["hkv"], p["d"]) for p in (q.kwargs for q in points(get_grid("paged")))}
    assert {(p["hq"], p["hkv"], p["d"]) for p in pts} == paged
    assert any(p.get("kv") == "fp8" for p in pts)


def test_a_profile_without_sweeps_prices_contexts_as_they_are(fitted_profile: Path) -> None:
    p = load_predictors(fitted_profile)
    assert p.report["decode_tiles"] == [] and p.decode_tile(128) == 1


def test_the_fit_reads_the_tile_from_the_profiles_sweep_table(profile_copy: Path) -> None:
    from latsim.calibration.fit import TILES_TABLE, fit_profile
    from latsim.costmodel.profile.tables import write_shard

    rows = pd.concat([_sweep(128, 128), _sweep(128, 128, batch=64, seed=1)], ignore_index=True)
    write_shard(profile_copy, TILES_TABLE, rows.to_dict("records"))
    report = fit_profile(profile_copy, load_device("h200"))
    assert [(t["d"], t["kv"], t["tile"]) for t in report["decode_tiles"]] == [(128, "bf16", 128)]


def _fake_runs(monkeypatch: pytest.MonkeyPatch, impl: str) -> list[object]:
    """``run_calibration`` replaced by one that writes a staircase as every run's attention rows."""
    import latsim.calibration.runner as runner
    from latsim.costmodel.profile.tables import write_shard

    calls: list[object] = []

    def run(req: object, on_point: object = None, on_start: object = None) -> dict[str, object]:
        calls.append(req)
        out = req.out  # type: ignore[attr-defined]
        out.mkdir(parents=True, exist_ok=True)
        write_shard(out, "attention", _sweep(128, 128).assign(impl=impl).to_dict("records"))
        return {"gpu_name": "NVIDIA H200", "impl": {"attention": [impl]}, "counts": {}}

    monkeypatch.setattr(runner, "run_calibration", run)
    return calls


def test_a_full_calibration_also_times_the_tile_sweeps_and_the_spread_probe(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from rich.console import Console

    from latsim.calibration import cli as calib_cli
    from latsim.calibration.fit import TILES_TABLE

    calls = _fake_runs(monkeypatch, "vllm-fa3-paged")
    monkeypatch.setattr(calib_cli, "_measure_spread", lambda folder, resume, console: calls.append("spread"))
    calib_cli._measure(tmp_path, load_device("h200"), "cuda", False, True, Console(quiet=True))
    assert [(c.grid, c.families) for c in calls[:2]] == [("full", calls[0].families),  # type: ignore[attr-defined]
                                                         ("decode-tiles", ("attention",))]
    assert calls[2:] == ["spread"]  # then the spread probe (tests/calibration/test_spread_probe.py)
    assert calls[1].out == tmp_path / "decode-tiles"  # type: ignore[attr-defined]
    assert [t["tile"] for t in decode_tiles(pd.read_parquet(shard_path(tmp_path, TILES_TABLE)))] == [128]


@pytest.mark.parametrize(("quick", "impl"), [(True, "vllm-fa3-paged"), (False, "flash-varlen")])
def test_no_tile_sweeps_after_a_quick_grid_or_without_the_paged_kernel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                     quick: bool, impl: str) -> None:
    from rich.console import Console

    from latsim.calibration import cli as calib_cli
    from latsim.calibration.fit import TILES_TABLE

    calls = _fake_runs(monkeypatch, impl)
    monkeypatch.setattr(calib_cli, "_measure_spread", lambda folder, resume, console: calls.append("spread"))
    calib_cli._measure(tmp_path, load_device("h200"), "cuda", quick, True, Console(quiet=True))
    assert len(calls) == 1 and not shard_path(tmp_path, TILES_TABLE).exists()  # no tiles, no spread probe


def test_block_table_hands_each_sequence_its_pages_in_order() -> None:
    from latsim.calibration.attention import PAGE, block_table, pages_of

    pages = pages_of([1, PAGE, PAGE + 1])
    assert pages == [1, 1, 2]
    table = block_table(pages, np.array([7, 3, 9, 5], dtype=np.int32))
    assert table.tolist() == [[7, 0], [3, 0], [9, 5]]
