"""The command line: JSON contract, files written, and one-line errors with exit status 2."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest

from latsim.engines.vllm.host_terms import typical_host_speeds
from tests.cli_runner import run_cli as run

SMALL = ["--num-requests", "60", "--qps", "4"]




def test_json_output_is_exactly_one_object_with_the_contract_keys(monkeypatch, capsys):
    code, out, _ = run(["predict", *SMALL, "--json"], monkeypatch, capsys)
    assert code == 0
    summary = json.loads(out)
    for key in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
        assert set(summary[key]) >= {"mean", "p50", "p90", "p95", "p99"}
    for key in ("throughput_rps", "output_tokens_per_s", "num_requests", "preemptions", "kv_capacity_tokens",
                "kv_peak_utilization", "cost_model"):
        assert key in summary
    # five replications of 60 requests by default: counts are summed, each run's size is in inputs
    assert summary["replications"] == 5 and summary["num_requests"] == 5 * 60
    assert summary["inputs"]["workload"]["num_requests"] == 60
    for key in ("stable", "saturation", "capacity_rps", "stability", "intervals"):
        assert key in summary
    assert summary["ttft_ms"]["ci_method"] == "replications" and summary["ttft_ms"]["ci_n"] == 5


def test_table_output_and_out_dir(tmp_path, monkeypatch, capsys):
    code, out, _ = run(["predict", *SMALL, "--out", str(tmp_path)], monkeypatch, capsys)
    assert code == 0 and "TTFT" in out
    records = pd.read_parquet(tmp_path / "requests.parquet")
    assert len(records) == 5 * 60 and sorted(records["replication"].unique()) == [0, 1, 2, 3, 4]
    assert json.loads((tmp_path / "summary.json").read_text())["summary"]["num_requests"] == 5 * 60


def test_config_file_is_used_and_flags_win(tmp_path, monkeypatch, capsys):
    cfg = tmp_path / "d.yaml"
    cfg.write_text("model: qwen2.5-7b\ndevice: h200\nworkload: {qps: 3, num_requests: 40, output_len: 20}\n")
    code, out, _ = run(["predict", "--config", str(cfg), "--num-requests", "30", "--json"], monkeypatch, capsys)
    assert code == 0 and json.loads(out)["inputs"]["workload"]["num_requests"] == 30


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--qps", "0"], "qps"),
        (["--model", "llama-3.1-8"], "llama-3.1-8b"),
        (["--device", "h1000"], "h100"),
        (["--model", "llama-3.1-70b", "--device", "h100"], "--tp"),
        (["--tp", "3"], "tp=3"),
        (["--gpu-memory-utilization", "1.5"], "gpu_memory_utilization"),
        (["--input-len", "9000", "--output-len", "10", "--max-model-len", "8192"], "max_model_len"),
        (["--input-dist", "lognormal:median=-3"], "median"),
        (["--arrival", "weibull"], "weibull"),
        (["--host-speed", "0"], "host_speed"),
        (["--host-speed", "50"], "[0.1, 10]"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(argv, needle, monkeypatch, capsys):
    code, _, err = run(["predict", "--num-requests", "20", *argv], monkeypatch, capsys)
    assert code == 2
    assert needle in err
    assert len(err.strip().splitlines()) == 1
    assert "Traceback" not in err


def test_malformed_trace_names_the_line(tmp_path, monkeypatch, capsys):
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"arrival_s": 0, "input_tokens": 10, "output_tokens": 5}\n'
                     '{"arrival_s": 1, "input_tokens": "x"}\n')
    code, _, err = run(["predict", "--trace", str(trace)], monkeypatch, capsys)
    assert code == 2 and "2" in err and "t.jsonl" in err


def test_empty_trace_is_refused(tmp_path, monkeypatch, capsys):
    trace = tmp_path / "t.csv"
    trace.write_text("")
    code, _, err = run(["predict", "--trace", str(trace)], monkeypatch, capsys)
    assert code == 2 and "t.csv" in err


def test_overload_is_reported_unstable_not_hung(monkeypatch, capsys):
    argv = ["predict", "--qps", "500", "--num-requests", "400", "--input-len", "2000", "--output-len", "400",
            "--device", "l4", "--model", "llama-3.2-1b", "--max-model-len", "4096"]
    monkeypatch.setattr("latsim.sim.simulate.default_horizon", lambda trace: 30.0)
    code, out, err = run([*argv, "--json"], monkeypatch, capsys)
    assert code == 0 and "UNSTABLE" in err  # an answer, not an error
    summary = json.loads(out)
    assert summary["stable"] is False and summary["ttft_ms"]["steady_state"] is False


def test_models_and_devices_list(monkeypatch, capsys):
    code, out, _ = run(["models"], monkeypatch, capsys)
    assert code == 0 and "llama-3.1-70b" in out and "mixtral-8x7b" in out
    assert "1,024 on 52" in out and "4,096 on 21" in out  # Gemma-3-27B's and Gemma-2-9B's sliding layers
    code, out, _ = run(["devices"], monkeypatch, capsys)
    assert code == 0 and "h200" in out and "mi300x" in out


def test_async_scheduling_is_a_setting_that_changes_the_timing(monkeypatch, capsys):
    _, on, _ = run(["predict", *SMALL, "--json"], monkeypatch, capsys)
    code, off, _ = run(["predict", *SMALL, "--json", "--no-async-scheduling"], monkeypatch, capsys)
    assert code == 0
    assert json.loads(on)["ttft_ms"] != json.loads(off)["ttft_ms"]


def test_host_speed_slows_a_host_bound_engine_not_a_gpu_bound_one(monkeypatch, capsys):
    """Llama-3.2-1B on an H200 is host-bound (its TPOT follows the CPU); Qwen2.5-32B is not."""
    def tpot(model: str, speed: str) -> float:
        argv = ["predict", "--model", model, "--device", "h200", "--qps", "4", "--num-requests", "60",
                "--input-len", "512", "--output-len", "64", "--host-speed", speed, "--json"]
        code, out, _ = run(argv, monkeypatch, capsys)
        assert code == 0
        return json.loads(out)["tpot_ms"]["p50"]

    assert tpot("llama-3.2-1b", "0.7") > 1.3 * tpot("llama-3.2-1b", "1")
    # GPU-bound: a few percent (its graph-less launches are CPU work), against 1.3x and more above
    assert tpot("qwen2.5-32b", "0.7") == pytest.approx(tpot("qwen2.5-32b", "1"), rel=0.05)


def test_host_speed_in_a_deployment_file(tmp_path, monkeypatch, capsys):
    cfg = tmp_path / "d.yaml"
    cfg.write_text("model: llama-3.2-1b\ndevice: h200\nengine: {host_speed: 0.5}\n"
                   "workload: {qps: 4, num_requests: 40, output_len: 32}\n")
    code, slow, _ = run(["predict", "--config", str(cfg), "--json"], monkeypatch, capsys)
    _, fast, _ = run(["predict", "--config", str(cfg), "--host-speed", "1", "--json"], monkeypatch, capsys)
    assert code == 0 and json.loads(slow)["tpot_ms"]["p50"] > json.loads(fast)["tpot_ms"]["p50"]
    assert (json.loads(slow)["host_speed"], json.loads(fast)["host_speed"]) == (0.5, 1.0)  # the output says it
    code, table, _ = run(["predict", "--config", str(cfg)], monkeypatch, capsys)
    assert code == 0 and "host speed (1: a typical lent H200 VM's CPU)" in table
    cfg.write_text("engine: {host_speed: fast}\n")
    code, _, err = run(["predict", "--config", str(cfg)], monkeypatch, capsys)
    assert code == 2 and "engine.host_speed" in err


def test_host_speed_command(monkeypatch, capsys):
    monkeypatch.setattr("latsim.measure.hostprobe.time_workload", lambda n: 2.48e-3)
    code, out, _ = run(["host-speed", "--seconds", "0.05", "--json"], monkeypatch, capsys)
    result = json.loads(out)
    assert code == 0 and result["p50_s"] == 2.48e-3
    assert result["host_speed"] == pytest.approx(result["reference_s"] / 2.48e-3)
    code, out, _ = run(["host-speed", "--seconds", "0.05"], monkeypatch, capsys)
    assert code == 0 and f"--host-speed {result['host_speed']:.2f}" in out
    code, _, err = run(["host-speed", "--seconds", "0"], monkeypatch, capsys)
    assert code == 2 and "seconds" in err


def test_the_table_names_the_executor_the_engine_runs_the_model_in(monkeypatch, capsys):
    """vLLM's default by TP (one GPU: the engine-core process; more: worker processes), or the one given."""
    argv = ["predict", *SMALL, "--num-requests", "20", "--replications", "1"]
    for extra, executor in (([], "uni"), (["--tp", "2"], "mp"), (["--executor", "mp"], "mp")):
        code, out, _ = run([*argv, *extra], monkeypatch, capsys)
        assert code == 0 and f"(vllm, executor {executor}; weights" in out.replace("\n", " "), (extra, out)


def test_host_report_says_how_host_bound_a_prediction_is(monkeypatch, capsys):
    argv = ["predict", "--model", "llama-3.2-1b", "--device", "h200", "--qps", "10", "--num-requests", "80",
            "--input-len", "256", "--output-len", "32", "--host-report", "--json"]
    code, out, _ = run(argv, monkeypatch, capsys)
    host = json.loads(out)["host"]
    assert code == 0 and 0.5 < host["share"]["cpu_set_share"] <= 1.0  # a 1B on an H200 waits for its CPU
    slow, fast = host["speeds"]["at"]
    assert (slow["host_speed"], fast["host_speed"]) == typical_host_speeds()  # the live runs' hosts' range
    assert slow["host_speed"] < 1.0 < fast["host_speed"]
    assert slow["tpot_p50_change"] > 0.1 > 0.0 > -0.1 > fast["tpot_p50_change"]


def test_host_report_counts_the_launches_of_graph_less_prompt_steps(monkeypatch, capsys):
    """A mixture of experts' decodes are the GPU's, so few steps are host-bound, but each prompt's
    step runs without CUDA graphs and waits on the CPU's launch: the table says how much of the
    step time those launches are, beside the host-bound share."""
    argv = ["predict", "--model", "qwen3-30b-a3b", "--device", "h200", "--qps", "2", "--num-requests", "40",
            "--input-len", "1500", "--output-len", "64", "--host-report"]
    code, table, _ = run(argv, monkeypatch, capsys)
    row = next(line for line in table.splitlines() if "graph-less launches" in line)
    assert code == 0 and " steps, " in row and "% of step time" in row
    code, out, _ = run([*argv, "--json"], monkeypatch, capsys)
    share = json.loads(out)["host"]["share"]
    assert share["launches"] >= 40 and share["launch_s"] / share["step_s"] > share["cpu_set_share"]


def test_predict_says_how_far_the_live_engine_was_from_such_answers(monkeypatch, capsys):
    """On the calibrated H200 the answer carries the held-out live levels' error band for its
    load and decode pace; elsewhere it says why there is none."""
    argv = ["predict", "--model", "qwen2.5-32b", "--device", "h200", "--qps", "1", "--num-requests", "60",
            "--input-len", "512", "--output-len", "64"]
    code, out, _ = run([*argv, "--json"], monkeypatch, capsys)
    validated = json.loads(out)["validated_error"]
    assert code == 0 and validated["available"] and (validated["band"], validated["pace"]) == ("light", "gpu")
    cell = validated["metrics"]["tpot_ms p50"]
    assert cell["low"] < cell["median"] < cell["high"] and cell["levels"] >= 10
    code, table, _ = run(argv, monkeypatch, capsys)
    flat = "".join(ch for ch in table if not ch.isspace() and ch not in "│┃")  # the cell may wrap
    assert code == 0 and "lightload,gpupace(decodeCPU/GPU0." in flat
    assert "live engine vs this answer, p50" in table
    code, out, _ = run([*argv, "--tp", "2", "--json"], monkeypatch, capsys)
    assert json.loads(out)["validated_error"] == {"available": False, "why": "measured live on one engine at TP=1 only"}
    code, table, _ = run([*argv[:3], "--device", "a100", *argv[5:]], monkeypatch, capsys)
    assert code == 0 and "no band: built from h200, h100 runs only" in table
    code, out, _ = run([*argv[:3], "--device", "h100", *argv[5:], "--json"], monkeypatch, capsys)
    validated = json.loads(out)["validated_error"]  # the H100's own band, from its live runs
    assert code == 0 and validated["available"] and validated["device"] == "h100"


def test_a_mixture_of_experts_gets_the_launch_paced_band(monkeypatch, capsys):
    """Qwen3-30B-A3B decodes at the GPU's pace but its prompt steps, too large for the CUDA
    graphs, wait on the CPU's launch of 48 layers: the band of the launch-paced levels, and the
    table says which step's ratio put it there."""
    argv = ["predict", "--model", "qwen3-30b-a3b", "--device", "h200", "--qps", "4", "--num-requests", "80",
            "--input-len", "1500", "--output-len", "128"]
    code, out, _ = run([*argv, "--json"], monkeypatch, capsys)
    validated = json.loads(out)["validated_error"]
    assert code == 0 and validated["available"] and validated["pace"] == "launch"
    assert validated["prompt_ratio"] > 1.0 > validated["host_ratio"]
    code, table, _ = run(argv, monkeypatch, capsys)
    flat = "".join(ch for ch in table if not ch.isspace() and ch not in "│┃")  # the cell may wrap
    ratio = re.search(r"launchpace\(promptstepCPU/GPU(\d+\.\d\d)\)", flat)
    assert code == 0 and ratio is not None and float(ratio.group(1)) > 1.0


def test_an_slo_is_also_checked_at_the_live_bands_slow_edge(monkeypatch, capsys):
    argv = ["predict", "--model", "qwen2.5-32b", "--device", "h200", "--qps", "1", "--num-requests", "60",
            "--input-len", "512", "--output-len", "64", "--slo-tpot-ms", "1000", "--slo-ttft-ms", "1"]
    code, out, _ = run([*argv, "--json"], monkeypatch, capsys)
    answer = json.loads(out)
    edge, cells = answer["validated_error"]["slo_at_slow_edge"], answer["validated_error"]["metrics"]
    assert code == 0 and set(edge) == {"ttft_ms", "tpot_ms"}
    tpot = edge["tpot_ms"]
    assert tpot["percentile_ms"] == pytest.approx(answer["tpot_ms"]["p99"] / (1 + cells["tpot_ms p99"]["low"]))
    assert tpot["percentile_ms"] > answer["tpot_ms"]["p99"]  # the slow edge: the live engine slower
    assert tpot["met"] is True and edge["ttft_ms"]["met"] is False
    code, table, _ = run(argv, monkeypatch, capsys)
    assert code == 0 and "the SLO's percentile at the band's slow edge" in table and "(misses 1.0)" in table


def test_predict_says_when_a_models_own_launch_was_measured(monkeypatch, capsys) -> None:
    """A model with a measured graph-less launch ratio (launch_by_model.json) says so, in the JSON
    and the table; one without has no such key."""
    from latsim.engines.vllm.host_terms import launch_ratio

    code, out, _ = run(["predict", "--model", "qwen2.5-7b", *SMALL, "--json"], monkeypatch, capsys)
    assert code == 0 and json.loads(out)["launch_ratio"] == launch_ratio("qwen2.5-7b") != 1.0
    code, out, _ = run(["predict", "--model", "qwen2.5-7b", *SMALL], monkeypatch, capsys)
    assert code == 0 and "graph-less launch (measured for this model)" in out
    code, out, _ = run(["predict", *SMALL, "--json"], monkeypatch, capsys)
    assert code == 0 and "launch_ratio" not in json.loads(out)
