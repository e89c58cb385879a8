"""Print the README's validation table from ``latsim validate ... --out DIR`` (``DIR/errors.csv``).

    latsim validate data/validation --device h200 --out /tmp/val
    python scripts/validation_table.py /tmp/val/errors.csv --fit 'h200/llama-3.1-8b-'

Rows: every run (signed errors of p50/p99 TTFT, TPOT, E2E); then the median |error| over the
Poisson levels of each group (the fitted runs, all held-out runs, those at TP=1 and at TP>1 with
and without the client-bound runs, and held-out runs per model).
"""

from __future__ import annotations

import argparse
import re

import pandas as pd

COLS = [("ttft_ms", "p50"), ("ttft_ms", "p99"), ("tpot_ms", "p50"), ("tpot_ms", "p99"),
        ("e2e_ms", "p50"), ("e2e_ms", "p99")]


def relative(runs: pd.Series) -> pd.Series:
    """Run paths from ``validation/`` on: ``<root>/<model>-<shape>/<level>``."""
    return runs.str.replace(r"^.*?validation/", "", regex=True)


def model_of(config: str) -> str:
    """The model of a ``<model>-<shape>`` folder: ``llama-3.2-1b`` of ``llama-3.2-1b-mix``."""
    return re.sub(r"-(fixed-in\d+-out\d+|mix|long|prefix-len\d+-groups\d+)$", "", config)


def tp_suffix(root: str) -> str:
    """`` (TP=2)`` for a root of tensor-parallel runs (its name ends in ``tp2``), else ``""``."""
    return " (TP=2)" if root.endswith("tp2") else ""


def wide(errors: pd.DataFrame) -> pd.DataFrame:
    """One row per run, one column per (metric, stat), plus ``qps``."""
    t = errors.assign(run=relative(errors["run"]))
    w = t.pivot_table(index="run", columns=["metric", "stat"], values="error")[COLS]
    w.columns = [f"{m.split('_')[0]}_{s}" for m, s in COLS]
    qps = t.groupby("run")["offered_qps"].first()
    bound = t.groupby("run")["client_bound"].first() if "client_bound" in t else False
    return w.assign(qps=qps, client_bound=bound)


def group_of(run: str, fit: str) -> str:
    if re.search(fit, run):
        return "fit"
    root, name = run.split("/")[:2]
    return f"held out: {model_of(name)}{tp_suffix(root)}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("errors_csv")
    ap.add_argument("--fit", required=True, help="regex matching the runs used for fitting")
    args = ap.parse_args()
    w = wide(pd.read_csv(args.errors_csv))
    w["set"] = [group_of(r, args.fit) for r in w.index]
    head = "| run | set | req/s | " + " | ".join(c.replace("_", " ").upper().replace(" P", " p") for c in w.columns[:6])
    print(head + " |\n|" + " --- |" * 9)
    for run, r in w.iterrows():
        qps = "burst" if run.endswith("/burst") else f"{r['qps']:.1f}"
        cells = " | ".join(f"{v * 100:+.0f}%" for v in r.iloc[:6])
        tag = ("fit" if r["set"] == "fit" else "held out") + (", client-bound" if r["client_bound"] else "")
        print(f"| {run} | {tag} | {qps} | {cells} |")
    poisson = w[~w.index.str.endswith("/burst")]
    held = poisson[poisson["set"] != "fit"]
    multi = held["set"].str.contains("TP=")
    groups = [("fit", poisson[poisson["set"] == "fit"]), ("held out, all", held)]
    for name, part in (("TP=1", held[~multi]), ("TP>1", held[multi])):
        groups += [(f"held out, {name}", part),
                   (f"held out, {name}, client-bound runs left out", part[~part["client_bound"].astype(bool)])]
    groups += [(g, d) for g, d in held.groupby("set")]
    print("\n| median \\|error\\| over Poisson levels | runs | " + " | ".join(
        c.replace("_", " ").upper().replace(" P", " p") for c in w.columns[:6]) + " |\n|" + " --- |" * 8)
    for name, d in groups:
        med = d.iloc[:, :6].abs().median()
        print(f"| {name} | {len(d)} | " + " | ".join(f"{v * 100:.1f}%" for v in med) + " |")


if __name__ == "__main__":
    main()
