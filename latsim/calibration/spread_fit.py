"""Fit decode attention's spread table (:mod:`latsim.costmodel.spread`) from the spread probe.

Reads ``skew_grid.json`` (:mod:`latsim.calibration.spread_probe`): pairs of decode calls, one
over spread contexts and one over equal contexts of the same total, timed back to back.  Each
pair's excess is ``spread / equal - 1``.  The model: ``excess(units, ctx) x min(1, cv / cv_full)``,
``units`` = sequences x KV heads.

- ``excess``: on knots at the powers of two of ``units`` the grid covers and at its mean
  contexts, the median over the ``grid`` pairs (three head shapes, two draws, sigma 0.8) whose
  ``log2(units)`` rounds to the knot, each pair's excess divided by its share of the full spread;
  an empty cell takes its nearest filled neighbour along the context axis, then the units axis;
- ``cv_full``: the value (on a 0.05 grid) that minimises the squared error of the modelled
  ratio over the ``sigma`` pairs (sigma 0.05-1.2); the two are fitted in turn until ``cv_full``
  stops moving.

With a held-out file (``skew_probe.json`` of ``scripts/device_skew_probe.py``: five head shapes,
batches 1-96, contexts drawn as long-prompt serving draws them) the table is the pooled one
unless one per KV-head count prices those cases better, and both fits' residuals on them are
reported.  :func:`document` is ``decode_spread.json``'s contents: the table, the fit's residuals
and the sources' sha256; ``latsim calibrate`` writes it after the regressors when the profile
folder holds the probe (:func:`latsim.calibration.fit.fit_spread`).
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from latsim.calibration.spread_probe import SKEW_GRID_FILE
from latsim.costmodel.spread import DecodeSpread, KvTable

HELD_OUT_FILE = "skew_probe.json"

CV_GRID = tuple(round(0.05 * i, 2) for i in range(1, 31))


def load_pairs(path: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """A probe file's cases and head shapes; ValueError naming the file when it is not one."""
    try:
        data = json.loads(path.read_text())
        return list(data["cases"]), dict(data["shapes"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{path}: not a spread-probe file ({exc})") from exc


def units_of(case: dict[str, Any], shapes: dict[str, Any]) -> int:
    return int(case["batch"]) * int(shapes[case["shape"]][1])


def ratio_of(case: dict[str, Any]) -> float:
    """The spread call's time over the equal call's."""
    return float(case["us"]) / float(case["equal_us"])


def share(cv: float, cv_full: float) -> float:
    return min(1.0, cv / cv_full)


Table = tuple[list[int], list[int], list[list[float]]]
Cases = list[dict[str, Any]]


def table(grid: list[dict[str, Any]], shapes: dict[str, Any], cv_full: float) -> Table:
    """Knots and the median excess per cell (see the module note) of the cases in ``grid``."""
    cells: dict[tuple[int, int], list[float]] = {}
    for case in grid:
        u = 2 ** round(math.log2(units_of(case, shapes)))
        c = 2 ** round(math.log2(case["mean"]))
        cells.setdefault((u, c), []).append((ratio_of(case) - 1.0) / share(case["cv"], cv_full))
    units = sorted({u for u, _ in cells})
    ctxs = sorted({c for _, c in cells})
    rows: list[list[float | None]] = [[float(np.median(cells[(u, c)])) if (u, c) in cells else None for c in ctxs]
                                      for u in units]
    return units, ctxs, _filled(rows)


def _filled(rows: list[list[float | None]]) -> list[list[float]]:
    """Empty cells from the nearest filled one in their row, then in their column."""
    def nearest(values: list[float | None], i: int) -> float | None:
        order = sorted(range(len(values)), key=lambda j: (abs(j - i), j))
        return next((values[j] for j in order if values[j] is not None), None)

    rows = [[v if v is not None else nearest(r, j) for j, v in enumerate(r)] for r in rows]
    cols = list(zip(*rows, strict=True))
    out = [[v if v is not None else nearest(list(cols[j]), i) for j, v in enumerate(r)] for i, r in enumerate(rows)]
    if any(v is None for r in out for v in r):
        raise ValueError("the probe leaves a whole row and column of the spread table empty")
    return [[float(v) for v in r if v is not None] for r in out]


def kv_tables(grid: list[dict[str, Any]], shapes: dict[str, Any], cv_full: float, per_kv: bool) -> dict[int, Table]:
    """One table per KV-head count the grid measured (``per_kv``), or one over every head shape
    (filed under the smallest count; :meth:`DecodeSpread.table_for` gives it to every count)."""
    heads = sorted({int(shapes[c["shape"]][1]) for c in grid})
    if not per_kv:
        return {heads[0]: table(grid, shapes, cv_full)}
    return {h: table([c for c in grid if int(shapes[c["shape"]][1]) == h], shapes, cv_full) for h in heads}


def model_of(tables: dict[int, Table], cv_full: float, source: str) -> DecodeSpread:
    return DecodeSpread(tuple(KvTable(h, tuple(float(u) for u in units), tuple(float(c) for c in ctxs),
                                      tuple(tuple(r) for r in rows)) for h, (units, ctxs, rows) in tables.items()),
                        cv_full, source)


def modelled(spread: DecodeSpread, case: dict[str, Any], shapes: dict[str, Any]) -> float:
    lens = [int(x) for x in case["lens"]]
    kv_heads = int(shapes[case["shape"]][1])
    return spread.factor(len(lens), kv_heads, float(sum(lens)), float(sum(x * x for x in lens)))


def fit(cases: Cases, shapes: dict[str, Any], per_kv: bool = False) -> tuple[DecodeSpread, dict[str, Any]]:
    """The spread model fitted on the ``grid`` and ``sigma`` pairs (see the module note)."""
    grid = [c for c in cases if c.get("case") == "grid"]
    sweep = [c for c in cases if c.get("case") == "sigma"]
    if not grid or not sweep:
        raise ValueError(f"{SKEW_GRID_FILE} needs both 'grid' and 'sigma' cases (the spread probe's grid)")
    cv_full, seen = 0.5, set()
    while cv_full not in seen:
        seen.add(cv_full)
        tables = kv_tables(grid, shapes, cv_full, per_kv)
        errors = {}
        for cand in CV_GRID:
            s = model_of(tables, cand, "fit")
            errors[cand] = sum((modelled(s, c, shapes) - ratio_of(c)) ** 2 for c in sweep)
        cv_full = min(errors, key=lambda k: (errors[k], k))
    spread = model_of(kv_tables(grid, shapes, cv_full, per_kv), cv_full, "fit")
    return spread, {"per_kv_heads": per_kv, "grid_pairs": len(grid), "sigma_pairs": len(sweep),
                    "grid": residuals(spread, grid, shapes), "sigma": residuals(spread, sweep, shapes)}


def residuals(spread: DecodeSpread, cases: list[dict[str, Any]], shapes: dict[str, Any]) -> dict[str, float]:
    """Median |modelled - measured| of the ratio, and the same for pricing every batch as equal."""
    if not cases:
        return {"cases": 0}
    meas = np.array([ratio_of(c) for c in cases])
    mod = np.array([modelled(spread, c, shapes) for c in cases])
    return {"cases": len(cases), "median_abs_error": round(float(np.median(np.abs(mod - meas))), 4),
            "median_abs_error_equal": round(float(np.median(np.abs(1.0 - meas))), 4),
            "median_measured": round(float(np.median(meas)), 4), "median_modelled": round(float(np.median(mod)), 4)}


def held_out_choice(cases: Cases, shapes: dict[str, Any], held: Path) -> tuple[DecodeSpread, dict[str, Any]]:
    """The pooled table, or one per KV-head count where that prices the held-out serving cases
    better (median |error|), with both fits' held-out residuals in the report."""
    hcases, hshapes = load_pairs(held)
    serving = [c for c in hcases if c["spread"] != "onelong"]
    onelong = [c for c in hcases if c["spread"] == "onelong"]
    fits = {per_kv: fit(cases, shapes, per_kv) for per_kv in (False, True)}
    for spread, report in fits.values():
        report["held_out_serving"] = residuals(spread, serving, hshapes)
        report["held_out_onelong"] = residuals(spread, onelong, hshapes)
    errors = {k: r["held_out_serving"]["median_abs_error"] for k, (_, r) in fits.items()}
    chosen = min(errors, key=lambda k: (errors[k], k))
    spread, report = fits[chosen]
    report["held_out_serving_per_kv_heads"] = fits[True][1]["held_out_serving"]
    report["held_out_serving_pooled"] = fits[False][1]["held_out_serving"]
    return spread, report


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def document(probe_folder: Path, provenance: dict[str, Any], source_names: bool = False) -> dict[str, Any]:
    """The ``decode_spread.json`` contents (what :func:`latsim.costmodel.spread.load_decode_spread`
    reads) fitted on ``probe_folder``'s probe: the table, the fit's report and ``provenance`` with
    the sources' sha256, each source named by its path, or by its file name (``source_names``)."""
    spread, report, sources = fit_probe_folder(probe_folder)
    if source_names:
        sources = {Path(k).name: v for k, v in sources.items()}
    return {"tables": [{"kv_heads": t.kv_heads, "unit_knots": list(t.unit_knots), "ctx_knots": list(t.ctx_knots),
                        "excess": [[round(v, 4) for v in r] for r in t.excess]} for t in spread.tables],
            "cv_full": spread.cv_full, "fit": report, "provenance": {**provenance, "sources": sources}}


def fit_probe_folder(folder: Path) -> tuple[DecodeSpread, dict[str, Any], dict[str, str]]:
    """The spread model from ``folder``'s ``skew_grid.json`` (and its held-out ``skew_probe.json``
    when present), its report and the sources' sha256."""
    grid_path = folder / SKEW_GRID_FILE
    if not grid_path.is_file():
        raise ValueError(f"{grid_path} not found (the spread probe's grid: latsim calibrate, or "
                         "scripts/device_skew_probe.py --grid)")
    cases, shapes = load_pairs(grid_path)
    sources = {str(grid_path): sha256(grid_path)}
    held = folder / HELD_OUT_FILE
    if held.is_file():
        spread, report = held_out_choice(cases, shapes, held)
        sources[str(held)] = sha256(held)
    else:
        spread, report = fit(cases, shapes)
    return spread, report, sources
