"""Measure one model through vLLM's OpenAI server (``vllm serve``) on a GPU machine (issue 17).

Every run of ``data/validation`` drives vLLM in-process (``AsyncLLM``, token ids out); a planner's
deployment streams through the OpenAI server, whose output path (one HTTP server-sent event per
token and request, JSON for each) costs more per output.  This starts the server as a
subprocess (dummy weights from the catalog config, ``--skip-tokenizer-init``: prompts go as token
ids), waits for ``/health``, warms it up, then a saturation burst and Poisson levels at
``--fractions`` of the burst's capacity through :mod:`latsim.measure.http_driver`, the host
probe beside each level (the server's processes watched), as ``scripts/device_measure.py`` does
in-process.  Each level's run directory goes to ``OUT/serve-<model>-<shape>/<level>/`` with the
server's resolved limits in ``engine_config`` (its KV size read from its log), so ``latsim
validate`` replays it like any other run.  Run from the repository root on the GPU machine with
the vLLM bundle importable:

    PYTHONPATH=/tmp/site:. VLLM_USE_FLASHINFER_SAMPLER=0 python3 scripts/device_serve_probe.py \\
        --model llama-3.1-8b --shape fixed:in=512,out=128
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
from device_measure import capacity_rps, make_trace, parse_shape, poisson_trace, print_table, summarize

from latsim.atomic import atomic_write_text
from latsim.measure.hostprobe import HostProbe
from latsim.measure.http_driver import HttpOptions, run_http_async
from latsim.measure.loadgen import LoadSpec
from latsim.paths import CATALOG as CATALOG_DIR

CATALOG = CATALOG_DIR / "models"
KV_LINE = re.compile(r"GPU KV cache size: ([\d,]+) tokens")


def start_server(args: argparse.Namespace, model_dir: str, log: Path) -> subprocess.Popen[bytes]:
    """The OpenAI server on ``args.port`` serving ``model_dir`` as ``args.model``."""
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model_dir,
           "--served-model-name", args.model, "--load-format", "dummy", "--skip-tokenizer-init",
           "--port", str(args.port), "--max-model-len", str(args.max_model_len),
           "--gpu-memory-utilization", str(args.gpu_memory_utilization), "--seed", "0"]
    return subprocess.Popen(cmd, stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True)


def wait_healthy(proc: subprocess.Popen[bytes], port: int, log: Path, timeout_s: float) -> None:
    """Return once ``/health`` answers 200; SystemExit with the log's tail if the server dies
    or ``timeout_s`` passes."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited ({proc.returncode}):\n{log.read_text(errors='replace')[-3000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        time.sleep(1.0)
    raise SystemExit(f"server not healthy after {timeout_s:.0f} s:\n{log.read_text(errors='replace')[-3000:]}")


def engine_config(args: argparse.Namespace, log: Path) -> dict[str, Any]:
    """The server's limits (vLLM 0.25.1's defaults on an H200, the flags given) and its KV size."""
    found = KV_LINE.findall(log.read_text(errors="replace"))
    tokens = int(found[-1].replace(",", "")) if found else None
    return {"max_num_seqs": 1024, "max_num_batched_tokens": 8192, "chunked_prefill": True, "async_scheduling": True,
            "block_size": 16, "num_gpu_blocks": tokens // 16 if tokens else None, "kv_capacity_tokens": tokens,
            "gpu_memory_utilization": args.gpu_memory_utilization, "prefix_caching": True,
            "kv_cache_dtype": "auto", "max_model_len": args.max_model_len, "tp": 1, "pp": 1,
            "front_end": "vllm serve (OpenAI completions, streamed)"}


async def level(args: argparse.Namespace, name: str, trace: Any, load: LoadSpec, root: Path | None,
                meta: dict[str, Any], watch: int) -> Any:
    """One level through the server, the host probe beside it; its run directory under ``root``."""
    url = f"http://127.0.0.1:{args.port}/v1"
    options = HttpOptions(seed=args.seed, run_id=f"serve-{name}", vocab_size=meta["vocab_size"],
                          extra_body={"return_token_ids": True})
    out = root / name if root is not None else None
    with HostProbe(watch=watch) as probe:
        m = await run_http_async(url, args.model, trace, load, out, options=options,
                                 meta={**meta["run"], "level": name})
    if out is not None:
        path = out / "meta.json"
        data = json.loads(path.read_text())
        data["host_probe"] = probe.result()
        atomic_write_text(path, json.dumps(data, indent=1) + "\n")
    return m


async def measure(args: argparse.Namespace, meta: dict[str, Any], root: Path, watch: int) -> list[dict[str, Any]]:
    shape, rng = parse_shape(args.shape), np.random.default_rng(args.seed)
    warm = make_trace(np.zeros(args.warmup), shape, rng, args.max_model_len)
    await level(args, "warmup", warm, LoadSpec(mode="burst", request_timeout_s=120.0), None, meta, watch)
    burst = make_trace(np.zeros(args.burst), shape, rng, args.max_model_len)
    m = await level(args, "burst", burst, LoadSpec(mode="burst", request_timeout_s=120.0), root, meta, watch)
    rows, cap = [summarize("burst", None, m)], capacity_rps(m)
    print(f"capacity {cap:.2f} req/s", flush=True)
    for f in args.fractions:
        qps = f * cap
        trace = poisson_trace(qps, args.level_seconds, shape, rng, args.max_model_len)
        load = LoadSpec(mode="open", request_timeout_s=args.level_seconds, deadline_s=args.level_seconds * 2)
        m = await level(args, f"f{f:.2f}", trace, load, root, meta, watch)
        rows.append(summarize(f"f{f:.2f}", qps, m))
    return rows


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="llama-3.1-8b", help="name in latsim/data/catalog/models/")
    p.add_argument("--shape", default="fixed:in=512,out=128")
    p.add_argument("--fractions", type=lambda s: [float(x) for x in s.split(",") if x], default=[0.25, 0.5, 0.75, 0.9])
    p.add_argument("--burst", type=int, default=300)
    p.add_argument("--warmup", type=int, default=256)
    p.add_argument("--level-seconds", type=float, default=40.0)
    p.add_argument("--max-model-len", type=int, default=8192)
    p.add_argument("--gpu-memory-utilization", type=float, default=0.92)
    p.add_argument("--port", type=int, default=8011)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--start-timeout", type=float, default=300.0)
    p.add_argument("--out", default=os.environ.get("OUT", "out"))
    return p.parse_args()


def main() -> None:
    args = parse_args()
    src = CATALOG / f"{args.model}.json"
    if not src.is_file():
        raise SystemExit(f"--model {args.model!r} is not in the catalog ({CATALOG})")
    config = json.loads(src.read_text())
    shape = parse_shape(args.shape)
    label = args.shape.split(":")[0] if shape["kind"] != "fixed" else f"fixed-in{shape['in']}-out{shape['out']}"
    root = Path(args.out) / f"serve-{args.model}-{label}"
    root.mkdir(parents=True, exist_ok=True)
    log = Path(args.out) / "server.log"
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "config.json").write_text(src.read_text())
        t0 = time.monotonic()
        proc = start_server(args, tmp, log)
        try:
            wait_healthy(proc, args.port, log, args.start_timeout)
            print(f"server healthy after {time.monotonic() - t0:.0f} s", flush=True)
            meta = {"vocab_size": int(config["vocab_size"]),
                    "run": {"model": {"name": args.model, "config": config}, "engine_config": engine_config(args, log),
                            "workload": {"shape": shape, "seed": args.seed}, "driver_note": "vllm serve"}}
            rows = asyncio.run(measure(args, meta, root, proc.pid))
        finally:
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
    print_table(rows)


if __name__ == "__main__":
    main()
