"""The surrogate and the simulator against the live vLLM runs of ``data/validation``.

Every Poisson level (``f*/``) of every run becomes one configuration row: the model and TP and
engine limits of its ``meta.json``, the GPU it recorded (the H200 for runs that recorded none), the
offered rate, and its workload shape (``fixed``: a length with no spread; ``mix``: the lognormal
median and sigma).  The surrogate
answers from that row; the simulator answers on the synthetic trace the recipe would draw for
the same row (:func:`latsim.predict.recipe.trace_for`), so both see the same summary of the
workload.  Measured P50/P99 TTFT and P99 TPOT come from the run's ``summary.json``.

Levels the grid's columns cannot describe are left out: a model that is no catalog name (e.g.
an FP8 checkpoint's own config) and workloads other than ``fixed``, ``mix`` and ``long``
lognormal lengths (shared prefixes: the run's prefix groups are not a ``prefix_share``).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from latsim.validate.compare import recorded_device

MEASURED = {"ttft_ms_p50": "ttft_p50", "ttft_ms_p99": "ttft_p99", "tpot_ms_p99": "tpot_p99"}
"""Surrogate target -> the measured field of ``summary.json`` it is compared with."""


DESCRIBED_SHAPES = ("fixed", "mix", "long")
"""Workload shapes a grid row's length columns describe."""


def live_rows(root: str | Path) -> pd.DataFrame:
    """One row per measured Poisson level under ``root`` the grid can describe (see the module
    note): grid columns, ``run``, measured metrics."""
    from latsim.catalog import list_models

    catalog, rows = set(list_models()), []
    for summary_path in sorted(Path(root).glob("*/*/summary.json")):
        levels = {s["level"]: s for s in json.loads(summary_path.read_text())}
        for meta_path in sorted(summary_path.parent.glob("f*/meta.json")):
            meta = json.loads(meta_path.read_text())
            level = levels.get(meta["level"])
            if level is None or not level.get("completed"):
                continue
            if meta["model"]["name"] not in catalog or meta["workload"]["shape"]["kind"] not in DESCRIBED_SHAPES:
                continue
            rows.append(_row(meta, level, str(meta_path.parent.relative_to(root))))
    return pd.DataFrame(rows)


def _row(meta: dict, level: dict, run: str) -> dict:
    shape, engine = meta["workload"]["shape"], meta["engine_config"]
    if shape["kind"] == "fixed":
        lengths = {"input_median": float(shape["in"]), "input_sigma": 0.0, "output_median": float(shape["out"]),
                   "output_sigma": 0.0}
    else:
        lengths = {"input_median": float(shape["in"][0]), "input_sigma": float(shape["in"][1]),
                   "output_median": float(shape["out"][0]), "output_sigma": float(shape["out"][1])}
    row = {"run": run, "model": meta["model"]["name"], "device": recorded_device(meta) or "h200",
           "tp": int(engine.get("tp", 1)),
           "replicas": 1, "weight_dtype": "bf16", "kv_dtype": "bf16", "max_num_seqs": engine["max_num_seqs"],
           "max_num_batched_tokens": engine["max_num_batched_tokens"], "qps": float(meta["trace"]["offered_qps"]),
           **lengths, "prefix_share": 0.0, "num_requests": int(meta["trace"]["num_requests"]), "seed": 0}
    row.update({f"measured_{t}": float(level[field]) for t, field in MEASURED.items()})
    return row


def simulate_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """The simulator's answer for every live row (targets, same index)."""
    from latsim.predict.recipe import simulate_point

    out = [simulate_point({k: v for k, v in row.items() if not str(k).startswith("measured_")},
                          int(row["num_requests"]))
           for row in rows.to_dict("records")]
    return pd.DataFrame(out, index=rows.index)


def live_errors(rows: pd.DataFrame, predicted: pd.DataFrame) -> dict:
    """Median and P90 of ``|predicted / measured - 1|`` per compared metric."""
    result = {}
    for target in MEASURED:
        rel = np.abs(predicted[target].to_numpy(dtype=float) / rows[f"measured_{target}"].to_numpy() - 1.0)
        result[target] = {"median": float(np.median(rel)), "p90": float(np.quantile(rel, 0.9)), "n": len(rel)}
    return result
