"""Decode attention over spread contexts: what long-prompt serving runs and the grid does not (issue 17).

The live long-prompt runs (prompts of 1k-24k tokens) decode batches of 2-64 sequences whose
contexts differ by up to 20x, and their decode steps take 10-17 % longer than the cost model
prices them, the more so the more sequences decode (``build``-free check: each measured decode
emission against the model's price of the same contexts).  The paged grid times equal contexts
only, and the model prices a batch at its mean context.  This probe times the grid's own call
(``attention._paged`` / ``_flash_paged``: vLLM's FA3 over 16-token pages, the 32 splits of a
CUDA-graph step) on batches of spread contexts and, beside each, the equal batch of the same
total, so that their ratio is what pricing at the mean misses:

- ``serving``: contexts drawn as the long-prompt workload's prompts are (log-normal, median
  4,096, sigma 0.8, clipped to 1,024-24,576) plus 0-200 generated tokens, two draws per batch;
- ``exp``: exponential around a mean of 2,048 and of 6,144 (the grid's ``skewed`` mix);
- ``onelong``: one sequence of 24,576 tokens beside ones of 1,536;

and, with ``--grid``, the probe the table is fitted on (``scripts/fit_decode_spread.py``), the
one ``latsim calibrate`` runs (:mod:`latsim.calibration.spread_probe`: log-normal contexts of
means 512-8,192 over 2-256 sequences of three head shapes, and a sweep of the spread).

Writes ``$OUT/skew_probe.json``; run from the repository root on the GPU machine with vLLM
importable (``scripts/device_fidelity.sh skew``).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from latsim.calibration.context import make_context
from latsim.calibration.spread_probe import SKEW_GRID_FILE, TimeCall, device_time_call, pair, run_spread_probe, scaled

SHAPES = {"llama-8b": (32, 8, 128), "qwen-7b": (28, 4, 128), "phi-3": (32, 32, 96), "qwen-32b": (40, 8, 128),
          "llama-70b": (64, 8, 128)}
"""(query heads, KV heads, head dim) on one GPU."""
BATCHES = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96)
SPREADS = ("serving-0", "serving-1", "exp-2048", "exp-6144", "onelong")


def lengths(batch: int, spread: str) -> list[int]:
    """The contexts of one ``spread`` case of ``batch`` sequences (seeded by both)."""
    rng = np.random.default_rng([batch, SPREADS.index(spread)])
    if spread.startswith("serving"):
        prompt = np.clip(np.round(4096 * np.exp(0.8 * rng.standard_normal(batch))), 1024, 24576)
        return [int(x) for x in prompt + rng.integers(0, 201, batch)]
    if spread.startswith("exp"):
        return scaled(rng.exponential(1.0, batch), int(spread.split("-")[1]))
    return [24576] + [1536] * (batch - 1)


def show(case: dict[str, Any]) -> None:
    print(f"{case['shape']:>9} {case['batch']:3d} {case.get('spread') or case.get('case')} mean {case['mean']:7.0f} "
          f"cv {case['cv']:.2f} {case['us']:8.1f} us equal {case['equal_us']:8.1f} ratio "
          f"{case['us'] / case['equal_us']:.3f}", flush=True)


def cases(time_call: TimeCall) -> list[dict[str, Any]]:
    """The serving, exponential and one-long spreads of every shape and batch (``skew_probe.json``;
    its rows gained a ``cv`` after the first run, which wrote them without it)."""
    out = []
    for shape in SHAPES:
        for batch in BATCHES:
            for spread in SPREADS:
                if batch > 1 or spread == "serving-0":
                    out.append(pair(time_call, shape, SHAPES[shape], lengths(batch, spread), spread=spread))
                    show(out[-1])
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.environ.get("OUT", "."))
    p.add_argument("--grid", action="store_true", help="time the grid and sigma sweeps (skew_grid.json)")
    args = p.parse_args()
    ctx = make_context("cuda")
    gpu, time_call = ctx.torch.cuda.get_device_name(0), device_time_call(ctx)
    if args.grid:
        run_spread_probe(Path(args.out, SKEW_GRID_FILE), time_call, gpu, on_case=show)
        return
    Path(args.out, "skew_probe.json").write_text(json.dumps({"gpu": gpu, "shapes": SHAPES, "cases": cases(time_call)}))


if __name__ == "__main__":
    main()
