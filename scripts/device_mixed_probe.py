"""Decode rows inside a prefill's attention call: do they cost what a decode-only call costs? (issue 17)

A step that carries a prompt beside decoding sequences runs one FA3 call over all of them (vLLM's
FlashAttention backend: one varlen call, ``max_seqlen_q`` the prompt's rows).  The cost model
prices that call as the prompt's prefill attention plus the decode rows' attention at the
decode grid's price (a decode-only call, FA3's key splits).  Live graph-less steps of
Qwen2.5-32B (``data/traces/h200/s27/gl3-qwen2.5-32b``) ran longer than the priced kernels by
an amount that grows with the decode rows: about 0, 4 and 15 ms for 16, 64 and 128 rows beside a
512-token prompt.

Times here, per head shape and context, with the grid's own paged call (``attention.time_paged``:
vLLM's FA3, 16-token pages, FA3's split heuristic above 512 tokens as vLLM leaves it outside
CUDA graphs):

* ``mixed``: one call over a ``P``-token prompt (no cached context) and ``D`` decode rows of
  context ``C``;
* ``prefill``: the prompt alone; ``decode``: the ``D`` rows alone, as the decode grid times them
  (32 splits, the CUDA-graph path);

and prints ``extra = mixed - prefill - decode`` per call (one layer).  Writes
``$OUT/mixed_probe.json``; run from the repository root on the GPU machine with vLLM importable
(``scripts/device_fidelity.sh mixed``).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from latsim.calibration.attention import time_paged
from latsim.calibration.context import make_context

SHAPES = {"qwen-32b": (40, 8, 128), "llama-8b": (32, 8, 128), "llama-70b": (64, 8, 128)}
"""(query heads, KV heads, head dim) on one GPU."""
PROMPTS = (256, 512, 1024, 2048)
DECODES = (16, 64, 128, 256)
CONTEXTS = (700, 2048, 8192)


def time_batch(ctx: Any, heads: tuple[int, int, int], q_lens: list[int], k_lens: list[int]) -> float:
    """Median microseconds of the grid's paged FA3 call over ``q_lens`` / ``k_lens``."""
    return time_paged(ctx, heads, q_lens, k_lens)["us"]


def probe(ctx: Any) -> list[dict[str, Any]]:
    rows = []
    for shape, heads in SHAPES.items():
        for prompt in PROMPTS:
            alone = time_batch(ctx, heads, [prompt], [prompt])
            for ctx_len in CONTEXTS:
                for decodes in DECODES:
                    decode = time_batch(ctx, heads, [1] * decodes, [ctx_len] * decodes)
                    mixed = time_batch(ctx, heads, [prompt] + [1] * decodes, [prompt] + [ctx_len] * decodes)
                    row = {"shape": shape, "prompt": prompt, "decodes": decodes, "ctx": ctx_len,
                           "prefill_us": alone, "decode_us": decode, "mixed_us": mixed,
                           "extra_us": mixed - alone - decode}
                    rows.append(row)
                    print(f"{shape:>9} P={prompt:5d} D={decodes:4d} C={ctx_len:5d}  prefill {alone:8.1f}  "
                          f"decode {decode:8.1f}  mixed {mixed:8.1f}  extra {row['extra_us']:8.1f} us")
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.environ.get("OUT", "."))
    args = p.parse_args()
    ctx = make_context("cuda")
    result = {"gpu": ctx.torch.cuda.get_device_name(0), "shapes": SHAPES, "rows": probe(ctx)}
    Path(args.out, "mixed_probe.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main()
