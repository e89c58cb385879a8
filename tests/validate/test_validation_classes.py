"""scripts/validation_classes.py: per-configuration medians and the bias by load level."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from tests.script_module import load_script

classes = load_script(Path("validation_classes.py"))


def _errors() -> pd.DataFrame:
    rows = []
    for run, level, errs in (("v/a-mix/f0.25", "f0.25", (0.10, 0.02)), ("v/b-mix/f0.25", "f0.25", (0.06, -0.04)),
                             ("v/a-mix/f0.90", "f0.90", (-0.20, 0.01)), ("fit/c-mix/f0.25", "f0.25", (0.50, 0.50))):
        for metric in ("ttft_ms", "tpot_ms", "e2e_ms"):
            for stat, err in zip(("p50", "p99"), errs, strict=True):
                rows.append({"run": run, "level": level, "metric": metric, "stat": stat, "error": err,
                             "host_probe_ms": 1.8})
            rows.append({"run": run, "level": level, "metric": metric, "stat": "mean", "error": 9.0,
                         "host_probe_ms": 1.8})
    return pd.DataFrame(rows)


def test_bias_by_load_is_the_signed_median_and_leaves_out_the_excluded_runs() -> None:
    table = classes.load_table(_errors(), exclude=r"^fit/")
    assert table.loc["f0.25", "levels"] == 2 and table.loc["f0.90", "levels"] == 1
    assert table.loc["f0.25", "ttft p50 bias"] == pytest.approx(8.0)
    assert table.loc["f0.25", "tpot p99 bias"] == pytest.approx(-1.0)
    assert table.loc["f0.25", "tpot p99 |err|"] == pytest.approx(3.0)
    assert table.loc["f0.90", "e2e p50 bias"] == pytest.approx(-20.0)
    with_fit = classes.load_table(_errors())
    assert with_fit.loc["f0.25", "levels"] == 3 and with_fit.loc["f0.25", "ttft p50 bias"] == pytest.approx(10.0)


def test_class_table_pools_a_configuration_over_its_poisson_levels() -> None:
    table = classes.class_table(_errors())
    assert table.loc["a-mix", "levels"] == 2
    assert table.loc["a-mix", "ttft p50"] == pytest.approx(15.0)
