"""Why decode attention at large batches runs slower live than the calibration grid prices it (issue 17).

A live trace of Llama-3.1-8B (``data/traces/h200/llama-3.1-8b-decode``) ran FA3 over 256 decode
sequences of 593-632 tokens in 192.7 us a layer (+ 7.0 us of split combine), where the paged
grid's rows at 512 and 1,024 tokens (158 and 276 us, combine included) interpolate to about 181.
Two differences between the grid's call and the engine's are timed here, one at a time, with the
grid's own call (``attention._paged`` / ``_flash_paged``: vLLM's FA3, 16-token pages, 32 splits):

1. ``staircase``: equal contexts every 16 or 32 tokens.  FA3 walks a sequence's keys in tiles of
   ``kBlockN`` tokens (128 at head dim 128 over non-TMA paged KV), so a tile is paid whole: the
   grid's powers of two fill their last tile, a live context rarely does;
2. ``layout``: the same batch with the lengths spread (``ragged``: +-20 tokens around the mean, as
   the trace's were; ``wide``: spread over 0.25-1.75 x the mean) and the blocks drawn from a cache
   of an engine's size (``scattered``: 57,489 blocks, the 8B's on the H200 at 0.9) instead of a
   compact shuffled one.

Writes ``$OUT/decode_probe.json``; run from the repository root on the GPU machine with vLLM
importable (``scripts/device_fidelity.sh decode``).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from latsim.calibration.attention import PAGE, block_table, pages_of, time_paged_decode
from latsim.calibration.context import make_context

SHAPES = {"llama-8b": (32, 8, 128), "qwen-7b": (28, 4, 128), "phi-3": (32, 32, 96), "hd64": (32, 8, 64),
          "hd256": (8, 4, 256)}
"""(query heads, KV heads, head dim) on one GPU."""
SWEEPS = (("llama-8b", 256, 448, 1088, 16), ("llama-8b", 150, 448, 1088, 32), ("llama-8b", 64, 448, 1088, 32),
          ("qwen-7b", 64, 2048, 2592, 32), ("phi-3", 104, 448, 1088, 32), ("hd64", 256, 448, 1088, 32),
          ("hd256", 128, 448, 1088, 32))
"""(shape, batch, first context, last context, step): the staircase sweeps."""
LAYOUTS = (("llama-8b", 256, 612), ("llama-8b", 150, 650), ("llama-8b", 64, 2400), ("phi-3", 104, 700))
"""(shape, batch, mean context): the layout cases."""
ENGINE_BLOCKS = 57489


def lengths(batch: int, mean: int, spread: str) -> list[int]:
    """Contexts of ``batch`` sequences around ``mean``: ``equal``, ``ragged`` (+-20) or ``wide``."""
    if spread == "equal":
        return [mean] * batch
    rng = np.random.default_rng(batch * 31 + mean)
    half = 20 if spread == "ragged" else 0.75 * mean
    return [int(x) for x in np.round(rng.uniform(mean - half, mean + half, batch))]


def scatter(ctx: Any, c: dict[str, Any], k_lens: list[int], hkv: int, d: int) -> dict[str, Any]:
    """``c`` with its blocks drawn at random from a cache of ``ENGINE_BLOCKS`` blocks."""
    torch = ctx.torch
    pages = pages_of(k_lens)
    pick = np.random.default_rng(7).choice(ENGINE_BLOCKS, sum(pages), replace=False).astype(np.int32)
    table = block_table(pages, pick)
    k = torch.empty(ENGINE_BLOCKS, PAGE, hkv, d, dtype=torch.bfloat16, device=ctx.device).normal_()
    return {**c, "k": k, "v": torch.empty_like(k).normal_(), "table": torch.tensor(table, device=ctx.device)}


def time_call(ctx: Any, heads: tuple[int, int, int], k_lens: list[int], scattered: bool = False) -> dict[str, float]:
    """The grid's paged FA3 decode call over ``k_lens`` (blocks ``scattered`` over an engine-sized
    cache or not): median and p10/p90 microseconds, repetitions."""
    hkv, d = heads[1], heads[2]
    prepare = (lambda c: scatter(ctx, c, k_lens, hkv, d)) if scattered else None
    return time_paged_decode(ctx, heads, k_lens, prepare)


def staircase(ctx: Any) -> list[dict[str, Any]]:
    rows = []
    for shape, batch, first, last, step in SWEEPS:
        for c in range(first, last + 1, step):
            rows.append({"shape": shape, "batch": batch, "ctx": c, **time_call(ctx, SHAPES[shape], [c] * batch)})
        print(shape, batch, " ".join(f"{r['ctx']}:{r['us']:.1f}" for r in rows if r["shape"] == shape
                                     and r["batch"] == batch))
    return rows


def layouts(ctx: Any) -> list[dict[str, Any]]:
    rows = []
    for shape, batch, mean in LAYOUTS:
        for spread in ("equal", "ragged", "wide"):
            k_lens = lengths(batch, mean, spread)
            for scattered in (False, True):
                r = {"shape": shape, "batch": batch, "mean_ctx": float(np.mean(k_lens)), "spread": spread,
                     "scattered": scattered, **time_call(ctx, SHAPES[shape], k_lens, scattered)}
                rows.append(r)
                print(f"{shape:>9} {batch:4d} {r['mean_ctx']:7.1f} {spread:>6} scattered={scattered!s:5} "
                      f"{r['us']:8.1f} us")
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.environ.get("OUT", "."))
    args = p.parse_args()
    ctx = make_context("cuda")
    result = {"gpu": ctx.torch.cuda.get_device_name(0), "shapes": SHAPES, "layouts": layouts(ctx),
              "staircase": staircase(ctx)}
    Path(args.out, "decode_probe.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main()
