"""All-reduce over NCCL, one process per GPU (``torch.multiprocessing.spawn``).

Points ``{world, bytes}`` of one ``world`` size run together in one spawn (starting NCCL costs
seconds); rank 0 times each message size with CUDA events (median of repeats after a warm-up,
bf16 sum in place) and writes the rows to a JSON file the parent reads.  With fewer GPUs than
``world`` (or the CPU backend) the points are skipped with the reason recorded.

NVLink SHARP / multicast stays off in every process (``NCCL_NVLS_ENABLE=0``,
``TORCH_SYMM_MEM_DISABLE_MULTICAST=1``, ``NVSHMEM_DISABLE_NVLS=1``): the lent machines do not
support it.
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
from pathlib import Path
from typing import Any

from latsim.calibration.context import BenchContext

SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
WARMUP = 5


def skip_reason(ctx: BenchContext, world: int) -> str | None:
    """Why ``world`` GPUs cannot be measured here, or None."""
    if not ctx.is_cuda:
        return "all-reduce needs CUDA GPUs and NCCL"
    found = int(ctx.torch.cuda.device_count())
    return None if found >= world else f"all-reduce over {world} GPUs needs {world} GPUs; found {found}"


def run_group(ctx: BenchContext, world: int, sizes: list[int]) -> list[dict[str, Any]]:
    """Measure every message size in ``sizes`` (bytes) on ``world`` GPUs; one row per size."""
    os.environ.update(SAFE_ENV)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "rows.json"
        ctx.torch.multiprocessing.spawn(_worker, args=(world, sizes, str(out), _free_port()), nprocs=world)
        rows: list[dict[str, Any]] = json.loads(out.read_text())
    return rows


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _worker(rank: int, world: int, sizes: list[int], out: str, port: int) -> None:
    os.environ.update(SAFE_ENV)
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        rows = [_measure(torch, dist, nbytes) for nbytes in sizes]
        if rank == 0:
            Path(out).write_text(json.dumps(rows))
    finally:
        dist.destroy_process_group()


def _measure(torch: Any, dist: Any, nbytes: int) -> dict[str, Any]:
    import numpy as np

    x = torch.randn(max(1, nbytes // 2), dtype=torch.bfloat16, device="cuda")
    reps = 30 if nbytes <= 16 * 2**20 else 10
    for _ in range(WARMUP):
        dist.all_reduce(x)
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        dist.barrier()
        a.record()
        dist.all_reduce(x)
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e-3)
    p10, med, p90 = np.percentile(times, [10, 50, 90])
    return {"median_s": float(med), "p10_s": float(p10), "p90_s": float(p90), "reps": reps,
            "impl": f"nccl {'.'.join(map(str, torch.cuda.nccl.version()))}", "bytes": float(nbytes)}
