"""How much of a graph-less step's launch follows the host's CPU speed, from ``device_trace.py``
graph-less runs that kept the host probe's series (the twenty-sixth session on).

    python scripts/launch_speed_share.py data/traces/h200/s26/gl2-phi-3-mini [...] [--csv OUT]

Each prompt's launch (the decoders' emission held back by its step, ``e1 - e0``,
``graphless_steps.cycle_parts``) is read beside the engine CPU's speed while it ran: the
median of the probe samples from 0.1 s before the launch to 0.1 s after (the probe times a
fixed Python workload on the engine's busiest thread's CPU every 0.1 s; speed = the reference
time over the sample's).  Prompts whose samples disagree by more than ``--agree`` (the VM's CPU
switched state around them) are left out.  The fit, by least squares over the prompts kept:
``launch = c_scenario x (1 - share + share / speed)``, one ``c`` per scenario (its launch at
speed 1) and one ``share`` for all; the share's interval is the 5th-95th percentile of 400
bootstrap resamples of the prompts (seeded).  ``share`` 1: the launch is all CPU time at the
probe's speed; 0: none of it moves with the probe.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

sys.path.insert(0, str(Path(__file__).resolve().parent))
from graphless_steps import cycle_parts

WINDOW_S = 0.1
"""Probe samples this long before and after a launch speak for it."""


def series(meta: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """(absolute perf_counter seconds, speed) of the run's host probe samples; ValueError when
    the run kept none."""
    hs = meta.get("host_series")
    if not hs or "host_series_t0_s" not in meta:
        raise ValueError("no host probe series in timings.json (device_trace.py before the twenty-sixth session)")
    rows = np.array([[r[0], r[1]] for r in hs["rows"] if r[1]], dtype=float)
    return meta["host_series_t0_s"] + rows[:, 0], hs["reference_s"] / rows[:, 1]


def prompt_rows(folder: Path, agree: float) -> pd.DataFrame:
    """One row per graph-less prompt with a launch: scenario, launch (ms), speed, kept."""
    meta = json.loads((folder / "timings.json").read_text())
    t, speed = series(meta)
    out = []
    for res in meta["scenarios"]:
        sc = res["scenario"]
        if sc["kind"] != "graphless":
            continue
        for p in res["prompts"]:
            parts = cycle_parts(p)
            if parts is None or "sent_s" not in p:
                continue
            start, end = p["sent_s"] + parts[0] / 1e3, p["sent_s"] + parts[1] / 1e3
            near = speed[(t >= start - WINDOW_S) & (t <= end + WINDOW_S)]
            if len(near) == 0:
                continue
            out.append({"run": folder.name, "scenario": sc["label"], "launch_ms": parts[1] - parts[0],
                        "speed": float(np.median(near)), "kept": bool(near.max() / near.min() <= 1.0 + agree)})
    return pd.DataFrame(out)


def fit_share(d: pd.DataFrame) -> tuple[float, dict[str, float]]:
    """(share, launch at speed 1 per scenario) by least squares (share bounded to [0, 1])."""
    labels = sorted(d.scenario.unique())
    idx = d.scenario.map({k: i for i, k in enumerate(labels)}).to_numpy()
    inv, y = 1.0 / d.speed.to_numpy(), d.launch_ms.to_numpy()

    def resid(x: np.ndarray) -> np.ndarray:
        share, c = x[0], x[1:]
        return c[idx] * (1.0 - share + share * inv) - y

    start = np.r_[0.5, [float(np.median(y[idx == i])) for i in range(len(labels))]]
    lo, hi = np.r_[0.0, np.zeros(len(labels))], np.r_[1.0, np.full(len(labels), np.inf)]
    x = least_squares(resid, start, bounds=(lo, hi)).x
    return float(x[0]), dict(zip(labels, (float(v) for v in x[1:]), strict=True))


def bootstrap(d: pd.DataFrame, n: int = 400, seed: int = 0) -> tuple[float, float]:
    rng = np.random.default_rng(seed)
    shares = [fit_share(d.iloc[rng.integers(0, len(d), len(d))])[0] for _ in range(n)]
    return float(np.percentile(shares, 5)), float(np.percentile(shares, 95))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("folders", nargs="+", type=Path)
    p.add_argument("--agree", type=float, default=0.1,
                   help="keep a prompt when its probe samples are within this fraction of each other")
    p.add_argument("--csv", type=Path)
    args = p.parse_args(argv)
    if not 0.0 < args.agree <= 1.0:
        print(f"--agree {args.agree!r}: a fraction in (0, 1] is accepted", file=sys.stderr)
        return 2
    frames = []
    for folder in args.folders:
        if not (folder / "timings.json").is_file():
            print(f"no timings.json in {folder} (a device_trace.py --out folder)", file=sys.stderr)
            return 2
        try:
            frames.append(prompt_rows(folder, args.agree))
        except ValueError as err:
            print(f"{folder}: {err}", file=sys.stderr)
            return 2
    d = pd.concat(frames, ignore_index=True)
    kept = d[d.kept]
    if kept.scenario.nunique() == 0 or len(kept) < 10:
        print(f"{len(kept)} prompts kept of {len(d)}: too few to fit", file=sys.stderr)
        return 2
    share, per = fit_share(kept)
    lo, hi = bootstrap(kept)
    print(f"prompts {len(d)}, kept {len(kept)} (probe samples within {args.agree:.0%}); "
          f"speeds {kept.speed.min():.2f}-{kept.speed.max():.2f}")
    print(f"share of the launch that follows the probe: {share:.2f} (90 % bootstrap {lo:.2f}-{hi:.2f})")
    for label, c in per.items():
        g = kept[kept.scenario == label]
        print(f"  {label:48s} n {len(g):3d}  launch at speed 1 {c:5.1f} ms"
              f"  measured median {g.launch_ms.median():5.1f}")
    if args.csv:
        from latsim.atomic import atomic_write_text
        atomic_write_text(args.csv, d.to_csv(index=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
