"""How much a kernel slows once the GPU runs at its power cap (issue 17, long prompts).

``device_prefill_probe.py`` found an H200 running a long prefill step after step at its 700 W
cap with the SM clock at 1,500-1,650 MHz instead of 1,980, its GEMMs 18 % and its prefill
attention 12-24 % slower than the calibration grid's short bursts.  This probe asks which
kernels that touches: each kernel runs after an idle pause (the clocks recover), back to back
for ``--seconds``, every call timed by CUDA events, ``nvidia-smi`` sampling the SM clock and
power every 50 ms.  Kernels: bf16 GEMMs of the 8B's gate_up (K 4,096, N 28,672) and vLLM's
CUTLASS fp8 GEMMs of the 70B's (K 8,192, N 57,344) over 64 to 8,160 rows, a prefill chunk's and a
decode batch's paged FA3 attention.  Then duty-cycle runs (the bf16 GEMM of 8,160 rows on for
``on`` ms, idle for ``off`` ms) show how fast the clock recovers in a pause.

Writes ``$OUT/power_probe.json``; from the repository root on the GPU machine with vLLM
importable (``scripts/device_fidelity.sh power``).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
from device_prefill_probe import Clocks  # scripts/ is on the path when a script runs by path

from latsim.calibration import gemm
from latsim.calibration.attention import _flash_paged, _paged
from latsim.calibration.context import make_context

GEMMS = [("bf16", 4096, 28672, m) for m in (64, 256, 537, 2048, 8160)] + \
        [("fp8", 8192, 57344, m) for m in (64, 537, 2048, 8160)]
DUTY = [(100, 100), (200, 50), (50, 200)]


def _gemm(ctx: Any, dtype: str, k: int, n: int, m: int) -> Any:
    ws = gemm._weights(ctx, k, n, dtype)
    xs = [gemm._make(ctx, m, k, dtype) for _ in range(len(ws))]
    fn, _ = gemm._kernel(ctx, dtype, xs, ws)
    return fn


def _attention(ctx: Any, q_lens: list[int], k_lens: list[int]) -> Any:
    caches = [_paged(ctx, q_lens, k_lens, 32, 8, 128, seed=j) for j in range(2)]
    return lambda i: _flash_paged(ctx, caches[i % 2])


def sustained(ctx: Any, fn: Any, seconds: float, on_ms: float = 0,
              off_ms: float = 0) -> dict[str, Any]:
    """``fn`` back to back (or ``on_ms`` busy / ``off_ms`` idle) for ``seconds`` after a 1.5 s pause:
    per-call (start seconds, milliseconds) and the clock samples."""
    torch = ctx.torch
    fn(0)
    torch.cuda.synchronize()
    time.sleep(1.5)
    calls: list[tuple[float, float]] = []
    t0, i = time.perf_counter(), 0
    with Clocks() as clocks:
        while time.perf_counter() - t0 < seconds:
            burst_start = time.perf_counter()
            while True:
                ev = [torch.cuda.Event(enable_timing=True) for _ in range(16)]
                start = time.perf_counter() - t0
                for j in range(8):
                    ev[2 * j].record()
                    fn(i)
                    ev[2 * j + 1].record()
                    i += 1
                torch.cuda.synchronize()
                calls += [(start, ev[2 * j].elapsed_time(ev[2 * j + 1])) for j in range(8)]
                if not on_ms or (time.perf_counter() - burst_start) * 1e3 >= on_ms:
                    break
            if off_ms:
                time.sleep(off_ms / 1e3)
    return {"calls": calls, "clocks": clocks.lines}


def _summary(r: dict[str, Any]) -> str:
    t = np.array([c[1] for c in r["calls"]])
    s = np.array([c[0] for c in r["calls"]])
    fresh = np.median(t[s < 0.05]) if (s < 0.05).any() else t[0]
    late = np.median(t[s > s.max() - 1.0])
    sm = [int(line.split(", ")[1]) for line in r["clocks"] if line.split(", ")[1].strip().isdigit()]
    return (f"fresh {fresh:8.3f} ms  sustained {late:8.3f} ms  x{late / fresh:5.3f}  "
            f"sm min/median {min(sm)}/{int(np.median(sm))}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.environ.get("OUT", "."))
    p.add_argument("--seconds", type=float, default=2.5)
    args = p.parse_args()
    ctx = make_context("cuda")
    rows: list[dict[str, Any]] = []
    for dtype, k, n, m in GEMMS:
        r = sustained(ctx, _gemm(ctx, dtype, k, n, m), args.seconds)
        rows.append({"kernel": "gemm", "dtype": dtype, "K": k, "N": n, "M": m, **r})
    ctx.clear()
    for label, q, kk in (("prefill ctx=8160", [8160], [16320]), ("decode 256 x 1024", [1] * 256, [1024] * 256)):
        r = sustained(ctx, _attention(ctx, q, kk), args.seconds)
        rows.append({"kernel": "attention", "case": label, **r})
        ctx.clear()
    big = _gemm(ctx, "bf16", 4096, 28672, 8160)
    for on, off in DUTY:
        r = sustained(ctx, big, 3.0, on_ms=on, off_ms=off)
        rows.append({"kernel": "gemm-duty", "dtype": "bf16", "M": 8160, "on_ms": on, "off_ms": off, **r})
    for r in rows:
        duty = f" {r['on_ms']}/{r['off_ms']}" if "on_ms" in r else ""
        label = r.get("case") or f"{r.get('dtype')} M={r.get('M')}{duty}"
        print(f"{r['kernel']:>9} {label:>22}  {_summary(r)}")
    Path(args.out, "power_probe.json").write_text(json.dumps({"gpu": ctx.torch.cuda.get_device_name(0), "rows": rows}))


if __name__ == "__main__":
    main()
