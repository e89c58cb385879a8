"""``latsim measure``: a run that measured nothing, or could not start, ends in one line and exit 2."""

from __future__ import annotations

import socket
import sys
import types

import pytest

from latsim.measure import vllm_driver
from tests.test_cli import run

TINY = ["--num-requests", "2", "--input-len", "4", "--output-len", "2", "--burst"]


@pytest.fixture
def silent_endpoint():
    """A port that accepts connections and never answers."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        yield f"http://127.0.0.1:{server.getsockname()[1]}/v1"


def test_an_endpoint_that_answers_nothing_exits_2(silent_endpoint, tmp_path, monkeypatch, capsys):
    argv = ["measure", "--out", str(tmp_path / "run"), "--endpoint", silent_endpoint, "--model-name", "m",
            "--timeout-s", "0.3", *TINY]
    code, _, err = run(argv, monkeypatch, capsys)
    assert code == 2 and "no request" in err and "'ok': 0" in err and len(err.strip().splitlines()) == 1
    assert (tmp_path / "run" / "meta.json").exists()  # the failed run is kept to read its errors


def test_measure_with_vllm_missing_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "vllm", None)  # import vllm raises ImportError
    code, _, err = run(["measure", "--out", str(tmp_path / "run"), "--engine", "vllm", "--model", "llama-3.2-1b",
                        *TINY], monkeypatch, capsys)
    assert code == 2 and "vllm is not importable" in err and "--endpoint" in err
    assert len(err.strip().splitlines()) == 1


def test_measure_with_an_engine_that_cannot_start_is_one_line(tmp_path, monkeypatch, capsys):
    def no_gpu(settings):
        raise RuntimeError("Device string must not be empty")

    monkeypatch.setitem(sys.modules, "vllm", types.ModuleType("vllm"))
    monkeypatch.setattr(vllm_driver, "build_engine", no_gpu)
    code, _, err = run(["measure", "--out", str(tmp_path / "run"), "--engine", "vllm", "--model", "llama-3.2-1b",
                        *TINY], monkeypatch, capsys)
    assert code == 2 and "could not start" in err and "Device string must not be empty" in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(("extra", "needle"), [(["--qps", "3"], "--qps 3.0"), (["--input-len", "9"], "--input-len")])
def test_measure_refuses_workload_options_next_to_a_trace(extra, needle, tmp_path, monkeypatch, capsys):
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"arrival_s": 0, "input_tokens": 4, "output_tokens": 2}\n')
    code, _, err = run(["measure", "--out", str(tmp_path / "run"), "--endpoint", "http://127.0.0.1:1/v1",
                        "--model-name", "m", "--trace", str(trace), *extra], monkeypatch, capsys)
    assert code == 2 and "--trace" in err and needle in err


@pytest.mark.parametrize(("extra", "needle"), [
    (["--seed", "-1"], "--seed"), (["--num-requests", "0"], "--num-requests")])
def test_measure_names_a_bad_count_or_seed(extra, needle, tmp_path, monkeypatch, capsys):
    code, _, err = run(["measure", "--out", str(tmp_path / "run"), "--endpoint", "http://127.0.0.1:1/v1",
                        "--model-name", "m", "--qps", "2", *extra], monkeypatch, capsys)
    assert code == 2 and needle in err and not (tmp_path / "run").exists()
