"""How stable is the dense host fit?  Fit its terms on each probed start alone, on all together,
and on all but one (that one held out), and compare.

    python scripts/dense_fit_stability.py [--group h100=h100-s41/llama-3\\.1-8b-(mix|fixed) ...]
        [--free gpu_scale,eager_layer_s] [--host-speed probe] [--out build/dense-stability.json]

``scripts/fit_engine_host.py`` fits the dense terms (:data:`~latsim.validate.fit_host.DENSE_FIELDS`,
the default ``--free``; until the fifty-sixth session ``frontend_s`` too) on one start's levels.
This study asks whether that is enough: a term that
moves by more between starts than the errors it buys is not measured by one start.  Each
``--group DEVICE=REGEX`` names one engine start's (or one machine's) Poisson levels, replayed
on DEVICE's cost model at each level's host probe (``--host-speed probe``: the terms come out
in the reference host's units, so starts on hosts of different speeds are comparable).

Prints and writes (``--out``, JSON) for every group: the terms fitted on it alone and its median
|error| (TTFT and TPOT p50 / p99) under the shipped terms, under its own fit, under the pooled
fit and under the fit on the other groups (leave one group out).  Nothing is written into the
shipped terms.
"""

from __future__ import annotations

import argparse
import json
import re
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path

import numpy as np

from latsim.atomic import atomic_write_text
from latsim.engines.vllm import host_write
from latsim.engines.vllm.host_terms import read_host_terms
from latsim.measure.records import read_meta
from latsim.validate.compare import find_runs, host_speed_option
from latsim.validate.fit_host import DENSE_FIELDS, FIELDS, Replay, errors, fit_host, load_replays

DEFAULT_GROUPS = (
    r"h200=h200-probed-b/llama-3\.1-8b-(mix|fixed)",
    r"h100=h100-s38/llama-3\.1-8b-(mix|fixed)",
    r"h100=h100-s41/llama-3\.1-8b-(mix|fixed)",
    r"h100=h100-s43/llama-3\.1-8b-(mix|fixed)",
    r"h100=h100-s51/llama-3\.1-8b-(mix|fixed)",
    r"h100=h100-s52/llama-3\.1-8b-mix",
)
"""The probed Llama-3.1-8B starts (plain mix and fixed shapes) on both GPUs."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path, default=Path("data/validation"))
    ap.add_argument("--group", action="append", default=[],
                    help="DEVICE=REGEX: one group's Poisson levels (repeat; default: the probed 8B starts)")
    ap.add_argument("--free", default=",".join(DENSE_FIELDS), help="the terms fitted, comma-separated")
    ap.add_argument("--kind", default="calibrated", choices=("calibrated", "roofline"))
    ap.add_argument("--host-speed", default="probe")
    ap.add_argument("--yaml", type=Path, default=host_write.shipped_path())
    ap.add_argument("--out", type=Path, default=Path("build/dense-stability.json"))
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args(argv)
    try:
        args.host_speed = host_speed_option(args.host_speed)
    except ValueError as exc:
        ap.error(str(exc))
    args.free = tuple(t for t in args.free.split(",") if t)
    if not args.free or any(t not in FIELDS for t in args.free):
        ap.error(f"--free {','.join(args.free)!r}: choose one or more of {FIELDS}")
    specs = []
    for text in args.group or DEFAULT_GROUPS:
        device, sep, pattern = text.partition("=")
        if not sep or not device or not pattern:
            ap.error(f"--group {text!r}: expected DEVICE=REGEX (e.g. h100=h100-s41/llama-3\\.1-8b-mix)")
        specs.append((device, pattern))
    args.group = specs
    return args


def group_replays(root: Path, device: str, pattern: str, kind: str, host_speed) -> list[Replay]:
    """The Poisson levels under ``root`` measured on ``device`` whose path matches ``pattern``."""
    runs = [p for p in find_runs(root, device) if re.search(pattern, str(p))
            and (read_meta(p).get("load") or {}).get("mode") == "open"]
    if not runs:
        raise SystemExit(f"no Poisson level under {root} on {device} matches {pattern!r}")
    return load_replays(runs, device, kind, host_speed)


def median_errors(replays: list[Replay], host) -> list[float]:
    """Median |error| (fractions) of TTFT p50, p99, TPOT p50, p99 over ``replays``."""
    errs = np.abs(np.array([errors(r, host) for r in replays]))
    return [round(float(v), 4) for v in np.median(errs, axis=0)]


def _fit(job):
    replays, start, free = job
    host, loss = fit_host(replays, start, free=free)
    return {name: float(getattr(host, name)) for name in free}, loss


def main() -> None:
    args = parse_args()
    start = read_host_terms(args.yaml, args.kind)
    groups = {f"{dev}:{pat}": group_replays(args.root, dev, pat, args.kind, args.host_speed)
              for dev, pat in args.group}
    names = list(groups)
    everyone = [r for name in names for r in groups[name]]
    jobs = [(groups[n], start, args.free) for n in names]  # each alone
    jobs += [([r for m in names if m != n for r in groups[m]], start, args.free) for n in names]  # all but one
    jobs.append((everyone, start, args.free))  # pooled
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        fits = list(pool.map(_fit, jobs))
    alone, others, pooled = fits[:len(names)], fits[len(names):2 * len(names)], fits[-1]
    pooled_host = replace(start, **pooled[0])
    rows = []
    for i, name in enumerate(names):
        reps = groups[name]
        rows.append({
            "group": name, "levels": len(reps),
            "fit_alone": alone[i][0], "fit_without": others[i][0],
            "error_shipped": median_errors(reps, start),
            "error_own_fit": median_errors(reps, replace(start, **alone[i][0])),
            "error_pooled_fit": median_errors(reps, pooled_host),
            "error_held_out": median_errors(reps, replace(start, **others[i][0])),
        })
        print_row(rows[-1], args.free)
    spread = {t: [min(r["fit_alone"][t] for r in rows), max(r["fit_alone"][t] for r in rows)] for t in args.free}
    loo = {t: [min(r["fit_without"][t] for r in rows), max(r["fit_without"][t] for r in rows)] for t in args.free}
    print("pooled fit:", fmt_terms(pooled[0]), f"(loss {pooled[1]:.4f})")
    print("each alone, range:", {t: [f"{v:.4g}" for v in spread[t]] for t in args.free})
    print("leave one out, range:", {t: [f"{v:.4g}" for v in loo[t]] for t in args.free})
    result = {"free": list(args.free), "host_speed": args.host_speed, "kind": args.kind,
              "shipped": {t: getattr(start, t) for t in args.free}, "pooled": pooled[0],
              "alone_range": spread, "leave_one_out_range": loo, "groups": rows,
              "errors": "median |log(predicted / measured)| of TTFT p50, TTFT p99, TPOT p50, TPOT p99"}
    atomic_write_text(args.out, json.dumps(result, indent=1) + "\n")
    print(f"written {args.out}")


def fmt_terms(terms: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:.4g}" for k, v in terms.items())


def print_row(row: dict, free: tuple[str, ...]) -> None:
    pct = lambda e: "/".join(f"{v * 100:.1f}" for v in e)  # noqa: E731
    print(f"{row['group']} ({row['levels']} levels)\n  alone: {fmt_terms(row['fit_alone'])}\n"
          f"  without: {fmt_terms(row['fit_without'])}\n"
          f"  |error| TTFT p50/p99, TPOT p50/p99 %: shipped {pct(row['error_shipped'])}, own "
          f"{pct(row['error_own_fit'])}, pooled {pct(row['error_pooled_fit'])}, held out "
          f"{pct(row['error_held_out'])}")


if __name__ == "__main__":
    main()
