"""Rough edges a new user hits: each bad input ends as one line naming it, exit status 2."""

from __future__ import annotations

import gzip
import json

import pandas as pd
import pytest

from tests.test_cli import run

SMALL = ["--num-requests", "20", "--qps", "4"]


def test_a_negative_seed_names_the_flag(monkeypatch, capsys):
    code, _, err = run(["predict", *SMALL, "--seed", "-1"], monkeypatch, capsys)
    assert code == 2 and "--seed" in err and "-1" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("model", ["./no-such-model.json", "no/such/folder"])
def test_a_missing_model_config_path_is_file_not_found(model, monkeypatch, capsys):
    code, _, err = run(["predict", *SMALL, "--model", model], monkeypatch, capsys)
    assert code == 2 and "file not found" in err and model in err and "unknown model" not in err


def test_an_unknown_model_name_is_still_unknown(monkeypatch, capsys):
    code, _, err = run(["predict", *SMALL, "--model", "llama-3.1-8"], monkeypatch, capsys)
    assert code == 2 and "unknown model" in err and "llama-3.1-8b" in err


@pytest.mark.parametrize("name", ["t.jsonl", "t.csv", "t.jsonl.gz"])
def test_binary_bytes_in_a_trace_name_the_file_and_line(name, tmp_path, monkeypatch, capsys):
    text = (b'{"arrival_s": 0, "input_tokens": 10, "output_tokens": 5}\n\xff\xfe\n' if ".jsonl" in name
            else b"arrival_s,input_tokens,output_tokens\n0,10,5\n1,\xff\xfe,4\n")
    path = tmp_path / name
    path.write_bytes(gzip.compress(text) if name.endswith(".gz") else text)
    code, _, err = run(["predict", "--trace", str(path)], monkeypatch, capsys)
    line = 2 if ".jsonl" in name else 3
    assert code == 2 and f"{path}:{line}: not UTF-8" in err and "0xff" in err


def test_a_damaged_gzip_trace_names_the_file(tmp_path, monkeypatch, capsys):
    path = tmp_path / "t.jsonl.gz"
    path.write_bytes(gzip.compress(b'{"arrival_s": 0, "input_tokens": 10, "output_tokens": 5}\n')[:-12])
    code, _, err = run(["predict", "--trace", str(path)], monkeypatch, capsys)
    assert code == 2 and str(path) in err and "gzip" in err and "aborted" not in err


TRACE_LINES = ('{"arrival_s": 0.5, "input_tokens": 30, "output_tokens": 5}\n'
               '{"arrival_s": 0.0, "input_tokens": 20, "output_tokens": 4}\n'
               '{"arrival_s": 1.0, "input_tokens": 10, "output_tokens": 3}\n')


@pytest.mark.parametrize(("extra", "needle"), [
    (["--qps", "3"], "--qps"), (["--input-len", "7", "--arrival", "constant"], "--arrival, --input-len")])
def test_workload_flags_next_to_a_trace_are_refused(extra, needle, tmp_path, monkeypatch, capsys):
    trace = tmp_path / "t.jsonl"
    trace.write_text(TRACE_LINES)
    code, _, err = run(["predict", "--trace", str(trace), *extra], monkeypatch, capsys)
    assert code == 2 and "--trace" in err and needle in err


def test_a_trace_in_the_file_with_synthetic_settings_in_the_file_is_refused(tmp_path, monkeypatch, capsys):
    trace = tmp_path / "t.jsonl"
    trace.write_text(TRACE_LINES)
    cfg = tmp_path / "d.yaml"
    cfg.write_text(f"workload: {{trace: {trace}, qps: 3}}\n")
    code, _, err = run(["predict", "--config", str(cfg)], monkeypatch, capsys)
    assert code == 2 and "qps" in err and "--trace" in err


def test_a_trace_flag_replaces_the_files_synthetic_workload(tmp_path, monkeypatch, capsys):
    trace = tmp_path / "t.jsonl"
    trace.write_text(TRACE_LINES)
    cfg = tmp_path / "d.yaml"
    cfg.write_text("workload: {qps: 3, num_requests: 500}\n")
    code, out, _ = run(["predict", "--config", str(cfg), "--trace", str(trace), "--json"], monkeypatch, capsys)
    assert code == 0 and json.loads(out)["num_requests"] == 3


def test_records_of_an_unsorted_trace_keep_the_files_order_as_id(tmp_path, monkeypatch, capsys):
    trace = tmp_path / "t.jsonl"
    trace.write_text(TRACE_LINES)
    code, _, err = run(["predict", "--trace", str(trace), "--out", str(tmp_path / "o")], monkeypatch, capsys)
    records = pd.read_parquet(tmp_path / "o" / "requests.parquet")
    assert code == 0 and "not in arrival order" in err and "sorted" in err
    lines = [json.loads(line) for line in TRACE_LINES.splitlines()]
    for row in records.itertuples():  # request_id is the record's position in the file
        assert row.input_tokens == lines[row.request_id]["input_tokens"]
        assert row.arrival_s == lines[row.request_id]["arrival_s"]
    assert records["arrival_s"].is_monotonic_increasing and sorted(records["request_id"]) == [0, 1, 2]


def test_records_of_a_sorted_trace_are_numbered_in_order_without_a_note(tmp_path, monkeypatch, capsys):
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(sorted(TRACE_LINES.splitlines(keepends=True), key=lambda s: json.loads(s)["arrival_s"])))
    code, _, err = run(["predict", "--trace", str(trace), "--out", str(tmp_path / "o")], monkeypatch, capsys)
    records = pd.read_parquet(tmp_path / "o" / "requests.parquet")
    assert code == 0 and "arrival order" not in err and records["request_id"].tolist() == [0, 1, 2]


def test_json_records_the_inputs_that_produced_it(tmp_path, monkeypatch, capsys):
    cfg = tmp_path / "d.yaml"
    cfg.write_text("device: h200\nengine: {max_num_seqs: 64}\nworkload: {arrival: constant}\n")
    argv = ["predict", "--config", str(cfg), "--tp", "2", "--replicas", "2", "--qps", "3", "--input-len", "100",
            "--num-requests", "20", "--seed", "4", "--json"]
    code, out, _ = run(argv, monkeypatch, capsys)
    inputs = json.loads(out)["inputs"]
    assert code == 0 and inputs["model"] == "llama-3.1-8b" and inputs["device"] == "h200"
    assert (inputs["tp"], inputs["replicas"]) == (2, 2)
    engine = inputs["engine"]
    assert engine["max_num_seqs"] == 64 and engine["max_num_batched_tokens"] >= 1 and engine["max_model_len"] >= 1
    assert engine["enable_chunked_prefill"] is True and engine["engine"] == "vllm"
    workload = inputs["workload"]
    assert workload["qps"] == 3 and workload["arrival"] == "constant" and workload["input_len"] == 100
    assert "input_dist" not in workload and workload["num_requests"] == 20 and workload["seed"] == 4


def test_the_recorded_inputs_reproduce_the_prediction(monkeypatch, capsys):
    code, out, _ = run(["predict", "--num-requests", "20", "--qps", "5", "--max-num-seqs", "8", "--json"],
                       monkeypatch, capsys)
    first = json.loads(out)
    inputs, workload = first["inputs"], first["inputs"]["workload"]
    argv = ["predict", "--model", inputs["model"], "--device", inputs["device"], "--tp", str(inputs["tp"]),
            "--max-num-seqs", str(inputs["engine"]["max_num_seqs"]), "--qps", str(workload["qps"]),
            "--num-requests", str(workload["num_requests"]), "--input-dist", workload["input_dist"],
            "--output-dist", workload["output_dist"], "--seed", str(workload["seed"]), "--json"]
    code, out, _ = run(argv, monkeypatch, capsys)
    assert code == 0 and json.loads(out) == first


def test_a_trace_prediction_records_the_trace(tmp_path, monkeypatch, capsys):
    trace = tmp_path / "t.jsonl"
    trace.write_text(TRACE_LINES)
    code, out, _ = run(["predict", "--trace", str(trace), "--json"], monkeypatch, capsys)
    workload = json.loads(out)["inputs"]["workload"]
    assert code == 0 and workload["trace"] == str(trace) and workload["num_requests"] == 3
    assert workload["sorted_by_arrival"] is True and "qps" not in workload


@pytest.mark.parametrize("as_json", [False, True])
def test_out_says_what_it_wrote_and_the_summary_has_the_inputs(as_json, tmp_path, monkeypatch, capsys):
    argv = ["predict", *SMALL, "--out", str(tmp_path / "o"), *(["--json"] if as_json else [])]
    code, out, err = run(argv, monkeypatch, capsys)
    said = err if as_json else out
    assert code == 0 and f"wrote {tmp_path / 'o' / 'requests.parquet'}, {tmp_path / 'o' / 'summary.json'}" in said
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["inputs"]["workload"]["num_requests"] == 20 and summary["inputs"]["device"] == "h100"
    if as_json:
        assert json.loads(out)["inputs"] == summary["inputs"]


def test_an_unknown_executor_names_the_accepted_ones(monkeypatch, capsys):
    code, _, err = run(["predict", *SMALL, "--executor", "ray"], monkeypatch, capsys)
    assert code == 2 and "'ray'" in err and "uni" in err and "mp" in err and len(err.strip().splitlines()) == 1
