"""Fit a GPU's power-cap terms from its ``data/power/<gpu>`` probes and write them beside its profile.

    python scripts/fit_power.py data/power/h200 --profile latsim/data/calibration/h200 [--write]

What is fitted (the model: :mod:`latsim.costmodel.power`):

- ``full_clock_ratio`` and ``capped_ratio``: prefill attention's time at full clock and at the
  power cap, each over the profile's row for the same call.  Pairs: the 8B's 8,160-token FA3
  chunks at contexts 0 and 16,320 (``prefill_probe.json``; full clock: the calls in the first
  30 ms of a sustained run after warm-up, capped: the chunk between its step's GEMMs) and at
  context 8,160 (``power_probe.json.gz``; full clock: its first calls after the idle pause,
  capped: its calls 0.5-1.0 s in).  The profile rows are read at the probe's shapes (attention
  rows at 8,192 queries scaled by query-key pairs).  The medians are kept.
- ``budget_s`` and ``refill``: the full-clock budget of heavy work and its refill per idle
  second.  Fitted by least squares on every call of the 8,160-row bf16 GEMM's runs in
  ``power_probe.json.gz`` (sustained from idle, and on/off duty cycles of 50/200, 100/100 and
  200/50 ms): each call's measured capped share is ``(ms - full) / (capped - full)``, full the
  first calls' time, capped the sustained run's median over 0.5-1.0 s (later the chip's warming
  slows it further, which the model leaves out); the model spends the budget call by call and
  refills it in the gaps.

- ``gemms``: each GEMM class's own two ratios (``bf16``, ``fp8``, ``int4``).  Where the
  ``shapes_probe*.json.gz`` files hold the class's sustained runs on all four linear shapes of a
  model at one row count of at least ``HEAVY_TOKENS`` (:func:`layer_ratios`; quantized classes on
  Llama-3.1-70B, bf16 on six catalog models), a ratio is the layer's: the four shapes' summed
  full-clock (capped) time over their summed profile time (GEMM rows interpolated linearly in M),
  the median over models, row counts (and zero points); the shapes weigh as much as they take of
  a layer, where a median over single-kernel pairs would let gate_up's rows set the price of the
  small shapes too.  Without such layers, the median over the class's single-kernel pairs
  (:func:`quantized_pairs`; for bf16 the 8B's gate_up of ``prefill_probe.json`` and
  ``power_probe.json.gz``, kept in ``power.json`` either way).

- ``decode_cap``: the decoders' tensor rate at which sustained decoding starts to lower the clock
  and at which it holds it at the cap (``scripts/power_decode.py``), from ``--decode-trace
  RUN=SMI`` pairs: a ``device_trace.py`` run of stamped decode scenarios and the ``nvidia-smi``
  series beside it (the H200's: the 32B and 8B in bf16, ``s27/pw2-qwen2.5-32b``,
  ``s28/pw4-llama-3.1-8b`` and ``s29/pw7-qwen2.5-32b``, set the ramp; the GPTQ and FP8 70B on
  checkpoint-like weights, ``s28/pw5-llama-3.1-70b-gptq`` and ``s28/pw6-llama-3.1-70b-fp8``, their
  classes' weights on it), and from their ``graphless`` scenarios each class's capped ratio in
  light steps (bf16's from ``pw7``).  Without pairs, no decode cap.  With ``--prompt-weight``,
  ``prompt_rate_weight`` too: the factor by which the power probe's sustained bf16 GEMM runs'
  tensor rates fall on that ramp (``power_decode.gemm_points``; fitted on both GPUs, whose
  whole-rate states read their live levels' clock two to nine times too capped,
  ``data/power/README.md``); without it the field is left out (1).

Without ``--write`` it prints the fit; with it, writes ``<profile>/power.json`` (atomically)
with the values, the pairs, the fit's residual and the sources' sha256.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from power_decode import (  # type: ignore[import-not-found]  # scripts/
    decode_points,
    fit_light_ratios,
    fit_ramp,
    fit_weight,
    gemm_points,
    light_points,
    probe_clocks,
    run_and_series,
)

from latsim.atomic import atomic_write_text

CHUNK, GATE_UP, HEAVY_TOKENS = 8160, (4096, 28672), 2048
CAPPED_WINDOW = (0.5, 1.0)
"""Seconds into a sustained run whose calls' median is its capped time by default (later the
chip's warming slows it 2-3 % more: ``data/power/README.md``)."""
BUDGETS_MS = tuple(range(5, 105, 5))
SHAPE_FILES = ("", "_bf16", "_bf16_models")
"""``shapes_probe<tail>.json.gz``: every layer's four GEMM shapes sustained from idle (quantized
classes on Llama-3.1-70B; bf16 on the 8B and 70B, and on six catalog models)."""
REFILLS = tuple(np.round(np.arange(0.05, 1.55, 0.05), 2))


def pairs(q: int, ctx: int) -> float:
    return q * ctx + q * (q + 1) / 2


def profile_gemm_ms(gemm: pd.DataFrame, m: int, dtype: str = "bf16", shape: tuple[int, int] = GATE_UP) -> float | None:
    """The profile's time of the GEMM (interpolated linearly in M), None past its largest row."""
    rows = gemm[(gemm["dtype"] == dtype) & (gemm["K"] == shape[0]) & (gemm["N"] == shape[1])
                & (gemm["status"] == "ok")].sort_values("M")
    if rows.empty or m > rows["M"].max():
        return None
    return float(np.interp(m, rows["M"], rows["median_s"])) * 1e3


def _bf16_gemm_ms(gemm: pd.DataFrame, m: int) -> float:
    ms = profile_gemm_ms(gemm, m)
    if ms is None:
        raise SystemExit(f"the profile has no bf16 gate_up row at or above M={m}")
    return ms


def profile_prefill_ms(attn: pd.DataFrame, ctx: int) -> float:
    rows = attn[(attn["phase"] == "prefill") & (attn["hq"] == 32) & (attn["hkv"] == 8) & (attn["d"] == 128)
                & (attn["impl"] == "vllm-fa3-paged") & (attn["q"] == 8192) & (attn["status"] == "ok")]
    # the probe's context is k x 8,160 tokens; the grid's row at the same k x 8,192
    row = rows.iloc[(rows["ctx"] - ctx * 8192 / CHUNK).abs().argmin()]
    return float(row["median_s"]) * 1e3 * pairs(CHUNK, ctx) / pairs(8192, int(row["ctx"]))


def _first_ms(ms: list[float], window_ms: float = 30.0) -> float:
    """Median of the calls that start within ``window_ms`` of the run, the very first one left out."""
    t = np.cumsum([0.0, *ms[:-1]])
    sel = [m for m, s in zip(ms[1:], t[1:], strict=True) if s < window_ms]
    return float(np.median(sel))


def ratio_pairs(prefill: dict[str, Any], power: dict[str, Any], gemm: pd.DataFrame,
                attn: pd.DataFrame, window: tuple[float, float] = CAPPED_WINDOW) -> dict[str, list[dict[str, Any]]]:
    """(kernel, profile ms, full-clock ms, capped ms) for every measured pair, by class: ``bf16``
    (the 8B's gate_up GEMM, the first the prefill probe's sustained run) and ``attention`` (FA3
    prefill chunks)."""
    out: dict[str, list[dict[str, Any]]] = {"bf16": [], "attention": []}
    sus = {(r["case"], r.get("ctx")): r for r in prefill["sustained"]}
    g = sus[("gate_up-sustained", None)]["ms"]
    out["bf16"].append({"kernel": f"bf16 GEMM {GATE_UP[0]}x{GATE_UP[1]} M={CHUNK}",
                        "profile_ms": _bf16_gemm_ms(gemm, CHUNK), "full_ms": _first_ms(g),
                        "capped_ms": float(np.median(g))})
    for ctx in (0, 16320):
        alone = sus[("attention-sustained", ctx)]["ms"]
        in_step = np.asarray(sus[("sustained-step", ctx)]["attention_ms_per_step"]) / 32
        out["attention"].append({"kernel": f"FA3 prefill {CHUNK} at context {ctx}",
                                 "profile_ms": profile_prefill_ms(attn, ctx), "full_ms": _first_ms(alone),
                                 "capped_ms": float(np.median(in_step))})
    for r in power["rows"]:
        if "on_ms" in r:
            continue
        covered = r.get("case") == "prefill ctx=8160" or (r.get("dtype") == "bf16" and r.get("M", 0) >= HEAVY_TOKENS)
        if not covered:
            continue
        full, capped = _fresh_and_capped(r, window)
        if r.get("case"):
            cls, name, profile = "attention", f"FA3 prefill {CHUNK} at context 8160", profile_prefill_ms(attn, 8160)
        else:
            cls, name, profile = "bf16", f"bf16 GEMM {GATE_UP[0]}x{GATE_UP[1]} M={r['M']}", _bf16_gemm_ms(gemm, r["M"])
        out[cls].append({"kernel": name + " (power probe)", "profile_ms": profile, "full_ms": full,
                         "capped_ms": capped})
    return out


def _fresh_and_capped(row: dict[str, Any], window: tuple[float, float] = CAPPED_WINDOW) -> tuple[float, float]:
    """A power-probe run's full-clock time (calls 2-9 after the idle pause: the first of a group
    carries the launch gap) and capped time (median of the calls starting 0.5-1.0 s in)."""
    return float(np.median(np.asarray(row["calls"])[1:9, 1])), _capped_ms(row, window)


def _capped_ms(row: dict[str, Any], window: tuple[float, float] = CAPPED_WINDOW) -> float:
    """A sustained run's capped time: the median of its calls starting ``window`` seconds in
    (:data:`CAPPED_WINDOW` unless ``--capped-window`` says otherwise)."""
    calls = np.asarray(row["calls"])
    inside = (calls[:, 0] >= window[0]) & (calls[:, 0] < window[1])
    return float(np.median(calls[inside, 1]))


def quantized_pairs(power: dict[str, Any], int4: dict[str, Any], gemm: pd.DataFrame,
                    window: tuple[float, float] = CAPPED_WINDOW) -> dict[str, list[dict[str, Any]]]:
    """Per quantized GEMM class, (kernel, profile ms, full-clock ms, capped ms) of every sustained
    run of at least ``HEAVY_TOKENS`` rows: vLLM's CUTLASS fp8 GEMMs (``power_probe.json.gz``) and
    Machete 4-bit GEMMs, symmetric and with zero points (``int4_probe.json.gz``), each over the
    profile's row of the same shape and dtype (the 4-bit rows are symmetric Machete); a run past
    the profile's largest row of its shape has no pair (the fp8 grid stops at 3,072 rows)."""
    runs = {"fp8": [r for r in power["rows"] if r.get("dtype") == "fp8" and "on_ms" not in r],
            "int4": int4["sustained"]}
    out: dict[str, list[dict[str, Any]]] = {}
    for cls, rows in runs.items():
        for r in rows:
            if r["M"] < HEAVY_TOKENS:
                continue
            shape = (int(r["K"]), int(r["N"]))
            profile = profile_gemm_ms(gemm, r["M"], cls, shape)
            if profile is None:
                continue
            # full clock: the first 30 ms of calls (a 10 ms call's second to ninth would run past the budget)
            full, capped = _first_ms([c[1] for c in r["calls"]]), _capped_ms(r, window)
            label = f"{cls} GEMM {shape[0]}x{shape[1]} M={r['M']}" + (" zero points" if r.get("zero_points") else "")
            out.setdefault(cls, []).append({"kernel": label, "profile_ms": profile,
                                            "full_ms": full, "capped_ms": capped})
    return out


LAYER = ("qkv", "o", "gate_up", "down")
"""The linear layers of one transformer layer, as the probes name their shapes."""
PROBED_70B = "Llama-3.1-70B"
"""The model of a probe row that names none (``shapes_probe.json.gz``: the 70B's shapes at TP 1)."""


def layer_ratios(shapes: dict[str, Any], gemm: pd.DataFrame,
                 window: tuple[float, float] = CAPPED_WINDOW) -> dict[str, list[dict[str, Any]]]:
    """Per GEMM class, one entry per (model, row count, zero points) whose sustained runs in
    ``shapes`` (the ``shapes_probe*.json.gz`` files) cover all of :data:`LAYER` within the
    profile's rows: the summed profile, full-clock and capped milliseconds and their two ratios.  A
    shape run twice (the 8B's in two files) counts once: the later row's."""
    groups: dict[tuple[str, str, int, bool], dict[str, dict[str, float]]] = {}
    for r in shapes["rows"]:
        shape = (int(r["K"]), int(r["N"]))
        profile = profile_gemm_ms(gemm, r["M"], r["dtype"], shape)
        if profile is None or r.get("shape") not in LAYER or r["M"] < HEAVY_TOKENS:
            continue
        full, capped = _first_ms([c[1] for c in r["calls"]]), _capped_ms(r, window)
        key = (r["dtype"], str(r.get("model", PROBED_70B)), int(r["M"]), bool(r.get("zero_points", False)))
        groups.setdefault(key, {})[r["shape"]] = {"profile_ms": profile, "full_ms": full, "capped_ms": capped}
    out: dict[str, list[dict[str, Any]]] = {}
    for (cls, model, m, zp), kernels in sorted(groups.items()):
        if set(kernels) != set(LAYER):
            continue
        total = {k: float(sum(v[k] for v in kernels.values())) for k in ("profile_ms", "full_ms", "capped_ms")}
        out.setdefault(cls, []).append({"layer": f"{cls} {model} layer M={m}" + (" zero points" if zp else ""),
                                        **total, "full_clock_ratio": total["full_ms"] / total["profile_ms"],
                                        "capped_ratio": total["capped_ms"] / total["profile_ms"]})
    return out


def class_ratios(pairs: dict[str, list[dict[str, Any]]],
                 layers: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """``power.json``'s ``gemms``: per class the median layer ratios (:func:`layer_ratios`) where
    the class has layers, else the median over its single-kernel ``pairs``; both lists kept."""
    out = {}
    for cls in sorted(set(pairs) | set(layers)):
        if layers.get(cls):
            full = [x["full_clock_ratio"] for x in layers[cls]]
            capped = [x["capped_ratio"] for x in layers[cls]]
        else:
            full = [p["full_ms"] / p["profile_ms"] for p in pairs[cls]]
            capped = [p["capped_ms"] / p["profile_ms"] for p in pairs[cls]]
        out[cls] = {"full_clock_ratio": float(np.median(full)), "capped_ratio": float(np.median(capped)),
                    "from": "layers" if layers.get(cls) else "pairs",
                    "layers": layers.get(cls, []), "pairs": pairs.get(cls, [])}
    return out


def duty_series(row: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """(start, end) seconds of every call of one run, calls of a group laid end to end."""
    starts, ends, prev_group, t = [], [], None, 0.0
    for group_start, ms in row["calls"]:
        if group_start != prev_group:
            t, prev_group = max(group_start, t), group_start
        starts.append(t)
        t += ms / 1e3
        ends.append(t)
    return np.asarray(starts), np.asarray(ends)


def predicted_share(starts: np.ndarray, ends: np.ndarray, full_s: float, budget_s: float, refill: float) -> np.ndarray:
    """The model's capped share of each call (heavy during calls, refilling between them); a call's
    work is ``full_s`` seconds at full clock."""
    budget, last, out = budget_s, None, np.empty(len(starts))
    for i, (s, e) in enumerate(zip(starts, ends, strict=True)):
        if last is not None:
            budget = min(budget_s, budget + refill * max(0.0, s - last))
        out[i] = 0.0 if budget >= full_s else 1.0 - budget / full_s
        budget = max(0.0, budget - full_s)
        last = e
    return out


def fit_dynamics(power: dict[str, Any], full_ms: float) -> dict[str, Any]:
    """Least squares of (budget_s, refill) over the 8,160-row GEMM's runs."""
    runs = [r for r in power["rows"] if r.get("dtype") == "bf16" and r.get("M") == CHUNK]
    capped_ms = _capped_ms(runs[0])
    series = []
    for r in runs:
        starts, ends = duty_series(r)
        measured = np.clip((np.asarray([c[1] for c in r["calls"]]) - full_ms) / (capped_ms - full_ms), 0.0, 1.0)
        series.append((starts, ends, measured))
    best: tuple[float, float, float] | None = None
    for budget_ms in BUDGETS_MS:
        for refill in REFILLS:
            err = sum(float(np.sum((predicted_share(s, e, full_ms / 1e3, budget_ms / 1e3, refill) - m) ** 2))
                      for s, e, m in series)
            if best is None or err < best[0]:
                best = (err, budget_ms / 1e3, float(refill))
    assert best is not None
    n = sum(len(m) for _, _, m in series)
    per_run = {f"{r.get('on_ms', 'sustained')}/{r.get('off_ms', 0)}": {
        "measured_mean_share": round(float(np.mean(m)), 3),
        "model_mean_share": round(float(np.mean(predicted_share(s, e, full_ms / 1e3, best[1], best[2]))), 3)}
        for r, (s, e, m) in zip(runs, series, strict=True)}
    return {"budget_s": best[1], "refill": best[2], "rms_share_error": math.sqrt(best[0] / n), "calls": n,
            "runs": per_run, "full_ms": full_ms, "capped_ms": capped_ms}


def fit_decode_cap(pairs: list[tuple[Path, Path]], power: dict[str, Any], profile: Path, budget_s: float,
                   gemm_full_ms: float, prompt_weight: bool = False) -> dict[str, Any]:
    """The tensor-rate state's ramp (``scripts/power_decode.py``) over every decode scenario of the
    runs, with the probe's two clocks it measured shares against, and its time constant: the one
    at which back-to-back bf16 GEMMs from idle (the 8,160-row gate_up at ``gemm_full_ms``, its
    full-clock time) reach the ramp's top after ``budget_s``, as the budget has them reach the cap."""
    clocks = probe_clocks(power, HEAVY_TOKENS)
    points = pd.concat([decode_points(run, smi, profile, clocks) for run, smi in pairs], ignore_index=True)
    fit = fit_ramp(points[points["gemm_class"] == "bf16"])
    weights = {cls: fit_weight(group, fit["decode_onset_tflops"], fit["decode_full_tflops"])
               for cls, group in points[points["gemm_class"] != "bf16"].groupby("gemm_class")}
    fit["rate_weights"] = {cls: w["weight"] for cls, w in weights.items()}
    if prompt_weight:
        gemms = gemm_points(power, clocks)
        prompt = fit_weight(gemms, fit["decode_onset_tflops"], fit["decode_full_tflops"])
        fit["prompt_rate_weight"] = prompt["weight"]
        fit["prompt_rate_fit"] = {**prompt, "runs": [{k: (round(v, 3) if isinstance(v, float) else v)
                                                      for k, v in r.items()} for r in gemms.to_dict("records")]}
    fit["rate_weight_fits"] = weights
    fit.update(fit_light_ratios(pd.concat([light_points(run, smi, clocks) for run, smi in pairs], ignore_index=True)))
    gemm_tflops = 2e-12 * CHUNK * GATE_UP[0] * GATE_UP[1] / (gemm_full_ms / 1e3)
    if gemm_tflops <= fit["decode_full_tflops"]:
        raise ValueError(f"the probe's GEMM rate {gemm_tflops:.0f} TFLOP/s is below the ramp's top "
                         f"{fit['decode_full_tflops']:.0f}: no time constant reaches it")
    tau = budget_s / -math.log(1.0 - fit["decode_full_tflops"] / gemm_tflops)
    return {**fit, "decode_tau_s": round(tau, 4), "gemm_tflops": round(gemm_tflops, 1),
            "full_mhz": clocks[0], "capped_mhz": clocks[1]}


def load_probes(folder: Path) -> dict[str, Any]:
    """The probe files of ``folder`` (``data/power/h200``): ``prefill``, ``power``, ``int4``,
    ``shapes`` (the ``shapes_probe*`` files' rows together) and ``paths`` (prefill, power, int4,
    then every shapes file name, present or not)."""
    prefill_path, power_path = folder / "prefill_probe.json", folder / "power_probe.json.gz"
    int4_path = folder / "int4_probe.json.gz"
    with gzip.open(power_path, "rt") as f:
        power = json.load(f)
    with gzip.open(int4_path, "rt") as f:
        int4 = json.load(f)
    shape_paths = [folder / f"shapes_probe{tail}.json.gz" for tail in SHAPE_FILES]
    shapes: dict[str, list[Any]] = {"rows": []}
    for path in shape_paths:
        if path.exists():
            with gzip.open(path, "rt") as f:
                shapes["rows"] += json.load(f)["rows"]
    return {"prefill": json.loads(prefill_path.read_text()), "power": power, "int4": int4, "shapes": shapes,
            "paths": [prefill_path, power_path, int4_path, *shape_paths]}


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--profile", type=Path, default=Path("latsim/data/calibration/h200"))
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--capped-window", type=float, nargs=2, metavar=("FROM_S", "TO_S"),
                    help="seconds into a sustained run whose calls set its capped time (default 0.5 1.0; "
                         "the duty-cycle fit keeps the default)")
    ap.add_argument("--decode-trace", action="append", default=[], metavar="RUN=SMI",
                    help="a device_trace.py run of stamped decode scenarios and the nvidia-smi series beside it "
                         "(repeatable): fits the decode cap")
    ap.add_argument("--prompt-weight", action="store_true",
                    help="with --decode-trace: fit how much of a prompt step's own tensor rate counts on the ramp "
                         "from the power probe's sustained GEMM runs (without: all of it)")
    args = ap.parse_args()
    probes = load_probes(args.folder)
    prefill, power, int4, shapes = probes["prefill"], probes["power"], probes["int4"], probes["shapes"]
    prefill_path, power_path, int4_path, *shape_paths = probes["paths"]
    gemm = pd.read_parquet(args.profile / "gemm.parquet")
    attn = pd.read_parquet(args.profile / "attention.parquet")
    window = (args.capped_window[0], args.capped_window[1]) if args.capped_window else CAPPED_WINDOW
    pairs_by_class = ratio_pairs(prefill, power, gemm, attn, window)
    attention = pairs_by_class["attention"]
    full = [p["full_ms"] / p["profile_ms"] for p in attention if p["full_ms"]]
    capped = [p["capped_ms"] / p["profile_ms"] for p in attention]
    # the budget's fit keeps the default window; its full clock: the prefill probe's gate_up
    dynamics = fit_dynamics(power, pairs_by_class["bf16"][0]["full_ms"])
    gemm_pairs = {**quantized_pairs(power, int4, gemm, window), "bf16": pairs_by_class["bf16"]}
    gemms = class_ratios(gemm_pairs, layer_ratios(shapes, gemm, window))
    decode_pairs = [run_and_series(text) for text in args.decode_trace]
    decode_cap = (fit_decode_cap(decode_pairs, power, args.profile, dynamics["budget_s"],
                                 pairs_by_class["bf16"][0]["full_ms"], args.prompt_weight) if decode_pairs else None)
    result = {
        "full_clock_ratio": float(np.median(full)), "capped_ratio": float(np.median(capped)),
        **{k: dynamics[k] for k in ("budget_s", "refill")},
        "heavy_tokens": HEAVY_TOKENS,
        "applies_to": "prefill attention over a 16-bit KV cache in steps of at least heavy_tokens tokens; the "
                      "GEMMs of those steps by their class's ratios under 'gemms'"
                      + ("; under 'decode_cap', the same seconds of every step with prompt work, by the "
                         "tensor-rate state's share of the way to the capped clock" if decode_pairs else ""),
        "pairs": attention, "gemms": gemms, "dynamics_fit": dynamics,
        **({"decode_cap": decode_cap} if decode_cap else {}),
        "sources": {str(p): _sha(p) for p in (prefill_path, power_path, int4_path, *shape_paths,
                                              *(path for run, smi in decode_pairs
                                                for path in (run / "timings.json", smi)),
                                              args.profile / "gemm.parquet", args.profile / "attention.parquet")
                    if p.exists()},
        "command": "python scripts/fit_power.py " + " ".join([str(args.folder), "--profile", str(args.profile),
                                                               *(["--capped-window", *map(str, window)]
                                                                 if args.capped_window else []),
                                                               *(f"--decode-trace {t}" for t in args.decode_trace),
                                                               *(["--prompt-weight"] if args.prompt_weight else []),
                                                               "--write"]),
    }
    print(json.dumps({k: v for k, v in result.items() if k != "sources"}, indent=1))
    if args.write:
        atomic_write_text(args.profile / "power.json", json.dumps(result, indent=1) + "\n")
        print(f"wrote {args.profile / 'power.json'}")


if __name__ == "__main__":
    main()
