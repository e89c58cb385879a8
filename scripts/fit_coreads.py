"""Fit the co-read terms (:mod:`latsim.costmodel.coreads`) from ``shared`` decode traces.

    python scripts/fit_coreads.py data/traces/h100/s45/shared-llama-3.1-8b \
        data/traces/h100/s45/shared2-llama-3.1-8b data/traces/h100/s45/shared-qwen2.5-7b [--write]

Each ``shared:seqs=S,in=I,prefix=P,groups=G`` scenario of ``scripts/device_trace.py`` (sequence j
reads prefix ``j mod G``) is paired with a ``decode:seqs=S,in=I+P`` scenario of the same model and
GPU (any of the folders): the same contexts, no prefix shared.  Scenarios of a multi-head
attention model (one query head per KV head) are printed and left out: the model gives them no
co-reads (:func:`~latsim.costmodel.coreads.coreads_for`).  Per scenario, the median decode
attention of its profiled pure decode steps (``steps.csv``), the base's scaled to the scenario's
context (``context_at_profile``), gives the measured ratio; the model's is
``1 - saving x co-read tokens / KV tokens`` with the co-reads of that order
(:func:`~latsim.costmodel.coreads.ordered_saved`) in waves of ``ctas_per_sm x SMs / KV heads``.
For each ``ctas_per_sm`` of a grid, ``saving`` is the least-squares fit of the ratios; the pair
with the least RMS of the attention's relative error is kept.  ``--write`` writes
``latsim/data/calibration/coreads.json`` (atomically) with both, the GPU's HBM bandwidth (other
Hopper GPUs scale the saving by theirs: :meth:`~latsim.costmodel.coreads.CoReads.saving_at`),
every scenario's row and the traces' digests.  The traces must come from one GPU.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from latsim.atomic import atomic_write_text
from latsim.catalog.lookup import detect_device, load_model
from latsim.costmodel.coreads import COREADS_FILE, ordered_saved
from latsim.paths import CALIBRATION
from latsim.provenance import file_digest, record

CTAS_GRID = (0.5, 0.75, 1.0, 1.25, 1.5, 2.0)


def _model_of(meta: dict[str, Any]) -> str:
    argv = meta.get("argv", [])
    return str(argv[argv.index("--model") + 1]) if "--model" in argv else ""


def scenarios(folder: Path) -> list[dict[str, Any]]:
    """The folder's decode and shared scenarios: label, parameters, context and median attention (s)."""
    meta = json.loads((folder / "timings.json").read_text())
    steps = pd.read_csv(folder / "steps.csv")
    model, gpu = _model_of(meta), meta.get("gpu_name")
    if not model or not gpu:
        raise ValueError(f"{folder}: timings.json names no --model or no gpu_name")
    out = []
    for sc in meta["scenarios"]:
        spec = sc["scenario"]
        if spec["kind"] not in ("decode", "shared"):
            continue
        rows = steps[(steps["scenario"] == spec["label"]) & (steps["prefill_reqs"] == 0)
                     & (steps["decode_reqs"] == spec["seqs"])]
        if rows.empty:
            raise ValueError(f"{folder}: no pure decode step of {spec['seqs']} sequences in {spec['label']!r}")
        out.append({"folder": folder.as_posix(), "model": model, "gpu": gpu, **spec,
                    "context": float(np.mean(sc["context_at_profile"])),
                    "attention_s": float(rows["attention_us"].median()) * 1e-6, "steps": len(rows)})
    return out


def pairs(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each shared scenario with its base (first decode scenario of the same model, GPU, S and context)."""
    bases: dict[tuple[Any, ...], dict[str, Any]] = {}
    for r in rows:
        if r["kind"] == "decode":
            bases.setdefault((r["model"], r["gpu"], r["seqs"], r["in"]), r)
    out = []
    for r in rows:
        if r["kind"] != "shared":
            continue
        base = bases.get((r["model"], r["gpu"], r["seqs"], r["in"] + r["prefix"]))
        if base is None:
            print(f"  (no decode:seqs={r['seqs']},in={r['in'] + r['prefix']} for {r['label']} of "
                  f"{r['model']}: left out)", file=sys.stderr)
            continue
        model, device = load_model(r["model"]), detect_device(r["gpu"])
        expected = base["attention_s"] * r["context"] / base["context"]
        if model.num_heads == model.num_kv_heads:
            print(f"  ({r['model']} {r['label']}: multi-head attention, not modelled: measured "
                  f"{1e3 * r['attention_s']:.3f} ms against {1e3 * expected:.3f} unshared)", file=sys.stderr)
            continue
        if not device.sm_count:
            raise ValueError(f"{r['folder']}: GPU {r['gpu']!r} has no sm_count in the catalog")
        kv_heads = model.num_kv_heads
        out.append({**r, "base_label": base["label"], "base_folder": base["folder"], "expected_s": expected,
                    "kv_tokens": r["seqs"] * r["context"], "sm_count": device.sm_count, "kv_heads": kv_heads,
                    "hbm_bandwidth": device.hbm_bandwidth})
    return out


def fit(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """``saving`` and ``ctas_per_sm`` (the grid's best) and each row's modelled attention."""
    ratio = np.array([r["attention_s"] / r["expected_s"] for r in rows])
    grid: list[dict[str, Any]] = []
    for ctas in CTAS_GRID:
        x = np.array([ordered_saved([j % r["groups"] for j in range(r["seqs"])],
                                    {g: r["prefix"] for g in range(r["groups"])},
                                    ctas * r["sm_count"] / r["kv_heads"]) / r["kv_tokens"] for r in rows])
        saving = float(np.clip(x @ (1.0 - ratio) / (x @ x), 0.0, 1.0)) if x @ x > 0 else 0.0
        model = 1.0 - saving * x
        rms = float(np.sqrt(np.mean(((model - ratio) / ratio) ** 2)))
        grid.append({"ctas_per_sm": ctas, "saving": saving, "rms": rms, "x": x})
    best = min(grid, key=lambda g: g["rms"])
    hbm = {r["hbm_bandwidth"] for r in rows}
    if len(hbm) != 1:
        raise ValueError(f"the traces come from GPUs of different HBM bandwidths ({sorted(hbm)}): one GPU at a time")
    no_sharing = float(np.sqrt(np.mean(((1.0 - ratio) / ratio) ** 2)))
    scen = [{"trace": r["folder"], "scenario": r["label"], "base": f"{r['base_folder']} {r['base_label']}",
             "model": r["model"], "gpu": r["gpu"], "seqs": r["seqs"], "groups": r["groups"], "prefix": r["prefix"],
             "steps": r["steps"], "measured_ms": 1e3 * r["attention_s"], "unshared_ms": 1e3 * r["expected_s"],
             "modelled_ms": 1e3 * r["expected_s"] * (1.0 - best["saving"] * x)}
            for r, x in zip(rows, best["x"], strict=True)]
    return {"saving": best["saving"], "ctas_per_sm": best["ctas_per_sm"], "rms": best["rms"],
            "gpu": rows[0]["gpu"], "hbm_bandwidth_gb_s": hbm.pop() / 1e9,
            "rms_without": no_sharing,
            "grid": [{k: v for k, v in g.items() if k != "x"} for g in grid], "scenarios": scen}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("traces", nargs="+", type=Path, help="device_trace.py folders with decode and shared scenarios")
    p.add_argument("--write", action="store_true", help=f"write latsim/data/calibration/{COREADS_FILE}")
    args = p.parse_args(argv)
    try:
        rows = pairs([r for folder in args.traces for r in scenarios(folder)])
        if not rows:
            raise ValueError("no shared scenario has a decode base of the same contexts")
        result = fit(rows)
    except (OSError, ValueError, KeyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for s in result["scenarios"]:
        print(f"  {s['model']:14s} S={s['seqs']:3d} G={s['groups']:2d} P={s['prefix']:4d}  measured "
              f"{s['measured_ms']:6.3f}  unshared {s['unshared_ms']:6.3f}  modelled {s['modelled_ms']:6.3f} ms")
    for g in result["grid"]:
        print(f"  ctas_per_sm {g['ctas_per_sm']:.2f}: saving {g['saving']:.3f}, rms {100 * g['rms']:.1f} %")
    print(f"kept: ctas_per_sm {result['ctas_per_sm']}, saving {result['saving']:.3f} (rms {100 * result['rms']:.1f} %, "
          f"{100 * result['rms_without']:.1f} % without co-reads)")
    if args.write:
        path = CALIBRATION / COREADS_FILE
        inputs = {f"{t.as_posix()}/{name}": file_digest(t / name) for t in args.traces
                  for name in ("timings.json", "steps.csv")}
        doc = {"saving": round(result["saving"], 4), "ctas_per_sm": result["ctas_per_sm"],
               "hbm_bandwidth_gb_s": result["hbm_bandwidth_gb_s"], "measured_on": result["gpu"],
               "note": "share of an HBM read of a shared prefix block that a co-read (a sequence of the same "
                       "decode wave reading it) saves; see latsim/costmodel/coreads.py",
               "provenance": record(inputs, {k: v for k, v in result.items()
                                             if k not in ("saving", "ctas_per_sm", "gpu", "hbm_bandwidth_gb_s")},
                                    exclude=path)}
        atomic_write_text(path, json.dumps(doc, indent=1) + "\n")
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
