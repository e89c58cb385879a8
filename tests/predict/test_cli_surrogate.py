"""``latsim predict --surrogate``: the simulator's JSON keys, the fallback, traces, and one-line errors."""

from __future__ import annotations

import json
import shutil
from importlib.resources import files

import pytest

from latsim.predict.answer import SUMMARY_KEYS
from tests.cli_runner import run_cli as run

BASE = ["predict", "--model", "llama-3.1-8b", "--device", "h200", "--qps", "8", "--num-requests", "40", "--json"]




def test_surrogate_answers_with_the_simulators_keys(monkeypatch, capsys):
    code, out, _ = run(BASE, monkeypatch, capsys)
    assert code == 0
    simulated = json.loads(out)
    assert set(simulated) == set(SUMMARY_KEYS)  # the list the surrogate fills is the simulator's
    code, out, err = run([*BASE, "--surrogate"], monkeypatch, capsys)
    assert code == 0 and err == ""
    answer = json.loads(out)
    assert set(answer) == set(SUMMARY_KEYS) | {"surrogate"}
    assert answer["cost_model"] == "surrogate" and answer["surrogate"]["in_domain"] is True
    assert answer["stable"] is True and answer["surrogate"]["latency"] == "steady state"
    assert answer["ttft_ms"]["p99"] >= answer["ttft_ms"]["p50"] > 0
    assert answer["offered_rps"] == 8.0  # the synthetic workload's rate (the simulator reports its samples')
    assert simulated["offered_rps"] == pytest.approx(8.0, rel=0.3)


def test_outside_the_domain_the_simulator_answers_and_says_why(monkeypatch, capsys):
    code, out, err = run([*BASE, "--surrogate", "--block-size", "32"], monkeypatch, capsys)
    assert code == 0
    answer = json.loads(out)
    assert answer["cost_model"] != "surrogate" and answer["surrogate"]["in_domain"] is False
    assert "block_size=32" in err and "the simulator answers" in err
    assert any("block_size=32" in r for r in answer["surrogate"]["reasons"])


@pytest.mark.parametrize(("tp", "inside"), [("1", False), ("2", True)])
def test_an_executor_other_than_vllms_default_is_outside_the_domain(tp, inside, monkeypatch, capsys):
    """The training rows ran vLLM's executor for their TP: worker processes above one GPU only."""
    code, out, err = run([*BASE, "--surrogate", "--tp", tp, "--executor", "mp"], monkeypatch, capsys)
    assert code == 0
    answer = json.loads(out)
    assert answer["surrogate"]["in_domain"] is inside
    assert ("executor='mp'" in err) is not inside


@pytest.mark.parametrize(("model", "inside"), [("gemma-3-27b", False), ("gemma-2-9b", True)])
def test_sliding_windows_unlike_the_training_are_outside_the_domain(model, inside, monkeypatch, capsys):
    """Gemma 3's 1 + 6 KV groups (8 padding layers) hold 0.89x the context of every layer keeping
    every token at these lengths; Gemma-2's 4,096-token window holds the same."""
    code, out, err = run(["predict", "--model", model, "--device", "h200", "--qps", "2", "--num-requests", "40",
                          "--json", "--surrogate"], monkeypatch, capsys)
    assert code == 0
    assert json.loads(out)["surrogate"]["in_domain"] is inside
    assert ("sliding-window layers" in err) is not inside


def test_a_trace_is_summarised_into_the_features(tmp_path, monkeypatch, capsys):
    trace = tmp_path / "t.csv"
    rows = [f"{0.25 * i},{300 + 10 * (i % 5)},{60 + i % 7}" for i in range(41)]
    trace.write_text("arrival_s,input_tokens,output_tokens\n" + "\n".join(rows) + "\n")
    code, out, _ = run(["predict", "--model", "llama-3.1-8b", "--device", "h200", "--trace", str(trace), "--json",
                        "--surrogate"], monkeypatch, capsys)
    assert code == 0
    workload = json.loads(out)["surrogate"]["workload"]
    assert workload["qps"] == pytest.approx(4.0)
    assert 300 <= workload["input_median"] <= 340 and workload["prefix_share"] == 0.0


def test_a_corrupted_shipped_model_is_one_line_with_how_to_rebuild(tmp_path, monkeypatch, capsys):
    shutil.copytree(str(files("latsim") / "data" / "surrogate"), tmp_path / "surrogate")
    (tmp_path / "surrogate" / "e2e_ms_p50.json").write_bytes(b"\x00garbage")
    monkeypatch.setattr("latsim.paths.DATA", tmp_path)
    code, out, err = run([*BASE, "--surrogate"], monkeypatch, capsys)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1
    assert "e2e_ms_p50.json is corrupted" in err and "rebuild with" in err


def test_table_output_says_the_surrogate_answered(monkeypatch, capsys):
    code, out, err = run([a for a in BASE if a != "--json"] + ["--surrogate"], monkeypatch, capsys)
    assert code == 0 and err == ""
    assert "TTFT" in out and "surrogate: stable" in out


@pytest.mark.parametrize(("extra", "says"), [(["--out", "x"], "--out writes per-request records"),
                                             (["--slo-ttft-ms", "100"], "need per-request latencies")])
def test_what_only_a_simulation_gives_is_refused_in_one_line(extra, says, monkeypatch, capsys):
    code, out, err = run([*BASE, "--surrogate", *extra], monkeypatch, capsys)
    assert code == 2 and out == "" and says in err and len(err.strip().splitlines()) == 1


def test_latencies_predicted_unstable_are_said_to_be_a_runs_of_the_training_length():
    from latsim.predict.answer import latency_meaning

    assert latency_meaning(True, {"num_requests_per_configuration": 1600}) == "steady state"
    said = latency_meaning(False, {"num_requests_per_configuration": 1600})
    assert said.startswith("unstable") and "1600-request run" in said
    assert latency_meaning(False, {}).startswith("unstable")
