"""scripts/output_lag.py: the front end's time per output ahead of a first token, measured from
vLLM's engine stamps beside the client's first tokens, at the reference host."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from latsim.engines.vllm import host_write
from latsim.engines.vllm.host_terms import read_host_terms, reference_probe_s
from latsim.measure.records import RequestRecord, write_run
from tests.script_module import load_script

A_S, B_S = 1.2e-3, 6e-5


def level(root: Path, probe_s: float, mode: str = "open", engine_times: bool = True) -> Path:
    """Requests scheduled 10 ms apart, each running 95 ms, so 0-9 others are running at a first
    token; the client sees it ``A_S + B_S x ahead`` after the engine's stamp."""
    rng = np.random.default_rng(7)
    starts = np.cumsum(rng.uniform(0.002, 0.018, 60))
    records = []
    for i, start in enumerate(starts):
        stamp, last = start + 0.005, start + 0.095
        ahead = np.sum((starts <= stamp) & (starts + 0.095 >= stamp)) - 1
        first = stamp + A_S + B_S * ahead
        stamps = {"engine_queued_s": start, "engine_scheduled_s": start, "engine_first_token_s": stamp,
                  "engine_last_token_s": last} if engine_times else {}
        records.append(RequestRecord(f"r{i}", start - 0.002, start - 0.002, 64, 2, 2, first, (first, last + 1e-3),
                                     None, last + 1e-3, "ok", **stamps))
    meta = {"driver": "synthetic", "load": {"mode": mode},
            "host_probe": {"summary": {"probe_p50_s": probe_s}}}
    return write_run(root, records, meta)


def run(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    module = load_script(Path("output_lag.py"))
    monkeypatch.setattr("sys.argv", ["scripts/output_lag.py", *argv])
    module.main()


def test_the_slope_is_written_at_the_reference_host_then_left_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    hostfile = tmp_path / "host.yaml"
    shutil.copy(host_write.shipped_path(), hostfile)
    slow = level(tmp_path / "slow", probe_s=2 * reference_probe_s())  # half the reference speed
    burst = level(tmp_path / "burst", probe_s=reference_probe_s(), mode="burst")  # left out
    argv = [str(slow), str(burst), "--write", "--yaml", str(hostfile)]
    run(argv, monkeypatch)
    out = capsys.readouterr().out
    assert "1 levels" in out and "written (output_seq_s)" in out
    assert read_host_terms(hostfile, "calibrated").output_seq_s == pytest.approx(B_S / 2, abs=1e-8)
    before = hostfile.read_bytes()
    run(argv, monkeypatch)
    assert "unchanged" in capsys.readouterr().out
    assert hostfile.read_bytes() == before


def test_runs_without_engine_times_are_refused_with_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plain = level(tmp_path / "plain", probe_s=reference_probe_s(), engine_times=False)
    with pytest.raises(SystemExit, match="no open-loop level with vLLM's engine times"):
        run([str(plain)], monkeypatch)
