"""Trace files: round trips, sorting, the Azure format, replay options and every error path."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import numpy as np
import pytest

import latsim.atomic
import latsim.workload.io as trace_io
from latsim.workload.io import TraceFormatError, read_trace, write_trace
from latsim.workload.trace import RequestTrace

AZURE = """TIMESTAMP,ContextTokens,GeneratedTokens
2023-11-16 18:15:46.6805900,374,44
2023-11-16 18:15:50.9951690,396,109
2023-11-16 18:15:51.0000000,879,1
2023-11-16 18:16:00.1234567,91,12
"""


def make_trace(prefixes: bool = False) -> RequestTrace:
    arrivals = [0.0, 0.1, 1 / 3, 2.000000000000001, 7.5]
    group = [-1, 0, 0, 1, -1] if prefixes else None
    shared = [0, 16, 16, 32, 0] if prefixes else None
    return RequestTrace.from_arrays(arrivals, [10, 20, 30, 40, 50], [1, 2, 3, 4, 5], group, shared)


def assert_same(a: RequestTrace, b: RequestTrace) -> None:
    for name in ("arrival_s", "input_tokens", "output_tokens", "prefix_group", "prefix_tokens"):
        x, y = getattr(a, name), getattr(b, name)
        assert (x is None) == (y is None), name
        if x is not None:
            np.testing.assert_array_equal(x, y)
            assert x.dtype == y.dtype


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    if name.endswith(".gz"):
        with gzip.open(path, "wt", encoding="utf-8") as f:
            f.write(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize("name", ["t.jsonl", "t.json", "t.csv", "t.jsonl.gz", "t.CSV.GZ"])
@pytest.mark.parametrize("prefixes", [False, True])
def test_round_trip_is_exact(tmp_path: Path, name: str, prefixes: bool) -> None:
    trace = make_trace(prefixes)
    write_trace(trace, tmp_path / name)
    assert_same(read_trace(tmp_path / name), trace)
    assert sorted(os.listdir(tmp_path)) == [name]


def test_gzip_output_is_reproducible(tmp_path: Path) -> None:
    write_trace(make_trace(), tmp_path / "a.csv.gz")
    write_trace(make_trace(), tmp_path / "b.csv.gz")
    assert (tmp_path / "a.csv.gz").read_bytes() == (tmp_path / "b.csv.gz").read_bytes()


def test_write_replaces_atomically_and_cleans_up_on_failure(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "t.csv"
    path.write_text("old contents\n")

    def broken_replace(src: str, dst: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(latsim.atomic.os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        write_trace(make_trace(), path)
    assert path.read_text() == "old contents\n"
    assert os.listdir(tmp_path) == ["t.csv"]
    monkeypatch.undo()
    write_trace(make_trace(), path)
    assert_same(read_trace(path), make_trace())


def test_write_rejects_empty_trace_and_unknown_extension(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="refusing to write an empty trace"):
        write_trace(RequestTrace.from_arrays([], [], []), tmp_path / "e.csv")
    with pytest.raises(ValueError, match=r"trace format of .*t\.parquet.*accepted: \.jsonl\[\.gz\]"):
        write_trace(make_trace(), tmp_path / "t.parquet")


def test_csv_extra_columns_blank_lines_and_stable_sort(tmp_path: Path) -> None:
    text = "id, arrival_s ,input_tokens,output_tokens\nx,2.0,1,9\n\ny,1.0,2,9\nz,1.0,3,9\n"
    path = write(tmp_path, "t.csv", text)
    trace = read_trace(path)
    np.testing.assert_array_equal(trace.arrival_s, [1.0, 1.0, 2.0])
    np.testing.assert_array_equal(trace.input_tokens, [2, 3, 1])


def test_jsonl_extra_keys_and_partial_prefixes(tmp_path: Path) -> None:
    text = (
        '{"arrival_s": 0, "input_tokens": 100, "output_tokens": 5, "note": "x"}\n'
        '\n'
        '{"arrival_s": 0.5, "input_tokens": 100, "output_tokens": 5,'
        ' "prefix_group": 3, "prefix_tokens": 64}\n'
    )
    trace = read_trace(write(tmp_path, "t.jsonl", text))
    np.testing.assert_array_equal(trace.prefix_group, [-1, 3])
    np.testing.assert_array_equal(trace.prefix_tokens, [0, 64])
    assert trace.has_prefixes


def test_azure_trace_with_seven_fractional_digits(tmp_path: Path) -> None:
    trace = read_trace(write(tmp_path, "AzureLLMInferenceTrace_code.csv", AZURE))
    np.testing.assert_allclose(trace.arrival_s, [0.0, 4.314579, 4.31941, 13.4428667], rtol=0, atol=1e-9)
    np.testing.assert_array_equal(trace.input_tokens, [374, 396, 879, 91])
    np.testing.assert_array_equal(trace.output_tokens, [44, 109, 1, 12])


def test_azure_is_detected_by_header_with_extra_columns_offsets_and_gz(tmp_path: Path) -> None:
    text = (
        "Region,TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "eu,2024-05-10T00:00:01.5+00:00,10,2\n"
        "us,2024-05-10 02:00:00-02:00,20,3\n"
        "eu,2024-05-09 23:59:59Z,30,4\n"
    )
    trace = read_trace(write(tmp_path, "az.csv.gz", text))
    np.testing.assert_allclose(trace.arrival_s, [0.0, 2.5, 4 * 3600 + 1.0])
    np.testing.assert_array_equal(trace.input_tokens, [30, 10, 20])


def test_time_scale_and_max_requests(tmp_path: Path) -> None:
    path = write(tmp_path, "az.csv", AZURE)
    trace = read_trace(path, time_scale=0.5, max_requests=2)
    np.testing.assert_allclose(trace.arrival_s, [0.0, 4.314579 / 2])
    np.testing.assert_array_equal(trace.input_tokens, [374, 396])
    assert len(read_trace(path, max_requests=100)) == 4


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"time_scale": 0}, r"time_scale must be a finite number > 0, got 0"),
        ({"time_scale": float("inf")}, r"time_scale must be a finite number > 0"),
        ({"max_requests": 0}, r"max_requests must be None or an integer >= 1, got 0"),
        ({"max_requests": 2.0}, r"max_requests must be None or an integer >= 1, got 2.0"),
    ],
)
def test_bad_replay_arguments(tmp_path: Path, kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        read_trace(write(tmp_path, "az.csv", AZURE), **kwargs)


HEAD = "arrival_s,input_tokens,output_tokens\n"


@pytest.mark.parametrize(
    ("name", "text", "line", "message"),
    [
        ("empty.csv", "", 1, "empty file"),
        ("blank.csv", "\n  \n", 1, "empty file"),
        ("head.csv", HEAD, 2, "no requests after the header"),
        ("cols.csv", "arrival_s,input_tokens\n0,1\n", 1, "missing column 'output_tokens'"),
        ("prefix.csv", "arrival_s,input_tokens,output_tokens,prefix_group\n0,1,1,0\n", 1,
         "missing column 'prefix_tokens'"),
        ("text.csv", HEAD + "0,10,5\n1,ten,5\n", 3, "input_tokens: expected a number, got 'ten'"),
        ("cell.csv", HEAD + "0,10,5\n\n1,10,\n", 4, "output_tokens: expected a number, got ''"),
        ("nan.csv", HEAD + "nan,10,5\n", 2, "arrival_s: expected a finite number, got 'nan'"),
        ("neg.csv", HEAD + "0,10,5\n-0.5,10,5\n", 3, "arrival_s: arrival time must be >= 0, got '-0.5'"),
        ("zero.csv", HEAD + "0,10,5\n1,10,5\n2,10,0\n", 4, "output_tokens: must be >= 1, got '0'"),
        ("frac.csv", HEAD + "0,10.5,5\n", 2, "input_tokens: expected a whole number, got '10.5'"),
        ("fields.csv", HEAD + "0,10,5\n1,10\n", 3, "expected 3 fields"),
        ("pfx.csv", "arrival_s,input_tokens,output_tokens,prefix_group,prefix_tokens\n0,10,5,0,11\n", 2,
         "prefix_tokens: 11 exceeds the 10 input tokens"),
        ("grp.csv", "arrival_s,input_tokens,output_tokens,prefix_group,prefix_tokens\n0,10,5,-2,1\n", 2,
         "prefix_group: must be >= -1"),
        ("empty.jsonl", "", 1, "empty file"),
        ("json.jsonl", '{"arrival_s": 0, "input_tokens": 1, "output_tokens": 1}\n{"arrival_s": 1,\n', 2,
         "invalid JSON"),
        ("list.jsonl", "[0, 1, 1]\n", 1, "expected a JSON object per line, got list"),
        ("key.jsonl", '\n{"arrival_s": 0, "input_tokens": 1}\n', 2, "missing key 'output_tokens'"),
        ("str.jsonl", '{"arrival_s": "0", "input_tokens": 1, "output_tokens": 1}\n', 1,
         "arrival_s: expected a number, got '0'"),
        ("bool.jsonl", '{"arrival_s": 0, "input_tokens": true, "output_tokens": 1}\n', 1,
         "input_tokens: expected a number, got True"),
        ("nul.jsonl", '{"arrival_s": 0, "input_tokens": 1, "output_tokens": null}\n', 1,
         "output_tokens: expected a number, got None"),
        ("tok.jsonl", '{"arrival_s": 0, "input_tokens": 1, "output_tokens": 1}\n'
         '{"arrival_s": 3, "input_tokens": 0, "output_tokens": 1}\n', 2, "input_tokens: must be >= 1, got 0"),
        ("neg.jsonl.gz", '{"arrival_s": -1, "input_tokens": 1, "output_tokens": 1}\n', 1,
         "arrival time must be >= 0, got -1"),
        ("az.csv", "TIMESTAMP,ContextTokens\n2023-11-16 18:15:46.6805900,3\n", 1,
         "Azure trace is missing column 'GeneratedTokens'"),
        ("az2.csv", AZURE + "2023-11-16 18:16:01,5,5\nyesterday,5,5\n", 7,
         "TIMESTAMP: expected 'YYYY-MM-DD HH:MM:SS[.fffffff]', got 'yesterday'"),
        ("az3.csv", AZURE + "2023-02-30 18:16:01,5,5\n", 6, "TIMESTAMP: invalid date '2023-02-30'"),
        ("az4.csv", AZURE + "2023-11-16 25:16:01,5,5\n", 6, "TIMESTAMP: invalid time"),
        ("az5.csv", AZURE + "2023-11-16 18:16:01,5,0\n", 6, "GeneratedTokens: must be >= 1, got '0'"),
    ],
)
def test_errors_name_file_and_line(tmp_path: Path, name: str, text: str, line: int, message: str) -> None:
    path = write(tmp_path, name, text)
    with pytest.raises(TraceFormatError) as info:
        read_trace(path)
    err = info.value
    assert isinstance(err, ValueError)
    assert err.line == line and err.path == str(path)
    assert str(err).startswith(f"{path}:{line}: ")
    assert message in str(err)


def test_unknown_extension_on_read(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="cannot tell the trace format"):
        read_trace(write(tmp_path, "trace.txt", HEAD + "0,1,1\n"))


MIXED_ZONES = "TIMESTAMP,ContextTokens,GeneratedTokens\n2024-05-10 00:00:01Z,1,1\n2024-05-10 00:00:00,2,2\n"


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("latsim.csv", "id, arrival_s ,input_tokens,output_tokens\nx,2.5,1,9\n\ny,1e-3,2,9\nz,0.1,3,9\n"),
        ("prefix.csv.gz", "arrival_s,input_tokens,output_tokens,prefix_group,prefix_tokens\n0,10,5,0,4\n1,9,5,-1,0\n"),
        ("azure.csv", AZURE),
        ("zones.csv", AZURE.replace(",374", "+00:00,374").replace(",396", "Z,396").replace(",879", "-01:00,879")
         .replace(",91,", "+00:00,91,")),
        ("mixed.csv", MIXED_ZONES),
        ("coarse.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16,1,1\n2023-11-16 00:01,2,2\n"),
    ],
)
def test_fast_and_line_tracking_readers_agree(tmp_path: Path, name: str, text: str, monkeypatch) -> None:
    path = write(tmp_path, name, text)
    fast = read_trace(path)
    monkeypatch.setattr(trace_io, "read_csv_table_fast", lambda *args: None)
    assert_same(read_trace(path), fast)


def test_clean_csv_never_needs_the_slow_reader(tmp_path: Path, monkeypatch) -> None:
    def refuse(*args: object) -> None:
        raise AssertionError("slow reader used")

    monkeypatch.setattr(trace_io, "read_csv_table_slow", refuse)
    write_trace(make_trace(prefixes=True), tmp_path / "t.csv")
    assert_same(read_trace(tmp_path / "t.csv"), make_trace(prefixes=True))
    assert len(read_trace(write(tmp_path, "az.csv", AZURE))) == 4


def test_mixed_offsets_are_converted_to_utc(tmp_path: Path) -> None:
    trace = read_trace(write(tmp_path, "mixed.csv", MIXED_ZONES))
    np.testing.assert_array_equal(trace.arrival_s, [0.0, 1.0])
    np.testing.assert_array_equal(trace.input_tokens, [2, 1])


def test_an_unsorted_trace_keeps_each_requests_position_in_the_file(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("arrival_s,input_tokens,output_tokens\n2,20,1\n0,10,1\n1,30,1\n0,40,1\n")
    trace = read_trace(path, max_requests=3)
    assert trace.arrival_s.tolist() == [0, 0, 1] and trace.input_tokens.tolist() == [10, 40, 30]
    assert trace.request_ids.tolist() == [1, 3, 2]
    assert read_trace(path).request_ids.tolist() == [1, 3, 2, 0]
