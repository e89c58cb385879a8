"""Fit one regressor per operator family from a profile's tables, and report held-out error.

Each family's xgboost model predicts ``log(measured / roofline)`` from the features of
:mod:`latsim.costmodel.profile.features` and is saved as ``model_<family>.json`` (xgboost's JSON
format, never pickle).  Held-out error holds out *whole shapes* (:data:`GROUP_KEYS`: a GEMM's
``K x N``, an attention head configuration, a memory op at one width, an MoE layer shape):
about a fifth of the groups, seeded, are left out of a first fit and scored; the saved model
is then refitted on every row.  ``fit_report.json`` holds MAPE, median and p90 absolute
percentage error of the *time* per family, the train/test sizes and which shapes were held out.
Overheads and all-reduce tables are fitted by :mod:`latsim.calibration.fit_fixed`.

Timer floor: every row is fitted less the timer's floor (:mod:`latsim.costmodel.profile.floor`);
``fit_report.json`` records the floor.

A folder holding the spread probe (``skew_grid.json``, :mod:`latsim.calibration.spread_probe`)
also gets its decode-spread table (``decode_spread.json``, :func:`fit_spread`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from latsim.calibration import attention, fit_fixed
from latsim.calibration.spread_probe import SKEW_GRID_FILE
from latsim.calibration.unchanged import save_if_changed, write_json_if_changed
from latsim.catalog.devices import DeviceSpec
from latsim.costmodel.profile import features
from latsim.costmodel.profile.floor import without_floor
from latsim.costmodel.profile.regressors import model_path
from latsim.costmodel.profile.store import available_families, check_device, load_table, read_profile
from latsim.costmodel.profile.tables import read_shard, shard_path
from latsim.costmodel.profile.tiles import decode_tiles, tile_for, tiled_ctx

GROUP_KEYS = {
    "gemm": ("K", "N"), "attn_prefill": ("hq", "hkv", "d"), "attn_decode": ("hq", "hkv", "d"),
    "memory": ("op", "width"), "moe": ("experts", "top_k", "hidden", "inter"),
}
GROUP_KEYS.update({variant: GROUP_KEYS[base] for variant, base in features.VARIANTS.items()})
HOLDOUT_FRACTION = 0.2
XGB_PARAMS: dict[str, Any] = {"n_estimators": 400, "max_depth": 6, "learning_rate": 0.05, "subsample": 0.9,
                              "min_child_weight": 1.0, "tree_method": "hist", "n_jobs": 2}
MIN_ROWS = 4
TILES_TABLE = "decode_tiles"
"""The profile's table (``decode_tiles.parquet``) of the ``decode-tiles`` grid's rows, kept apart from
``attention.parquet``: they measure FA3's key
tile (:func:`~latsim.costmodel.profile.tiles.decode_tiles`); 3,500 rows over a few hundred tokens
of context would pull the attention regressor's splits to that corner (tried: held-out levels'
TPOT 5.8 -> 6.6 %)."""


def fit_frames(folder: Path, tiles: list[dict[str, Any]] | None = None) -> dict[str, pd.DataFrame]:
    """The ``ok`` rows of each fit family: GEMMs split by kernel (4-bit weight-only rows,
    Machete or Marlin, are ``gemm_w4a16``), attention by phase and KV dtype (``*_fp8kv``); sliding-window attention rows
    are a check of the windowed pricing, not fitted.  With ``tiles`` (``tiles.decode_tiles``) the paged
    decode rows are priced at their context in whole tiles (:func:`_tiled_decode`)."""
    have = available_families(folder)
    out: dict[str, pd.DataFrame] = {}
    if "gemm" in have:
        g = load_table(folder, "gemm")
        g = g.assign(fp8=(g["dtype"] == "fp8").astype(np.float64))
        out["gemm"] = g[g["dtype"] != "int4"].reset_index(drop=True)
        out["gemm_w4a16"] = g[g["dtype"] == "int4"].reset_index(drop=True)
    if "attention" in have:
        a = load_table(folder, "attention")
        kv = a["kv"].fillna("bf16") if "kv" in a else pd.Series("bf16", index=a.index)
        plain = a["window"].fillna(0) == 0 if "window" in a else pd.Series(True, index=a.index)
        for suffix, rows in (("", a[plain & (kv == "bf16")]), ("_fp8kv", a[plain & (kv == "fp8")])):
            out[f"attn_prefill{suffix}"] = rows[rows["phase"] == "prefill"].reset_index(drop=True)
            d = rows[rows["phase"] == "decode"].reset_index(drop=True)
            d = d.assign(ctx=d["kv_tokens"] / d["batch"], skewed=(d["mix"] == "skewed").astype(np.float64))
            out[f"attn_decode{suffix}"] = _tiled_decode(d, tiles or [], "fp8" if suffix else "bf16")
    for fam in ("memory", "moe"):
        if fam in have:
            out[fam] = load_table(folder, fam)
    return {k: v for k, v in out.items() if len(v) >= MIN_ROWS}


def _tiled_decode(d: pd.DataFrame, tiles: list[dict[str, Any]], kv: str) -> pd.DataFrame:
    """Decode rows with each paged equal-context row's ``ctx``, FLOPs and bytes at its context in
    whole tiles (the work FA3 does; rows of other kernels as they are)."""
    tile = np.array([tile_for(tiles, int(x), kv) for x in d["d"]], dtype=np.int64)
    paged = d["impl"].astype(str).str.contains("paged").to_numpy() & (d["mix"] == "uniform").to_numpy() & (tile > 1)
    if not paged.any():
        return d
    ctx = np.where(paged, tiled_ctx(d["ctx"].to_numpy(np.float64), tile), d["ctx"].to_numpy(np.float64))
    b = d["batch"].to_numpy(np.float64)
    work = [attention.work(int(hq), int(hkv), int(hd), int(n), n * c, round(n * c), kv)
            for hq, hkv, hd, n, c in zip(d["hq"], d["hkv"], d["d"], b, ctx, strict=True)]
    flops, nbytes = (np.array(col) for col in zip(*work, strict=True))
    return d.assign(ctx=ctx, flops=np.where(paged, flops, d["flops"]), bytes=np.where(paged, nbytes, d["bytes"]))


def family_peak(family: str, cols: Any, device: DeviceSpec) -> Any:
    """Peak FLOP/s per row: fp8 or bf16 tensor cores (4-bit weight-only GEMMs and FA3 over an fp8
    cache: bf16, as the cost model prices them), fp32 vector units for memory ops."""
    if family == "gemm":
        return np.where(np.asarray(cols["fp8"], dtype=float) > 0, device.flops_for("fp8"), device.flops_for("bf16"))
    return device.flops_for("fp32" if family == "memory" else "bf16")


def family_roofline(family: str, cols: Any, device: DeviceSpec) -> np.ndarray:
    flops, nbytes = (np.asarray(cols[c], dtype=np.float64) for c in ("flops", "bytes"))
    return features.roofline_s(flops, nbytes, family_peak(family, cols, device), device.hbm_bandwidth)


def _xy(family: str, df: pd.DataFrame, device: DeviceSpec) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    roof = family_roofline(family, df, device)
    x = features.matrix(family, df, roof)
    return x, np.log(df["median_s"].to_numpy(np.float64) / roof), roof


def _regressor(seed: int, params: dict[str, Any] | None = None) -> Any:
    """An xgboost regressor with :data:`XGB_PARAMS`, updated by ``params`` (smaller models for imports)."""
    import xgboost as xgb

    return xgb.XGBRegressor(**{**XGB_PARAMS, **(params or {})}, random_state=seed)


def _groups(family: str, df: pd.DataFrame) -> np.ndarray:
    keys = GROUP_KEYS[family]
    return np.asarray(["/".join(str(df[k].iloc[i]) for k in keys) for i in range(len(df))])


def _split(groups: np.ndarray, seed: int) -> tuple[np.ndarray, list[str]]:
    """Boolean test mask holding out whole groups (rows when there are fewer than 3 groups)."""
    rng = np.random.default_rng(seed)
    uniq = sorted(set(groups.tolist()))
    if len(uniq) >= 3:
        held = sorted(rng.choice(uniq, size=max(1, round(HOLDOUT_FRACTION * len(uniq))), replace=False).tolist())
        return np.isin(groups, held), held
    return rng.random(len(groups)) < HOLDOUT_FRACTION, []


def ape_stats(pred_s: np.ndarray, true_s: np.ndarray) -> dict[str, float]:
    """MAPE, median and p90 absolute percentage error (percent)."""
    ape = 100.0 * np.abs(pred_s - true_s) / true_s
    return {"mape": float(ape.mean()), "median_ape": float(np.median(ape)), "p90_ape": float(np.percentile(ape, 90))}


def fit_family(family: str, df: pd.DataFrame, device: DeviceSpec, seed: int = 0,
               params: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
    """(model fitted on all rows, held-out report) for one family."""
    x, y, roof = _xy(family, df, device)
    test, held = _split(_groups(family, df), seed)
    report: dict[str, Any] = {"n_train": int((~test).sum()), "n_test": int(test.sum()), "held_out_shapes": held,
                              "group_by": list(GROUP_KEYS[family])}
    if test.any() and (~test).sum() >= MIN_ROWS:
        probe = _regressor(seed, params).fit(x[~test], y[~test])
        pred = roof[test] * np.exp(probe.predict(x[test]).astype(np.float64))
        report.update(ape_stats(pred, df["median_s"].to_numpy(np.float64)[test]))
    model = _regressor(seed, params).fit(x, y)
    fit_pred = roof * np.exp(model.predict(x).astype(np.float64))
    report["train_fit"] = ape_stats(fit_pred, df["median_s"].to_numpy(np.float64))
    return model, report


def fit_spread(folder: Path, out: Path) -> dict[str, Any]:
    """Fit ``folder``'s spread probe into ``out/decode_spread.json`` (left alone when the same);
    the fit's summary for the report."""
    from latsim.calibration.spread_fit import document
    from latsim.costmodel.spread import SPREAD_FILE

    doc = document(folder, {"command": "latsim calibrate (latsim.calibration.fit.fit_spread)"}, source_names=True)
    write_json_if_changed(out / SPREAD_FILE, doc)
    return {"file": SPREAD_FILE, "cv_full": doc["cv_full"], "grid": doc["fit"]["grid"], "sigma": doc["fit"]["sigma"]}


def fit_profile(folder: Path, device: DeviceSpec, out: Path | None = None, seed: int = 0,
                params: dict[str, Any] | None = None) -> dict[str, Any]:
    """Fit every family found in ``folder``; write models and ``fit_report.json`` to ``out`` (default: ``folder``).

    ``params`` override :data:`XGB_PARAMS` (imported profiles ship smaller models)."""
    import xgboost as xgb

    profile = read_profile(folder)
    check_device(profile, folder, device.name, device.aliases)
    out = out or folder
    fixed = fit_fixed.fit_fixed(folder, out)
    floor = float(fixed.get("overhead", {}).get("graph_base_s", 0.0))
    gap = float(fixed.get("overhead", {}).get("graph_per_kernel_s", 0.0))
    report: dict[str, Any] = {"profile": {k: profile.get(k) for k in ("gpu_name", "date_utc", "grid", "grid_hash")},
                              "device": device.name, "xgboost": xgb.__version__, "timer_floor_s": floor,
                              "graph_gap_s": gap,
                              "families": {}}
    tiles_path = shard_path(folder, TILES_TABLE)
    tiles = decode_tiles(read_shard(tiles_path)) if tiles_path.is_file() else []
    report["decode_tiles"] = tiles
    for family, df in fit_frames(folder, tiles).items():
        model, rep = fit_family(family, without_floor(df, floor, gap), device, seed, params)
        save_if_changed(model_path(out, family), model.get_booster().save_model)
        report["families"][family] = rep
    report["families"].update(fixed)
    if (folder / SKEW_GRID_FILE).is_file():
        report["decode_spread"] = fit_spread(folder, out)
    write_json_if_changed(out / "fit_report.json", report)  # a re-fit of the same tables leaves it alone
    return report
