"""Several prompts' chunks in one attention call: do they cost the sum of each alone? (issue 17)

vLLM runs a step's prefill chunks in one FlashAttention varlen call.  The calibration grid times
one sequence's chunk per call, and the cost model prices a step of ``n`` chunks of ``q`` tokens
as ``n`` times one chunk's measured price (the roofline of the summed work times one chunk's
ratio).  A short chunk under few query heads leaves most of the GPU idle (FA3 launches one
thread block per 128 query rows per head), so ``n`` of them in one call may cost far less than
``n`` calls: live bursts of Gemma-2-9B (16 query heads of dim 256) and of Llama-3.1-8B at TP=2
(16 per GPU) run their prompts 7-16 % faster than priced, Llama-3.1-8B at TP=1 (32) 0-2 %.

Times here, per head shape, with the grid's own paged call (``attention.time_paged``: vLLM's
FA3, 16-token pages): ``n`` chunks of ``q`` tokens after ``ctx`` cached ones in one call, and one
such chunk alone, and prints ``batched / (n x alone)``.  Writes ``$OUT/prefill_batch_probe.json``;
run from the repository root on the GPU machine with vLLM importable
(``scripts/device_fidelity.sh pbatch``).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from latsim.atomic import atomic_write_text
from latsim.calibration.attention import time_paged
from latsim.calibration.context import make_context

SHAPES = {"gemma-2-9b": (16, 8, 256), "llama-8b": (32, 8, 128), "llama-8b-tp2": (16, 4, 128),
          "llama-70b-tp4": (16, 2, 128), "phi-3-mini": (32, 32, 96), "llama-1b": (32, 8, 64)}
"""(query heads, KV heads, head dim) on one GPU."""
CHUNKS = (128, 256, 512, 1024, 2048)
COUNTS = (1, 2, 4, 8, 16)
CONTEXTS = (0, 2048)
MAX_TOKENS = 16384
"""The largest step probed (``n x q``)."""


def probe(ctx: Any, shapes: list[str], contexts: list[int], out: Path) -> list[dict[str, Any]]:
    """Time every shape's chunks; ``out`` is rewritten after each shape, so a run cut short
    keeps what it measured."""
    rows: list[dict[str, Any]] = []
    for shape in shapes:
        heads = SHAPES[shape]
        for cached in contexts:
            for q in CHUNKS:
                alone = time_paged(ctx, heads, [q], [q + cached])["us"]
                for n in COUNTS:
                    if n * q > MAX_TOKENS:
                        continue
                    batched = alone if n == 1 else time_paged(ctx, heads, [q] * n, [q + cached] * n)["us"]
                    rows.append({"shape": shape, "hq": heads[0], "hkv": heads[1], "d": heads[2], "q": q,
                                 "ctx": cached, "n": n, "alone_us": alone, "batched_us": batched})
                    print(f"{shape:>13} q={q:5d} ctx={cached:5d} n={n:3d}  alone {alone:8.1f}  batched "
                          f"{batched:9.1f} us  batched / (n x alone) {batched / (n * alone):6.3f}", flush=True)
        atomic_write_text(out, json.dumps({"gpu": ctx.torch.cuda.get_device_name(0), "shapes": SHAPES, "rows": rows}))
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.environ.get("OUT", "."))
    p.add_argument("--shapes", default=",".join(SHAPES), help=f"comma-separated, of {', '.join(SHAPES)}")
    p.add_argument("--contexts", default=",".join(map(str, CONTEXTS)), help="cached tokens before each chunk")
    args = p.parse_args()
    shapes = [s for s in args.shapes.split(",") if s]
    unknown = [s for s in shapes if s not in SHAPES]
    if unknown or not shapes:
        p.error(f"--shapes {args.shapes!r}: choose from {', '.join(SHAPES)}")
    contexts = [int(c) for c in args.contexts.split(",") if c]
    ctx = make_context("cuda")
    probe(ctx, shapes, contexts, Path(args.out, "prefill_batch_probe.json"))


if __name__ == "__main__":
    main()
