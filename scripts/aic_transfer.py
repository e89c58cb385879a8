"""Leave-one-GPU-out transfer error of the kernel regressors, per op family.

For each GPU with an imported profile (A100, L40S, H100, H200 from ``h200-aic``, B200), its kernel
times are predicted without any of its measurements, from the other GPUs' tables and its
datasheet (the roofline of :class:`~latsim.catalog.devices.DeviceSpec`):

* ``pooled``: one regressor fitted on the other GPUs' rows together (``log(measured /
  roofline)`` of each row on its own GPU, the features of :mod:`latsim.costmodel.profile.features`),
  applied to the held-out GPU's roofline;
* ``donor``: each other GPU's shipped regressor alone (latsim's ``transferred`` kind); the
  median over donors is reported, and the best donor;
* ``roofline``: the datasheet roofline itself (efficiency 1), for scale.

All-reduce (vLLM custom all-reduce in CUDA graphs, per world size): the other GPUs' tables
averaged in log space at each message size.  Error: absolute percentage of each measured row,
median (and p90) per family.  The summary (median over held-out GPUs, and the worst) goes to
``latsim/data/calibration/transfer_error.json``: the uncertainty a GPU priced without
measurements carries (:func:`latsim.costmodel.profile.transfer.transfer_uncertainty`).

    PYTHONPATH=. python scripts/aic_transfer.py [--out PATH]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from latsim.atomic import atomic_write_text
from latsim.calibration.aic_import import IMPORT_XGB
from latsim.calibration.fit import _regressor, family_roofline, fit_frames
from latsim.catalog import load_device
from latsim.costmodel.profile import features
from latsim.costmodel.profile.regressors import load_predictors
from latsim.costmodel.profile.store import SHIPPED_DIR, read_json, read_profile
from latsim.costmodel.profile.transfer import TRANSFER_FILE

GPUS = {"a100": "a100", "l40s": "l40s", "h100": "h100-aic", "h200": "h200-aic", "b200": "b200"}
FAMILIES = ("gemm", "attn_prefill", "attn_decode", "moe")


def _ape(pred: np.ndarray, true: np.ndarray) -> dict[str, float]:
    ape = 100.0 * np.abs(pred - true) / true
    signed = 100.0 * (pred - true) / true
    return {"median_ape": float(np.median(ape)), "p90_ape": float(np.percentile(ape, 90)),
            "median_signed": float(np.median(signed)), "rows": len(true)}


def _xy(family: str, df: pd.DataFrame, gpu: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    roof = family_roofline(family, df, load_device(gpu))
    return features.matrix(family, df, roof), np.log(df["median_s"].to_numpy(np.float64) / roof), roof


def family_errors(frames: dict[str, dict[str, pd.DataFrame]], target: str, family: str) -> dict[str, Any]:
    df = frames[target][family]
    true = df["median_s"].to_numpy(np.float64)
    donors = [g for g in GPUS if g != target and family in frames[g]]
    x_t, _, roof_t = _xy(family, df, target)
    parts = [_xy(family, frames[g][family], g) for g in donors]
    model = _regressor(0, IMPORT_XGB).fit(np.vstack([p[0] for p in parts]), np.concatenate([p[1] for p in parts]))
    out: dict[str, Any] = {"pooled": _ape(roof_t * np.exp(model.predict(x_t).astype(np.float64)), true),
                           "roofline": _ape(roof_t, true)}
    each = {g: _ape(roof_t * load_predictors(SHIPPED_DIR / GPUS[g]).ratio(family, df, roof_t), true) for g in donors}
    out["donor"] = {"median_ape": float(np.median([e["median_ape"] for e in each.values()])),
                    "best": min(each, key=lambda g: each[g]["median_ape"]), "each": each}
    return out


def allreduce_errors(target: str) -> dict[str, Any] | None:
    """Donor-mean error of ``target``'s in-graph all-reduce table (None when it has none)."""
    tables = {g: read_json(SHIPPED_DIR / GPUS[g] / "allreduce.json", "all-reduce")["modes"]["vllm_custom"]
              for g in GPUS if (SHIPPED_DIR / GPUS[g] / "allreduce.json").is_file()}
    if target not in tables:
        return None
    pred, true = [], []
    for world, t in tables[target].items():
        donors = [tables[g][world] for g in tables if g != target and world in tables[g]]
        logs = [np.interp(np.log(t["bytes"]), np.log(d["bytes"]), np.log(d["seconds"])) for d in donors]
        pred.extend(np.exp(np.mean(logs, axis=0)))
        true.extend(t["seconds"])
    return {"donor_mean": _ape(np.asarray(pred), np.asarray(true))}


def summary(per_gpu: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Per family: median and worst over held-out GPUs of the pooled (all-reduce: donor mean) median APE."""
    out = {}
    for fam in (*FAMILIES, "allreduce"):
        key = "donor_mean" if fam == "allreduce" else "pooled"
        vals = {g: per_gpu[g][fam][key]["median_ape"] for g in per_gpu if fam in per_gpu[g]}
        out[fam] = {"median_ape_pct": float(np.median(list(vals.values()))), "worst_ape_pct": max(vals.values()),
                    "worst_gpu": max(vals, key=lambda g: vals[g]), "method": key}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=TRANSFER_FILE)
    args = ap.parse_args()
    frames = {g: fit_frames(SHIPPED_DIR / folder) for g, folder in GPUS.items()}
    per_gpu: dict[str, dict[str, Any]] = {}
    for g in GPUS:
        per_gpu[g] = {f: family_errors(frames, g, f) for f in FAMILIES if f in frames[g]}
        ar = allreduce_errors(g)
        if ar is not None:
            per_gpu[g]["allreduce"] = ar
    profiles = {g: read_profile(SHIPPED_DIR / folder) for g, folder in GPUS.items()}
    doc = {"what": "leave-one-GPU-out error of kernel times predicted from the other GPUs' measurements and the "
                   "held-out GPU's datasheet roofline (scripts/aic_transfer.py)",
           "profiles": {g: {"folder": f"latsim/data/calibration/{GPUS[g]}", "gpu_name": p["gpu_name"],
                            "source_commit": p.get("source", {}).get("commit"), "vllm": p.get("vllm")}
                        for g, p in profiles.items()},
           "xgb_params": IMPORT_XGB, "summary": summary(per_gpu), "per_gpu": per_gpu}
    atomic_write_text(args.out, json.dumps(doc, indent=1) + "\n")
    rows = []
    for g, fams in per_gpu.items():
        for f, r in fams.items():
            if f == "allreduce":
                rows.append((g, f, "-", "-", "-", r["donor_mean"]["median_ape"]))
            else:
                rows.append((g, f, r["pooled"]["median_ape"], r["pooled"]["median_signed"], r["donor"]["median_ape"],
                             r["roofline"]["median_ape"]))
    print("| held-out GPU | family | pooled median APE % | pooled median signed % | donor median APE % | "
          "roofline median APE % (all-reduce: donor mean) |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print("| " + " | ".join(f"{v:.1f}" if isinstance(v, float) else str(v) for v in r) + " |")
    print()
    print("| family | median over GPUs % | worst % | worst GPU |")
    print("|---|---|---|---|")
    for f, s in doc["summary"].items():
        print(f"| {f} | {s['median_ape_pct']:.1f} | {s['worst_ape_pct']:.1f} | {s['worst_gpu']} |")


if __name__ == "__main__":
    main()
