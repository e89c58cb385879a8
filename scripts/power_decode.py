"""The power model's decode cap (:mod:`latsim.costmodel.power`), fitted on traced decode runs.

A ``scripts/device_trace.py`` run of ``decode:seqs=N,in=L`` scenarios, with an ``nvidia-smi``
series beside it (``--query-gpu=timestamp,clocks.sm,power.draw,...``), gives per scenario:

- the decoders' tensor rate ``I``: 2 x the linear-layer parameters x N over the price of a
  decode step of N sequences at the scenario's mean profiled context (the run's model, from
  the catalog or the run's kept ``config.json``, at its checkpoint's weight dtype on the
  profile's GPU, TP 1), unweighted; ``gemm_class`` its GEMM class;
- how far the SM clock was on its way to the capped clock: ``(f_full / f - 1) / (f_full / f_cap
  - 1)``, ``f`` the mean clock of the scenario's busy samples (utilisation >= 90 %), ``f_full``
  and ``f_cap`` the clocks of the power probe's GEMMs from idle and sustained
  (:func:`probe_clocks`): the share by which compute-bound kernels slow towards the capped price.

:func:`fit_ramp` fits ``decode_onset_tflops`` / ``decode_full_tflops`` (share 0 below the onset,
1 above the full rate, linear between) by least squares over the bf16 scenarios, and
:func:`fit_weight` each other class's weight (its rate's factor on that ramp), and the weight of
a prompt's own GEMM work from the power probe's sustained GEMM runs (:func:`gemm_points`).

A run's ``graphless`` scenarios with decoders (a prompt's step beside them) give each GEMM class
its capped ratio in light steps (:func:`light_points`, :func:`fit_light_ratios`): the prompt's
measured cycle over the model's without the graph-less term and without any clock
(``scripts/graphless_steps.py``), the excess over the step's heavy seconds x the scenario's
share of the way to the capped clock, for scenarios at least ``LIGHT_MIN_SHARE`` there.  Only runs whose
scenarios carry ``started_at`` (stamped since the twenty-seventh session) can be cut.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from power_summary import read_smi, window  # type: ignore[import-not-found]  # scripts/ is on the path

BUSY_UTIL = 90
"""Samples below this GPU utilisation (%) are a scenario's set-up or profiling, not its decoding."""
RAMP_GRID = np.arange(0.0, 801.0, 1.0)
"""Candidate onset and full rates (TFLOP/s) of the ramp's least-squares grid."""


def sample_mhz(row: dict[str, Any]) -> np.ndarray:
    """The SM clock (MHz) of each ``nvidia-smi`` sample beside a power-probe run (``row["clocks"]``:
    ``timestamp, clocks.sm, ...`` lines)."""
    return np.array([float(sample.split(",")[1]) for sample in row["clocks"]])


def probe_clocks(power: dict[str, Any], heavy_tokens: int) -> tuple[float, float]:
    """``(f_full, f_cap)`` in MHz from ``power_probe.json.gz``'s bf16 GEMM runs: the highest
    median clock of a run (a small GEMM never leaves full clock), and the median over the second
    half of the runs of at least ``heavy_tokens`` rows (sustained, at the cap)."""
    medians, capped = [], []
    for row in power["rows"]:
        if row.get("dtype") != "bf16" or "on_ms" in row or not row.get("clocks"):
            continue
        clocks = sample_mhz(row)
        medians.append(float(np.median(clocks)))
        if row["M"] >= heavy_tokens:
            capped.extend(clocks[len(clocks) // 2:])
    if not medians or not capped:
        raise ValueError("power probe: no bf16 GEMM runs with clocks (need one sustained run of "
                         f">= {heavy_tokens} rows)")
    return max(medians), float(np.median(capped))


def run_and_series(text: str) -> tuple[Path, Path]:
    """``RUN=SMI`` (a ``--decode-trace`` argument) as two paths; SystemExit naming the argument
    when malformed or missing."""
    run, sep, smi = text.partition("=")
    if not sep or not Path(run, "timings.json").is_file() or not Path(smi).is_file():
        raise SystemExit(f"--decode-trace {text!r}: expected RUN=SMI, RUN a device_trace.py run folder "
                         "(with timings.json) and SMI its nvidia-smi series")
    return Path(run), Path(smi)


def clock_share(mhz: Any, clocks: tuple[float, float]) -> Any:
    """The share of the way from full clock to the capped one that clock(s) ``mhz`` stand at,
    measured as compute-bound slowdown: ``(f_full / mhz - 1) / (f_full / f_cap - 1)`` (module note;
    a float or a pandas Series, unclipped)."""
    f_full, f_cap = clocks
    return (f_full / mhz - 1.0) / (f_full / f_cap - 1.0)


def busy_mean_mhz(smi: pd.DataFrame, scenario: dict[str, Any]) -> tuple[float, int]:
    """``(mean SM clock, samples)`` over a stamped scenario's busy samples (utilisation at least
    :data:`BUSY_UTIL`); the mean is NaN when there are none."""
    cut = window(smi, scenario["started_at"], scenario["seconds"])
    busy = cut[cut["util"] >= BUSY_UTIL]
    return (float(busy["sm"].mean()) if len(busy) else float("nan")), len(busy)


def trace_model(trace_dir: Path) -> Any:
    """The model a ``device_trace.py`` run served: its ``--model`` from the catalog, or the
    ``config.json`` a ``--config-dir`` run keeps beside its timings."""
    from latsim.catalog.hf_config import parse_hf_config
    from latsim.catalog.lookup import load_model

    argv = json.loads((trace_dir / "timings.json").read_text()).get("argv", [])
    if "--model" in argv:
        return load_model(str(argv[argv.index("--model") + 1]))
    if (trace_dir / "config.json").is_file():
        return parse_hf_config(json.loads((trace_dir / "config.json").read_text()), trace_dir.name)
    raise ValueError(f"{trace_dir}: timings.json's argv names no --model and no config.json is kept")


def decode_points(trace_dir: Path, smi_path: Path, profile: Path, clocks: tuple[float, float]) -> pd.DataFrame:
    """One row per decode scenario of the run: ``scenario``, ``seqs``, ``context``, ``tflops``
    (the model's rate), ``busy_samples``, ``mean_mhz`` and ``share`` (module note); ValueError
    when the scenarios are not stamped."""
    from latsim.catalog.lookup import load_device
    from latsim.catalog.quant_resolve import AUTO, resolve_weight_dtype
    from latsim.catalog.sizing import param_breakdown
    from latsim.costmodel.batch import BatchShape
    from latsim.costmodel.calibrated import load_calibrated

    meta = json.loads((trace_dir / "timings.json").read_text())
    decodes = [sc for sc in meta.get("scenarios", []) if sc["scenario"].get("kind") == "decode"]
    if any("started_at" not in sc for sc in decodes):
        raise ValueError(f"{trace_dir}: its scenarios carry no started_at; the clock cannot be cut by scenario")
    model = trace_model(trace_dir)
    device = load_device(json.loads((profile / "profile.json").read_text())["device"])
    weight_dtype = resolve_weight_dtype(model, AUTO)[0]  # a quantized checkpoint's, else its 16-bit dtype
    cost = load_calibrated(model, device, 1, weight_dtype, "bf16", profile=profile)
    smi = read_smi(smi_path)
    token_tflop = 2e-12 * param_breakdown(model).linear_active
    rows = []
    for sc in decodes:
        seqs = int(sc["scenario"]["seqs"])
        context = float(np.mean(sc.get("context_at_profile") or [sc["scenario"]["in"]]))
        mean, busy = busy_mean_mhz(smi, sc)
        price = cost.step_time(BatchShape(decode_seqs=seqs, decode_kv_tokens=round(seqs * context)))
        rows.append({"run": trace_dir.name, "model": model.name, "gemm_class": cost.gemm_class,
                     "scenario": sc["scenario"]["label"], "seqs": seqs, "context": round(context),
                     "busy_samples": busy, "mean_mhz": round(mean), "tflops": token_tflop * seqs / price,
                     "share": clock_share(mean, clocks)})
    return pd.DataFrame(rows)


def ramp(tflops: np.ndarray, onset: float, full: float) -> np.ndarray:
    """The decode cap's share at ``tflops`` (the model's :meth:`PowerCap.decode_share`, vectorised)."""
    return np.clip((np.asarray(tflops, dtype=float) - onset) / (full - onset), 0.0, 1.0)


def fit_ramp(points: pd.DataFrame) -> dict[str, Any]:
    """Least-squares ``decode_onset_tflops`` < ``decode_full_tflops`` on :data:`RAMP_GRID` over the
    rows' ``(tflops, share)`` (shares clipped to 0-1), with the residual and each row's fit."""
    pts = points.dropna(subset=["share"])
    if len(pts) < 3:
        raise ValueError(f"decode cap: {len(pts)} scenarios with busy samples; at least 3 are needed")
    x = pts["tflops"].to_numpy(dtype=float)
    y = np.clip(pts["share"].to_numpy(dtype=float), 0.0, 1.0)
    onset, full = np.meshgrid(RAMP_GRID, RAMP_GRID, indexing="ij")
    valid = full > onset
    pred = np.clip((x[None, None, :] - onset[..., None]) / np.where(valid, full - onset, 1.0)[..., None], 0.0, 1.0)
    sse = np.where(valid, ((pred - y) ** 2).sum(axis=-1), np.inf)
    i, j = np.unravel_index(int(np.argmin(sse)), sse.shape)
    best_onset, best_full = float(RAMP_GRID[i]), float(RAMP_GRID[j])
    fitted = ramp(x, best_onset, best_full)
    scenarios = [{"run": r.run, "scenario": r.scenario, "tflops": round(float(r.tflops), 1),
                  "mean_mhz": int(r.mean_mhz), "share": round(float(r.share), 3), "model_share": round(float(f), 3)}
                 for r, f in zip(pts.itertuples(), fitted, strict=True)]
    return {"decode_onset_tflops": best_onset, "decode_full_tflops": best_full,
            "rms_share_error": float(np.sqrt(np.mean((fitted - y) ** 2))), "scenarios": scenarios}


WEIGHT_GRID = np.round(np.arange(0.05, 2.0001, 0.01), 2)
"""Candidate weights of a GEMM class's rate on the bf16 ramp."""


def fit_weight(points: pd.DataFrame, onset: float, full: float) -> dict[str, Any]:
    """The least-squares factor on :data:`WEIGHT_GRID` by which ``points``' rates (one GEMM class)
    fall on the ramp ``onset``-``full``, with its residual."""
    if len(points) < 3:
        raise ValueError(f"a class's weight: {len(points)} scenarios; at least 3 are needed")
    x = points["tflops"].to_numpy(dtype=float)
    y = np.clip(points["share"].to_numpy(dtype=float), 0.0, 1.0)
    sse = [float(((ramp(w * x, onset, full) - y) ** 2).sum()) for w in WEIGHT_GRID]
    best = int(np.argmin(sse))
    return {"weight": float(WEIGHT_GRID[best]), "rms_share_error": float(np.sqrt(sse[best] / len(x))),
            "scenarios": len(x)}


def gemm_points(power: dict[str, Any], clocks: tuple[float, float]) -> pd.DataFrame:
    """One row per sustained bf16 GEMM run of ``power_probe.json.gz`` (not the duty cycles): its
    tensor rate (TFLOP/s, ``2 M K N`` over the median call of the run's second half) and the share
    of the way to the capped clock of the median clock over the same half.  A prompt's step is
    GEMM work like this; :func:`fit_weight` on these rows says how much of its rate counts on the
    decoders' ramp (``power.json``'s ``prompt_rate_weight``)."""
    rows = []
    for row in power["rows"]:
        if row.get("kernel") != "gemm" or row.get("dtype") != "bf16" or not row.get("clocks") or not row.get("calls"):
            continue
        ms = np.array([call[1] for call in row["calls"]], dtype=float)
        mhz = sample_mhz(row)
        tflops = 2e-9 * row["M"] * row["K"] * row["N"] / float(np.median(ms[len(ms) // 2:]))
        rows.append({"run": "power probe", "scenario": f"bf16 GEMM {row['K']}x{row['N']} M={row['M']} sustained",
                     "tflops": tflops, "share": float(clock_share(float(np.median(mhz[len(mhz) // 2:])), clocks))})
    if not rows:
        raise ValueError("power probe: no sustained bf16 GEMM runs with calls and clocks")
    return pd.DataFrame(rows)


LIGHT_MIN_SHARE = 0.5
"""Graph-less scenarios nearer full clock than this share say too little about the capped ratio."""


def light_points(trace_dir: Path, smi_path: Path, clocks: tuple[float, float]) -> pd.DataFrame:
    """One row per stamped graph-less scenario with decoders: ``gemm_class``, ``share`` (the
    clock's, as :func:`decode_points`), the measured and modelled cycles, the heavy seconds and
    the capped ratio they imply (``ratio``)."""
    from graphless_steps import cost_model, folder_rows  # type: ignore[import-not-found]

    meta = json.loads((trace_dir / "timings.json").read_text())
    stamps = {sc["scenario"]["label"]: sc for sc in meta.get("scenarios", []) if "started_at" in sc}
    gemm_class = cost_model(meta, 1.0, trace_dir).inner.gemm_class
    smi = read_smi(smi_path)
    rows = []
    for row in folder_rows(trace_dir)[1]:
        sc = stamps.get(row["scenario"])
        if sc is None or sc["scenario"].get("decodes", 0) <= 0 or not row["model_heavy_ms"] > 0:
            continue
        mean, busy = busy_mean_mhz(smi, sc)
        share = min(1.0, clock_share(mean, clocks)) if busy else 0.0
        excess = row["cycle_ms"] - row["model_cycle_less_eager_ms"]
        rows.append({"run": trace_dir.name, "scenario": row["scenario"], "gemm_class": gemm_class,
                     "share": round(share, 3), "cycle_ms": round(row["cycle_ms"], 2),
                     "model_cycle_ms": round(row["model_cycle_less_eager_ms"], 2),
                     "heavy_ms": round(row["model_heavy_ms"], 2),
                     "ratio": 1.0 + excess / (row["model_heavy_ms"] * share) if share > 0 else float("nan")})
    return pd.DataFrame(rows)


def fit_light_ratios(points: pd.DataFrame) -> dict[str, Any]:
    """Per GEMM class, the median implied capped ratio of its scenarios at least
    :data:`LIGHT_MIN_SHARE` of the way to the capped clock, with the scenarios used."""
    if points.empty:
        return {"light_ratios": {}, "light_scenarios": []}
    used = points[(points["share"] >= LIGHT_MIN_SHARE) & points["ratio"].notna()]
    ratios = {str(cls): round(float(group["ratio"].median()), 4) for cls, group in used.groupby("gemm_class")}
    return {"light_ratios": ratios, "light_scenarios": used.round(4).to_dict(orient="records")}
