"""Median |error| per measured configuration (``<model>-<shape>``) from ``latsim validate --out``.

    latsim validate data/validation/h200-fidelity --device h200 --out /tmp/fid
    python scripts/validation_classes.py /tmp/fid/errors.csv

One row per configuration folder: the median |error| over its Poisson levels of p50/p99 TTFT,
TPOT and E2E, the number of levels, and the median host probe (ms) of those levels.

    python scripts/validation_classes.py DEFAULT/errors.csv --rows data/validation/classes.yaml \
        --probed PROBED/errors.csv

writes the README's table of deployment classes (quantized, MHA, shared prefixes, long prompts,
...): one row per entry of the YAML list (``label``, ``runs``: a regular expression searched in
each run's path), its levels, loads and host-probe range added to the label, then the same runs
replayed at their probed speed (``latsim validate --host-speed probe``) on a row ``same | probed``.

    python scripts/validation_classes.py /tmp/fid/errors.csv --by-load [--exclude REGEX]

gives one row per load level instead (``f0.25``: a quarter of the run's measured capacity;
``burst``), pooled over every configuration (less the runs ``REGEX`` matches, e.g. those a fit
saw): the median signed error (a bias: + is the prediction too slow) and the median |error|, so
a miss that grows or changes sign with load shows.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pandas as pd
import yaml

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


def load_rows(path: Path) -> list[tuple[str, re.Pattern[str]]]:
    """The (label, compiled ``runs`` pattern) of each entry of the YAML list at ``path``;
    ``SystemExit`` naming the entry when one is not a mapping with a string ``label`` and a
    valid regular expression ``runs``."""
    entries = yaml.safe_load(path.read_text())
    if not isinstance(entries, list) or not entries:
        raise SystemExit(f"{path}: expected a non-empty YAML list of {{label, runs}} entries")
    rows = []
    for k, entry in enumerate(entries):
        if not isinstance(entry, dict) or not isinstance(entry.get("label"), str) \
                or not isinstance(entry.get("runs"), str):
            raise SystemExit(f"{path}: entry {k} must have a string 'label' and a string 'runs', got {entry!r}")
        try:
            rows.append((entry["label"], re.compile(entry["runs"])))
        except re.error as exc:
            where = f"{path}: entry {k} ({entry['label']})"
            raise SystemExit(f"{where}: 'runs' is not a regular expression: {exc}") from None
    return rows


def poisson_levels(errors: pd.DataFrame, pattern: re.Pattern[str]) -> pd.DataFrame:
    """The headline rows of the Poisson levels (``f...``) whose run path ``pattern`` matches."""
    e = errors[errors["level"].str.startswith("f") & errors["run"].map(lambda r: bool(pattern.search(r)))]
    return headline_rows(e)


def row_cells(levels: pd.DataFrame) -> list[str]:
    """The median |error| cells (``"4.2 %"``) of one row, in :data:`COLS` order (``"-"`` where none)."""
    cells = []
    for metric, stat in COLS:
        v = levels[(levels["metric"] == metric) & (levels["stat"] == stat)]["error"].abs()
        cells.append(f"{v.median() * 100:.1f} %" if len(v) else "-")
    return cells


def describe_levels(levels: pd.DataFrame) -> str:
    """``"8: 0.25-0.9; probe 1.1-1.9 ms"``: the count of levels, their loads and host-probe range."""
    runs = levels.drop_duplicates("run")
    loads = sorted({float(level[1:]) for level in runs["level"]})
    shown = ", ".join(f"{x:g}" for x in loads) if len(loads) <= 3 else f"{loads[0]:g}-{loads[-1]:g}"
    probe = runs["host_probe_ms"].dropna()
    where = f"; probe {probe.min():.2f}-{probe.max():.2f} ms" if len(probe) else "; no host probe"
    if len(probe) and len(probe) < len(runs):
        where += f" on {len(probe)} of them"
    return f"{len(runs)}: {shown}{where}"


def rows_table(default: pd.DataFrame, probed: pd.DataFrame, rows: list[tuple[str, re.Pattern[str]]]) -> list[str]:
    """The README's deployment-class table: for each row, its median |errors| at the default host
    speed and at the probed one (a ``same | probed`` line)."""
    out = ["| configuration (levels) | host speed | " + " | ".join(label(m, s).replace("ttft", "TTFT")
                                                                   .replace("tpot", "TPOT").replace("e2e", "E2E")
                                                                   for m, s in COLS) + " |",
           "| --- | --- |" + " --- |" * len(COLS)]
    for name, pattern in rows:
        at_default, at_probe = poisson_levels(default, pattern), poisson_levels(probed, pattern)
        if at_default.empty:
            raise SystemExit(f"row {name!r}: no Poisson level's run matches {pattern.pattern!r}")
        out.append(f"| {name} ({describe_levels(at_default)}) | 1 | " + " | ".join(row_cells(at_default)) + " |")
        out.append("| same | probed | " + " | ".join(row_cells(at_probe)) + " |")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("errors", help="errors.csv of `latsim validate --out`")
    ap.add_argument("--by-load", action="store_true", help="one row per load level, with the signed bias")
    ap.add_argument("--exclude", help="a regular expression: leave out the runs it matches (--by-load)")
    ap.add_argument("--rows", type=Path, help="YAML list of {label, runs}: the README's class rows")
    ap.add_argument("--probed", help="errors.csv of the same runs at --host-speed probe (with --rows)")
    args = ap.parse_args()
    if args.rows is not None:
        if args.probed is None:
            ap.error("--rows needs --probed (the errors.csv of `latsim validate --host-speed probe`)")
        print("\n".join(rows_table(pd.read_csv(args.errors), pd.read_csv(args.probed), load_rows(args.rows))))
        return
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
