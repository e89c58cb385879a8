"""Tables of the H200's power-cap measurements (``data/power/h200/``), as the README quotes them.

    python scripts/power_summary.py data/power/h200

1. ``prefill_probe.json`` (``scripts/device_prefill_probe.py``): a long FA3 prefill chunk alone,
   beside 32/64 decode rows in one call, and sustained (alone, and between its step's GEMMs);
2. ``power_probe.json.gz`` (``scripts/device_power_probe.py``): per kernel, the per-call time over
   the seconds of a sustained run, and duty cycles;
3. ``smi-<run>.csv[.gz]``: the SM clock and power over a live run's levels (``nvidia-smi`` every
   100-200 ms), cut by each level's start and duration from its ``meta.json``; ``runs.json`` names
   each such file and its run folder (from the repository root), or a list of them where one engine
   start ran several shapes.

    python scripts/power_summary.py --trace data/traces/h200/RUN data/power/h200/smi-RUN.csv.gz

cuts an ``nvidia-smi`` series (with or without its header and units, gzipped or not) by the
scenarios of a ``scripts/device_trace.py`` run instead (each scenario's ``started_at`` and
``seconds`` in ``timings.json``, stamped since the twenty-seventh session; earlier runs lack them).
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

BINS = (0.3, 0.5, 1.0, 2.0, 3.1)


def prefill_table(probe: dict[str, Any]) -> pd.DataFrame:
    """Short-burst medians (ms) per case and context, then the sustained ones."""
    rows = [{"case": r["case"], "ctx": r.get("ctx", "-"), "decodes": r.get("decodes", "-"),
             "median_ms": round(r["median_ms"], 3)} for r in probe["short"]]
    for r in probe["sustained"]:
        vals = r.get("ms") or r.get("attention_ms_per_step")
        per_call = np.asarray(vals) / (32 if "attention_ms_per_step" in r else 1)
        rows.append({"case": r["case"], "ctx": r.get("ctx", "-"), "decodes": 0,
                     "median_ms": round(float(np.median(per_call)), 3),
                     "first_ms": round(float(per_call[0]), 3)})
    return pd.DataFrame(rows)


def power_table(probe: dict[str, Any]) -> pd.DataFrame:
    """Per kernel: median per-call ms in windows of the run's seconds, and the SM clock's median."""
    rows = []
    for r in probe["rows"]:
        calls = np.asarray(r["calls"])
        start, ms = calls[:, 0], calls[:, 1]
        duty = f" {r['on_ms']}/{r['off_ms']} ms" if "on_ms" in r else ""
        label = r.get("case") or f"{r['dtype']} {r.get('K', 4096)}x{r.get('N', 28672)} M={r['M']}{duty}"
        row: dict[str, Any] = {"kernel": r["kernel"], "case": label}
        for lo, hi in itertools.pairwise(BINS):
            sel = (start >= lo) & (start < hi)
            row[f"{lo}-{hi} s"] = round(float(np.median(ms[sel])), 3) if sel.any() else None
        sm = [int(x.split(", ")[1]) for x in r["clocks"] if x.split(", ")[1].strip().isdigit()]
        row["sm_mhz_median"] = int(np.median(sm))
        rows.append(row)
    return pd.DataFrame(rows)


SMI_COLUMNS = ("ts", "sm", "watts", "temp", "util")
"""The columns of a headerless series, in order (``--query-gpu=timestamp,clocks.sm,power.draw,
temperature.gpu,utilization.gpu``)."""
SMI_NAMES = {"timestamp": "ts", "clocks.current.sm": "sm", "clocks.current.memory": "mem", "power.draw": "watts",
             "temperature.gpu": "temp", "utilization.gpu": "util"}
"""A headed series' column names (units cut off) -> ours."""


def read_smi(smi_csv: Path) -> pd.DataFrame:
    """An ``nvidia-smi --query-gpu=...`` series: written with ``noheader,nounits`` (the columns of
    :data:`SMI_COLUMNS`, in order) or with its header line (columns by name, :data:`SMI_NAMES`) and
    units (``1980 MHz``), plain or gzipped; columns ``sm``, ``watts``, ``temp`` (``util``, ``mem``
    when queried) and the sample time ``t`` (UTC)."""
    raw = pd.read_csv(smi_csv, header=None, skipinitialspace=True, dtype=str)
    if raw.iloc[0, 0].strip() == "timestamp":
        names = [SMI_NAMES.get(str(h).split("[")[0].strip(), f"col{i}") for i, h in enumerate(raw.iloc[0])]
        raw = raw.iloc[1:]
    else:
        names = [*SMI_COLUMNS, *(f"col{i}" for i in range(len(SMI_COLUMNS), raw.shape[1]))][:raw.shape[1]]
    raw.columns = names
    stamps = pd.to_datetime(raw["ts"].str.strip(), format="%Y/%m/%d %H:%M:%S.%f")
    smi = pd.DataFrame({"t": stamps.dt.tz_localize("UTC")})
    for name in names:
        if name in SMI_NAMES.values() and name != "ts":
            smi[name] = pd.to_numeric(raw[name].str.extract(r"([-0-9.]+)")[0]).to_numpy()
    return smi.reset_index(drop=True)


def window(smi: pd.DataFrame, start: str, seconds: float) -> pd.DataFrame:
    """The samples of an nvidia-smi series (:func:`read_smi`) from ``start`` (a timestamp) for
    ``seconds``."""
    t0 = pd.Timestamp(start)
    return smi[(smi["t"] >= t0) & (smi["t"] < t0 + pd.Timedelta(seconds=seconds))]


def _cut(smi: pd.DataFrame, name: str, start: str, seconds: float) -> dict[str, Any]:
    s = window(smi, start, seconds)
    row: dict[str, Any] = {"level": name, "samples": len(s), "sm_mhz_p10": int(s["sm"].quantile(0.1)),
                           "sm_mhz_median": int(s["sm"].median()),
                           "share_below_1800": round(float((s["sm"] < 1800).mean()), 2),
                           "watts_mean": int(s["watts"].mean())}
    if "util" in s:
        row["gpu_util_mean"] = int(s["util"].mean())
    return row


def live_clocks(smi_csv: Path, run_dir: Path) -> pd.DataFrame:
    """SM clock and power per level of one live run."""
    smi = read_smi(smi_csv)
    rows = []
    for level in sorted(p.name for p in run_dir.iterdir() if (p / "meta.json").exists()):
        meta = json.loads((run_dir / level / "meta.json").read_text())
        rows.append(_cut(smi, level, meta["start_time"], meta["duration_s"]))
    return pd.DataFrame(rows)


def trace_clocks(smi_csv: Path, trace_dir: Path) -> pd.DataFrame:
    """SM clock and power per scenario of one ``device_trace.py`` run; ValueError when its
    ``timings.json`` does not stamp the scenarios' starts."""
    meta = json.loads((trace_dir / "timings.json").read_text())
    scenarios = meta.get("scenarios", [])
    if not scenarios or any("started_at" not in sc for sc in scenarios):
        raise ValueError(f"{trace_dir}: its scenarios carry no started_at (device_trace.py stamps them since the "
                         "twenty-seventh session; earlier runs lack them)")
    smi = read_smi(smi_csv)
    return pd.DataFrame([_cut(smi, sc["scenario"]["label"], sc["started_at"], sc["seconds"]) for sc in scenarios])


def series_runs(runs: dict[str, str | list[str]]) -> list[tuple[str, str]]:
    """``(series file, run folder)`` pairs of a ``runs.json`` mapping, sorted: a series names one
    run folder, or a list of them where one engine start ran several shapes."""
    return sorted((name, run) for name, named in runs.items() for run in ([named] if isinstance(named, str) else named))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path, help="data/power/h200, or with --trace a device_trace.py run")
    ap.add_argument("--trace", metavar="SMI", type=Path, help="cut this nvidia-smi series by the run's scenarios")
    args = ap.parse_args()
    pd.set_option("display.width", 200)
    if args.trace is not None:
        try:
            print(trace_clocks(args.trace, args.folder).to_string(index=False))
        except (ValueError, FileNotFoundError) as exc:
            raise SystemExit(str(exc)) from exc
        return
    print(prefill_table(json.loads((args.folder / "prefill_probe.json").read_text())).to_string(index=False))
    with gzip.open(args.folder / "power_probe.json.gz", "rt") as f:
        print(power_table(json.load(f)).to_string(index=False))
    runs = json.loads((args.folder / "runs.json").read_text())
    for name, run in series_runs(runs):  # the series beside live runs (those beside traces: --trace)
        print(f"{name} ({run})")
        print(live_clocks(args.folder / name, Path(run)).to_string(index=False))


if __name__ == "__main__":
    main()
