"""All-reduce, one process per GPU (``torch.multiprocessing.spawn``), in up to three modes.

Points ``{world, bytes}`` of one ``world`` size run together in one spawn (starting NCCL costs
seconds).  Each size is measured in each requested mode (:data:`MODES`), mode after mode; rank 0
times with CUDA events (median of repeats after a warm-up, bf16 sum) and rewrites the rows to a
JSON file after each mode, so a crash in a later mode keeps the earlier rows.

- ``nccl``: one eager ``dist.all_reduce`` per timing, in place, after a ``dist.barrier()``.
- ``nccl_graph``: :data:`GRAPH_CALLS` back-to-back all-reduces captured in one CUDA graph on
  every rank; one replay is timed and divided by the count (per-call cost inside a graph).
- ``vllm_custom``: vLLM's ``CustomAllreduce`` on a gloo group (default ``max_size`` 8 MiB,
  ``symm_mem_enabled=False`` as in the TP=2 H200 runs), captured like ``nccl_graph`` (what vLLM
  replays); sizes it does not take are ``skipped``.

Every row carries ``bytes``, ``mode``, ``status`` and ``reason``; a failing mode gives ``error``
rows with the reason, never failing the group.  Multicast / NVLink SHARP stays off in every
process (:data:`SAFE_ENV`): the lent machines do not support it.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from latsim.calibration.context import BenchContext, Skip

SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
MODES = ("nccl", "nccl_graph", "vllm_custom")
WARMUP = 5
GRAPH_CALLS = 20


def skip_reason(ctx: BenchContext, world: int) -> str | None:
    """Why ``world`` GPUs cannot be measured here, or None."""
    if not ctx.is_cuda:
        return "all-reduce needs CUDA GPUs and NCCL"
    found = int(ctx.torch.cuda.device_count())
    return None if found >= world else f"all-reduce over {world} GPUs needs {world} GPUs; found {found}"


def run_group(ctx: BenchContext, world: int, sizes: list[int],
              modes: tuple[str, ...] = ("nccl",)) -> list[dict[str, Any]]:
    """Rows of every ``(mode, size)`` on ``world`` GPUs, mode-major (one mode: one row per size, in order).

    When the spawned group dies, rows already written are kept and the missing ones become
    ``error`` rows naming the exception; with no row written the exception propagates.
    """
    os.environ.update(SAFE_ENV)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "rows.json"
        reason = "not measured (the workers wrote no row)"
        try:
            ctx.torch.multiprocessing.spawn(_worker, args=(world, sizes, str(out), _free_port(), modes), nprocs=world)
        except Exception as exc:
            if not out.is_file():
                raise
            reason = _reason(exc)
        rows: list[dict[str, Any]] = json.loads(out.read_text()) if out.is_file() else []
    return complete_rows(rows, sizes, modes, reason)


def complete_rows(rows: list[dict[str, Any]], sizes: list[int], modes: tuple[str, ...],
                  reason: str) -> list[dict[str, Any]]:
    """``rows`` ordered mode-major over ``modes`` x ``sizes``; a missing pair becomes an ``error`` row."""
    have = {(r["mode"], int(r["bytes"])): r for r in rows}
    return [have.get((m, n)) or _failed(m, n, "error", reason) for m in modes for n in sizes]


def point_rows(ctx: BenchContext, world: int, bases: list[dict[str, Any]],
               modes: tuple[str, ...] = MODES) -> list[dict[str, Any]]:
    """Table rows of one world's comm points (``bases`` hold ``point_id`` and ``bytes``).

    One row per point and mode, the point's columns first; an unmeasurable world gives one
    ``skipped`` row per point, a group that fails before any row one ``error`` row per point.
    """
    reason = skip_reason(ctx, world)
    if reason is not None:
        return [{**b, "mode": "nccl", "status": "skipped", "reason": reason} for b in bases]
    try:
        measured = run_group(ctx, world, [int(b["bytes"]) for b in bases], modes)
    except Exception as exc:
        return [{**b, "mode": "nccl", "status": "error", "reason": _reason(exc)} for b in bases]
    by_size = {int(b["bytes"]): b for b in bases}
    return [{**by_size[int(m["bytes"])], **m} for m in measured]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _reason(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:400]


def _failed(mode: str, nbytes: int, status: str, reason: str) -> dict[str, Any]:
    return {"bytes": float(nbytes), "mode": mode, "status": status, "reason": reason}


@dataclass
class Group:
    """What a mode needs in a worker: torch modules, this rank, and a gloo group (or None)."""

    torch: Any
    dist: Any
    rank: int
    world: int
    cpu_group: Any = None


Setup = Callable[[Group], Any]
Measure = Callable[[Group, Any, int], dict[str, Any]]


def measure_modes(g: Group, sizes: list[int], modes: tuple[str, ...],
                  on_mode: Callable[[list[dict[str, Any]]], None] | None = None) -> list[dict[str, Any]]:
    """Rows of every ``(mode, size)``: :data:`SETUPS` once per mode, then :data:`MEASURES` per size.

    ``Skip`` gives ``skipped`` rows, any other exception ``error`` rows (a failed setup fails all
    of that mode's sizes); ``on_mode`` gets the rows so far after each mode.
    """
    rows: list[dict[str, Any]] = []
    for mode in modes:
        state: Any = None
        setup_fail: tuple[str, str] | None = None
        try:
            state = SETUPS[mode](g)
        except Skip as exc:
            setup_fail = ("skipped", str(exc))
        except Exception as exc:
            setup_fail = ("error", f"setup: {_reason(exc)}")
        for nbytes in sizes:
            if setup_fail is not None:
                rows.append(_failed(mode, nbytes, *setup_fail))
                continue
            try:
                rows.append({"bytes": float(nbytes), "mode": mode, "status": "ok", "reason": None,
                             **MEASURES[mode](g, state, nbytes)})
            except Skip as exc:
                rows.append(_failed(mode, nbytes, "skipped", str(exc)))
            except Exception as exc:
                rows.append(_failed(mode, nbytes, "error", _reason(exc)))
        _close(state)
        if on_mode is not None:
            on_mode(rows)
    return rows


def _close(state: Any) -> None:
    close = getattr(state[0] if isinstance(state, tuple) else state, "close", None)
    if callable(close):
        with contextlib.suppress(Exception):  # freeing IPC buffers at the end is best effort
            close()


def _worker(rank: int, world: int, sizes: list[int], out: str, port: int, modes: tuple[str, ...]) -> None:
    os.environ.update(SAFE_ENV)
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        cpu = dist.new_group(backend="gloo") if "vllm_custom" in modes else None

        def write(rows: list[dict[str, Any]]) -> None:
            Path(out).write_text(json.dumps(rows))

        measure_modes(Group(torch, dist, rank, world, cpu), sizes, modes, write if rank == 0 else None)
    finally:
        dist.destroy_process_group()


def _stats(times: list[float], reps: int, impl: str) -> dict[str, Any]:
    import numpy as np

    p10, med, p90 = np.percentile(times, [10, 50, 90])
    return {"median_s": float(med), "p10_s": float(p10), "p90_s": float(p90), "reps": reps, "impl": impl}


def _buffer(g: Group, nbytes: int) -> tuple[Any, int]:
    x = g.torch.randn(max(1, nbytes // 2), dtype=g.torch.bfloat16, device="cuda")
    return x, (30 if nbytes <= 16 * 2**20 else 10)


def _timed(g: Group, run: Callable[[], Any], reps: int, calls: int) -> list[float]:
    """Seconds per call of ``run`` (which makes ``calls`` all-reduces), once per rep after a barrier."""
    torch, times = g.torch, []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        g.dist.barrier()
        a.record()
        run()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e-3 / calls)
    return times


def _nccl_impl(g: Group) -> str:
    return f"nccl {'.'.join(map(str, g.torch.cuda.nccl.version()))}"


def _measure_nccl(g: Group, state: Any, nbytes: int) -> dict[str, Any]:
    x, reps = _buffer(g, nbytes)
    for _ in range(WARMUP):
        g.dist.all_reduce(x)
    g.torch.cuda.synchronize()
    return _stats(_timed(g, lambda: g.dist.all_reduce(x), reps, 1), reps, _nccl_impl(g))


def _replay_stats(g: Group, graph: Any, reps: int, impl: str) -> dict[str, Any]:
    for _ in range(2):
        graph.replay()
    g.torch.cuda.synchronize()
    return _stats(_timed(g, graph.replay, reps, GRAPH_CALLS), reps, f"{impl} cuda-graph x{GRAPH_CALLS}")


def _measure_nccl_graph(g: Group, state: Any, nbytes: int) -> dict[str, Any]:
    torch, (x, reps) = g.torch, _buffer(g, nbytes)
    for _ in range(WARMUP):
        g.dist.all_reduce(x)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(GRAPH_CALLS):
            g.dist.all_reduce(x)
    return _replay_stats(g, graph, reps, _nccl_impl(g))


def _setup_vllm(g: Group) -> tuple[Any, str]:
    """vLLM's ``CustomAllreduce`` on the gloo group (Skip when vllm does not import)."""
    os.environ["VLLM_SKIP_P2P_CHECK"] = "1"  # else the P2P probe asks vLLM's own world group
    try:
        import vllm
        from vllm.distributed.device_communicators.custom_all_reduce import CustomAllreduce
    except Exception as exc:
        raise Skip(f"vllm does not import: {_reason(exc)}") from exc
    ca = CustomAllreduce(group=g.cpu_group, device=g.rank)
    if ca.disabled:
        raise RuntimeError("vLLM's custom all-reduce disabled itself (custom-op library missing, world size "
                           "not 2/4/6/8, GPUs not fully NVLink-connected or no P2P); see the vLLM log")
    return ca, f"vllm {vllm.__version__} custom_all_reduce"


def _measure_vllm(g: Group, state: tuple[Any, str], nbytes: int) -> dict[str, Any]:
    torch, (ca, impl), (x, reps) = g.torch, state, _buffer(g, nbytes)
    if not ca.should_custom_ar(x):
        raise Skip(f"vLLM's custom all-reduce takes messages below max_size={ca.max_size} B (multiples of 16 B); "
                   f"{nbytes} B goes to NCCL")
    for _ in range(WARMUP):
        ca.custom_all_reduce(x)
    torch.cuda.synchronize()
    graph, outs = torch.cuda.CUDAGraph(), []
    with ca.capture(), torch.cuda.graph(graph):  # capture() registers the graph's buffers on exit
        for _ in range(GRAPH_CALLS):
            outs.append(ca.custom_all_reduce(x))
    return _replay_stats(g, graph, reps, impl)


SETUPS: dict[str, Setup] = {"nccl": lambda g: None, "nccl_graph": lambda g: None, "vllm_custom": _setup_vllm}
MEASURES: dict[str, Measure] = {"nccl": _measure_nccl, "nccl_graph": _measure_nccl_graph,
                                "vllm_custom": _measure_vllm}
