"""scripts/ttft_parts.py: TTFT split into front-end, queue, prefill and output, both sides."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.script_module import load_script

parts_script = load_script(Path("ttft_parts.py"))


def test_measured_parts_add_up_to_the_ttft_and_skip_requests_without_engine_times() -> None:
    requests = pd.DataFrame({
        "status": ["ok", "ok", "error"], "sent_s": [1.0, 2.0, 3.0],
        "engine_queued_s": [1.004, np.nan, np.nan], "engine_scheduled_s": [1.010, np.nan, np.nan],
        "engine_first_token_s": [1.040, np.nan, np.nan], "first_token_s": [1.042, 2.05, np.nan],
    })
    parts = parts_script.measured_parts(requests)
    assert len(parts) == 1
    row = parts.iloc[0]
    assert row["front_end"] == pytest.approx(0.004) and row["queue"] == pytest.approx(0.006)
    assert row["prefill"] == pytest.approx(0.030) and row["output"] == pytest.approx(0.002)
    assert row[["front_end", "queue", "prefill", "output"]].sum() == pytest.approx(row["ttft"])


def test_simulated_parts_put_the_front_end_term_first() -> None:
    records = pd.DataFrame({"status": ["ok", "unfinished"], "arrival_s": [0.0, 1.0],
                            "first_scheduled_s": [0.008, 1.1], "first_token_s": [0.033, np.nan]})
    parts = parts_script.simulated_parts(records, frontend_s=0.003)
    assert len(parts) == 1
    assert parts["queue"].iloc[0] == pytest.approx(0.008) and parts["prefill"].iloc[0] == pytest.approx(0.022)
    assert parts[["front_end", "queue", "prefill", "output"]].sum(axis=1).iloc[0] == pytest.approx(0.033)


def test_runs_without_engine_times_or_no_runs_are_clear_errors(tmp_path: Path) -> None:
    older = Path(__file__).resolve().parents[2] / "data" / "validation" / "h200" / "llama-3.1-8b-mix" / "f0.25"
    with pytest.raises(SystemExit, match="no run with engine-side times"):
        parts_script.main([str(older)])
    with pytest.raises(SystemExit, match="holds no measurement"):
        parts_script.main([str(tmp_path)])


def test_timed_run_prints_both_sides(capsys: pytest.CaptureFixture[str]) -> None:
    run = (Path(__file__).resolve().parents[2] / "data" / "validation" / "h200-fidelity" / "llama-3.1-8b-mix-timed"
           / "f0.10")
    parts_script.main([str(run)])
    out = capsys.readouterr().out
    assert "measured" in out and "simulated" in out and "front_end" in out


def test_before_output_is_the_sum_of_the_engine_side_parts() -> None:
    run = (Path(__file__).resolve().parents[2] / "data" / "validation" / "h200-fidelity" / "llama-3.1-8b-mix-timed"
           / "f0.10")
    for row in parts_script.level_rows(run, 1.0):
        parts = row["front_end"] + row["queue"] + row["prefill"]
        assert row["before_output"] == pytest.approx(parts)
        assert row["before_output"] + row["output"] == pytest.approx(row["ttft"])


def test_graph_groups_split_at_the_limit_on_uncomputed_tokens() -> None:
    records = pd.DataFrame({
        "status": ["ok", "ok", "ok", "ok", "error"], "arrival_s": [0.0, 1.0, 2.0, 3.0, 4.0],
        "first_token_s": [0.02, 1.05, 2.03, 3.06, np.nan], "input_tokens": [512, 513, 1500, 2000, 100],
        "cached_tokens": [0, 0, 1024, np.nan, 0],
    })
    groups = parts_script.graph_groups(records, 512)
    assert len(groups["all"]) == 4
    # 512 fits; 1,500 with 1,024 cached leaves 476 to compute: it fits too; 513 and 2,000 do not.
    assert groups["graph"].round(3).tolist() == [0.02, 0.03]
    assert groups["eager"].round(3).tolist() == [0.05, 0.06]


def test_by_graph_prints_both_groups_for_both_sides(capsys: pytest.CaptureFixture[str]) -> None:
    run = (Path(__file__).resolve().parents[2] / "data" / "validation" / "h100-s51" / "qwen1.5-moe-a2.7b-mix"
           / "f0.25")
    parts_script.main([str(run), "--by-graph"])
    out = capsys.readouterr().out
    assert "p50_graph" in out and "p50_eager" in out
    rows = parts_script.graph_rows(run, 1.0)
    assert [r["side"] for r in rows] == ["measured", "simulated"]
    for row in rows:
        assert row["limit"] == 512 and row["n_graph"] + row["n_eager"] == row["n_all"]
        assert row["p50_graph"] < row["p50_all"] < row["p50_eager"]


def test_pooled_errors_keep_levels_with_both_modes_and_take_medians() -> None:
    def side(run: str, side: str, p50s: tuple[float, float, float], n_eager: int = 10) -> dict[str, object]:
        return {"run": run, "level": "f0.25", "side": side, "n_all": 10 + n_eager, "n_graph": 10,
                "n_eager": n_eager, "p50_all": p50s[0], "p50_graph": p50s[1], "p50_eager": p50s[2]}

    table = pd.DataFrame([
        side("a", "measured", (40.0, 20.0, 50.0)), side("a", "simulated", (36.0, 21.0, 45.0)),
        side("b", "measured", (40.0, 20.0, 50.0)), side("b", "simulated", (44.0, 19.0, 55.0)),
        side("c", "measured", (40.0, 20.0, 50.0), n_eager=2), side("c", "simulated", (80.0, 40.0, 100.0), n_eager=2),
    ])
    pooled = parts_script.pooled_graph_errors(table)
    assert pooled["levels"].tolist() == [2]   # "c" has two graph-less prompts: left out
    row = pooled.iloc[0]
    assert row["all_signed"] == pytest.approx(0.0) and row["all_abs"] == pytest.approx(10.0)
    assert row["graph_abs"] == pytest.approx(5.0) and row["eager_abs"] == pytest.approx(10.0)


def test_levels_that_match_nothing_are_named_in_the_error() -> None:
    run = Path(__file__).resolve().parents[2] / "data" / "validation" / "h100-s51" / "qwen1.5-moe-a2.7b-mix"
    with pytest.raises(SystemExit, match=r"no level named f0\.33 under it"):
        parts_script.main([str(run), "--by-graph", "--levels", "f0.33"])
