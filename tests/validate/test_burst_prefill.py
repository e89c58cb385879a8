"""scripts/burst_prefill.py: a burst's time per prompt token, read off its first tokens."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from latsim.measure.records import RequestRecord, write_run
from tests.script_module import load_script

burst = load_script(Path("burst_prefill.py"))


def records(per_token_s: float, n: int = 200, seed: int = 5) -> pd.DataFrame:
    """``n`` requests arriving at 0 whose first tokens come out in a random order, each when the
    prompt tokens before it (and its own) have been worked through at ``per_token_s``."""
    rng = np.random.default_rng(seed)
    tokens = rng.integers(100, 2000, n)
    done = np.cumsum(tokens) * per_token_s + 0.05
    frame = pd.DataFrame({"status": "ok", "arrival_s": 0.0, "first_token_s": done, "input_tokens": tokens})
    return frame.sample(frac=1.0, random_state=1)  # the file's order is not the TTFT order


def test_the_slope_is_the_time_per_prompt_token() -> None:
    assert burst.prefill_slope(records(25e-6)) == pytest.approx(25e-6, rel=1e-6)
    slow = records(25e-6)
    slow.loc[slow.index[:3], "status"] = "error"  # failed requests are left out
    assert burst.prefill_slope(slow) == pytest.approx(25e-6, rel=0.02)


def test_too_few_requests_give_nan() -> None:
    assert np.isnan(burst.prefill_slope(records(25e-6, n=9)))


def test_bursts_are_found_by_name_or_load_mode(tmp_path: Path) -> None:
    def run(path: Path, mode: str) -> Path:
        rec = RequestRecord("r0", 0.0, 0.0, 64, 2, 2, 0.01, (0.01, 0.02), None, 0.02, "ok")
        return write_run(path, [rec], {"driver": "synthetic", "load": {"mode": mode}})

    named = run(tmp_path / "a" / "burst", "open")
    by_mode = run(tmp_path / "b" / "sat", "burst")
    run(tmp_path / "c" / "f0.25", "open")
    assert sorted(burst.burst_runs(tmp_path)) == sorted([named, by_mode])


def test_bad_input_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        burst.main([str(tmp_path), "--host-speed", "fast"])
    assert exc.value.code == 2 and "--host-speed 'fast'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        burst.main([str(tmp_path)])
    assert exc.value.code == 2 and "holds no measurement" in capsys.readouterr().err
    rec = RequestRecord("r0", 0.0, 0.0, 64, 2, 2, 0.01, (0.01, 0.02), None, 0.02, "ok")
    write_run(tmp_path / "x" / "f0.5", [rec], {"driver": "synthetic", "load": {"mode": "open"}})
    with pytest.raises(SystemExit, match="no saturation burst under"):
        burst.main([str(tmp_path)])


def test_a_live_burst_reads_its_measured_and_replayed_slopes() -> None:
    """The 8B's H100 fixed-shape burst: about 23 us a prompt token measured, priced within 5 %."""
    run = Path(__file__).resolve().parents[2] / "data/validation/h100-s51/llama-3.1-8b-fixed-in512-out128/burst"
    row = burst.burst_row(run, "probe")
    assert row["device"] == "h100" and row["model"] == "llama-3.1-8b" and row["tp"] == 1
    assert 20.0 < float(row["measured_us"]) < 27.0
    assert float(row["ratio"]) == pytest.approx(float(row["predicted_us"]) / float(row["measured_us"]))
    assert 0.95 < float(row["ratio"]) < 1.05


def test_a_burst_cut_off_by_its_deadline_is_read_over_the_requests_it_finished() -> None:
    """Gemma-3-27B's long prompts on the H200: 13 of 100 finished before the run's deadline; over
    every replayed request the replay's slope would take in 87 the live run never measured (0.22)."""
    run = Path(__file__).resolve().parents[2] / "data/validation/h200-s40/gemma-3-27b-long/burst"
    row = burst.burst_row(run, "probe")
    assert row["device"] == "h200"
    assert 0.9 < float(row["ratio"]) < 1.1


def test_the_csv_holds_one_row_per_burst(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = Path(__file__).resolve().parents[2] / "data/validation/h100-s51/llama-3.1-8b-fixed-in512-out128"
    out = tmp_path / "bursts.csv"
    burst.main([str(root), "--csv", str(out)])
    table = pd.read_csv(out)
    assert list(table["model"]) == ["llama-3.1-8b"] and {"measured_us", "predicted_us", "ratio"} <= set(table.columns)
    assert "median replayed / measured" in capsys.readouterr().out
