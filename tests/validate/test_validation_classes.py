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


def test_readme_rows_pool_the_matching_runs_at_both_speeds(tmp_path: Path) -> None:
    spec = tmp_path / "classes.yaml"
    spec.write_text("- {label: 'a and b', runs: '^v/(a|b)-mix/'}\n- {label: 'c', runs: '^fit/c-mix/'}\n")
    probed = _errors().assign(error=lambda e: e["error"] / 2)
    lines = classes.rows_table(_errors(), probed, classes.load_rows(spec))
    assert lines[2].startswith("| a and b (3: 0.25, 0.9; probe 1.80-1.80 ms) | 1 | 10.0 % |")
    assert lines[3].startswith("| same | probed | 5.0 % |")
    assert lines[4].startswith("| c (1: 0.25; probe 1.80-1.80 ms) | 1 | 50.0 % | 50.0 % |")
    assert len(lines) == 6


@pytest.mark.parametrize(("text", "message"), [
    ("- {label: x}\n", "entry 0 must have a string 'label' and a string 'runs'"),
    ("- {label: x, runs: '(unclosed'}\n", "entry 0 (x): 'runs' is not a regular expression"),
    ("{label: x, runs: y}\n", "expected a non-empty YAML list"),
])
def test_bad_row_files_are_named(tmp_path: Path, text: str, message: str) -> None:
    spec = tmp_path / "classes.yaml"
    spec.write_text(text)
    with pytest.raises(SystemExit, match=message.replace("(", r"\(").replace(")", r"\)")):
        classes.load_rows(spec)


def test_a_row_matching_no_run_is_an_error(tmp_path: Path) -> None:
    spec = tmp_path / "classes.yaml"
    spec.write_text("- {label: gone, runs: '^nowhere/'}\n")
    with pytest.raises(SystemExit, match="row 'gone': no Poisson level"):
        classes.rows_table(_errors(), _errors(), classes.load_rows(spec))


def test_the_shipped_rows_file_loads() -> None:
    rows = classes.load_rows(Path("data/validation/classes.yaml"))
    assert len(rows) >= 20 and len({label for label, _ in rows}) == len(rows)
