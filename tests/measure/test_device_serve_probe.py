"""scripts/device_serve_probe.py against the package's streaming test server (no vLLM): the
levels it writes replay like any run, with the host probe and the server's KV size in them; a
server that dies before it is healthy is named with its log."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from latsim.measure.records import load_run
from latsim.measure.testserver import ServerSchedule, StreamingTestServer
from tests.script_module import load_script


def args_for(probe, port: int, out: Path):
    argv = ["--burst", "12", "--warmup", "4", "--level-seconds", "1", "--fractions", "0.25",
            "--port", str(port), "--out", str(out), "--shape", "fixed:in=16,out=6"]
    saved = sys.argv
    sys.argv = ["scripts/device_serve_probe.py", *argv]
    try:
        return probe.parse_args()
    finally:
        sys.argv = saved


def test_levels_are_written_as_replayable_runs(tmp_path: Path) -> None:
    probe = load_script(Path("device_serve_probe.py"))
    log = tmp_path / "server.log"
    log.write_text("INFO ... GPU KV cache size: 919,824 tokens\n")
    schedule = ServerSchedule(first_token_s=0.01, token_interval_s=0.002, include_token_ids=True)
    with StreamingTestServer(schedule) as server:
        port = int(server.url.rsplit(":", 1)[1].split("/")[0])
        args = args_for(probe, port, tmp_path)
        config = json.loads((probe.CATALOG / "llama-3.1-8b.json").read_text())
        meta = {"vocab_size": int(config["vocab_size"]),
                "run": {"model": {"name": "llama-3.1-8b", "config": config},
                        "engine_config": probe.engine_config(args, log), "workload": {"seed": 0}}}
        rows = asyncio.run(probe.measure(args, meta, tmp_path / "root", os.getpid()))
    assert [r["level"] for r in rows] == ["burst", "f0.25"]
    assert sorted(p.name for p in (tmp_path / "root").iterdir()) == ["burst", "f0.25"]  # no warm-up run kept
    level = load_run(tmp_path / "root" / "f0.25")
    assert level.meta["engine_config"]["num_gpu_blocks"] == 919824 // 16
    assert level.meta["host_probe"]["summary"]["samples"] >= 1
    assert level.meta["load"]["mode"] == "open" and level.meta["level"] == "f0.25"
    assert (level.requests["status"] == "ok").any()


def test_a_server_that_exits_before_it_is_healthy_is_reported_with_its_log(tmp_path: Path) -> None:
    probe = load_script(Path("device_serve_probe.py"))
    log = tmp_path / "server.log"
    log.write_text("ValueError: no such model\n")
    proc = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    proc.wait()
    with pytest.raises(SystemExit, match=r"server exited \(3\)[\s\S]*no such model"):
        probe.wait_healthy(proc, 9, log, timeout_s=5.0)
