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
