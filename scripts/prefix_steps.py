"""Prompts that hit the prefix cache against cold ones, measured and priced, from ``device_trace.py`` runs.

    python scripts/prefix_steps.py data/traces/h100/s44/prefix-llama-3.1-8b [...] [--device h100]

A ``prefixed:in=I,prefix=P,n=N`` scenario sent N prompts, one at a time, each a shared prefix of
P tokens whose full blocks were cached and I tokens of its own; a ``prefill:in=I,n=N`` scenario
N cold prompts of I tokens.  Per scenario this prints the median TTFT (unprofiled) beside the
model's (``frontend + host + gpu`` for a step the CUDA graphs hold, ``frontend + max(gpu,
launch + tail)`` for one past them, as ``scripts/graphless_steps.py`` prices a lone prompt) and
the median GPU busy time of the profiled prompts' steps (the kernels' sum, ``steps.csv``) beside
the model's GPU time of the same step: the uncomputed tokens (the request's own and the
prefix's tail past its last full block of ``--block`` tokens) as one chunk after the cached
context.  Each scenario is priced at its own probed host speed.  ``ratio``: model over measured
(below 1, the model is too fast).  A hit that costs more than the cold step of the same new
tokens beyond its attention over the cached context shows as a TTFT ratio below the GPU one.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import pandas as pd
from graphless_steps import cost_model, run_speed, scenario_speed  # type: ignore[import-not-found]

from latsim.costmodel.batch import BatchShape
from latsim.costmodel.host import HostOverlapCostModel

KINDS = ("prefixed", "prefill")


def step_shape(sc: dict[str, Any], block: int) -> BatchShape:
    """The prompt's step: its uncomputed tokens as one chunk after the cached full blocks."""
    cached = (sc.get("prefix", 0) // block) * block
    return BatchShape.from_chunks([(sc["in"] + sc.get("prefix", 0) - cached, cached)], [])


def model_ttft_s(cm: HostOverlapCostModel, shape: BatchShape) -> tuple[float, float]:
    """(TTFT, GPU seconds) the cost model gives a lone prompt's step ``shape``."""
    gpu, host = cm.parts(shape)
    launch = cm.launch_s(shape)
    body = max(gpu, launch + cm.launch_tail_s) if launch > 0 else host + gpu
    return cm.frontend_s + body, gpu


def scenario_row(cm: HostOverlapCostModel, res: dict[str, Any], steps: pd.DataFrame, block: int) -> dict[str, Any]:
    """One scenario's medians, measured and modelled (see the module note)."""
    sc = res["scenario"]
    shape = step_shape(sc, block)
    ttft, gpu = model_ttft_s(cm, shape)
    own = steps[(steps["scenario"] == sc["label"]) & (steps["prefill_tokens"] > 0)] if not steps.empty else steps
    busy = float(own["gpu_busy_us"].median()) / 1e3 if len(own) else float("nan")
    measured = statistics.median(float(t) for t in res["ttft_ms"])
    cached = shape.prefill_kv_tokens - shape.prefill_tokens
    return {"scenario": sc["label"], "new": shape.prefill_tokens, "cached": cached,
            "ttft_ms": measured, "model_ttft_ms": 1e3 * ttft, "ttft_ratio": 1e3 * ttft / measured,
            "gpu_ms": busy, "model_gpu_ms": 1e3 * gpu, "gpu_ratio": 1e3 * gpu / busy if busy > 0 else float("nan"),
            "steps": len(own)}


def folder_rows(folder: Path, device: str, block: int) -> list[dict[str, Any]]:
    """One row per ``prefixed`` or ``prefill`` scenario of the run in ``folder``."""
    meta = json.loads((folder / "timings.json").read_text())
    steps = pd.read_csv(folder / "steps.csv") if (folder / "steps.csv").is_file() else pd.DataFrame()
    speed, models, rows = run_speed(meta), {}, []
    for res in meta.get("scenarios", []):
        if res["scenario"]["kind"] not in KINDS:
            continue
        own = round(scenario_speed(res, speed), 2)
        if own not in models:
            models[own] = cost_model(meta, own, folder, device)
        rows.append({**scenario_row(models[own], res, steps, block), "host_speed": own})
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path, help="device_trace.py output folders")
    ap.add_argument("--device", default="h200", help="the catalog GPU the runs were taken on")
    ap.add_argument("--block", type=int, default=16, help="the engine's KV block size in tokens")
    args = ap.parse_args(argv)
    if args.block < 1:
        ap.error(f"--block {args.block}: expected a whole number >= 1")
    for folder in args.runs:
        try:
            rows = folder_rows(folder, args.device, args.block)
        except (OSError, ValueError, KeyError) as err:
            print(f"error: {folder}: {err}", file=sys.stderr)
            return 2
        print(f"{folder}")
        print(f"  {'scenario':34s} speed   new cached | ttft  model ratio |   gpu  model ratio  steps")
        for r in rows:
            print(f"  {r['scenario']:34s} {r['host_speed']:5.2f} {r['new']:5d} {r['cached']:6d} |"
                  f" {r['ttft_ms']:5.1f} {r['model_ttft_ms']:6.1f} {r['ttft_ratio']:5.2f} |"
                  f" {r['gpu_ms']:5.1f} {r['model_gpu_ms']:6.1f} {r['gpu_ratio']:5.2f} {r['steps']:6d}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
