"""scripts/fit_power.py: a GEMM class's ratios are its layers', each shape weighed by its time."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from tests.script_module import load_script

fit = load_script(Path("fit_power.py"))
SHAPES = dict(zip(fit.LAYER, ((8192, 10240), (8192, 8192), (8192, 57344), (28672, 8192)), strict=True))
"""Llama-3.1-70B's four linear shapes (K, N) by name."""


def _profile(ms: dict[str, float], dtype: str = "int4") -> pd.DataFrame:
    """A profile with rows at 1,024 and 4,096 rows for each named shape: ``ms`` at 2,048 rows (linear in M)."""
    rows = [{"dtype": dtype, "K": SHAPES[s][0], "N": SHAPES[s][1], "M": m, "median_s": t / 1e3 * m / 2048,
             "status": "ok"} for s, t in ms.items() for m in (1024, 4096)]
    return pd.DataFrame(rows)


def _run(shape: str, full: float, capped: float, zp: bool = False, dtype: str = "int4", **extra: str) -> dict:
    """A sustained run of 2,048 rows: ``full`` ms over its first 30 ms, ``capped`` from 0.5 s on."""
    calls = [[i * full / 1e3, full] for i in range(int(30 / full) + 2)]
    calls += [[0.5 + i * 0.01, capped] for i in range(50)]
    return {"dtype": dtype, "K": SHAPES[shape][0], "N": SHAPES[shape][1], "M": 2048, "zero_points": zp,
            "shape": shape, "calls": calls, **extra}


def test_layer_ratio_weighs_each_shape_by_its_time() -> None:
    big = "gate_up"
    profile = {s: (9.0 if s == big else 1.0) for s in fit.LAYER}  # 12 ms a layer
    runs = [_run(s, full=0.5 * profile[s], capped=(0.9 if s == big else 1.3) * profile[s])
            for s in fit.LAYER]
    layers = fit.layer_ratios({"rows": runs}, _profile(profile))
    (layer,) = layers["int4"]
    assert layer["profile_ms"] == pytest.approx(12.0)
    assert layer["full_clock_ratio"] == pytest.approx(0.5)
    # gate_up's 0.9 over 9 ms and three small shapes' 1.3 over 1 ms each: (8.1 + 3.9) / 12
    assert layer["capped_ratio"] == pytest.approx(1.0)
    ratios = fit.class_ratios({"int4": [{"full_ms": 1.0, "profile_ms": 2.0, "capped_ms": 1.8}]}, layers)["int4"]
    assert ratios["from"] == "layers" and ratios["capped_ratio"] == pytest.approx(1.0)


def test_incomplete_layer_falls_back_to_single_kernel_pairs() -> None:
    profile = {s: 1.0 for s in fit.LAYER}
    runs = [_run(s, 1.0, 1.2) for s in fit.LAYER[:3]]  # down is missing
    layers = fit.layer_ratios({"rows": runs}, _profile(profile))
    assert layers == {}
    pairs = {"int4": [{"full_ms": 1.0, "profile_ms": 2.0, "capped_ms": 1.8},
                      {"full_ms": 1.0, "profile_ms": 1.0, "capped_ms": 1.0}]}
    ratios = fit.class_ratios(pairs, layers)["int4"]
    assert ratios["from"] == "pairs"
    assert ratios["full_clock_ratio"] == pytest.approx(0.75) and ratios["capped_ratio"] == pytest.approx(0.95)


def test_zero_points_and_row_counts_make_separate_layers() -> None:
    profile = {s: 1.0 for s in fit.LAYER}
    runs = [_run(s, 1.0, 1.1) for s in fit.LAYER] + [_run(s, 1.0, 1.3, zp=True) for s in fit.LAYER]
    layers = fit.layer_ratios({"rows": runs}, _profile(profile))["int4"]
    assert [x["capped_ratio"] for x in layers] == pytest.approx([1.1, 1.3])
    assert fit.class_ratios({}, {"int4": layers})["int4"]["capped_ratio"] == pytest.approx(1.2)


def test_each_model_s_bf16_layer_is_its_own_and_rows_under_the_heavy_size_are_left_out() -> None:
    profile = _profile({s: 1.0 for s in fit.LAYER}, "bf16")
    runs = [_run(s, 1.0, 1.15, dtype="bf16", model="llama-3.1-8b") for s in fit.LAYER]
    runs += [_run(s, 1.0, 1.05, dtype="bf16", model="qwen2.5-7b") for s in fit.LAYER]
    runs += [{**_run(s, 1.0, 2.0, dtype="bf16", model="qwen2.5-7b"), "M": 1024} for s in fit.LAYER]
    layers = fit.layer_ratios({"rows": runs}, profile)["bf16"]
    assert [x["layer"] for x in layers] == ["bf16 llama-3.1-8b layer M=2048", "bf16 qwen2.5-7b layer M=2048"]
    assert [x["capped_ratio"] for x in layers] == pytest.approx([1.15, 1.05])
