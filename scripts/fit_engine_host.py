"""Fit ``latsim/data/engines/vllm/host.yaml``'s terms on measured runs and report held-out runs.

    python scripts/fit_engine_host.py --kind calibrated [--dense-free frontend_s,gpu_scale,...] [--host-speed probe]

Two stages, each on its own training runs (every other Poisson level is held out):

1. the dense terms (``--dense-free``) on ``--dense-train`` (default: the Llama-3.1-8B levels;
   ``--dense-free ''`` holds them at the yaml's values);
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

from latsim.engines.vllm import host_write
from latsim.engines.vllm.host_terms import read_host_terms
from latsim.measure.records import read_meta
from latsim.provenance import combined_digest, display_path, record, round_significant, run_inputs, significant
from latsim.validate.compare import find_runs, host_speed_option
from latsim.validate.fit_host import DENSE_FIELDS, FIELDS, TARGETS, Replay, errors, fit_host, load_replays

DIGITS = 4
"""Significant digits each written term keeps."""


def poisson_runs(root: Path, device: str) -> list[Path]:
    """Every open-loop level (Poisson arrivals) under ``root`` measured on ``device``."""
    return [p for p in find_runs(root, device) if (read_meta(p).get("load") or {}).get("mode") == "open"]


def report(label: str, replays: list[Replay], host) -> dict[str, float]:
    """Print and return the median |error| of each target (:data:`TARGETS`) over ``replays``."""
    if not replays:
        print(f"{label:>10} ( 0 runs)")
        return {}
    errs = np.abs(np.array([errors(r, host) for r in replays]))
    med = np.median(errs, axis=0)
    print(f"{label:>10} ({len(replays):2d} runs)  median |error| TTFT p50 {med[0] * 100:5.1f} %  "
          f"p99 {med[1] * 100:5.1f} %  TPOT p50 {med[2] * 100:5.1f} %  p99 {med[3] * 100:5.1f} %")
    return {f"{col.removesuffix('_s')}_p{q}": float(m) for (col, q), m in zip(TARGETS, med, strict=True)}


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path, default=Path("data/validation"))
    ap.add_argument("--device", default="h200")
    ap.add_argument("--kind", default="calibrated", choices=("calibrated", "roofline"))
    ap.add_argument("--dense-train", default=r"h200-probed-b/llama-3\.1-8b-",
                    help="regular expression of the dense training levels (default: the shipped dense fit's)")
    ap.add_argument("--moe-train", default=r"h100-s48/qwen3-30b-a3b-",
                    help="regular expression of the MoE training levels (default: the shipped MoE fit's, H100 "
                         "runs: with --device h100)")
    ap.add_argument("--dense-free", default=",".join(DENSE_FIELDS))
    ap.add_argument("--moe-free", default="eager_moe_layer_s")
    ap.add_argument("--host-speed", default="probe",
                    help="host speed to replay the runs at: a number, or 'probe' (each level at its host probe's "
                         "speed, so the CPU terms come out in the reference host's units; unprobed levels at 1)")
    ap.add_argument("--start", action="append", default=[], help="KEY=VALUE starting value of a term")
    ap.add_argument("--yaml", type=Path, default=host_write.shipped_path(), help="the host-terms file")
    ap.add_argument("--write", action="store_true", help="write the fitted terms into --yaml")
    args = ap.parse_args()
    try:
        args.host_speed = host_speed_option(args.host_speed)
    except ValueError as exc:
        ap.error(str(exc))
    args.dense_free = tuple(t for t in args.dense_free.split(",") if t)
    args.moe_free = tuple(t for t in args.moe_free.split(",") if t)
    for name in (*args.dense_free, *args.moe_free):
        if name not in FIELDS:
            ap.error(f"free term {name!r} is not one of {FIELDS}")
    return args


def main() -> None:
    args = parse_args()
    start = read_host_terms(args.yaml, args.kind)
    for item in args.start:
        key, _, value = item.partition("=")
        if key not in FIELDS:
            raise SystemExit(f"--start {item}: {key!r} is not one of {FIELDS}")
        start = replace(start, **{key: float(value)})
    runs = poisson_runs(args.root, args.device)
    replays = load_replays(runs, args.device, args.kind, args.host_speed)
    dense = [r for r in replays if re.search(args.dense_train, r.name)]
    moe = [r for r in replays if re.search(args.moe_train, r.name)] if args.moe_free else []
    held = [r for r in replays if r not in dense and r not in moe]
    if not dense:
        raise SystemExit(f"no Poisson level under {args.root} matches --dense-train {args.dense_train!r}")
    print(f"{len(runs)} Poisson levels: {len(dense)} dense training, {len(moe)} MoE training, {len(held)} held out")
    report("start", held, start)
    losses = {}
    host = start
    if args.dense_free:
        host, losses["dense"] = fit_host(dense, start, free=args.dense_free)
        print(f"stage 1 loss {losses['dense']:.4f}")
    else:
        print("stage 1 skipped: no --dense-free term, the dense terms held at the yaml's values")
    report("dense fit", dense, host)
    if args.moe_free:
        if not moe:
            raise SystemExit(f"no Poisson level under {args.root} matches --moe-train {args.moe_train!r}")
        host, losses["moe"] = fit_host(moe, host, free=args.moe_free)
        print(f"stage 2 loss {losses['moe']:.4f}")
        report("moe fit", moe, host)
    report("held out", held, host)
    for name in FIELDS:
        print(f"      {name}: {getattr(host, name):.4g}")
    if args.write:
        write(args, start, host, losses, {"dense": dense, "moe": moe, "held_out": held})


def write(args: argparse.Namespace, start, host, losses: dict[str, float], groups: dict[str, list[Replay]]) -> None:
    """Write the freed terms (to :data:`DIGITS`) into ``args.yaml``'s ``args.kind`` entry, with
    their provenance and the errors at the written values."""
    free = list(dict.fromkeys((*args.dense_free, *args.moe_free)))
    terms = {name: round_significant(getattr(host, name), DIGITS) for name in free}
    written = replace(host, **terms)
    print("at the written values:")
    at_written = {group: report(group, replays, written) for group, replays in groups.items()}
    inputs = {
        "root": str(args.root), "device": args.device, "kind": args.kind,
        "host_speed": args.host_speed, "dense_train": args.dense_train, "moe_train": args.moe_train,
        "dense_free": list(args.dense_free), "moe_free": list(args.moe_free),
        "start": {name: getattr(start, name) for name in free},
        "held": {name: getattr(start, name) for name in FIELDS if name not in free},
        "dense_runs": run_inputs(Path(r.name) for r in groups["dense"]),
        "moe_runs": run_inputs(Path(r.name) for r in groups["moe"]),
        "held_out_runs": {"count": len(groups["held_out"]),
                          "digest": combined_digest(Path(r.name) for r in groups["held_out"])},
        "significant_digits": DIGITS,
    }
    results = {"loss": significant(losses), "fitted": significant({n: getattr(host, n) for n in free}, 6),
               "median_abs_error_at_written": significant(at_written, 3)}
    try:
        changed = host_write.write_terms(args.yaml, terms, record(inputs, results, exclude=args.yaml),
                                         script="fit_engine_host", entry=args.kind)
    except ValueError as exc:
        raise SystemExit(f"{display_path(args.yaml)}: {exc}") from None
    print(f"{display_path(args.yaml)}: {'written' if changed else 'unchanged'} ({', '.join(terms)})")


if __name__ == "__main__":
    main()
