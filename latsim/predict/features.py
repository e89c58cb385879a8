"""Physical features of a configuration, for the fitted surrogate.

A configuration is one row of the grid (:data:`GRID_COLUMNS`): a deployment (model, device,
TP, replicas, dtypes, engine limits) and a workload summary (rate, lognormal input/output
length median and spread, prefix share).  :func:`features` turns a DataFrame of them into
numbers a regressor can carry to a model or GPU it never saw: step times from the
deployment's cost model in :mod:`latsim.costmodel` (the one the simulator uses: calibrated
where a GPU profile ships, roofline elsewhere), KV bytes per token, the KV capacity of the memory plan, an estimated
capacity in requests per second, and the offered load over that capacity.

Everything that does not depend on the rate is computed once per distinct deployment and
length summary (cached), so a DataFrame of 10,000 rates over a few hundred deployments costs
a few hundred cost-model builds.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np
import pandas as pd
from scipy.stats import norm

DEPLOYMENT_COLUMNS = ("model", "device", "tp", "replicas", "weight_dtype", "kv_dtype", "max_num_seqs",
                      "max_num_batched_tokens")
WORKLOAD_COLUMNS = ("qps", "input_median", "input_sigma", "output_median", "output_sigma", "prefix_share")
GRID_COLUMNS = DEPLOYMENT_COLUMNS + WORKLOAD_COLUMNS
"""The columns of a configuration DataFrame, all required (engine limits may be NaN: the engine's default)."""

INPUT_CLIP = (16, 3072)
OUTPUT_CLIP = (8, 1024)
"""Synthetic length distributions are lognormal clipped to these bounds (prompt + output fits 4096)."""

BATCH_GRID = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
"""Decode batches the cost model is priced at (a batch above the cap is priced at the cap)."""
_QUANTILES = norm.ppf((np.arange(64) + 0.5) / 64)

STATIC_FEATURES = ("log_decode_step_ms", "log_decode_full_ms", "log_prefill_ms", "log_first_token_ms",
                   "log_kv_bytes_token", "log_kv_capacity_tokens", "log_batch", "kv_limited", "log_capacity_rps",
                   "mean_in", "mean_out", "in_sigma", "out_sigma", "prefix_share", "replicas", "tp",
                   "log_params_active", "log_bw_per_gpu", "log_flops_per_gpu", "log_max_num_batched_tokens")
LOAD_FEATURES = ("load", "load_per_batch", "prefill_utilization", "batch_share_at_load", "log_step_at_load_ms")
FEATURES = STATIC_FEATURES + LOAD_FEATURES
"""Feature names in the order of :func:`features`'s columns; every LOAD_FEATURES entry grows with the rate."""
_HIDDEN = ("capacity_rps", "batch", *(f"_step_{g}" for g in BATCH_GRID))


def length_mean(median: float, sigma: float, clip: tuple[int, int]) -> float:
    """Mean of a lognormal(median, sigma) clipped to ``clip`` (64-point quantile rule)."""
    return float(np.clip(median * np.exp(sigma * _QUANTILES), *clip).mean())


def check_columns(frame: pd.DataFrame) -> None:
    """Raise ValueError naming the first missing grid column."""
    missing = [c for c in GRID_COLUMNS if c not in frame.columns]
    if missing:
        raise ValueError(f"configuration is missing column {missing[0]!r}; required: {', '.join(GRID_COLUMNS)}")


def features(frame: pd.DataFrame) -> pd.DataFrame:
    """The :data:`FEATURES` of every configuration row of ``frame`` (same index).

    Raises ValueError for a missing column or a deployment the catalog or memory plan rejects.
    """
    return features_at(static_features(frame), frame["qps"].to_numpy(dtype=float))


def static_features(frame: pd.DataFrame) -> pd.DataFrame:
    """The rate-independent part of :func:`features` (same index): :data:`STATIC_FEATURES`, the
    estimated capacity ``capacity_rps``, the decode ``batch`` cap and the decode step in ms at
    every batch of :data:`BATCH_GRID` (``_step_<batch>``), from which :func:`features_at` prices
    any rate without building a cost model again."""
    check_columns(frame)
    rows = [_static(*key) for key in _keys(frame)]
    return pd.DataFrame(rows, columns=[*STATIC_FEATURES, *_HIDDEN], index=frame.index)


def features_at(static: pd.DataFrame, qps: np.ndarray) -> pd.DataFrame:
    """The :data:`FEATURES` of the rows of ``static`` (:func:`static_features`) at rates ``qps``
    (req/s, one per row); every :data:`LOAD_FEATURES` entry is non-decreasing in ``qps``."""
    qps = np.asarray(qps, dtype=float)
    out = static[list(STATIC_FEATURES)].copy()
    out["load"] = qps / static["capacity_rps"].to_numpy()
    out["load_per_batch"] = qps / static["replicas"].to_numpy() / static["batch"].to_numpy()
    util, share, step = step_at_load(static, qps)
    out["prefill_utilization"] = util
    out["batch_share_at_load"] = share
    out["log_step_at_load_ms"] = np.log(step)
    return out


def step_at_load(static: pd.DataFrame, qps: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(prefill utilization, decode batch / its cap, decode step in ms)`` of one replica at ``qps``.

    A mean-value model: a replica serves ``r = min(qps, capacity) / replicas`` (past capacity
    the queue grows, the running batch does not); prefill takes a share
    ``u = min(r * prefill, 0.95)`` of its time; a decode step of ``n`` sequences costs
    ``step(n)`` (the cost model at the batches of :data:`BATCH_GRID`, linearly between: concave
    for MoE models) stretched by ``1 / (1 - u)``; Little's law ``n = r * mean_out * step(n) /
    (1 - u)`` is solved by fixed-point iteration from ``n = 0`` (its least root), capped at the
    batch cap ``B``.  Every output is non-decreasing in ``qps``.
    """
    # a larger batch is never faster (a calibrated model's tables can dip by a fraction of a percent)
    steps = np.maximum.accumulate(static[[f"_step_{g}" for g in BATCH_GRID]].to_numpy() / 1e3, axis=1)
    cap = np.exp(static["log_batch"].to_numpy())
    r = np.minimum(qps, np.exp(static["log_capacity_rps"].to_numpy())) / static["replicas"].to_numpy()
    util = np.minimum(r * np.exp(static["log_prefill_ms"].to_numpy()) / 1e3, 0.95)
    demand = r * static["mean_out"].to_numpy() / (1.0 - util)
    n = np.zeros(len(static))
    for _ in range(40):
        n = np.minimum(cap, demand * _interp(steps, np.maximum(n, 1.0)))
    step = _interp(steps, np.maximum(n, 1.0)) / (1.0 - util)
    return util, n / cap, step * 1e3


def _interp(steps: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Row-wise linear interpolation of ``steps`` (one column per :data:`BATCH_GRID` batch) at ``n``."""
    grid = np.asarray(BATCH_GRID, dtype=float)
    hi = np.clip(np.searchsorted(grid, n), 1, len(grid) - 1)
    lo = hi - 1
    rows = np.arange(len(n))
    w = np.clip((n - grid[lo]) / (grid[hi] - grid[lo]), 0.0, 1.0)
    return steps[rows, lo] * (1 - w) + steps[rows, hi] * w


def _keys(frame: pd.DataFrame) -> list[tuple]:
    cols = [*DEPLOYMENT_COLUMNS, "input_median", "input_sigma", "output_median", "output_sigma", "prefix_share"]
    sub = frame[cols].astype(object).where(frame[cols].notna(), None)
    return [tuple(_plain(v) for v in row) for row in sub.itertuples(index=False, name=None)]


def _plain(v: object) -> object:
    if isinstance(v, (np.integer, np.floating)):
        return v.item()
    return v


@lru_cache(maxsize=65536)
def _static(model: str, device: str, tp: int, replicas: int, weight_dtype: str, kv_dtype: str,
            max_num_seqs: float | None, max_num_batched_tokens: float | None, in_median: float, in_sigma: float,
            out_median: float, out_sigma: float, prefix_share: float) -> tuple[float, ...]:
    """The rate-independent features plus capacity (req/s) and the decode batch."""
    from latsim.costmodel.batch import BatchShape

    d, engine, kv_tokens, cost = _priced(model, device, int(tp), int(replicas), weight_dtype, kv_dtype,
                                         max_num_seqs, max_num_batched_tokens)
    mean_in = length_mean(in_median, in_sigma, INPUT_CLIP)
    mean_out = length_mean(out_median, out_sigma, OUTPUT_CLIP)
    ctx = mean_in + mean_out / 2
    assert engine.max_num_seqs is not None and engine.max_num_batched_tokens is not None
    batch = float(max(1.0, min(engine.max_num_seqs, kv_tokens / ctx)))
    seqs = round(batch)
    step1 = cost.step_time(BatchShape(decode_seqs=1, decode_kv_tokens=int(ctx)))
    step_full = cost.step_time(BatchShape(decode_seqs=seqs, decode_kv_tokens=int(seqs * ctx)))
    new_in = max(1.0, mean_in * (1.0 - prefix_share))
    chunk = int(min(new_in, engine.max_num_batched_tokens))
    cached = int(mean_in - new_in)
    prefill = cost.step_time(BatchShape.from_chunks([(chunk, cached)], [])) * new_in / chunk
    # the first token on a lightly loaded deployment: the front end, then the prompt's steps
    # beside one running decode, each at least its launch (a step beyond the CUDA graphs is
    # launched layer by layer) and the launch's tail
    mixed = BatchShape.from_chunks([(chunk, cached)], [int(ctx)])
    launch = float(getattr(cost, "launch_s", lambda b: 0.0)(mixed))
    tail = float(getattr(cost, "launch_tail_s", 0.0)) if launch > 0.0 else 0.0
    first_token = float(getattr(cost, "frontend_s", 0.0)) + max(cost.step_time(mixed), launch + tail) * new_in / chunk
    per_request = mean_out * step_full / seqs + prefill
    capacity = replicas / per_request
    flops = d.device.peak_flops.get(weight_dtype, d.device.peak_flops["bf16"])
    row = (np.log(step1 * 1e3), np.log(step_full * 1e3), np.log(prefill * 1e3), np.log(first_token * 1e3),
           np.log(_kv_bytes(d)), np.log(kv_tokens), np.log(batch), float(batch < engine.max_num_seqs),
           np.log(capacity), mean_in, mean_out, in_sigma, out_sigma, prefix_share, float(replicas), float(tp),
           np.log(_active_params(d.model)), np.log(d.device.hbm_bandwidth), np.log(flops),
           np.log(engine.max_num_batched_tokens))
    grid = [cost.step_time(BatchShape(decode_seqs=min(g, seqs), decode_kv_tokens=int(min(g, seqs) * ctx))) * 1e3
            for g in BATCH_GRID]
    return (*(float(x) for x in row), capacity, batch, *grid)


@lru_cache(maxsize=4096)
def _priced(model: str, device: str, tp: int, replicas: int, weight_dtype: str, kv_dtype: str,
            max_num_seqs: float | None, max_num_batched_tokens: float | None) -> tuple:
    """``(deployment, resolved engine, KV tokens, the simulator's cost model)``, built once."""
    from latsim.sim.simulate import default_cost_model

    d, engine, kv_tokens = _deployment(model, device, tp, replicas, weight_dtype, kv_dtype, max_num_seqs,
                                       max_num_batched_tokens)
    return d, engine, kv_tokens, default_cost_model(d, engine, gpu=_gpu(model, device, tp, weight_dtype, kv_dtype))


@lru_cache(maxsize=1024)
def _gpu(model: str, device: str, tp: int, weight_dtype: str, kv_dtype: str) -> Any:
    """The GPU-side cost model (a calibrated one takes about a second to tabulate), built once."""
    from latsim import load_device, load_model
    from latsim.costmodel.factory import gpu_cost_model

    return gpu_cost_model(load_model(model), load_device(device), tp, weight_dtype, kv_dtype)


def _deployment(model: str, device: str, tp: int, replicas: int, weight_dtype: str, kv_dtype: str,
                max_num_seqs: float | None, max_num_batched_tokens: float | None):
    """``(deployment, resolved engine, KV capacity in tokens of one replica)``."""
    from latsim import Deployment, EngineConfig, load_device, load_model
    from latsim.deployment import resolve_engine
    from latsim.registry import engine_spec

    engine = EngineConfig(max_num_seqs=None if max_num_seqs is None else int(max_num_seqs),
                          max_num_batched_tokens=None if max_num_batched_tokens is None
                          else int(max_num_batched_tokens))
    d = Deployment(model=load_model(model), device=load_device(device), tp=tp, replicas=replicas,
                   weight_dtype=weight_dtype, kv_dtype=kv_dtype, engine=engine)
    resolved = resolve_engine(d)
    plan = engine_spec(resolved.engine).plan_memory(d, resolved)
    return d, resolved, float(plan.kv_capacity_tokens)


def _kv_bytes(d) -> float:
    from latsim.catalog.sizing import kv_bytes_per_token

    return float(kv_bytes_per_token(d.model, d.kv_dtype))


def _active_params(model) -> float:
    from latsim.catalog.sizing import param_counts

    return float(param_counts(model)[1])
