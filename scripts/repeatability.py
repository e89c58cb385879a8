"""How far repeated engine starts of one configuration disagree, beside the prediction's error.

    latsim validate data/validation --device h200 --out /tmp/val
    python scripts/repeatability.py /tmp/val/errors.csv

Runs are ``<root>/<model>-<shape>/<level>`` below ``validation/``; each root is one engine start
per model (roots ending in ``tp2`` are another deployment: TP=2).  For every (model-shape,
level) measured on two or more starts it prints the capacity range of those starts' bursts (the
level's target rate in the run folder's ``summary.json`` over its fraction; where that file is
missing, the rate its arrivals realised, which carries their Poisson noise) and per metric the
range of the prediction's signed error over the starts: its spread (max - min, in points) is
the part of the error that moves with the engine start, not with the load the model sees (each
replay uses its own start's arrivals and lengths).  The last table gives, per model, the median
over levels of that spread and of the median |error|.
"""

from __future__ import annotations

import argparse
import json
import re
from functools import cache
from pathlib import Path

import pandas as pd
from validation_table import model_of, relative, tp_suffix

METRICS = [("ttft_ms", "p50"), ("tpot_ms", "p50"), ("e2e_ms", "p50"), ("tpot_ms", "p99")]


@cache
def _summary(path: str) -> dict[str, float]:
    """Level -> target rate (req/s) from a device run's ``summary.json`` ({} when absent)."""
    try:
        rows = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}
    return {r["level"]: float(r["qps"]) for r in rows if isinstance(r, dict) and r.get("qps")}


def target_qps(run: str, offered: float) -> float:
    """The rate a level was asked for (``summary.json`` beside it), else the ``offered`` one."""
    level = Path(run)
    return _summary(str(level.parent / "summary.json")).get(level.name, offered)


def per_start(errors: pd.DataFrame) -> pd.DataFrame:
    """One row per (model, config, level, start): offered rate and the errors of :data:`METRICS`;
    a tensor-parallel root's model and config carry :func:`tp_suffix`."""
    parts = relative(errors["run"]).str.split("/", expand=True)
    tp = parts[0].map(tp_suffix)
    t = errors.assign(start=parts[0], model=parts[1].map(model_of) + tp, config=parts[1] + tp, level=parts[2])
    t = t[t["level"].str.match(r"^f\d")]
    keys = ["model", "config", "level", "start"]
    w = t.pivot_table(index=keys, columns=["metric", "stat"], values="error")
    w = w[[m for m in METRICS if m in w.columns]]
    w.columns = [f"{m.split('_')[0]} {s}" for m, s in w.columns]
    t = t.assign(target=[target_qps(r, q) for r, q in zip(t["run"], t["offered_qps"], strict=True)])
    qps = t.groupby(keys)["target"].first()
    return w.assign(qps=qps).reset_index()


def spread_table(rows: pd.DataFrame) -> pd.DataFrame:
    """Per (config, level) with two or more starts: starts, capacity range, and per metric the
    error range ``min..max`` and its spread in points."""
    out = []
    metric_cols = [c for c in rows.columns if c not in ("model", "config", "level", "start", "qps")]
    for (model, config, level), g in rows.groupby(["model", "config", "level"]):
        if len(g) < 2:
            continue
        frac = float(re.sub(r"^f", "", level))
        cap = g["qps"] / frac
        rec = {"model": model, "config": config, "level": level, "starts": len(g),
               "capacity": f"{cap.min():.0f}-{cap.max():.0f}"}
        for c in metric_cols:
            e = g[c].dropna()
            rec[c] = (e.min(), e.max(), e.abs().median())
        out.append(rec)
    return pd.DataFrame(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("errors_csv")
    args = ap.parse_args()
    table = spread_table(per_start(pd.read_csv(args.errors_csv)))
    if table.empty:
        print("no configuration was measured on two engine starts")
        return
    metrics = [c for c in table.columns if c not in ("model", "config", "level", "starts", "capacity")]
    print("| config | level | starts | capacity req/s | " + " | ".join(
        f"{m.upper()} error range (spread)" for m in metrics) + " |")
    print("|" + " --- |" * (4 + len(metrics)))
    for _, r in table.iterrows():
        cells = " | ".join(f"{lo * 100:+.0f}..{hi * 100:+.0f}% ({(hi - lo) * 100:.0f})"
                           for lo, hi, _ in (r[m] for m in metrics))
        print(f"| {r['config']} | {r['level']} | {r['starts']} | {r['capacity']} | {cells} |")
    print("\n| model | levels | " + " | ".join(f"{m.upper()} spread / median \\|error\\|" for m in metrics)
          + " |\n|" + " --- |" * (2 + len(metrics)))
    for model, g in table.groupby("model"):
        cells = " | ".join(
            f"{pd.Series([(r[1] - r[0]) for r in g[m]]).median() * 100:.0f} / "
            f"{pd.Series([r[2] for r in g[m]]).median() * 100:.0f}%" for m in metrics)
        print(f"| {model} | {len(g)} | {cells} |")


if __name__ == "__main__":
    main()
