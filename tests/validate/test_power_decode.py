"""scripts/power_decode.py: the tensor-rate ramp is recovered from decode runs, bad input is named."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from tests.script_module import load_script

decode = load_script(Path("power_decode.py"))


def _points(onset: float, full: float, rates: list[float]) -> pd.DataFrame:
    shares = decode.ramp(rates, onset, full)
    return pd.DataFrame({"run": "r", "scenario": [f"s{i}" for i in range(len(rates))], "tflops": rates,
                         "mean_mhz": 1800, "share": shares})


def test_the_fit_recovers_a_known_ramp() -> None:
    fit = decode.fit_ramp(_points(80.0, 340.0, [40.0, 120.0, 200.0, 280.0, 400.0]))
    assert (fit["decode_onset_tflops"], fit["decode_full_tflops"]) == (80.0, 340.0)
    assert fit["rms_share_error"] == pytest.approx(0.0, abs=1e-12) and len(fit["scenarios"]) == 5


def test_too_few_scenarios_are_refused() -> None:
    with pytest.raises(ValueError, match="at least 3"):
        decode.fit_ramp(_points(80.0, 340.0, [100.0, 200.0]))


def test_the_probe_clocks_need_a_sustained_bf16_run() -> None:
    rows = [{"dtype": "bf16", "M": 64, "clocks": ["t, 1980, 3201, 100"] * 4},
            {"dtype": "bf16", "M": 8160, "clocks": ["t, 1980, 3201, 600"] * 2 + ["t, 1470, 3201, 700"] * 6}]
    assert decode.probe_clocks({"rows": rows}, 2048) == (1980.0, 1470.0)
    with pytest.raises(ValueError, match="sustained"):
        decode.probe_clocks({"rows": rows[:1]}, 2048)


def test_an_unstamped_trace_is_refused(tmp_path: Path) -> None:
    (tmp_path / "timings.json").write_text('{"argv": ["--model", "llama-3.1-8b"], "scenarios": '
                                           '[{"scenario": {"kind": "decode", "label": "d", "seqs": 8, "in": 512}}]}')
    with pytest.raises(ValueError, match="started_at"):
        decode.decode_points(tmp_path, tmp_path / "smi.csv", Path("latsim/data/calibration/h200"), (1980.0, 1470.0))


def test_a_class_weight_puts_its_rates_on_the_bf16_ramp() -> None:
    heavy = _points(80.0, 340.0, [100.0, 200.0, 300.0, 400.0])
    heavy["tflops"] = heavy["tflops"] / 0.66  # the same shares at rates 1 / 0.66 as high
    fit = decode.fit_weight(heavy, 80.0, 340.0)
    assert fit["weight"] == pytest.approx(0.66) and fit["rms_share_error"] < 0.01
    with pytest.raises(ValueError, match="at least 3"):
        decode.fit_weight(heavy.head(2), 80.0, 340.0)


def test_a_malformed_or_missing_decode_trace_argument_is_named(tmp_path: Path) -> None:
    (tmp_path / "timings.json").write_text("{}")
    (tmp_path / "smi.csv").write_text("")
    assert decode.run_and_series(f"{tmp_path}={tmp_path / 'smi.csv'}") == (tmp_path, tmp_path / "smi.csv")
    smi = tmp_path / "smi.csv"
    for bad in (str(tmp_path), f"{tmp_path}={tmp_path / 'absent.csv'}", f"{tmp_path / 'no-run'}={smi}"):
        with pytest.raises(SystemExit, match="expected RUN=SMI"):
            decode.run_and_series(bad)


def test_the_clock_share_is_zero_at_full_clock_and_one_at_the_cap() -> None:
    assert decode.clock_share(1980.0, (1980.0, 1455.0)) == 0.0
    assert decode.clock_share(1455.0, (1980.0, 1455.0)) == pytest.approx(1.0)
    assert 0.0 < decode.clock_share(1700.0, (1980.0, 1455.0)) < 1.0


def test_the_power_probe_s_gemm_runs_give_the_prompt_weight_that_made_them() -> None:
    """Sustained GEMM runs whose clocks sit where a 0.5 weight puts their rates on the ramp give
    0.5 back; duty cycles and non-GEMM rows are skipped; a probe without such runs is named."""
    clocks, onset, full = (1980.0, 1360.0), 100.0, 340.0
    rows = [{"kernel": "gemm-duty", "dtype": "bf16", "M": 8160, "K": 4096, "N": 28672, "on_ms": 50,
             "calls": [[0.0, 9.0]], "clocks": ["t, 1980, 0, 0"]},
            {"kernel": "attention", "case": "prefill", "calls": [[0.0, 1.0]], "clocks": ["t, 1500, 0, 0"]}]
    for m, ms in ((256, 0.12), (537, 0.30), (2048, 0.70)):
        rate = 2e-9 * m * 4096 * 28672 / ms
        share = float(decode.ramp([0.5 * rate], onset, full)[0])
        mhz = clocks[0] / (1.0 + share * (clocks[0] / clocks[1] - 1.0))
        rows.append({"kernel": "gemm", "dtype": "bf16", "M": m, "K": 4096, "N": 28672,
                     "calls": [[0.0, ms]] * 10, "clocks": [f"t, {mhz}, 0, 0"] * 10})
    points = decode.gemm_points({"rows": rows}, clocks)
    assert len(points) == 3 and points["share"].between(0.0, 1.0).all()
    assert decode.fit_weight(points, onset, full)["weight"] == pytest.approx(0.5)
    with pytest.raises(ValueError, match="sustained bf16 GEMM"):
        decode.gemm_points({"rows": rows[:2]}, clocks)
