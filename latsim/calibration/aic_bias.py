"""The imported bf16 GEMM times corrected by the source harness's bias, measured on the H200.

On the H200 latsim holds both its own GEMM measurements (``h200``) and the published ones of the
same source (``h200-aic``): for the same shape the two fitted regressors differ by a ratio that
depends on the shape (the source's times run about 9 % long for memory-bound rows over 256 MB of
weights and short for small ones: ``scripts/aic_crosscheck.py``).  The live engine agrees with
latsim's own rows.  For a GPU of the reference's chip (:data:`SAME_CHIP`: the H100 SXM is the H200's
GH100 with less and slower memory) the imported bf16 rows are multiplied by that ratio at their
shape, ``native_h200(shape) / imported_h200(shape)`` (clipped to :data:`CLIP`), then the GEMM
regressor is re-fitted.  Other GPUs keep the source's times: nothing measured says how the harness
reads on another chip.  fp8 rows are left alone (the source times vLLM's whole fp8 linear layer,
activation quantisation included, which latsim's own rows do not: not the same operation).

``source_median_s`` keeps the source's time; applying the correction again starts from it, so the
step is idempotent.  The live check is the H100 run in ``data/validation/h100-s37`` (nothing of it
is fitted here).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from latsim.atomic import atomic_write_text
from latsim.catalog import load_device
from latsim.catalog.devices import DeviceSpec
from latsim.costmodel.profile.store import PROFILE, shipped_profile_dir

REFERENCE = "h200"
REFERENCE_IMPORT = "h200-aic"
SAME_CHIP = ("h100",)
"""Imported devices whose chip is the reference's, so the reference's harness ratio carries over."""
CLIP = (0.75, 1.25)
"""The factor's range: a ratio outside it is an extrapolation of one of the two regressors."""
CORRECTED = "bf16"
ADJUSTMENT = (f"bf16 GEMM median_s = source time x the ratio latsim's own {REFERENCE} GEMM regressor / the "
              f"{REFERENCE_IMPORT} (same source) regressor give at the row's shape, clipped to {list(CLIP)}: the "
              f"source harness's bias measured on the {REFERENCE}, where both exist, carried to a GPU of the same "
              "chip; source_median_s keeps the source's time (latsim.calibration.aic_bias)")


def harness_factors(rows: pd.DataFrame, reference: Path | None = None,
                    reference_import: Path | None = None) -> np.ndarray:
    """``native / imported`` GEMM time on the reference GPU at each row's shape (``dtype``, ``M``,
    ``K``, ``N``, ``flops``, ``bytes``), clipped to :data:`CLIP`; the roofline cancels.  A shape
    outside the span of the reference's own bf16 rows (:func:`inside_native_span`: the source also
    times layers of 32-256 columns, which no model has and latsim never measured) gets 1."""
    from latsim.calibration.fit import family_roofline
    from latsim.costmodel.profile.regressors import load_predictors
    from latsim.costmodel.profile.store import load_table

    ref = reference or shipped_profile_dir(REFERENCE)
    imp = reference_import or shipped_profile_dir(REFERENCE_IMPORT)
    rows = rows.assign(fp8=(rows["dtype"] == "fp8").astype(np.float64))
    roof = family_roofline("gemm", rows, load_device(REFERENCE))
    native = load_predictors(ref).ratio("gemm", rows, roof)
    imported = load_predictors(imp).ratio("gemm", rows, roof)
    inside = inside_native_span(rows, load_table(ref, "gemm"))
    return np.where(inside, np.clip(native / imported, *CLIP), 1.0)


def inside_native_span(rows: pd.DataFrame, native: pd.DataFrame) -> np.ndarray:
    """Whether each row's ``M``, ``K`` and ``N`` lie within those of ``native``'s bf16 rows."""
    own = native[native["dtype"] == CORRECTED]
    inside = np.ones(len(rows), dtype=bool)
    for axis in ("M", "K", "N"):
        v = rows[axis].to_numpy(np.float64)
        inside &= (v >= float(own[axis].min())) & (v <= float(own[axis].max()))
    return inside


def corrected_gemm(table: pd.DataFrame, **reference: Path) -> pd.DataFrame:
    """``table`` (an imported ``gemm.parquet``) with its bf16 rows' ``median_s`` corrected and the
    source's time in ``source_median_s`` (kept when already there: idempotent)."""
    out = table.copy()
    if "source_median_s" not in out:
        out["source_median_s"] = out["median_s"]
    bf16 = (out["dtype"] == CORRECTED).to_numpy()
    source = out["source_median_s"].to_numpy(np.float64)
    factor = np.ones(len(out))
    if bf16.any():
        factor[bf16] = harness_factors(out[bf16].reset_index(drop=True), **reference)
    out["median_s"] = source * factor
    return out


def correct_imported(folder: Path, device: DeviceSpec, seed: int = 0) -> dict[str, Any]:
    """Correct ``folder``'s imported bf16 GEMM rows (:func:`corrected_gemm`), record it in its
    ``profile.json`` and re-fit its GEMM regressor; returns ``{rows, factor median/p10/p90}``.
    ValueError for a device whose chip is not the reference's (:data:`SAME_CHIP`)."""
    from latsim.calibration.aic_import import refit_imported, write_parquet

    if device.name not in SAME_CHIP:
        raise ValueError(f"{device.name}: the {REFERENCE}'s GEMM harness ratio carries only to a GPU of its "
                         f"chip ({', '.join(SAME_CHIP)})")
    path = folder / "gemm.parquet"
    table = corrected_gemm(pd.read_parquet(path))
    record = harness_record(table)
    write_parquet(path, table)
    profile = json.loads((folder / PROFILE).read_text())
    profile.setdefault("adjustments", {})["gemm_harness"] = record
    atomic_write_text(folder / PROFILE, json.dumps(profile, indent=1, default=str) + "\n")
    refit_imported(folder, device, ("gemm",), seed)
    return {k: v for k, v in record.items() if k != "rule"}


def harness_record(table: pd.DataFrame) -> dict[str, Any]:
    """What ``profile.json`` records of a :func:`corrected_gemm` table: the rule, the corrected
    rows and their factors' median, p10 and p90."""
    ratio = (table["median_s"] / table["source_median_s"])[table["dtype"] == CORRECTED]
    return {"rule": ADJUSTMENT, "rows": len(ratio), "factor_median": float(ratio.median()),
            "factor_p10": float(ratio.quantile(0.1)), "factor_p90": float(ratio.quantile(0.9))}
