"""Operator-time predictors from a fitted profile, priced on a target device's roofline.

:func:`load_predictors` reads a profile folder once (xgboost models, overheads, all-reduce
table; cached per folder and modification time) and returns :class:`Predictors`, whose methods
take numpy arrays of shapes and return seconds for one kernel call (one layer).  Each time is
``roofline(target device) * exp(model(features))``: on the calibrated GPU that reproduces the
measurements; on another GPU it transfers the learned efficiency curves (lower confidence).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from latsim.catalog.devices import DeviceSpec
from latsim.costmodel.profile import features, machete, tiles
from latsim.costmodel.profile.floor import without_floor
from latsim.costmodel.profile.store import read_json, read_profile
from latsim.costmodel.roofline_params import default_roofline_params

Arr = features.Arr
REQUIRED = ("gemm", "attn_prefill", "attn_decode", "memory")


@dataclass(frozen=True)
class Predictors:
    """Fitted models of one profile (``boosters`` by family) plus its fixed-cost tables."""

    folder: Path
    profile: dict[str, Any]
    boosters: dict[str, Any]
    overheads: dict[str, Any] | None
    allreduce: dict[str, Any] | None
    report: dict[str, Any] = field(default_factory=dict)

    def ratio(self, family: str, cols: features.Cols, roof: Arr) -> Arr:
        """measured / roofline predicted for ``family`` (ValueError if the profile lacks it)."""
        if family not in self.boosters:
            raise ValueError(f"{self.folder}: no fitted model for {family!r}; run `latsim calibrate --fit-only`")
        x = features.matrix(family, cols, roof)
        return np.exp(np.asarray(self.boosters[family].inplace_predict(x), dtype=np.float64))

    def gemm_s(self, m: Arr, k: float, n: float, device: DeviceSpec, compute_dtype: str, wbytes: float,
               w4a16: bool = False) -> Arr:
        """One ``m x k`` by ``k x n`` GEMM; W8A8 dtypes (fp8, int8) use the fp8 curve, 4-bit
        weight-only layers (``w4a16``) the rows of vLLM's W4A16 kernel when the profile has them (else
        the bf16 curve on the 4-bit roofline), priced at the rows Machete computes when the profile
        timed Machete (:func:`~latsim.costmodel.profile.machete.padded_rows`).  A bf16 shape narrower
        than the regressor's grid that the profile timed (:attr:`narrow_measured`) is priced at its
        rows on the profile's own GPU."""
        family = "gemm_w4a16" if w4a16 and "gemm_w4a16" in self.boosters else "gemm"
        if family == "gemm_w4a16" and self.w4a16_machete():
            m = machete.padded_rows(m, int(k), int(n))
        fp8 = 1.0 if compute_dtype in ("fp8", "int8") else 0.0
        abytes = 1.0 if fp8 else 2.0
        flops = 2.0 * m * k * n
        nbytes = k * n * wbytes + m * k * abytes + m * n * 2.0
        roof = features.roofline_s(flops, nbytes, device.flops_for(compute_dtype), device.hbm_bandwidth)
        cols = {"M": m, "K": np.full_like(m, k), "N": np.full_like(m, n), "fp8": np.full_like(m, fp8),
                "flops": flops, "bytes": nbytes}
        measured = self.narrow_measured.get((int(k), int(n)))
        if measured is None or compute_dtype != "bf16" or w4a16 or device.name != self.profile.get("device"):
            return roof * self.ratio(family, cols, roof)
        return _at_rows(measured, m, lambda: roof * self.ratio(family, cols, roof))

    def w4a16_machete(self) -> bool:
        """Whether the profile's 4-bit rows were timed with vLLM's Machete (Hopper)."""
        impl = (self.profile.get("impl") or {}).get("gemm") or []
        return any("machete" in str(name) for name in impl)

    def attn_prefill_ratio(self, q: Arr, ctx: Arr, heads: tuple[int, int, int], device: DeviceSpec,
                           kv_bytes: float = 2.0) -> Arr:
        """measured / roofline of one sequence's chunk of ``q`` tokens after ``ctx`` cached, over a
        cache of ``kv_bytes`` per element (the calibrated model's roofline); over an fp8 cache the
        fp8-cache rows when the profile has them."""
        return self._attn_prefill(q, ctx, heads, device, kv_bytes)[1]

    def attn_prefill_s(self, q: Arr, ctx: Arr, heads: tuple[int, int, int], device: DeviceSpec,
                       kv_bytes: float = 2.0) -> Arr:
        """One prefill attention call (one layer) in seconds: the roofline times
        :meth:`attn_prefill_ratio`."""
        roof, ratio = self._attn_prefill(q, ctx, heads, device, kv_bytes)
        return roof * ratio

    def _attn_prefill(self, q: Arr, ctx: Arr, heads: tuple[int, int, int], device: DeviceSpec,
                      kv_bytes: float) -> tuple[Arr, Arr]:
        hq, hkv, d = heads
        pairs = q * ctx + q * (q + 1) / 2
        flops, nbytes = 4.0 * d * hq * pairs, d * q * hq * (kv_bytes + 2.0) + 2.0 * d * (q + ctx) * hkv * kv_bytes
        roof = features.roofline_s(flops, nbytes, device.flops_for("bf16"), device.hbm_bandwidth)
        cols = {"q": q, "ctx": ctx, "hq": np.full_like(q, hq), "hkv": np.full_like(q, hkv), "d": np.full_like(q, d)}
        return roof, self.ratio(self._kv_family("attn_prefill", kv_bytes), cols, roof)

    def _kv_family(self, family: str, kv_bytes: float) -> str:
        """``family`` or its fp8-cache variant (a 1-byte cache and a profile that measured it)."""
        variant = f"{family}_fp8kv"
        return variant if kv_bytes == 1.0 and variant in self.boosters else family

    def attn_decode_s(self, batch: Arr, ctx: Arr, heads: tuple[int, int, int], kv_bytes: float,
                      device: DeviceSpec) -> Arr:
        """One decode attention call: ``batch`` sequences of mean context ``ctx``, priced from the
        ``uniform`` mix (a paged kernel's cost follows the total KV read; see attention.py); bytes
        as the calibration counts them (``attention.work``: queries in the cache's dtype, bf16
        out), from the fp8-cache rows over a 1-byte cache when the profile has them.  Where the fit
        found FA3's key tile (``tiles``), ``ctx`` is priced as :func:`~tiles.expected_ctx`."""
        hq, hkv, d = heads
        family = self._kv_family("attn_decode", kv_bytes)
        ctx = tiles.expected_ctx(ctx, self.decode_tile(d, family))
        flops = 4.0 * d * hq * batch * ctx
        nbytes = d * batch * hq * (kv_bytes + 2.0) + 2.0 * d * hkv * kv_bytes * batch * ctx
        roof = features.roofline_s(flops, nbytes, device.flops_for("bf16"), device.hbm_bandwidth)
        cols = {"batch": batch, "ctx": ctx, "hq": np.full_like(batch, hq), "hkv": np.full_like(batch, hkv),
                "d": np.full_like(batch, d)}
        return roof * self.ratio(family, {**cols, "skewed": np.zeros_like(batch)}, roof)

    def decode_tile(self, d: int, family: str = "attn_decode") -> int:
        """Tokens of FA3's key tile at head dim ``d`` for ``family``'s cache dtype (1: none found)."""
        kv = "fp8" if family.endswith("_fp8kv") else "bf16"
        return tiles.tile_for(self.report.get("decode_tiles") or [], d, kv)

    def memory_s(self, op: str, nbytes: Arr, device: DeviceSpec) -> Arr:
        """One memory-bound kernel moving ``nbytes``; ``op`` one of ``features.MEMORY_OPS``."""
        roof = nbytes / device.hbm_bandwidth
        cols = {"op": np.full(nbytes.shape, op), "bytes": nbytes}
        return roof * self.ratio("memory", cols, roof)

    def moe_matches_engine(self) -> bool:
        """Whether the MoE rows were timed with the serving engine's own fused-MoE kernel.

        vLLM runs routed experts in one fused Triton kernel; a profile timed with another
        implementation (e.g. ``torch._grouped_mm``, which streams weights far slower at decode
        sizes) does not describe it, so MoE is then priced as a large GEMM streaming the hit
        experts' weights (roofline with the roofline's GEMM memory efficiency).
        """
        impl = (self.profile.get("impl") or {}).get("moe") or []
        return any("vllm" in str(name) for name in impl)

    def moe_s(self, tokens: Arr, shape: tuple[int, int, int, int], device: DeviceSpec, wbytes: float) -> Arr:
        """One MoE layer's experts (gather, grouped up, SiLU x mul, grouped down, combine)."""
        roof, cols = _moe_roofline(tokens, shape, device, wbytes)
        if not self.moe_matches_engine():
            return roof / default_roofline_params().memory_efficiency["gemm"]
        e, k, h, inter = shape
        measured = self.moe_measured.get((int(e), int(k), int(h), int(inter)))
        if measured is None or wbytes != 2.0 or device.name != self.profile.get("device"):
            return roof * self.ratio("moe", cols, roof)
        return _at_rows(measured, tokens, lambda: roof * self.ratio("moe", cols, roof))

    @functools.cached_property
    def moe_measured(self) -> dict[tuple[int, ...], tuple[Arr, Arr]]:
        """Per expert shape the profile timed with bf16 weights (experts, top-k, hidden, expert
        width), its measured seconds per token count as knots in log tokens and log seconds.
        :meth:`moe_s` interpolates them (log-log) for that shape on the profile's own GPU, inside the
        measured counts: the regressor, fitted over every shape, is piecewise constant between
        them (its trees split somewhere between two measured counts), which priced Qwen3-30B-A3B's
        experts at 1,024-8,192 tokens up to 20 % under its own rows on both Hopper GPUs, where a
        live engine's traced experts took what the rows say (``data/traces/h100/s50``).  The rows
        lose the timer's floor as the regressor's do (:func:`~.floor.without_floor`: the step
        adds each kernel's launch gap apart).  Empty
        when the profile has no MoE rows or timed another kernel than the engine's."""
        if not self.moe_matches_engine():
            return {}
        return self._measured_knots("moe", ("experts", "top_k", "hidden", "inter"), "tokens")

    @functools.cached_property
    def narrow_measured(self) -> dict[tuple[int, ...], tuple[Arr, Arr]]:
        """Per (K, N) the profile's ``gemm_narrow`` table timed in bf16 (the ``narrow`` grid: MoE
        routers and shared-expert gates, a few to 128 columns), its measured seconds per row count
        as knots in log rows and log seconds.  :meth:`gemm_s` prices those shapes at their rows on
        the profile's own GPU: the GEMM regressor's grid is no narrower than 384 columns, and
        below it the regressor extrapolates to a fraction of the kernel (at 64 rows 0.7 us for a
        2,048 x 1 GEMM the H100 ran in 3.5, timer floor off).  The rows lose the timer's floor as
        the regressor's do.  Empty when the profile has no such table."""
        return self._measured_knots("gemm_narrow", ("K", "N"), "M", dtype="bf16")

    def _measured_knots(self, table: str, keys: tuple[str, ...], count: str,
                        dtype: str | None = None) -> dict[tuple[int, ...], tuple[Arr, Arr]]:
        """Per shape (``keys``) of the profile's ``table``: log ``count`` and log seconds of its
        ``ok`` rows (median per count, less the timer's floor), shapes with two counts or more."""
        path = self.folder / f"{table}.parquet"
        if not path.is_file():
            return {}
        import pandas as pd

        rows = pd.read_parquet(path)
        rows = rows[(rows["status"] == "ok") & (rows["median_s"] > 0.0)]
        if dtype is not None:
            rows = rows[rows["dtype"] == dtype]
        rows = without_floor(rows, float(self.report.get("timer_floor_s", 0.0)),
                             float(self.report.get("graph_gap_s", 0.0)))
        out: dict[tuple[int, ...], tuple[Arr, Arr]] = {}
        for shape, group in rows.groupby(list(keys)):
            by_count = group.groupby(count)["median_s"].median().sort_index()
            if len(by_count) >= 2:
                out[tuple(int(v) for v in np.asarray(shape, dtype=np.int64))] = (
                    np.log(by_count.index.to_numpy(dtype=np.float64)), np.log(by_count.to_numpy(dtype=np.float64)))
        return out

    def allreduce_s(self, nbytes: Arr, world: int, graph: bool = False) -> Arr | None:
        """Measured all-reduce seconds (log-log interpolation), or None without a table for ``world``.

        ``graph=False``: the eager table (``worlds``: NCCL, or an imported source's eager custom
        all-reduce, :meth:`eager_allreduce_is_custom`), clamped at its end sizes.  ``graph=True``
        (calls replayed in a CUDA graph): per size, the first of ``vllm_custom``, ``nccl_graph``,
        ``nccl`` whose largest measured size is at least ``nbytes`` (sizes below a table's smallest
        take its smallest time); sizes above every table take the last available one, clamped.
        """
        order = ("vllm_custom", "nccl_graph", "nccl") if graph else ("nccl",)
        tables = [t for t in (self._allreduce_table(m, world) for m in order) if t is not None]
        if not tables:
            return None
        lx = np.log(np.maximum(np.asarray(nbytes, dtype=np.float64), 1.0))
        out = np.full(lx.shape, np.nan)
        for i, table in enumerate(tables):
            lb, ls = np.log(table["bytes"]), np.log(table["seconds"])
            take = np.isnan(out) & ((lx <= lb[-1]) | (i == len(tables) - 1))
            out = np.where(take, np.exp(np.interp(lx, lb, ls)), out)
        return np.asarray(out, dtype=np.float64)

    def eager_allreduce_is_custom(self) -> bool:
        """Whether the profile's eager all-reduce table (``worlds``) timed vLLM's custom all-reduce
        (an imported profile's source) rather than NCCL."""
        impl = (self.profile.get("impl") or {}).get("comm") or []
        return any("custom" in str(name) and "eager" in str(name) for name in impl)

    def has_graph_allreduce(self, world: int) -> bool:
        """Whether the profile timed all-reduce inside CUDA graphs (``vllm_custom`` or ``nccl_graph``)."""
        return any(self._allreduce_table(m, world) is not None for m in ("vllm_custom", "nccl_graph"))

    def _allreduce_table(self, mode: str, world: int) -> dict[str, Any] | None:
        """The ``{"bytes", "seconds"}`` table of ``mode`` for ``world`` (``nccl`` is top-level), or None."""
        ar = self.allreduce or {}
        worlds = ar.get("worlds", {}) if mode == "nccl" else ar.get("modes", {}).get(mode, {})
        table: dict[str, Any] | None = worlds.get(str(world))
        return table if table and len(table.get("bytes", [])) else None


def _moe_roofline(tokens: Arr, shape: tuple[int, int, int, int], device: DeviceSpec,
                  wbytes: float) -> tuple[Arr, features.Cols]:
    """The roofline seconds of one MoE layer's experts at ``tokens`` and the regressor's columns."""
    e, k, h, inter = shape
    hit = e * (1.0 - (1.0 - k / e) ** tokens)
    flops = 2.0 * tokens * k * 3.0 * h * inter
    nbytes = wbytes * hit * 3.0 * h * inter + 2.0 * tokens * k * (2 * h + 3 * inter)
    roof = features.roofline_s(flops, nbytes, device.flops_for("bf16"), device.hbm_bandwidth)
    cols = {"tokens": tokens, "experts": np.full_like(tokens, e), "top_k": np.full_like(tokens, k),
            "hidden": np.full_like(tokens, h), "inter": np.full_like(tokens, inter), "experts_hit": hit}
    return roof, cols


def _optional_json(path: Path, what: str) -> dict[str, Any] | None:
    return read_json(path, what) if path.is_file() else None


@functools.lru_cache(maxsize=8)
def _load(folder: Path, stamp: float) -> Predictors:
    import xgboost as xgb

    del stamp  # part of the cache key only: a refit invalidates the cached models
    profile = read_profile(folder)
    report = read_json(folder / "fit_report.json", "fit report (run `latsim calibrate --fit-only`)")
    boosters = {}
    for family in features.FAMILIES:
        path = model_path(folder, family)
        if path.is_file():
            booster = xgb.Booster()
            try:
                booster.load_model(str(path))
            except xgb.core.XGBoostError as exc:
                raise ValueError(f"{path}: not a readable xgboost model ({exc})") from exc
            boosters[family] = booster
    missing = [f for f in REQUIRED if f not in boosters]
    if missing:
        raise ValueError(f"{folder}: fitted model(s) missing for {missing}; expected model_<family>.json files")
    return Predictors(folder, profile, boosters, _optional_json(folder / "overheads.json", "overheads"),
                      _optional_json(folder / "allreduce.json", "all-reduce table"), report)


def _at_rows(measured: tuple[Arr, Arr], count: Arr, fallback: Callable[[], Arr]) -> Arr:
    """Seconds at ``count`` from measured knots (log count, log seconds), interpolated log-log inside
    the measured counts; outside them ``fallback()`` (the regressor), evaluated only when needed."""
    knots, logs = measured
    at = np.log(np.maximum(count, 1.0))
    inside = (at >= knots[0] - 1e-9) & (at <= knots[-1] + 1e-9)
    direct = np.exp(np.interp(at, knots, logs))
    if inside.all():
        return direct
    return np.where(inside, direct, fallback())


def load_predictors(folder: Path) -> Predictors:
    """The predictors of a fitted profile folder (ValueError naming the file when unusable)."""
    folder = Path(folder).resolve()
    report = folder / "fit_report.json"
    return _load(folder, report.stat().st_mtime if report.is_file() else 0.0)


def describe_source(p: Predictors) -> dict[str, Any]:
    """Provenance of the predictors for ``describe()``."""
    keys = ("gpu_name", "driver", "cuda", "torch", "vllm", "date_utc", "grid", "grid_hash", "impl")
    from latsim.costmodel.profile.origin import origin

    return {"profile": str(p.folder), "origin": origin(p.profile), **{k: p.profile.get(k) for k in keys},
            "held_out_mape": {f: r.get("mape") for f, r in p.report.get("families", {}).items() if "mape" in r},
            "fit_report": str(p.folder / "fit_report.json")}


def model_path(folder: Path, family: str) -> Path:
    return folder / f"model_{family}.json"
