"""Fit the co-read terms (:mod:`latsim.costmodel.coreads`) from ``shared`` decode traces.

    python scripts/fit_coreads.py data/traces/h100/s45/shared-llama-3.1-8b \
        data/traces/h100/s45/shared2-llama-3.1-8b data/traces/h100/s45/shared-qwen2.5-7b [--write]

Each ``shared:seqs=S,in=I,prefix=P,groups=G`` scenario of ``scripts/device_trace.py`` (sequence j
reads prefix ``j mod G``) is paired with a ``decode:seqs=S,in=I+P`` scenario of the same model and
GPU (any of the folders): the same contexts, no prefix shared.  Per scenario, the median decode
attention of its profiled pure decode steps (``steps.csv``), the base's scaled to the scenario's
context (``context_at_profile``), gives the measured ratio; the model's is
``1 - min(saving, cap) x co-read tokens / KV tokens`` with the co-reads of that order
(:func:`~latsim.costmodel.coreads.ordered_saved`) in waves of ``ctas_per_sm x SMs / KV heads``
and the cap of the model's decode tile (:func:`~latsim.costmodel.coreads.decode_tile_rows`,
:meth:`~latsim.costmodel.coreads.CoReads.cap_at`).  First, on the pairs whose tile is the
64-row one: for each ``ctas_per_sm`` of a grid, ``saving`` is the least-squares fit of the
ratios, and the pair with the least RMS of the attention's relative error is kept.  Then, on the
pairs of taller tiles (multi-head attention of head dim 96 runs 192 rows), ``ridge_rows`` is the
grid value of least RMS (none without such pairs).  All of this on the first trace's GPU; the
64-row pairs of every other GPU fit that GPU's own ``saving`` (least squares, the first GPU's
``ctas_per_sm``), which replaces the scaled one there (``gpu_savings``).

``chunked`` scenarios over a shared prefix (``prefix=P,groups=G``) paired with the same
``chunked`` scenario of ``din`` longer and nothing shared check the prompt-carrying steps' tile
(:func:`~latsim.costmodel.coreads.prompt_tile_rows`): the attention the co-reads save in the
steps carrying a chunk over what they save in the pure decode steps, measured and modelled
(``prompt_saving / saving``); reported, not fitted.

``--write`` writes ``latsim/data/calibration/coreads.json`` (atomically) with the terms, the
first GPU's HBM bandwidth and bf16 FLOP/s (other Hopper GPUs without a saving of their own scale
by theirs), every scenario's row, the prompt check and the traces' digests.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from latsim.atomic import atomic_write_text
from latsim.catalog.lookup import detect_device, load_model
from latsim.costmodel.coreads import (
    COREADS_FILE,
    ONE_GROUP_ROWS,
    CoReads,
    bind_to,
    layer_tile_rows,
    ordered_saved,
)
from latsim.paths import CALIBRATION
from latsim.provenance import file_digest, record

CTAS_GRID = (0.5, 0.75, 1.0, 1.25, 1.5, 2.0)
RIDGE_GRID = tuple(float(r) for r in np.round(np.geomspace(64.0, 4096.0, 601), 2))


def _model_of(meta: dict[str, Any]) -> str:
    argv = meta.get("argv", [])
    return str(argv[argv.index("--model") + 1]) if "--model" in argv else ""


def _kv_dtype_of(meta: dict[str, Any]) -> str:
    """The trace's cache dtype: ``fp8`` when its engine ran ``kv_cache_dtype`` fp8*, else ``bf16``."""
    argv = meta.get("argv", [])
    for flag, value in itertools.pairwise(argv):
        if flag == "--engine-arg" and value.startswith("kv_cache_dtype="):
            return "fp8" if str(json.loads(value.split("=", 1)[1])).startswith("fp8") else "bf16"
    return "bf16"


def scenarios(folder: Path) -> list[dict[str, Any]]:
    """The folder's decode and shared scenarios: label, parameters, context and median attention (s)."""
    meta = json.loads((folder / "timings.json").read_text())
    steps = pd.read_csv(folder / "steps.csv")
    model, gpu, kv_dtype = _model_of(meta), meta.get("gpu_name"), _kv_dtype_of(meta)
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
        out.append({"folder": folder.as_posix(), "model": model, "gpu": gpu, "kv_dtype": kv_dtype, **spec,
                    "context": float(np.mean(sc["context_at_profile"])),
                    "attention_s": float(rows["attention_us"].median()) * 1e-6, "steps": len(rows)})
    return out


def pairs(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each shared scenario with its base (first decode scenario of the same model, GPU, S and
    context) and its model's decode tiles (:func:`~latsim.costmodel.coreads.layer_tile_rows`)."""
    bases: dict[tuple[Any, ...], dict[str, Any]] = {}
    for r in rows:
        if r["kind"] == "decode":
            bases.setdefault((r["model"], r["gpu"], r["kv_dtype"], r["seqs"], r["in"]), r)
    out = []
    for r in rows:
        if r["kind"] != "shared":
            continue
        base = bases.get((r["model"], r["gpu"], r["kv_dtype"], r["seqs"], r["in"] + r["prefix"]))
        if base is None:
            print(f"  (no decode:seqs={r['seqs']},in={r['in'] + r['prefix']} for {r['label']} of "
                  f"{r['model']}: left out)", file=sys.stderr)
            continue
        model, device = load_model(r["model"]), detect_device(r["gpu"])
        if not device.sm_count or "bf16" not in device.peak_flops:
            raise ValueError(f"{r['folder']}: GPU {r['gpu']!r} has no sm_count or bf16 FLOP/s in the catalog")
        tiles = layer_tile_rows(model)
        out.append({**r, "base_label": base["label"], "base_folder": base["folder"], "device": device.name,
                    "expected_s": base["attention_s"] * r["context"] / base["context"],
                    "kv_tokens": r["seqs"] * r["context"], "sm_count": device.sm_count,
                    "kv_heads": model.num_kv_heads, "hbm_bandwidth": device.hbm_bandwidth,
                    "peak_flops": device.peak_flops["bf16"], "tiles": tiles,
                    "one_group": r["kv_dtype"] == "bf16" and all(rows == ONE_GROUP_ROWS for _, rows in tiles)})
    return out


def _shares(rows: list[dict[str, Any]], ctas: float) -> np.ndarray:
    """Each pair's co-read tokens over its KV tokens in waves of ``ctas`` work units an SM."""
    return np.array([ordered_saved([j % r["groups"] for j in range(r["seqs"])],
                                   {g: r["prefix"] for g in range(r["groups"])},
                                   ctas * r["sm_count"] / r["kv_heads"]) / r["kv_tokens"] for r in rows])


def _rms(model: np.ndarray, ratio: np.ndarray) -> float:
    return float(np.sqrt(np.mean(((model - ratio) / ratio) ** 2))) if len(ratio) else 0.0


def _lsq_saving(shares: np.ndarray, ratio: np.ndarray) -> float:
    """The least-squares ``saving`` of ``ratio = 1 - saving x shares``, clipped to [0, 1] (0.0
    where no pair co-reads)."""
    return float(np.clip(shares @ (1.0 - ratio) / (shares @ shares), 0.0, 1.0)) if shares @ shares > 0 else 0.0


def _saving_grid(rows: list[dict[str, Any]], ratio: np.ndarray) -> list[dict[str, Any]]:
    """For each ``ctas_per_sm`` of the grid, the least-squares ``saving`` and its RMS."""
    grid = []
    for ctas in CTAS_GRID:
        x = _shares(rows, ctas)
        saving = _lsq_saving(x, ratio)
        grid.append({"ctas_per_sm": ctas, "saving": saving, "rms": _rms(1.0 - saving * x, ratio)})
    return grid


def _capped(rows: list[dict[str, Any]], terms: CoReads) -> np.ndarray:
    """Each pair's modelled ratio under ``terms`` (bound to its GPU, tiles and cache as the
    simulator binds them: :meth:`~latsim.costmodel.coreads.CoReads.bind`)."""
    x = _shares(rows, terms.ctas_per_sm)
    saving = np.array([terms.bind(r["sm_count"], r["kv_heads"], r["hbm_bandwidth"], r["peak_flops"], r["tiles"],
                                  r["kv_dtype"], r["device"]).saving for r in rows])
    return np.asarray(1.0 - saving * x)


def _ridge(rows: list[dict[str, Any]], terms: CoReads, field: str) -> tuple[float, float | None]:
    """The grid's ``field`` (a ridge) of least RMS on ``rows`` and that RMS (infinite and None
    without rows)."""
    if not rows:
        return math.inf, None
    ratio = np.array([r["attention_s"] / r["expected_s"] for r in rows])
    def at(g: float) -> CoReads:
        return replace(terms, ridge_rows=g) if field == "ridge_rows" else replace(terms, ridge_rows_fp8=g)

    rms, ridge = min((_rms(_capped(rows, at(g)), ratio), g) for g in RIDGE_GRID)
    return ridge, rms


def _gpu_savings(rows: list[dict[str, Any]], terms: CoReads) -> dict[str, dict[str, Any]]:
    """Each GPU's own saving (catalog name -> fit) from its 64-row bf16 pairs in waves of
    ``terms.ctas_per_sm``, beside the RMS of the saving scaled from ``terms`` on the same pairs."""
    out: dict[str, dict[str, Any]] = {}
    for gpu in sorted({r["gpu"] for r in rows}):
        one = [r for r in rows if r["gpu"] == gpu and r["one_group"]]
        if not one:
            raise ValueError(f"no pair of a 64-row decode tile over a bf16 cache on {gpu} to fit its saving on")
        ratio = np.array([r["attention_s"] / r["expected_s"] for r in one])
        x = _shares(one, terms.ctas_per_sm)
        saving = _lsq_saving(x, ratio)
        out[one[0]["device"]] = {"saving": round(saving, 4), "measured_on": gpu, "pairs": len(one),
                                 "rms": _rms(1.0 - saving * x, ratio), "rms_scaled": _rms(_capped(one, terms), ratio),
                                 "scaled_saving": terms.saving_at(one[0]["hbm_bandwidth"])}
    return out


def fit(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """On the first row's GPU: ``saving`` and ``ctas_per_sm`` (the grid's best on the 64-row
    pairs over a bf16 cache), ``ridge_rows`` (the grid's best on the taller tiles' bf16 pairs),
    ``ridge_rows_fp8`` (on the FP8 cache's pairs; either infinite without pairs); every other
    GPU's own saving (``gpu_savings``) and each pair's modelled attention."""
    first = [r for r in rows if r["gpu"] == rows[0]["gpu"]]
    hbm, flops = {r["hbm_bandwidth"] for r in first}, {r["peak_flops"] for r in first}
    one = [r for r in first if r["one_group"]]
    if not one:
        raise ValueError("no pair of a 64-row decode tile over a bf16 cache (grouped queries of head dim 64 or "
                         "128) to fit the saving on")
    grid = _saving_grid(one, np.array([r["attention_s"] / r["expected_s"] for r in one]))
    best = min(grid, key=lambda g: g["rms"])
    terms = CoReads(best["saving"], best["ctas_per_sm"], hbm.pop(), "fit", peak_flops=flops.pop())
    ridge, rms_tall = _ridge([r for r in first if not r["one_group"] and r["kv_dtype"] == "bf16"], terms,
                             "ridge_rows")
    ridge_fp8, rms_fp8 = _ridge([r for r in first if r["kv_dtype"] == "fp8"], terms, "ridge_rows_fp8")
    terms = replace(terms, ridge_rows=ridge, ridge_rows_fp8=ridge_fp8)
    gpus = _gpu_savings([r for r in rows if r["gpu"] != rows[0]["gpu"]], terms)
    terms = replace(terms, gpu_savings=tuple((name, g["saving"]) for name, g in gpus.items()))
    ratio = np.array([r["attention_s"] / r["expected_s"] for r in rows])
    model = _capped(rows, terms)
    scen = [{"trace": r["folder"], "scenario": r["label"], "base": f"{r['base_folder']} {r['base_label']}",
             "model": r["model"], "gpu": r["gpu"], "kv_dtype": r["kv_dtype"], "seqs": r["seqs"],
             "groups": r["groups"], "prefix": r["prefix"], "tile_rows": [t for _, t in r["tiles"]],
             "steps": r["steps"], "measured_ms": 1e3 * r["attention_s"], "unshared_ms": 1e3 * r["expected_s"],
             "modelled_ms": 1e3 * r["expected_s"] * m}
            for r, m in zip(rows, model, strict=True)]
    return {"saving": terms.saving, "ctas_per_sm": terms.ctas_per_sm, "ridge_rows": ridge, "gpu_savings": gpus,
            "ridge_rows_fp8": ridge_fp8, "rms": best["rms"], "rms_tall": rms_tall, "rms_fp8": rms_fp8,
            "rms_all": _rms(model, ratio), "rms_without": _rms(np.ones_like(ratio), ratio), "gpu": rows[0]["gpu"],
            "terms": terms,
            "hbm_bandwidth_gb_s": terms.hbm_bandwidth / 1e9, "peak_tflops_bf16": terms.peak_flops / 1e12,
            "cap_64_rows": terms.cap_at(ONE_GROUP_ROWS, terms.hbm_bandwidth, terms.peak_flops),
            "grid": grid, "scenarios": scen}


def _chunked_attention(folder: Path, steps: pd.DataFrame, spec: dict[str, Any]) -> tuple[float, float]:
    """Median attention (s) of a ``chunked`` scenario's pure decode steps and of its steps carrying
    one whole prompt beside every decoder."""
    rows = steps[(steps["scenario"] == spec["label"]) & (steps["decode_reqs"] == spec["decodes"])]
    decode = rows[rows["prefill_reqs"] == 0]["attention_us"]
    prompt = rows[(rows["prefill_reqs"] == 1) & (rows["prefill_tokens"] == spec["in"])]["attention_us"]
    if decode.empty or prompt.empty:
        raise ValueError(f"{folder}: {spec['label']!r} has no pure decode step or no step with a whole prompt")
    return float(decode.median()) * 1e-6, float(prompt.median()) * 1e-6


def prompt_check(folders: list[Path], terms: CoReads) -> list[dict[str, Any]]:
    """Each ``chunked`` scenario over a shared prefix beside its unshared twin (module docstring):
    the attention its co-reads save in pure decode and in prompt-carrying steps, and the modelled
    ratio of the two (``terms``' ``prompt_saving / saving`` bound to the trace's GPU and model)."""
    out = []
    for folder in folders:
        meta = json.loads((folder / "timings.json").read_text())
        specs = [sc["scenario"] for sc in meta["scenarios"] if sc["scenario"]["kind"] == "chunked"]
        if not specs:
            continue
        steps = pd.read_csv(folder / "steps.csv")
        model, device = load_model(_model_of(meta)), detect_device(str(meta.get("gpu_name")))
        bound = bind_to(terms, device, model, kv_dtype=_kv_dtype_of(meta)) if device.sm_count else None
        for sc in (s for s in specs if s.get("prefix")):
            twin = next((b for b in specs if not b.get("prefix") and b["din"] == sc["din"] + sc["prefix"]
                         and all(b[k] == sc[k] for k in ("in", "n", "decodes"))), None)
            if twin is None or bound is None:
                continue
            (bd, bp), (sd, sp) = _chunked_attention(folder, steps, twin), _chunked_attention(folder, steps, sc)
            out.append({"trace": folder.as_posix(), "scenario": sc["label"], "base": twin["label"],
                        "decode_saved_us": 1e6 * (bd - sd), "prompt_saved_us": 1e6 * (bp - sp),
                        "measured_ratio": (bp - sp) / (bd - sd) if bd > sd else math.nan,
                        "modelled_ratio": bound.prompt_saving / bound.saving if bound.saving else math.nan})
    return out


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
        result["prompt_check"] = prompt_check(args.traces, result["terms"])
    except (OSError, ValueError, KeyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for s in result["scenarios"]:
        print(f"  {s['model']:14s} S={s['seqs']:3d} G={s['groups']:2d} P={s['prefix']:4d}  measured "
              f"{s['measured_ms']:6.3f}  unshared {s['unshared_ms']:6.3f}  modelled {s['modelled_ms']:6.3f} ms")
    for g in result["grid"]:
        print(f"  ctas_per_sm {g['ctas_per_sm']:.2f}: saving {g['saving']:.3f}, rms {100 * g['rms']:.1f} %")
    print(f"kept: ctas_per_sm {result['ctas_per_sm']}, saving {result['saving']:.3f} (rms of the 64-row pairs "
          f"{100 * result['rms']:.1f} %)")
    if result["rms_tall"] is not None:
        print(f"ridge_rows {result['ridge_rows']:.1f} (rms of the taller tiles' pairs "
              f"{100 * result['rms_tall']:.1f} %; 64 rows capped at {result['cap_64_rows']:.3f})")
    if result["rms_fp8"] is not None:
        print(f"ridge_rows_fp8 {result['ridge_rows_fp8']:.1f} (rms of the FP8 cache's pairs "
              f"{100 * result['rms_fp8']:.1f} %)")
    print(f"all pairs: rms {100 * result['rms_all']:.1f} %, {100 * result['rms_without']:.1f} % without co-reads")
    for name, g in result["gpu_savings"].items():
        print(f"{name}: saving {g['saving']:.3f} on its {g['pairs']} pairs (rms {100 * g['rms']:.1f} %; scaled "
              f"{g['scaled_saving']:.3f}, rms {100 * g['rms_scaled']:.1f} %)")
    for c in result["prompt_check"]:
        print(f"{c['scenario']}: co-reads save {c['decode_saved_us']:.0f} us in a pure decode step, "
              f"{c['prompt_saved_us']:.0f} us beside a prompt: ratio {c['measured_ratio']:.2f}, "
              f"modelled {c['modelled_ratio']:.2f}")
    if args.write:
        path = CALIBRATION / COREADS_FILE
        inputs = {f"{t.as_posix()}/{name}": file_digest(t / name) for t in args.traces
                  for name in ("timings.json", "steps.csv")}
        ridge = {dtype: None if math.isinf(result[key]) else result[key]
                 for dtype, key in (("bf16", "ridge_rows"), ("fp8", "ridge_rows_fp8"))}
        kept = ("saving", "ctas_per_sm", "gpu", "hbm_bandwidth_gb_s", "ridge_rows", "ridge_rows_fp8",
                "peak_tflops_bf16", "gpu_savings", "terms")
        doc = {"saving": round(result["saving"], 4), "ctas_per_sm": result["ctas_per_sm"], "ridge_rows": ridge,
               "hbm_bandwidth_gb_s": result["hbm_bandwidth_gb_s"], "peak_tflops_bf16": result["peak_tflops_bf16"],
               "measured_on": result["gpu"], "gpu_savings": result["gpu_savings"],
               "note": "saving: share of an HBM read of a shared prefix block that a co-read (a sequence of the "
                       "same decode wave reading it) saves; ridge_rows: per cache dtype, the decode tile "
                       "height whose work takes as long as its unshared read (a co-read saves at most 1 - rows / "
                       "ridge); gpu_savings: the saving measured on other GPUs, used there instead of the scaled one; "
                       "see latsim/costmodel/coreads.py",
               "provenance": record(inputs, {k: v for k, v in result.items() if k not in kept}, exclude=path)}
        atomic_write_text(path, json.dumps(doc, indent=1) + "\n")
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
