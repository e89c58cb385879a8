"""Fixed costs: launching kernels one by one, and replaying a captured CUDA graph.

Point ``{mode, kernels}``; the kernel is a one-element in-place add, so time is all overhead.

- ``eager``: ``kernels`` launches then a synchronise; ``median_s`` is the wall time of the
  whole sequence (host clock), ``gpu_s`` its span on the device (CUDA events).
- ``graph``: one replay of a graph holding ``kernels`` such kernels; ``median_s`` is its span on
  the device, ``host_s`` the host time of the ``replay()`` call.  Fitting ``a + b * kernels``
  over the grid gives the per-replay and per-kernel costs vLLM pays with CUDA graphs on.
"""

from __future__ import annotations

import time
from typing import Any

from latsim.calibration.context import BenchContext, Skip
from latsim.calibration.timing import summarize

MODES = ("eager", "graph")
REPS = 30


def run(ctx: BenchContext, p: dict[str, Any]) -> dict[str, Any]:
    mode, n = str(p["mode"]), int(p["kernels"])
    if mode not in MODES:
        raise ValueError(f"overhead mode={mode!r}; accepted: {', '.join(MODES)}")
    if mode == "graph" and not ctx.is_cuda:
        raise Skip("CUDA graphs need a CUDA GPU")
    x = ctx.randn(1, dtype=ctx.torch.float32)
    return _eager(ctx, x, n) if mode == "eager" else _graph(ctx, x, n)


def _eager(ctx: BenchContext, x: Any, n: int) -> dict[str, Any]:
    walls, gpus = [], []
    for _ in range(REPS + 3):
        ctx.synchronize()
        ev = _events(ctx)
        t0 = time.perf_counter()
        for _ in range(n):
            x.add_(1.0)
        ctx.synchronize()
        walls.append(time.perf_counter() - t0)
        gpus.append(_elapsed(ctx, ev, n, x))
    w, g = summarize(walls[3:]), summarize(gpus[3:])
    return {"median_s": w.median_s, "p10_s": w.p10_s, "p90_s": w.p90_s, "reps": w.reps, "gpu_s": g.median_s,
            "host_s": w.median_s, "impl": "tensor.add_"}


def _events(ctx: BenchContext) -> Any:
    if not ctx.is_cuda:
        return None
    start = ctx.torch.cuda.Event(enable_timing=True)
    start.record()
    return start


def _elapsed(ctx: BenchContext, start: Any, n: int, x: Any) -> float:
    if start is None:
        return float("nan")
    end = ctx.torch.cuda.Event(enable_timing=True)
    end.record()
    end.synchronize()
    return float(start.elapsed_time(end)) * 1e-3


def _graph(ctx: BenchContext, x: Any, n: int) -> dict[str, Any]:
    torch = ctx.torch
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            x.add_(1.0)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(n):
            x.add_(1.0)
    hosts: list[float] = []

    def replay(i: int) -> None:
        t0 = time.perf_counter()
        graph.replay()
        hosts.append(time.perf_counter() - t0)
    t = ctx.timer.time(replay)
    return {"median_s": t.median_s, "p10_s": t.p10_s, "p90_s": t.p90_s, "reps": t.reps,
            "host_s": summarize(hosts).median_s, "gpu_s": t.median_s, "impl": "torch.cuda.CUDAGraph"}
