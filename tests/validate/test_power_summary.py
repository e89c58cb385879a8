"""scripts/power_summary.py: the power-cap tables cut the right calls and clock samples."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from tests.script_module import load_script

power = load_script(Path("power_summary.py"))


def _smi_line(t: str, sm: int, watts: float) -> str:
    return f"2026/12/02 07:00:{t}, {sm}, {watts}, 50, 90"


def test_live_clocks_cut_samples_by_each_levels_start_and_duration(tmp_path: Path) -> None:
    run = tmp_path / "run"
    for level, start in (("f0.25", "2026-12-02T07:00:00+00:00"), ("f0.90", "2026-12-02T07:00:10+00:00")):
        (run / level).mkdir(parents=True)
        (run / level / "meta.json").write_text(json.dumps({"start_time": start, "duration_s": 5.0}))
    lines = [_smi_line(f"0{s}.000", 1980, 400.0) for s in range(5)]  # f0.25: full clock
    lines += [_smi_line(f"0{s}.000", 1200, 999.0) for s in range(5, 10)]  # between the levels
    lines += [_smi_line(f"{s}.000", 1500 if s < 13 else 1980, 690.0) for s in range(10, 15)]
    smi = tmp_path / "smi.csv"
    smi.write_text("\n".join(lines) + "\n")
    table = power.live_clocks(smi, run).set_index("level")
    assert table.loc["f0.25", "samples"] == 5 and table.loc["f0.25", "sm_mhz_median"] == 1980
    assert table.loc["f0.25", "share_below_1800"] == 0.0 and table.loc["f0.25", "watts_mean"] == 400
    assert table.loc["f0.90", "sm_mhz_median"] == 1500 and table.loc["f0.90", "share_below_1800"] == 0.6


def test_power_table_takes_medians_per_window_of_the_run() -> None:
    calls = [[0.35, 2.0], [0.4, 2.2], [0.6, 2.5], [1.5, 2.8], [2.5, 2.9], [2.6, 3.1], [2.7, 3.0]]
    probe = {"rows": [{"kernel": "gemm", "dtype": "bf16", "K": 4096, "N": 28672, "M": 8160, "calls": calls,
                       "clocks": ["t, 1980, 1", "t, 1470, 1", "t, 1470, 1", "t, [N/A], 1"]}]}
    row = power.power_table(probe).iloc[0]
    assert row["0.3-0.5 s"] == 2.1 and row["0.5-1.0 s"] == 2.5 and row["1.0-2.0 s"] == 2.8
    assert row["2.0-3.1 s"] == 3.0 and row["sm_mhz_median"] == 1470
    assert row["case"] == "bf16 4096x28672 M=8160"


def test_trace_clocks_cut_a_headed_gzipped_series_by_scenario(tmp_path: Path) -> None:
    trace = tmp_path / "trace"
    trace.mkdir()
    scenarios = [{"scenario": {"label": "decode:seqs=8,in=512"}, "started_at": "2026-12-02T07:00:00+00:00",
                  "seconds": 3.0},
                 {"scenario": {"label": "decode:seqs=256,in=512"}, "started_at": "2026-12-02T07:00:05+00:00",
                  "seconds": 3.0}]
    (trace / "timings.json").write_text(json.dumps({"scenarios": scenarios}))
    lines = ["timestamp, clocks.current.sm [MHz], power.draw [W], temperature.gpu"]
    lines += [f"2026/12/02 07:00:0{s}.000, {1980 if s < 5 else 1500} MHz, {500 if s < 5 else 692}.5 W, 50"
              for s in range(8)]
    smi = tmp_path / "smi.csv.gz"
    with gzip.open(smi, "wt") as f:
        f.write("\n".join(lines) + "\n")
    table = power.trace_clocks(smi, trace).set_index("level")
    assert table.loc["decode:seqs=8,in=512", "samples"] == 3
    assert table.loc["decode:seqs=8,in=512", "sm_mhz_median"] == 1980
    assert table.loc["decode:seqs=256,in=512", "sm_mhz_median"] == 1500
    assert table.loc["decode:seqs=256,in=512", "watts_mean"] == 692
    assert "gpu_util_mean" not in table.columns


def test_trace_clocks_need_stamped_scenarios(tmp_path: Path) -> None:
    (tmp_path / "timings.json").write_text(json.dumps({"scenarios": [{"scenario": {"label": "x"}, "seconds": 1.0}]}))
    with pytest.raises(ValueError, match="started_at"):
        power.trace_clocks(tmp_path / "smi.csv", tmp_path)


def test_a_headed_series_is_read_by_column_name(tmp_path: Path) -> None:
    smi = tmp_path / "smi.csv"
    smi.write_text("timestamp, clocks.current.sm [MHz], clocks.current.memory [MHz], power.draw [W], "
                   "temperature.gpu, utilization.gpu [%]\n"
                   "2026/12/02 07:00:00.000, 1500 MHz, 3201 MHz, 692.1 W, 50, 97 %\n")
    row = power.read_smi(smi).iloc[0]
    assert row["sm"] == 1500 and row["watts"] == 692.1 and row["mem"] == 3201 and row["util"] == 97
