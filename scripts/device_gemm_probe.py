"""How the calibration's per-call GEMM timing compares with GEMMs replayed back to back (issue 17).

A live trace of Llama-3.1-8B's decode steps (``data/traces/h200/llama-3.1-8b-decode``, 64
sequences, CUDA-graph replays) measured its four linear layers at 125 us a layer, where the
shipped profile's rows for the same shapes (``gemm.parquet``, timed one call at a time between
CUDA events, :class:`latsim.calibration.timing.CudaTimer`) add up to 140 us: +12 %, about what
the model's decode steps at small batches are too slow by.  This times each of the 8B's four
shapes (bf16, ``torch.nn.functional.linear`` as the grid does) at small row counts three ways:

1. ``events``: the calibration's timer, one call between two events, after a GPU sleep;
2. ``stream``: ``LAYERS`` calls on distinct weights (as a step's layers are), launched back to
   back between two events, per call;
3. ``graph``: the same calls captured in one CUDA graph and replayed, per call (the engine's
   decode steps replay graphs).

Writes ``$OUT/gemm_probe.json`` (per shape and row count: the three medians in seconds, and the
GPU, torch and CUDA versions); prints a table.  Plain torch; run from the repository root on
the GPU machine: ``python3 scripts/device_gemm_probe.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from pathlib import Path
from typing import Any

from latsim.atomic import atomic_write_text
from latsim.calibration.timing import CudaTimer, capture_graph

SHAPES = {"qkv": (4096, 6144), "o": (4096, 4096), "gate_up": (4096, 28672), "down": (14336, 4096)}
"""Llama-3.1-8B's linear layers at TP=1, (K, N)."""
ROWS = (1, 8, 16, 32, 64, 128, 256)
LAYERS = 32
REPLAYS = 20


def _stream(torch: Any, calls: list[Any], repeats: int) -> float:
    """Median seconds per call of ``calls`` launched back to back between two events."""
    per_call = []
    for _ in range(repeats):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(int(2e7))
        a.record()
        for call in calls:
            call()
        b.record()
        torch.cuda.synchronize()
        per_call.append(a.elapsed_time(b) * 1e-3 / len(calls))
    return statistics.median(per_call)


def _graph(torch: Any, calls: list[Any], repeats: int) -> float:
    """Median seconds per call of ``calls`` captured in one CUDA graph and replayed."""
    graph = capture_graph(torch, calls)
    graph.replay()
    torch.cuda.synchronize()
    return _stream(torch, [graph.replay], repeats) / len(calls)


def probe(torch: Any, name: str, k: int, n: int, m: int) -> dict[str, Any]:
    """The three timings of one shape at ``m`` rows."""
    f = torch.nn.functional.linear
    weights = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02 for _ in range(LAYERS)]
    xs = [torch.randn(m, k, device="cuda", dtype=torch.bfloat16) for _ in range(LAYERS)]
    calls = [lambda x=x, w=w: f(x, w) for x, w in zip(xs, weights, strict=True)]
    events = CudaTimer(torch).time(lambda i: calls[i % LAYERS]()).median_s
    row = {"shape": name, "K": k, "N": n, "M": m, "events_s": events,
           "stream_s": _stream(torch, calls, REPLAYS), "graph_s": _graph(torch, calls, REPLAYS)}
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "out"))
    args = ap.parse_args()
    import torch

    rows = []
    print(f"{'shape':8s} {'M':>4s} {'events us':>10s} {'stream us':>10s} {'graph us':>9s}")
    for name, (k, n) in SHAPES.items():
        for m in ROWS:
            row = probe(torch, name, k, n, m)
            torch.cuda.empty_cache()
            rows.append(row)
            us = [row[key] * 1e6 for key in ("events_s", "stream_s", "graph_s")]
            print(f"{name:8s} {m:4d} {us[0]:10.1f} {us[1]:10.1f} {us[2]:9.1f}")
    result = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "cuda": torch.version.cuda,
              "layers": LAYERS, "replays": REPLAYS, "rows": rows}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "gemm_probe.json", json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
