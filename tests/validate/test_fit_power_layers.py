"""scripts/fit_power.py: a quantized class's ratios are its layer's, each shape weighed by its time."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from tests.script_module import load_script

fit = load_script(Path("fit_power.py"))


def _profile(ms: dict[tuple[int, int], float]) -> pd.DataFrame:
    """A profile with rows at 1,024 and 4,096 rows for each shape: ``ms`` at 2,048 rows (linear in M)."""
    rows = [{"dtype": "int4", "K": k, "N": n, "M": m, "median_s": t / 1e3 * m / 2048, "status": "ok"}
            for (k, n), t in ms.items() for m in (1024, 4096)]
    return pd.DataFrame(rows)


def _run(shape: tuple[int, int], full: float, capped: float, zp: bool = False) -> dict:
    """A sustained run of 2,048 rows: ``full`` ms over its first 30 ms, ``capped`` from 0.5 s on."""
    calls = [[i * full / 1e3, full] for i in range(int(30 / full) + 2)]
    calls += [[0.5 + i * 0.01, capped] for i in range(50)]
    return {"dtype": "int4", "K": shape[0], "N": shape[1], "M": 2048, "zero_points": zp, "calls": calls}


def test_layer_ratio_weighs_each_shape_by_its_time() -> None:
    big = fit.LAYER_SHAPES[2]  # gate_up
    profile = {s: (9.0 if s == big else 1.0) for s in fit.LAYER_SHAPES}  # 12 ms a layer
    runs = [_run(s, full=0.5 * profile[s], capped=(0.9 if s == big else 1.3) * profile[s])
            for s in fit.LAYER_SHAPES]
    layers = fit.layer_ratios({"rows": runs}, _profile(profile))
    (layer,) = layers["int4"]
    assert layer["profile_ms"] == pytest.approx(12.0)
    assert layer["full_clock_ratio"] == pytest.approx(0.5)
    # gate_up's 0.9 over 9 ms and three small shapes' 1.3 over 1 ms each: (8.1 + 3.9) / 12
    assert layer["capped_ratio"] == pytest.approx(1.0)
    ratios = fit.class_ratios({"int4": [{"full_ms": 1.0, "profile_ms": 2.0, "capped_ms": 1.8}]}, layers)["int4"]
    assert ratios["from"] == "layers" and ratios["capped_ratio"] == pytest.approx(1.0)


def test_incomplete_layer_falls_back_to_single_kernel_pairs() -> None:
    profile = {s: 1.0 for s in fit.LAYER_SHAPES}
    runs = [_run(s, 1.0, 1.2) for s in fit.LAYER_SHAPES[:3]]  # down is missing
    layers = fit.layer_ratios({"rows": runs}, _profile(profile))
    assert layers == {}
    pairs = {"int4": [{"full_ms": 1.0, "profile_ms": 2.0, "capped_ms": 1.8},
                      {"full_ms": 1.0, "profile_ms": 1.0, "capped_ms": 1.0}]}
    ratios = fit.class_ratios(pairs, layers)["int4"]
    assert ratios["from"] == "pairs"
    assert ratios["full_clock_ratio"] == pytest.approx(0.75) and ratios["capped_ratio"] == pytest.approx(0.95)


def test_zero_points_and_row_counts_make_separate_layers() -> None:
    profile = {s: 1.0 for s in fit.LAYER_SHAPES}
    runs = [_run(s, 1.0, 1.1) for s in fit.LAYER_SHAPES] + [_run(s, 1.0, 1.3, zp=True) for s in fit.LAYER_SHAPES]
    layers = fit.layer_ratios({"rows": runs}, _profile(profile))["int4"]
    assert [x["capped_ratio"] for x in layers] == pytest.approx([1.1, 1.3])
    assert fit.class_ratios({}, {"int4": layers})["int4"]["capped_ratio"] == pytest.approx(1.2)
