"""Median |error| per measured configuration (``<model>-<shape>``) from ``latsim validate --out``.

    latsim validate data/validation/h200-fidelity --device h200 --out /tmp/fid
    python scripts/validation_classes.py /tmp/fid/errors.csv

One row per configuration folder: the median |error| over its Poisson levels of p50/p99 TTFT,
TPOT and E2E, the number of levels, and the median host probe (ms) of those levels.  The
README's table of deployment classes (quantized, MHA head dim 96, shared prefixes, long
prompts) is this output.

    python scripts/validation_classes.py /tmp/fid/errors.csv --by-load [--exclude REGEX]

gives one row per load level instead (``f0.25``: a quarter of the run's measured capacity;
``burst``), pooled over every configuration (less the runs ``REGEX`` matches, e.g. those a fit
saw): the median signed error (a bias: + is the prediction too slow) and the median |error|, so
a miss that grows or changes sign with load shows.
"""

from __future__ import annotations

import argparse

import pandas as pd

COLS = [(m, s) for m in ("ttft_ms", "tpot_ms", "e2e_ms") for s in ("p50", "p99")]


def label(metric: str, stat: str) -> str:
    """A column's name: ``ttft p50`` for ``("ttft_ms", "p50")``."""
    return f"{metric.split('_')[0]} {stat}"


def headline_rows(errors: pd.DataFrame) -> pd.DataFrame:
    """The rows of ``errors`` whose (metric, statistic) is one of :data:`COLS`."""
    return errors[[(m, s) in COLS for m, s in zip(errors["metric"], errors["stat"], strict=True)]]


def class_table(errors: pd.DataFrame) -> pd.DataFrame:
    """Rows per configuration folder, columns ``levels``, ``host_probe_ms`` and the |error| medians (%)."""
    e = errors[errors["level"].str.startswith("f")].copy()
    e["config"] = e["run"].str.replace(r"/[^/]+$", "", regex=True).str.replace(r"^.*/", "", regex=True)
    e["abs"] = e["error"].abs() * 100
    keep = headline_rows(e)
    table = keep.pivot_table(index="config", columns=["metric", "stat"], values="abs", aggfunc="median")
    table = table[[c for c in COLS if c in table.columns]]
    table.columns = [label(m, s) for m, s in table.columns]
    levels = e.groupby("config")["run"].nunique().rename("levels")
    probe = e.groupby("config")["host_probe_ms"].median().rename("host_probe_ms")
    return pd.concat([levels, probe, table.round(1)], axis=1)


def load_table(errors: pd.DataFrame, exclude: str | None = None) -> pd.DataFrame:
    """Rows per load level (``f0.25``..., ``burst``), columns ``levels`` and, per metric, the
    median signed error and the median |error| (%) over the runs ``exclude`` does not match."""
    e = errors if exclude is None else errors[~errors["run"].str.contains(exclude, regex=True)]
    e = headline_rows(e).copy()
    e["pct"] = e["error"] * 100
    e["key"] = [label(m, s) for m, s in zip(e["metric"], e["stat"], strict=True)]
    signed = e.pivot_table(index="level", columns="key", values="pct", aggfunc="median")
    absolute = e.assign(pct=e["pct"].abs()).pivot_table(index="level", columns="key", values="pct", aggfunc="median")
    out = pd.DataFrame({"levels": e.groupby("level")["run"].nunique()})
    for key in (label(m, s) for m, s in COLS):
        out[f"{key} bias"] = signed[key].round(1)
        out[f"{key} |err|"] = absolute[key].round(1)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("errors", help="errors.csv of `latsim validate --out`")
    ap.add_argument("--by-load", action="store_true", help="one row per load level, with the signed bias")
    ap.add_argument("--exclude", help="a regular expression: leave out the runs it matches (--by-load)")
    args = ap.parse_args()
    if args.by_load:
        loads = load_table(pd.read_csv(args.errors), args.exclude)
        print("| load | " + " | ".join(loads.columns) + " |")
        print("| --- |" + " --- |" * len(loads.columns))
        for name, row in loads.iterrows():
            print(f"| {name} | {int(row['levels'])} | " + " | ".join(f"{v:+.1f} %" if "bias" in k else f"{v:.1f} %"
                                                             for k, v in row.iloc[1:].items()) + " |")
        return
    table = class_table(pd.read_csv(args.errors))
    print("| configuration | " + " | ".join(table.columns) + " |")
    print("| --- |" + " --- |" * len(table.columns))
    for name, row in table.iterrows():
        cells = [f"{int(row['levels'])}", f"{row['host_probe_ms']:.2f}"] + [f"{v:.1f} %" for v in row.iloc[2:]]
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
