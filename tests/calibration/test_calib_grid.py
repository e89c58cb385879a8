"""Grids as data: unique ids, quick inside full, budgets, and a current shape table."""

from __future__ import annotations

import pytest

from latsim.calibration.estimate import estimate_seconds
from latsim.calibration.grid import FULL, QUICK, SHAPES, STUDY_SHAPES, TINY, WIDE, get_grid, grid_hash, points
from latsim.calibration.shapes import build_shapes, load_shapes
from latsim.calibration.timing import rotation_sets


@pytest.mark.parametrize("grid", [FULL, QUICK, TINY])
def test_ids_unique_and_hash_stable(grid) -> None:
    pts = points(grid)
    assert len({p.id for p in pts}) == len(pts)
    assert grid_hash(pts) == grid_hash(points(grid))


def test_quick_is_subset_of_full() -> None:
    assert {p.id for p in points(QUICK)} <= {p.id for p in points(FULL)}


def test_budgets_on_one_h200() -> None:
    """Planning estimate (matched the measured 173 s full / 7.5 s quick of the first H200 runs)."""
    full = estimate_seconds(points(FULL))
    quick = estimate_seconds(points(QUICK))
    single_gpu = {k: v for k, v in full.items() if k != "comm"}
    assert sum(single_gpu.values()) < 300
    assert sum(v for k, v in quick.items() if k != "comm") < 60


def test_shape_table_is_current() -> None:
    assert load_shapes() == build_shapes(), "run `python -m latsim.calibration.shapes`"


def test_unknown_grid() -> None:
    with pytest.raises(ValueError, match=r"grid='huge'.*accepted: full, quick, tiny"):
        get_grid("huge")


def test_rotation_exceeds_twice_l2() -> None:
    l2 = 60 * 2**20
    for nbytes in (1e3, 1e6, 3e7, 2e8):
        sets = rotation_sets(nbytes, l2, max_sets=10**6)
        assert sets == 1 if nbytes >= 2 * l2 else sets * nbytes > 2 * l2


def test_shape_study_grid_is_attention_over_its_own_shapes() -> None:
    pts = points(SHAPES)
    assert {p.family for p in pts} == {"attention"} and len({p.id for p in pts}) == len(pts)
    heads = {(p.kwargs["phase"], p.kwargs["hq"], p.kwargs["hkv"], p.kwargs["d"]) for p in pts}
    study = {(s["hq"], s["hkv"], s["d"]) for s in STUDY_SHAPES["attention"]}
    assert heads == {(phase, *s) for phase in ("prefill", "decode") for s in study}
    assert {d for _, _, d in study} == {64, 80, 96, 128, 256}
    assert {d for hq, hkv, d in study if hq == hkv} == {64, 80, 96, 128, 256}  # MHA at every head dim
    assert sum(estimate_seconds(pts).values()) < 150  # run_device's cap for this grid


def test_wide_grid_holds_a_control_shape_of_the_full_grid() -> None:
    wide = {(p.kwargs["phase"], p.kwargs["hq"], p.kwargs["hkv"]) for p in points(WIDE)}
    full = {(p.kwargs["phase"], p.kwargs["hq"], p.kwargs["hkv"]) for p in points(FULL) if p.family == "attention"}
    assert ("decode", 40, 8) in wide & full and ("decode", 64, 8) in wide - full


def test_paged_grids_re_time_every_profiled_attention_point_they_name() -> None:
    full = {p.id for p in points(FULL) if p.family == "attention" and "kv" not in p.kwargs}
    decode, prefill = points(get_grid("paged")), points(get_grid("paged-prefill"))
    assert {p.kwargs["phase"] for p in decode} == {"decode"} and {p.kwargs["mix"] for p in decode} == {"uniform"}
    assert {p.kwargs["phase"] for p in prefill} == {"prefill"}
    # the same point ids as the full grid's rows, so `merge_calibration.py --mode update` replaces them
    for grid in (decode, prefill):
        assert {p.id for p in grid} >= {i for i in full if f"phase={grid[0].kwargs['phase']}" in i
                                        and ("mix=uniform" in i or "prefill" in i)}
    study = {(s["hq"], s["hkv"], s["d"]) for s in STUDY_SHAPES["attention"]}
    assert study <= {(p.kwargs["hq"], p.kwargs["hkv"], p.kwargs["d"]) for p in decode}


def test_decode_batches_sit_between_the_powers_of_two_and_the_check_between_those() -> None:
    fitted = {p.kwargs["batch"] for p in points(get_grid("decode-batches"))}
    check = {p.kwargs["batch"] for p in points(get_grid("decode-batches-check"))}
    powers = {p.kwargs["batch"] for p in points(get_grid("paged"))}
    assert not fitted & powers and not check & (fitted | powers) and not FULL.decode_between
    for b in fitted:  # each between the powers of two on either side of it
        assert max(x for x in powers if x < b) < b < min(x for x in powers if x > b)


def test_msteps_grid_steps_through_the_dispatch_buckets_in_both_dtypes() -> None:
    gemm = [p.kwargs for p in points(get_grid("msteps")) if p.family == "gemm"]
    for dtype in ("bf16", "fp8"):
        ms = sorted({g["M"] for g in gemm if g["dtype"] == dtype and (g["K"], g["N"]) == (8192, 57344)})
        assert ms[0] == 96 and ms[-1] == 1024 and {136, 152, 272, 576} <= set(ms)


def test_quantized_and_windowed_grids_name_only_their_new_axes() -> None:
    """int4 GEMMs only on shapes Marlin takes; fp8-KV and window points name their option, and a
    grid without them keeps the ids it had (the bf16 points carry no ``kv`` or ``window``)."""
    w4 = [p.kwargs for p in points(get_grid("w4a16"))]
    assert w4 and {g["dtype"] for g in w4} == {"int4"}
    assert all(g["K"] % 128 == 0 and g["N"] % 64 == 0 for g in w4)
    high = [p.kwargs for p in points(get_grid("msteps-high"))]
    assert {g["dtype"] for g in high} == {"bf16", "fp8", "int4"}
    assert min(g["M"] for g in high) > 512
    fp8 = [p.kwargs for p in points(get_grid("fp8-kv"))]
    assert fp8 and all(a["kv"] == "fp8" for a in fp8)
    assert {a["phase"] for a in fp8} == {"prefill", "decode"}
    window = [p.kwargs for p in points(get_grid("window"))]
    assert window and all(a["window"] == 4096 for a in window)
    assert max(a["ctx"] for a in window) >= 8 * 4096
    plain = [p.id for name in ("paged", "shapes", "wide", "msteps") for p in points(get_grid(name))]
    assert not any(",kv=" in i or ",window=" in i for i in plain)


def test_full_grid_times_the_quantized_kernels_too() -> None:
    """`latsim calibrate` on a new GPU measures what the cost model prices from: 4-bit GEMMs on
    every fourth shape and the most-used head configurations over an fp8 cache (uniform decode
    and prefill), beside every bf16 point the grid had."""
    pts = [p.kwargs for p in points(FULL)]
    int4 = {(g["K"], g["N"]) for g in pts if g.get("dtype") == "int4"}
    bf16 = {(g["K"], g["N"]) for g in pts if g.get("dtype") == "bf16"}
    assert int4 and int4 < bf16 and len(int4) >= len(bf16) // 6
    fp8 = [a for a in pts if a.get("kv") == "fp8"]
    assert {a["phase"] for a in fp8} == {"prefill", "decode"}
    assert all(a["mix"] == "uniform" for a in fp8 if a["phase"] == "decode")
    assert (32, 8, 128) in {(a["hq"], a["hkv"], a["d"]) for a in fp8}
    steps = [p.kwargs for p in points(get_grid("w4-steps"))]
    assert {g["dtype"] for g in steps} == {"int4"} and {1, 128, 136, 520, 8192} <= {g["M"] for g in steps}


def test_heavy_gemm_grids_are_the_bf16_gemms_past_the_graph_size_of_their_grids() -> None:
    """The full-clock re-timing grids hold exactly the points of the full, msteps and msteps-high
    grids that are bf16 GEMMs of more than 512 rows (so their rows replace those points' rows)."""
    heavy = {p.id for name in ("heavy-gemm", "heavy-gemm-steps") for p in points(get_grid(name))}
    source = {p.id for name in ("full", "msteps", "msteps-high") for p in points(get_grid(name))
              if p.family == "gemm" and p.kwargs["dtype"] == "bf16" and p.kwargs["M"] > 512}
    assert heavy == source and len(heavy) > 2000


def test_msteps_low_times_every_gemm_dtype_at_and_between_the_full_grids_decode_rows() -> None:
    """The full grid's rows below 96 and rows between them, one just past each power of two, over
    the same 8B and 70B layers in bf16, fp8 and 4-bit; the 70B's fp8 layers get rows below 96."""
    pts = points(get_grid("msteps-low"))
    low = [p.kwargs for p in pts]
    full_rows = {p.kwargs["M"] for p in points(FULL) if p.family == "gemm"}
    rows = {g["M"] for g in low}
    assert {g["dtype"] for g in low} == {"bf16", "fp8", "int4"} and {p.family for p in pts} == {"gemm"}
    assert {m for m in full_rows if m < 96} <= rows and {17, 33, 65} <= rows and max(rows) < 96
    between = sorted(rows - full_rows)
    assert len(between) >= len(rows) // 2
    for m in between:  # each lies between two rows of the full grid
        assert max(x for x in full_rows if x < m) < m < min(x for x in full_rows if x > m)
    shapes = {(g["K"], g["N"]) for g in low}
    assert shapes == {(p.kwargs["K"], p.kwargs["N"]) for p in points(get_grid("msteps-high"))}
    full_fp8 = {(p.kwargs["K"], p.kwargs["N"]) for p in points(FULL) if p.kwargs.get("dtype") == "fp8"}
    timed = {(g["K"], g["N"], g["dtype"], g["M"]) for g in low}
    assert (8192, 57344) not in full_fp8 and (8192, 57344, "fp8", 16) in timed


def test_every_device_grid_can_be_run_by_name() -> None:
    from latsim.calibration.grid import GRIDS
    from latsim.calibration.run_device import CAPS_S

    assert set(GRIDS) - {"tiny"} <= set(CAPS_S)


def test_moe_steps_time_the_two_moe_models_between_the_full_grids_tokens() -> None:
    pts = points(get_grid("moe-steps"))
    assert {p.family for p in pts} == {"moe"}
    qwen3 = sorted(p.kwargs["tokens"] for p in pts if p.kwargs["experts"] == 128)
    assert {16, 20, 24, 28, 32} <= set(qwen3) and max(qwen3) == 512
    assert set(FULL.moe_tokens) & set(qwen3) == {1, 2, 4, 8, 16, 32, 64, 128, 256, 512}


def test_live_steps_time_the_other_live_models_layers_in_bf16_around_the_graph_size() -> None:
    """Llama-3.2-1B's, Phi-3-mini's and Qwen2.5-7B's four linear layers (none the 8B's or 70B's),
    bf16 only, at every row the msteps grids time, on both sides of the 512 rows vLLM graphs."""
    pts = points(get_grid("live-steps"))
    gemms = [p.kwargs for p in pts]
    assert {p.family for p in pts} == {"gemm"} and {g["dtype"] for g in gemms} == {"bf16"}
    shapes = {(g["K"], g["N"]) for g in gemms}
    assert len(shapes) == 12 and (3072, 9216) in shapes and (3584, 37888) in shapes and (8192, 2048) in shapes
    assert not shapes & {(p.kwargs["K"], p.kwargs["N"]) for p in points(get_grid("msteps-high"))}
    rows = {g["M"] for g in gemms}
    steps = {p.kwargs["M"] for name in ("msteps", "msteps-high") for p in points(get_grid(name)) if p.family == "gemm"}
    assert rows == steps and min(rows) == 96 and max(rows) == 3072 and {512, 520} <= rows


def test_narrow_times_every_catalog_moe_models_router_and_shared_gate_in_bf16() -> None:
    """The grid's shapes are the catalog's routers (hidden x experts) and shared experts' gates
    (hidden x 1), every one in bf16 from a decode row to a long prompt chunk, nothing else."""
    from latsim.catalog import list_models, load_model

    want = set()
    for name in list_models():
        model = load_model(name)
        if model.is_moe:
            want.add((model.hidden_size, model.num_experts))
            if model.shared_expert_intermediate_size:
                want.add((model.hidden_size, 1))
    pts = points(get_grid("narrow"))
    assert {p.family for p in pts} == {"gemm"} and {p.kwargs["dtype"] for p in pts} == {"bf16"}
    assert {(p.kwargs["K"], p.kwargs["N"]) for p in pts} == want and (2048, 1) in want
    rows = sorted({p.kwargs["M"] for p in pts})
    assert rows[0] == 1 and rows[-1] == 8192 and {16, 64, 256, 512} <= set(rows)
    assert len(pts) == len(want) * len(rows)
