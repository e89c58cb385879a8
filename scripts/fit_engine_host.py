"""Fit ``data/engines/vllm/host.yaml``'s terms on measured runs and report held-out runs.

    python scripts/fit_engine_host.py --kind calibrated [--dense-free frontend_s,gpu_scale,...]

Two stages, each on its own training runs (every other Poisson level is held out):

1. the dense terms (``--dense-free``) on ``--dense-train`` (default: the Llama-3.1-8B levels);
2. the mixture-of-experts terms (``--moe-free``) on ``--moe-train`` (default: the fixed-shape
   Qwen3-30B-A3B levels), every dense term held at stage 1's values.

Prints the fitted terms (ready for the yaml) and the median |error| of p50/p99 TTFT and TPOT
on the training and held-out runs.  Terms not freed start from, and keep, the yaml's values
(the launch terms there are measured, ``scripts/launch_gaps.py``); the defaults free what the
shipped entry fitted.  ``--start KEY=VALUE`` overrides a starting value.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import replace
from pathlib import Path

import numpy as np

from latsim.engines.vllm.host_terms import default_host_overhead
from latsim.measure.records import read_meta
from latsim.validate.compare import find_runs
from latsim.validate.fit_host import DENSE_FIELDS, FIELDS, Replay, errors, fit_host, load_replays


def poisson_runs(root: Path) -> list[Path]:
    """Every open-loop level (Poisson arrivals) under ``root``."""
    return [p for p in find_runs(root) if (read_meta(p).get("load") or {}).get("mode") == "open"]


def report(label: str, replays: list[Replay], host) -> None:
    errs = np.abs(np.array([errors(r, host) for r in replays])) * 100
    med = np.median(errs, axis=0)
    print(f"{label:>10} ({len(replays):2d} runs)  median |error| TTFT p50 {med[0]:5.1f} %  p99 {med[1]:5.1f} %  "
          f"TPOT p50 {med[2]:5.1f} %  p99 {med[3]:5.1f} %")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path, default=Path("data/validation"))
    ap.add_argument("--device", default="h200")
    ap.add_argument("--kind", default="calibrated", choices=("calibrated", "roofline"))
    ap.add_argument("--dense-train", default=r"h200/llama-3\.1-8b-")
    ap.add_argument("--moe-train", default=r"h200/qwen3-30b-a3b-fixed")
    ap.add_argument("--dense-free", default=",".join(DENSE_FIELDS))
    ap.add_argument("--moe-free", default="eager_moe_layer_s")
    ap.add_argument("--start", action="append", default=[], help="KEY=VALUE starting value of a term")
    args = ap.parse_args()
    start = default_host_overhead(args.kind)
    for item in args.start:
        key, _, value = item.partition("=")
        if key not in FIELDS:
            ap.error(f"--start {item}: {key!r} is not one of {FIELDS}")
        start = replace(start, **{key: float(value)})
    runs = poisson_runs(args.root)
    replays = load_replays(runs, args.device, args.kind)
    dense = [r for r in replays if re.search(args.dense_train, r.name)]
    moe = [r for r in replays if re.search(args.moe_train, r.name)]
    held = [r for r in replays if r not in dense and r not in moe]
    print(f"{len(runs)} Poisson levels: {len(dense)} dense training, {len(moe)} MoE training, {len(held)} held out")
    report("start", held, start)
    host, loss = fit_host(dense, start, free=tuple(args.dense_free.split(",")))
    print(f"stage 1 loss {loss:.4f}")
    report("dense fit", dense, host)
    if args.moe_free:
        host, loss = fit_host(moe, host, free=tuple(args.moe_free.split(",")))
        print(f"stage 2 loss {loss:.4f}")
        report("moe fit", moe, host)
    report("held out", held, host)
    for name in FIELDS:
        print(f"      {name}: {getattr(host, name):.4g}")


if __name__ == "__main__":
    main()
