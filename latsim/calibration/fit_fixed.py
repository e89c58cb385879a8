"""Fixed costs from a profile: kernel-launch and CUDA-graph overheads, all-reduce tables.

``overheads.json``: ``graph_base_s`` and ``graph_per_kernel_s`` from a least-squares line
through graph replay time vs kernels in the graph; ``eager_per_launch_s`` likewise from eager
launch sequences (host wall time).  ``allreduce.json``: per world size, message bytes and
median seconds, sorted; the cost model interpolates it in log-log.  The top-level ``worlds``
table is the eager NCCL mode (rows without a ``mode`` column are NCCL); other measured modes
(``nccl_graph``, ``vllm_custom``; see :mod:`latsim.calibration.comm`) go to an optional
``"modes": {mode: {world: {"bytes", "seconds"}}}`` section.  Held-out error of each table: each
interior size predicted from its neighbours (leave-one-out).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from latsim.calibration.unchanged import write_json_if_changed
from latsim.costmodel.profile.store import available_families, load_table, read_profile


def _line(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """(intercept, slope) of least squares, both clipped at zero."""
    if len(x) < 2:
        return max(float(y[0]), 0.0) if len(y) else 0.0, 0.0
    slope, icpt = np.polyfit(x, y, 1)
    return max(float(icpt), 0.0), max(float(slope), 0.0)


def fit_overheads(folder: Path) -> dict[str, Any] | None:
    if "overhead" not in available_families(folder):
        return None
    df = load_table(folder, "overhead")
    out: dict[str, Any] = {"source": str(folder.name), "date_utc": read_profile(folder)["date_utc"]}
    for mode, col in (("eager", "host_s"), ("graph", "median_s")):
        rows = df[df["mode"] == mode]
        base, per = _line(rows["kernels"].to_numpy(float), rows[col].to_numpy(float))
        out[f"{mode}_base_s"], out[f"{mode}_per_kernel_s"] = base, per
        out[f"{mode}_points"] = len(rows)
    return out


def fit_allreduce(folder: Path) -> dict[str, Any] | None:
    """The all-reduce tables of the profile's ``ok`` comm rows, or None without any.

    ``{"worlds": {world: table}}`` from the ``nccl`` rows, plus ``"modes": {mode: {world:
    table}}`` when other modes have rows; each table is ``{"bytes": [...], "seconds": [...]}``
    sorted by bytes.
    """
    if "comm" not in available_families(folder):
        return None
    df = load_table(folder, "comm")
    if df.empty:
        return None
    mode = df["mode"].fillna("nccl") if "mode" in df.columns else pd.Series("nccl", index=df.index)
    out: dict[str, Any] = {"worlds": _world_tables(df[mode == "nccl"])}
    others = {m: _world_tables(df[mode == m]) for m in sorted(set(mode)) if m != "nccl"}
    if others:
        out["modes"] = others
    return out


def _world_tables(df: pd.DataFrame) -> dict[str, dict[str, list[float]]]:
    worlds = {}
    for world, rows in df.groupby("world"):
        rows = rows.sort_values("bytes")
        worlds[f"{world}"] = {"bytes": rows["bytes"].astype(float).tolist(),
                              "seconds": rows["median_s"].astype(float).tolist()}
    return worlds


def _loo_report(ar: dict[str, Any]) -> dict[str, Any]:
    """Leave-one-out error of the nccl table (top-level keys) and of each other mode (``modes``)."""
    report: dict[str, Any] = _loo_error(ar)
    modes = {m: _loo_error({"worlds": t}) for m, t in ar.get("modes", {}).items()}
    if modes:
        report["modes"] = modes
    return report


def _loo_error(table: dict[str, Any]) -> dict[str, Any]:
    apes = []
    for t in table["worlds"].values():
        lb, ls = np.log(t["bytes"]), np.log(t["seconds"])
        for i in range(1, len(lb) - 1):
            keep = np.arange(len(lb)) != i
            pred = np.exp(np.interp(lb[i], lb[keep], ls[keep]))
            apes.append(100.0 * abs(pred - t["seconds"][i]) / t["seconds"][i])
    if not apes:
        return {}
    arr = np.asarray(apes)
    out: dict[str, Any] = {"mape": float(arr.mean()), "median_ape": float(np.median(arr)),
                           "p90_ape": float(np.percentile(arr, 90)),
            "n_test": len(arr), "held_out_shapes": ["each interior message size (leave-one-out)"]}
    return out


def fit_fixed(folder: Path, out: Path) -> dict[str, Any]:
    """Write ``overheads.json`` / ``allreduce.json`` where the profile has the data; report entries."""
    report: dict[str, Any] = {}
    over = fit_overheads(folder)
    if over is not None:
        write_json_if_changed(out / "overheads.json", over)
        report["overhead"] = {k: v for k, v in over.items() if k.endswith("_s") or k.endswith("_points")}
    ar = fit_allreduce(folder)
    if ar is not None:
        write_json_if_changed(out / "allreduce.json", ar)
        report["allreduce"] = _loo_report(ar)
    return report
