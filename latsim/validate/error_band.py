"""How far a prediction may be from the live engine: the validation's signed errors, summarised.

A prediction's intervals (replications, batch means) say how sure the simulation is of its own
answer; they say nothing of the model's error against a real engine.  That error is measured:
every held-out live level under ``data/validation`` replayed by the simulator (``latsim
validate``) gives one signed error per metric, ``(predicted - measured) / measured``.

:func:`summarise` puts those errors into load bands (:data:`BANDS`: the level's offered rate as
a fraction of the run's measured capacity) and gives, per band and metric (:data:`METRICS`),
their count and 10th / 50th / 90th percentiles: "80 % of the held-out levels at this load were
within ``q10`` .. ``q90``".  What that band claims for a deployment nobody measured is checked
by leaving each configuration (a model and workload shape, over all its engine starts) out in
turn (:func:`loo_coverage`): the share of its levels that fall inside the band the other
configurations give.  Near 0.8 the band is an honest 80 % statement; below, the classes differ
more than the pooled band admits (and the coverage says by how much).

:func:`applies` says whether a deployment is one the band describes (the measured engine, GPU
and cost model, one engine at TP=1, a load inside the measured range); ``latsim predict``
prints the band's TTFT and TPOT P50 beside its answer, or why there is none.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

BANDS: tuple[tuple[str, float, float], ...] = (("light", 0.0, 0.5), ("heavy", 0.5, 0.95))
"""(name, low, high]: the load bands, as offered rate over capacity.  Levels are measured at 0.1-0.9
of the measured capacity; a prediction's saturation (over its own estimated capacity) up to 0.95
is read as the heavy band."""
METRICS: tuple[tuple[str, str], ...] = tuple((m, s) for m in ("ttft_ms", "tpot_ms", "e2e_ms") for s in ("p50", "p99"))
QUANTILES = (0.1, 0.5, 0.9)
NOMINAL = QUANTILES[2] - QUANTILES[0]
"""The share of levels the ``q10`` .. ``q90`` band holds by construction (0.8)."""
SHIPPED = Path(__file__).resolve().parent.parent / "data" / "engines" / "vllm" / "error_band.json"


def load_fraction(level: str) -> float | None:
    """The offered load of a level named ``f0.25`` as a fraction of capacity; ``None`` for a burst or
    any other name."""
    if not level.startswith("f"):
        return None
    try:
        return float(level[1:])
    except ValueError:
        return None


def band_of(fraction: float) -> str | None:
    """The name of the band holding ``fraction`` (:data:`BANDS`), ``None`` outside every band."""
    for name, low, high in BANDS:
        if low < fraction <= high:
            return name
    return None


def configuration(run: str) -> str:
    """A level's configuration: the name of its run folder (``llama-3.1-8b-mix`` for
    ``data/validation/h200-s19/llama-3.1-8b-mix/f0.25``), the same over engine starts."""
    return Path(run).parent.name


def banded(errors: pd.DataFrame) -> pd.DataFrame:
    """``errors`` (columns ``run``, ``level``, ``metric``, ``stat``, ``error``) reduced to the rows of
    :data:`METRICS` on levels inside a band, with ``band`` and ``config`` columns added."""
    keep = pd.Series([(m, s) in METRICS for m, s in zip(errors["metric"], errors["stat"], strict=True)],
                     index=errors.index)
    e = errors[keep & errors["error"].notna()].copy()
    fractions = e["level"].map(load_fraction)
    e["band"] = [band_of(f) if f is not None else None for f in fractions]
    e = e[e["band"].notna()]
    e["config"] = e["run"].map(configuration)
    return e


def loo_coverage(errors: pd.Series, groups: pd.Series) -> float | None:
    """Share of ``errors`` inside the ``q10`` .. ``q90`` band (:data:`QUANTILES`) of the errors of the
    other groups, each group left out in turn; ``None`` with fewer than two groups."""
    if groups.nunique() < 2:
        return None
    inside = 0
    for group in groups.unique():
        mine = groups == group
        low, high = np.quantile(errors[~mine], [QUANTILES[0], QUANTILES[2]])
        inside += int(((errors[mine] >= low) & (errors[mine] <= high)).sum())
    return inside / len(errors)


def summarise(errors: pd.DataFrame) -> dict[str, dict[str, dict[str, float | None]]]:
    """``{band: {"ttft_ms p50": {levels, configurations, q10, q50, q90, loo_coverage}}}`` of the
    signed errors (:func:`banded`); bands without levels are left out."""
    e = banded(errors)
    out: dict[str, dict[str, dict[str, float | None]]] = {}
    for name, _, _ in BANDS:
        in_band = e[e["band"] == name]
        if in_band.empty:
            continue
        out[name] = {}
        for metric, stat in METRICS:
            rows = in_band[(in_band["metric"] == metric) & (in_band["stat"] == stat)]
            if rows.empty:
                continue
            q10, q50, q90 = np.quantile(rows["error"], QUANTILES)
            out[name][f"{metric} {stat}"] = {
                "levels": len(rows), "configurations": int(rows["config"].nunique()),
                "q10": float(q10), "q50": float(q50), "q90": float(q90),
                "loo_coverage": loo_coverage(rows["error"].reset_index(drop=True),
                                             rows["config"].reset_index(drop=True))}
    return out


@dataclass(frozen=True)
class ErrorBand:
    """The shipped summary (:data:`SHIPPED`): what was measured (``engine``, ``device``,
    ``cost_model``, ``tp``, ``host_speed``), the bands (:func:`summarise`), and the provenance."""

    engine: str
    device: str
    cost_model: str
    tp: int
    host_speed: float
    bands: dict[str, dict[str, dict[str, float]]]
    levels: int

    @classmethod
    def read(cls, path: Path = SHIPPED) -> ErrorBand:
        d = json.loads(path.read_text())
        return cls(engine=d["engine"], device=d["device"], cost_model=d["cost_model"], tp=int(d["tp"]),
                   host_speed=float(d["host_speed"]), bands=d["bands"], levels=int(d["levels"]))


def applies(band: ErrorBand, *, engine: str, device: str, cost_model: str, tp: int, replicas: int,
            saturation: float | None, default_scheduling: bool) -> tuple[str | None, str]:
    """(band name, "") when ``band`` describes this deployment, else (``None``, why not): the
    measured engine family, GPU and cost model, one engine at the measured TP, vLLM's default
    scheduling (asynchronous, chunked prefill) and a load inside a band."""
    family = band.engine.split("-")[0]
    checks = (
        (engine == family, f"measured live on {family} only"),
        (device == band.device, f"measured live on {band.device} only"),
        (cost_model == band.cost_model, f"measured live with the {band.cost_model} cost model only"),
        (tp == band.tp and replicas == 1, f"measured live on one engine at TP={band.tp} only"),
        (default_scheduling, "measured live with the engine's default scheduling only"),
    )
    for ok, why in checks:
        if not ok:
            return None, why
    if saturation is None or not np.isfinite(saturation):
        return None, "no load estimate"
    name = band_of(saturation)
    if name is None or name not in band.bands:
        return None, f"load {saturation:.2f} of capacity is outside the measured {BANDS[0][1]:g}-0.9"
    return name, ""


def validated_error(band: ErrorBand, **deployment: Any) -> dict[str, Any]:
    """The summary block ``latsim predict`` reports: the band's spread for this deployment's load,
    or ``{"available": False, "why": ...}`` (:func:`applies`)."""
    name, why = applies(band, **deployment)
    if name is None:
        return {"available": False, "why": why}
    return {"available": True, "band": name, "engine": band.engine, "device": band.device,
            "host_speed": band.host_speed, "nominal_coverage": NOMINAL, "metrics": band.bands[name]}
