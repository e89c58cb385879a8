"""Why a long prefill chunk runs slower in a live engine than in its microbenchmark (issue 17).

A live trace of Llama-3.1-8B (``data/traces/h200/llama-3.1-8b``) measured FA3 over 8,160-token
chunks at cached contexts 0 / 8k / 16k 7-19 % slower than the calibration grid's timing of the
same call.  The engine's call differs from the grid's in two ways, timed here one at a time on
the 8B's attention shape (32 query heads, 8 KV heads, head dim 128, paged 16-token blocks):

1. ``alone``: the chunk by itself, with the calibration timer (a short burst after a GPU sleep:
   the grid's conditions);
2. ``mixed``: the chunk and 32 or 64 decode rows (contexts near 1,024) in one varlen call, as a
   mixed step runs it, decodes first (vLLM's batch order) or last;
3. ``sustained``: the chunk between the GEMMs of the same step (qkv, o, gate_up, down of 8,160
   rows), 32 layers a step, step after step for a few seconds, each call timed by CUDA events,
   so the GPU runs at the power and clocks of a long prefill; and the gate_up GEMM alone, short
   and sustained, as the compute-bound reference.

Beside the sustained runs ``nvidia-smi`` samples the SM clock, power and the clock-event
reasons every 50 ms.  Writes ``$OUT/prefill_probe.json``; run from the repository root on the
GPU machine with vLLM importable (``scripts/device_fidelity.sh probe``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from latsim.calibration.attention import _flash_paged, _paged
from latsim.calibration.context import make_context

HQ, HKV, D, LAYERS = 32, 8, 128, 32
HIDDEN, INTER = 4096, 14336
CHUNK = 8160
CONTEXTS = (0, 8160, 16320)
SMI_FIELDS = "timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu"
SMI_REASONS = ",clocks_event_reasons.active"


def _attn(ctx: Any, q_lens: list[int], k_lens: list[int]) -> Any:
    caches = [_paged(ctx, q_lens, k_lens, HQ, HKV, D, seed=j) for j in range(2)]
    return lambda i: _flash_paged(ctx, caches[i % 2])


def _ms(ctx: Any, fn: Any) -> dict[str, float]:
    t = ctx.timer.time(fn)
    return {"median_ms": t.median_s * 1e3, "p10_ms": t.p10_s * 1e3, "p90_ms": t.p90_s * 1e3, "reps": t.reps}


def _decodes(n: int) -> list[int]:
    return [1024 + (37 * i) % 97 for i in range(n)]


def alone_and_mixed(ctx: Any) -> list[dict[str, Any]]:
    rows = []
    for c in CONTEXTS:
        rows.append({"case": "alone", "ctx": c, "decodes": 0, **_ms(ctx, _attn(ctx, [CHUNK], [c + CHUNK]))})
        for n in (32, 64):
            dec = _decodes(n)
            first = _attn(ctx, [1] * n + [CHUNK], [*dec, c + CHUNK])
            last = _attn(ctx, [CHUNK] + [1] * n, [c + CHUNK, *dec])
            rows.append({"case": "mixed-decodes-first", "ctx": c, "decodes": n, **_ms(ctx, first)})
            rows.append({"case": "mixed-decodes-last", "ctx": c, "decodes": n, **_ms(ctx, last)})
        ctx.clear()
    rows.append({"case": "decodes-alone", "ctx": 0, "decodes": 64, **_ms(ctx, _attn(ctx, [1] * 64, _decodes(64)))})
    return rows


class Clocks:
    """``nvidia-smi`` sampling every 50 ms into a temporary file while the context is open."""

    def __enter__(self) -> Clocks:
        fields = SMI_FIELDS + SMI_REASONS
        check = subprocess.run(["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader"], capture_output=True)
        if check.returncode != 0:
            fields = SMI_FIELDS
        self.file = tempfile.NamedTemporaryFile("w+", suffix=".csv", delete=False)
        self.proc = subprocess.Popen(["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits",
                                      "-lms", "50"], stdout=self.file, stderr=subprocess.STDOUT)
        time.sleep(0.3)
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=5)
        self.file.seek(0)
        self.lines = [line.strip() for line in self.file.read().splitlines() if line.strip()]
        os.unlink(self.file.name)


def _weights(ctx: Any) -> dict[str, Any]:
    return {"qkv": ctx.randn(HIDDEN, HIDDEN + 2 * HKV * D), "o": ctx.randn(HIDDEN, HIDDEN),
            "gate_up": ctx.randn(HIDDEN, 2 * INTER), "down": ctx.randn(INTER, HIDDEN)}


def _events(ctx: Any, n: int) -> list[Any]:
    return [ctx.torch.cuda.Event(enable_timing=True) for _ in range(n)]


def sustained_steps(ctx: Any, c: int, seconds: float) -> dict[str, Any]:
    """Steps of 32 layers (qkv, attention, o, gate_up, act, down) over ``CHUNK`` rows at context ``c``."""
    torch, w = ctx.torch, _weights(ctx)
    x, h = ctx.randn(CHUNK, HIDDEN), ctx.randn(CHUNK, INTER)
    attn = _attn(ctx, [CHUNK], [c + CHUNK])
    attn_ms, gemm_ms, step_ms, t0 = [], [], [], time.perf_counter()
    with Clocks() as clocks:
        while time.perf_counter() - t0 < seconds:
            a0, a1, g0, g1 = (_events(ctx, LAYERS) for _ in range(4))
            s0, s1 = _events(ctx, 2)
            s0.record()
            for layer in range(LAYERS):
                torch.matmul(x, w["qkv"])
                a0[layer].record()
                attn(layer)
                a1[layer].record()
                torch.matmul(x, w["o"])
                g0[layer].record()
                torch.matmul(x, w["gate_up"])
                g1[layer].record()
                torch.matmul(h, w["down"])
            s1.record()
            torch.cuda.synchronize()
            attn_ms.append(sum(p.elapsed_time(q) for p, q in zip(a0, a1, strict=True)))
            gemm_ms.append(sum(p.elapsed_time(q) for p, q in zip(g0, g1, strict=True)))
            step_ms.append(s0.elapsed_time(s1))
    ctx.clear()
    return {"case": "sustained-step", "ctx": c, "seconds": seconds, "steps": len(step_ms),
            "attention_ms_per_step": attn_ms, "gate_up_ms_per_step": gemm_ms, "step_ms": step_ms,
            "clocks": clocks.lines}


def sustained_calls(ctx: Any, name: str, fn: Any, seconds: float) -> dict[str, Any]:
    """``fn`` back to back for ``seconds``, per-call CUDA events, clocks sampled."""
    torch = ctx.torch
    times, t0, i = [], time.perf_counter(), 0
    with Clocks() as clocks:
        while time.perf_counter() - t0 < seconds:
            e = _events(ctx, 32)
            for j in range(16):
                e[2 * j].record()
                fn(i)
                e[2 * j + 1].record()
                i += 1
            torch.cuda.synchronize()
            times += [e[2 * j].elapsed_time(e[2 * j + 1]) for j in range(16)]
    return {"case": name, "seconds": seconds, "calls": len(times), "ms": times, "clocks": clocks.lines}


def _gate_up(ctx: Any) -> Any:
    """The 8B's gate_up GEMM over ``CHUNK`` rows (compute-bound), as ``fn(i)``."""
    x, w = ctx.randn(CHUNK, HIDDEN), ctx.randn(HIDDEN, 2 * INTER)
    return lambda i: ctx.torch.matmul(x, w)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.environ.get("OUT", "."))
    p.add_argument("--seconds", type=float, default=4.0)
    args = p.parse_args()
    ctx = make_context("cuda")
    result: dict[str, Any] = {"gpu": ctx.torch.cuda.get_device_name(0), "shape": [HQ, HKV, D, CHUNK]}
    result["short"] = alone_and_mixed(ctx)
    gate_up = _gate_up(ctx)
    result["short"].append({"case": "gate_up-alone", **_ms(ctx, gate_up)})
    result["sustained"] = [sustained_calls(ctx, "gate_up-sustained", gate_up, args.seconds)]
    ctx.clear()
    for c in (0, 16320):
        attn = _attn(ctx, [CHUNK], [c + CHUNK])
        result["sustained"].append({**sustained_calls(ctx, "attention-sustained", attn, args.seconds), "ctx": c})
        ctx.clear()
        result["sustained"].append(sustained_steps(ctx, c, args.seconds))
    for r in result["short"]:
        print(f"{r['case']:>22} ctx={r.get('ctx', '-')!s:>6} dec={r.get('decodes', '-')!s:>3} "
              f"{r['median_ms']:8.3f} ms")
    for r in result["sustained"]:
        vals = r.get("ms") or r.get("attention_ms_per_step")
        print(f"{r['case']:>22} ctx={r.get('ctx', '-')!s:>6} median {np.median(vals):8.3f} ms, "
              f"first {vals[0]:8.3f}, last {vals[-1]:8.3f}; clocks {r['clocks'][1:2]} .. {r['clocks'][-1:]}")
    Path(args.out, "prefill_probe.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main()
