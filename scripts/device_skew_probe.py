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

and, with ``--grid``, the table the cost model reads (``scripts/fit_decode_spread.py``):

- ``grid``: contexts log-normal with sigma 0.8 around a median scaled so that their mean is
  512-8,192 tokens, batches of 2-256 sequences, three head shapes, two draws each;
- ``sigma``: the same at sigma 0.05-1.2 (how much spread it takes), at 16 and 64 sequences of
  mean 1,024 and 4,096.

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
from device_decode_probe import time_call

from latsim.calibration.context import make_context

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


GRID_SHAPES = ("llama-8b", "qwen-7b", "phi-3")
GRID_BATCHES = (2, 4, 8, 16, 32, 64, 128, 256)
GRID_MEANS = (512, 1024, 2048, 4096, 8192)
GRID_SIGMA = 0.8
SIGMAS = (0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.2)
MAX_TOKENS = 2**21
"""Largest summed context of a grid case (the paged grid's own cap)."""


def lognormal(batch: int, mean: int, sigma: float, draw: int) -> list[int]:
    """``batch`` contexts log-normal with ``sigma``, scaled to average ``mean`` (seeded)."""
    rng = np.random.default_rng([batch, mean, round(sigma * 100), draw])
    return scaled(np.exp(sigma * rng.standard_normal(batch)), mean)


def scaled(weights: Any, mean: int) -> list[int]:
    """Contexts in proportion to ``weights``, averaging ``mean`` (each at least one token)."""
    return [max(1, round(mean * x)) for x in weights / weights.mean()]


def cases(ctx: Any) -> list[dict[str, Any]]:
    """The serving, exponential and one-long spreads of every shape and batch (``skew_probe.json``;
    its rows gained a ``cv`` after the first run, which wrote them without it)."""
    return [pair(ctx, shape, lengths(batch, spread), spread=spread) for shape in SHAPES for batch in BATCHES
            for spread in SPREADS if batch > 1 or spread == "serving-0"]


def pair(ctx: Any, shape: str, k_lens: list[int], **labels: Any) -> dict[str, Any]:
    """One spread batch and the equal batch of the same total, timed back to back."""
    heads = SHAPES[shape]
    equal = [round(sum(k_lens) / len(k_lens))] * len(k_lens)
    spread_t, equal_t = time_call(ctx, heads, k_lens), time_call(ctx, heads, equal)
    r = {"shape": shape, "batch": len(k_lens), **labels, "lens": k_lens, "mean": float(np.mean(k_lens)),
         "max": max(k_lens), "cv": float(np.std(k_lens) / np.mean(k_lens)), **spread_t,
         "equal_us": equal_t["us"], "equal_p10_us": equal_t["p10_us"], "equal_p90_us": equal_t["p90_us"]}
    print(f"{shape:>9} {len(k_lens):3d} {labels} mean {r['mean']:7.0f} cv {r['cv']:.2f} {r['us']:8.1f} us "
          f"equal {r['equal_us']:8.1f} ratio {r['us'] / r['equal_us']:.3f}", flush=True)
    return r


def grid(ctx: Any) -> list[dict[str, Any]]:
    rows = []
    for shape in GRID_SHAPES:
        for batch in GRID_BATCHES:
            for mean in GRID_MEANS:
                if batch * mean > MAX_TOKENS:
                    continue
                for draw in (0, 1):
                    rows.append(pair(ctx, shape, lognormal(batch, mean, GRID_SIGMA, draw), case="grid",
                                     sigma=GRID_SIGMA, draw=draw))
    for batch in (16, 64):
        for mean in (1024, 4096):
            for sigma in SIGMAS:
                for draw in (0, 1):
                    rows.append(pair(ctx, "llama-8b", lognormal(batch, mean, sigma, draw), case="sigma",
                                     sigma=sigma, draw=draw))
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.environ.get("OUT", "."))
    p.add_argument("--grid", action="store_true", help="time the grid and sigma sweeps (skew_grid.json)")
    args = p.parse_args()
    ctx = make_context("cuda")
    gpu = ctx.torch.cuda.get_device_name(0)
    if args.grid:
        Path(args.out, "skew_grid.json").write_text(json.dumps({"gpu": gpu, "shapes": SHAPES, "cases": grid(ctx)}))
        return
    Path(args.out, "skew_probe.json").write_text(json.dumps({"gpu": gpu, "shapes": SHAPES, "cases": cases(ctx)}))


if __name__ == "__main__":
    main()
