"""Gemma-2's attention as its layers call FA3: soft-capped logits, no ahead-of-time schedule (issue 17).

The calibration grid times vLLM's paged FA3 call without logit soft-capping and with FA3's
scheduler metadata computed ahead of time.  Gemma-2 soft-caps its attention logits
(``attn_logit_softcapping`` 50: ``50 tanh(s / 50)`` on every score) and alternates sliding-window
and global layers, for which vLLM's FlashAttention backend gives up the ahead-of-time schedule
(two window configurations: ``aot_schedule`` off, FA3 schedules inside the call).  A live
Gemma-2-9B engine ran a lone 512-token chunk's attention in 1.57-1.69 ms a step against 1.31
priced (``data/traces/h100/s57/burst-gemma-2-9b``).

Times, for one head shape (default Gemma-2-9B's on one GPU: 16 query heads, 8 KV heads of dim
256), each chunk ``q`` after ``ctx`` cached tokens, ``n`` chunks in one call, four calls:

* ``grid``: the calibration grid's call (``attention.time_paged``);
* ``softcap``: the same with the logits soft-capped;
* ``engine``: soft-capped, scheduled inside the call (as a global layer of Gemma-2 runs);
* ``engine_window``: the same under the sliding window (a local layer; the window reaches past
  every chunk probed, so only the kernel's variant changes).

Writes ``$OUT/softcap_probe.json`` (rewritten after each chunk size, so a run cut short keeps
what it measured); ``scripts/device_fidelity.sh softcap`` runs it on the GPU machine with vLLM
importable.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from latsim.atomic import atomic_write_text
from latsim.calibration.attention import time_paged
from latsim.calibration.context import make_context

CHUNKS = (128, 256, 512, 1024, 2048)
COUNTS = (1, 4, 16)
CONTEXTS = (0, 2048)
MAX_TOKENS = 16384
"""The largest call probed (``n x q``)."""


def variants(softcap: float, window: int) -> dict[str, Callable[[dict[str, Any]], dict[str, Any]]]:
    """The four calls, each a ``prepare`` step over the grid's batch (``attention._paged``)."""

    def capped(c: dict[str, Any]) -> dict[str, Any]:
        c["softcap"] = softcap
        return c

    def engine(c: dict[str, Any]) -> dict[str, Any]:
        c["sched"] = None
        return capped(c)

    def engine_window(c: dict[str, Any]) -> dict[str, Any]:
        c["window"] = [window - 1, 0]
        return engine(c)

    return {"grid": lambda c: c, "softcap": capped, "engine": engine, "engine_window": engine_window}


def probe(ctx: Any, heads: tuple[int, int, int], softcap: float, window: int, out: Path) -> list[dict[str, Any]]:
    """Every (q, ctx, n) within :data:`MAX_TOKENS`, each variant's median microseconds in its row."""
    rows: list[dict[str, Any]] = []
    calls = variants(softcap, window)
    for q in CHUNKS:
        for cached in CONTEXTS:
            for n in COUNTS:
                if n * q > MAX_TOKENS:
                    continue
                row: dict[str, Any] = {"q": q, "ctx": cached, "n": n}
                for name, prepare in calls.items():
                    row[f"{name}_us"] = time_paged(ctx, heads, [q] * n, [q + cached] * n, prepare)["us"]
                rows.append(row)
                print(f"q={q:5d} ctx={cached:5d} n={n:3d}  " + "  ".join(
                    f"{name} {row[f'{name}_us']:8.1f}" for name in calls) +
                    f"  us  engine / grid {row['engine_us'] / row['grid_us']:6.3f}", flush=True)
        atomic_write_text(out, json.dumps({"gpu": ctx.torch.cuda.get_device_name(0), "heads": list(heads),
                                           "softcap": softcap, "window": window, "rows": rows}))
    return rows


def parse_heads(text: str) -> tuple[int, int, int]:
    """``HQ,HKV,D`` as three positive integers, HQ a multiple of HKV; ValueError naming the text."""
    try:
        hq, hkv, d = (int(v) for v in text.split(","))
    except ValueError:
        raise ValueError(f"--heads {text!r}: expected three integers HQ,HKV,D (e.g. 16,8,256)") from None
    if min(hq, hkv, d) <= 0 or hq % hkv:
        raise ValueError(f"--heads {text!r}: heads and dim must be positive and HQ a multiple of HKV")
    return hq, hkv, d


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.environ.get("OUT", "."))
    p.add_argument("--heads", default="16,8,256", help="query heads, KV heads, head dim on one GPU")
    p.add_argument("--softcap", type=float, default=50.0, help="the logit soft-cap (Gemma-2: 50)")
    p.add_argument("--window", type=int, default=4096, help="the local layers' sliding window (Gemma-2: 4096)")
    args = p.parse_args()
    try:
        heads = parse_heads(args.heads)
    except ValueError as exc:
        p.error(str(exc))
    if args.softcap <= 0 or args.window <= 0:
        p.error(f"--softcap {args.softcap} / --window {args.window}: both must be positive")
    probe(make_context("cuda"), heads, args.softcap, args.window, Path(args.out, "softcap_probe.json"))


if __name__ == "__main__":
    main()
