"""Physical features of a configuration, for the fitted surrogate.

A configuration is one row of the grid (:data:`GRID_COLUMNS`): a deployment (model, device,
TP, replicas, dtypes, engine limits) and a workload summary (rate, lognormal input/output
length median and spread, prefix share).  :func:`features` turns a DataFrame of them into
numbers a regressor can carry to a model or GPU it never saw: step times from the
deployment's cost model in :mod:`latsim.costmodel` (the one the simulator uses: calibrated
where a GPU profile ships, roofline elsewhere), KV bytes per token, the KV capacity of the
memory plan, the first token of a prompt at the input lengths' P50/P90/P99 on an idle
deployment and beside the decode batch the load implies (:func:`first_token_at_load`), two
capacities in requests per second (a mean-value one, the design's, and one from pricing the
steps of a replica held at its batch cap, :func:`saturated_request_s`), the offered load over
each, the prompts' share of a replica's time (:func:`prompt_loads`), and how much longer than
alone a prompt's first token takes at the P50/P90/P99 when the replica's prompts queue for each
other's steps (:func:`queue_at_load`, a replayed queue: :mod:`latsim.predict.prompt_queue`).

Everything that does not depend on the rate is computed once per distinct deployment and
length summary (cached), so a DataFrame of 10,000 rates over a few hundred deployments costs
a few hundred cost-model builds.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
from scipy.stats import norm

if TYPE_CHECKING:
    from latsim.costmodel.batch import CostModel

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
                   "log_params_active", "log_bw_per_gpu", "log_flops_per_gpu", "log_max_num_batched_tokens",
                   "log_first_token_p50_ms", "log_first_token_p90_ms", "log_first_token_p99_ms",
                   "log_saturated_rps", "out_p50", "out_p90", "out_p99", "log_prompt_wall_ms")
LOAD_FEATURES = ("load", "load_saturated", "load_per_batch", "prefill_utilization", "batch_share_at_load",
                 "log_step_at_load_ms", "prompt_wall_load")
QUEUE_FEATURES = tuple(f"log_prompt_queue_{q}" for q in ("p50", "p90", "p99"))
RATE_FEATURES = ("prompt_extra_load", *QUEUE_FEATURES)
FEATURES = STATIC_FEATURES + LOAD_FEATURES + RATE_FEATURES
"""Feature names in the order of :func:`features`'s columns; the LOAD_FEATURES depend on the rate
and are non-decreasing in it (:func:`features_at`), the RATE_FEATURES depend on it, the others not.
The QUEUE_FEATURES are ``log(sojourn / alone)`` of :func:`queue_at_load` at the P50, P90 and P99:
0 at a vanishing rate, growing towards capacity (not monotone: a larger batch at a higher rate
takes more of the budget and lengthens the steps unevenly)."""
BASELINE_COLUMNS = tuple(f"log_first_token_at_load_{q}_ms" for q in ("p50", "p90", "p99"))
"""Columns :func:`features_at` adds beside the :data:`FEATURES`, for the baselines only
(:func:`latsim.predict.surrogate.baseline_ms`): the first token of the prompt at the input lengths'
P50/P90/P99 beside the decode batch the load implies (:func:`first_token_at_load`)."""
_HIDDEN = ("capacity_rps", "batch", "_prompt_step_ms", "_prompt_launch_ms", "_input_median",
           *(f"_step_{g}" for g in BATCH_GRID),
           *(f"_first_{q}_{g}" for q in ("p50", "p90", "p99") for g in BATCH_GRID))
_AT = {name: i for i, name in enumerate((*STATIC_FEATURES, *_HIDDEN))}
"""Position of every column in a :func:`_static` row."""


def length_mean(median: float, sigma: float, clip: tuple[int, int]) -> float:
    """Mean of a lognormal(median, sigma) clipped to ``clip`` (64-point quantile rule)."""
    return float(np.clip(median * np.exp(sigma * _QUANTILES), *clip).mean())


QUANTILES = (0.5, 0.9, 0.99)
"""Quantiles of the length distributions that the P50/P90/P99 baselines are priced at."""


_QUANTILE_Z = tuple(float(norm.ppf(q)) for q in QUANTILES)


def length_quantiles(median: float, sigma: float, clip: tuple[int, int]) -> tuple[float, ...]:
    """The :data:`QUANTILES` of a lognormal(median, sigma) clipped to ``clip``."""
    return tuple(float(np.clip(median * np.exp(sigma * z), *clip)) for z in _QUANTILE_Z)


def prompt_parts_s(cost: CostModel, budget: int, prompt: float, prefix_share: float,
                   ctx: float, decodes: int = 1) -> tuple[float, float]:
    """``(step seconds, launch seconds)`` of a ``prompt``-token request's uncached tokens, in chunks
    beside ``decodes`` decodes of ``ctx`` tokens each: the chunks' priced steps, and their
    launches plus tails (0.0 when they replay CUDA graphs).  A chunk holds at most ``budget``
    tokens less one for every decode past the first (so one decode leaves the prompt the whole
    budget, as on an idle deployment)."""
    from latsim.costmodel.batch import BatchShape

    new = max(1.0, prompt * (1.0 - prefix_share))
    chunk = max(1, min(round(new), budget - decodes + 1))
    mixed = BatchShape.from_chunks([(chunk, round(prompt - new))], [int(ctx)] * decodes)
    launch = float(cost.launch_s(mixed))
    tail = float(cost.launch_tail_s) if launch > 0.0 else 0.0
    return float(cost.step_time(mixed)) * new / chunk, (launch + tail) * new / chunk


def first_token_s(cost: CostModel, budget: int, prompt: float, prefix_share: float, ctx: float,
                  decodes: int = 1) -> float:
    """Seconds to the first token of a ``prompt``-token request on an idle deployment: the front
    end, then its uncached tokens in chunks of at most ``budget`` beside one decode of ``ctx``
    tokens, each chunk's step at least its launch and tail (:func:`prompt_parts_s`).  With
    ``decodes`` > 1 its chunks run beside that many decodes instead (a loaded deployment: each
    chunk's step prices the running batch too, and the decodes take their tokens of the budget)."""
    return float(cost.frontend_s) + max(prompt_parts_s(cost, budget, prompt, prefix_share, ctx, decodes))


def saturated_request_s(cost: CostModel, budget: int, seqs: int, ctx: float, prompt: tuple[float, float, float],
                        prefix_share: float, mean_out: float) -> float:
    """Engine seconds per request of one replica held at its batch cap ``seqs`` (the inverse of
    its saturated throughput); ``prompt`` is ``(mean, median, sigma)`` of the prompt lengths.

    A cycle in which all ``seqs`` requests finish and as many prompts join lasts
    ``S = max(mean_out, seqs x new / free)`` steps (``free = budget - seqs`` prompt tokens fit
    beside the decodes); each step carries a Poisson(``seqs / S``) number of prompts, and costs
    the decode-only step plus that share of a step with the usual number of prompts' extra
    (token-linear).  A step with more tokens than the CUDA graphs hold (:func:`launch_share` of
    them) lasts at least its launch and tail less the step before (asynchronous scheduling launches
    a step while the one before runs: :mod:`latsim.engines.vllm.launch`).  The cycle's
    time over ``seqs``."""
    from dataclasses import replace

    from latsim.costmodel.batch import BatchShape

    mean, median, sigma = prompt
    new = max(1.0, mean * (1.0 - prefix_share))
    free = max(1.0, budget - seqs)
    steps = max(mean_out, seqs * new / free)
    per_step = seqs / steps
    chunks = max(1, round(per_step))
    tokens = max(1, round(min(free, chunks * new) / chunks))
    decode = BatchShape(decode_seqs=seqs, decode_kv_tokens=int(seqs * ctx))
    mixed = replace(BatchShape.from_chunks([(tokens, round(mean - new))] * chunks, []),
                    decode_seqs=seqs, decode_kv_tokens=int(seqs * ctx))
    decode_s = float(cost.step_time(decode))
    share_of_mixed = min(free, per_step * new) / (chunks * tokens)  # the average step's prompt tokens over mixed's
    step = decode_s + share_of_mixed * (float(cost.step_time(mixed)) - decode_s)
    limit = cost.launch_from
    if limit is not None:
        share = launch_share(limit - seqs, per_step, median * (1.0 - prefix_share), sigma, free,
                             full=steps > mean_out)
        step = (1.0 - share) * step + share * max(step, _launch_s(cost, mixed, limit) - step)
    return steps * step / seqs


def _launch_s(cost: CostModel, shape: Any, limit: int) -> float:
    """Launch plus tail seconds of ``shape`` grown (in prompt tokens) past ``limit`` tokens if it is not."""
    from dataclasses import replace

    if shape.num_tokens <= limit:
        shape = replace(shape, prefill_tokens=limit + 1 - shape.decode_seqs)
    return float(cost.launch_s(shape)) + float(cost.launch_tail_s)


_POISSON_U = (np.arange(512) + 0.5) / 512
_LENGTH_Z = np.random.default_rng(20261202).standard_normal((512, 16))


def launch_share(room: float, per_step: float, median: float, sigma: float, free: float, full: bool = False) -> float:
    """The share of steps with more than ``room`` prompt tokens: a Poisson(``per_step``) number of
    prompts of lognormal(``median``, ``sigma``) new tokens each (at most 16), a step holding at
    most ``free``; ``full``: every step holds ``free`` (prompts queue for the budget).  Computed on
    a fixed sample of 512 steps, so the answer is deterministic."""
    if room < 0:
        return 1.0
    if full:
        return float(free > room)
    k = poisson_quantiles(_POISSON_U, per_step, _LENGTH_Z.shape[1])
    lengths = np.maximum(1.0, median * np.exp(sigma * _LENGTH_Z))
    used = np.where(np.arange(_LENGTH_Z.shape[1]) < k[:, None], lengths, 0.0).sum(axis=1)
    return float(np.mean(np.minimum(used, free) > room))


def poisson_quantiles(u: np.ndarray, mean: float, most: int) -> np.ndarray:
    """The quantiles ``u`` of a Poisson(``mean``) count, capped at ``most``: for each ``u`` the
    least ``k`` whose cumulative probability reaches it (scipy's ``poisson.ppf``, without its
    per-call overhead)."""
    k = np.arange(most + 1)
    log_pmf = k * np.log(max(mean, 1e-300)) - mean - np.cumsum(np.log(np.maximum(k, 1)))
    cdf = np.cumsum(np.exp(log_pmf))
    return np.minimum(np.searchsorted(cdf, u, side="left"), most).astype(float)


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
    (req/s, one per row); the loads and ``prefill_utilization`` are non-decreasing in ``qps``,
    ``batch_share_at_load`` and ``log_step_at_load_ms`` too while a replica's prompts take less
    than all its time (:func:`step_at_load`).

    ``load`` is the rate over the mean-value capacity ``exp(log_capacity_rps)`` (the design's
    load, :mod:`latsim.predict.design`), ``load_saturated`` over the saturated-cycle capacity
    ``exp(log_saturated_rps)`` (:func:`saturated_request_s`), the closer one to the simulator's.
    Also the :data:`BASELINE_COLUMNS` (:func:`first_token_at_load`), non-decreasing in ``qps`` like
    ``batch_share_at_load``."""
    qps = np.asarray(qps, dtype=float)
    out = static[list(STATIC_FEATURES)].copy()
    out["load"] = mean_value_load(static, qps)
    out["load_saturated"] = qps / static["capacity_rps"].to_numpy()
    out["load_per_batch"] = qps / static["replicas"].to_numpy() / static["batch"].to_numpy()
    util, share, step = step_at_load(static, qps)
    out["prefill_utilization"] = util
    out["batch_share_at_load"] = share
    out["log_step_at_load_ms"] = np.log(step)
    batch = share * np.exp(static["log_batch"].to_numpy())
    out["prompt_wall_load"], out["prompt_extra_load"] = prompt_loads(static, qps, batch)
    for q, first in zip(("p50", "p90", "p99"), first_token_at_load(static, batch), strict=True):
        out[f"log_first_token_at_load_{q}_ms"] = np.log(first)
    sojourn, alone = queue_at_load(static, qps, batch)
    for j, name in enumerate(QUEUE_FEATURES):
        out[name] = np.log(sojourn[:, j] / alone[:, j])
    return out


def mean_value_load(static: pd.DataFrame, qps: np.ndarray) -> np.ndarray:
    """The feature ``load``: ``qps`` over the mean-value capacity ``exp(log_capacity_rps)``, per row
    of ``static`` (:func:`static_features`); cheap, unlike the rest of :func:`features_at`."""
    load: np.ndarray = np.asarray(qps, dtype=float) / np.exp(static["log_capacity_rps"].to_numpy())
    return load


def queue_at_load(static: pd.DataFrame, qps: np.ndarray, batch: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(sojourn, alone)`` in seconds, one row per configuration and one column per
    :data:`latsim.predict.prompt_queue.QUANTILES`: a request's arrival to the end of the step that
    takes its last prompt token, replayed through the replica's prompt queue at ``qps`` (up to the
    saturated capacity) beside ``batch`` decodes (its batch at the load), and the same on an idle
    queue (:func:`latsim.predict.prompt_queue.prompt_queue`).  Priced from the static columns: a
    step is the decode step at the batch plus the mean prompt's priced steps over that decode step
    per uncached token, at least the prompt's launch per chunk; it holds the budget less the batch."""
    from latsim.predict.prompt_queue import prompt_queue

    batch = np.asarray(batch, dtype=float)
    decode = _decode_step_s(static, batch)
    prompt, launch = _prompt_s(static)
    prefix = static["prefix_share"].to_numpy()
    new = np.maximum(1.0, static["mean_in"].to_numpy() * (1.0 - prefix))
    budget = np.exp(static["log_max_num_batched_tokens"].to_numpy())
    return prompt_queue(np.minimum(qps, static["capacity_rps"].to_numpy()), static["replicas"].to_numpy(), decode,
                        np.maximum(prompt - decode, 0.0) / new, launch / np.maximum(1.0, new / budget),
                        np.maximum(1.0, budget - batch), np.minimum(batch, 1.0), static["_input_median"].to_numpy(),
                        static["in_sigma"].to_numpy(), prefix, INPUT_CLIP)


def prompt_loads(static: pd.DataFrame, qps: np.ndarray, batch: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(wall load, extra load)``: the prompts' share of a replica's time at ``qps`` in the
    mean-value model of :func:`step_at_load` before its 0.95 cap, with ``batch`` decodes running
    (its batch at the load).  The wall load, ``r x w`` (``r`` the replica's rate up to the
    saturated capacity, ``w`` the idle prompt wall), is ``prefill_utilization`` uncapped and
    non-decreasing in ``qps``; the extra load, ``r x e(batch)`` (``e`` each prompt's time over the
    decode step it replaces), falls where a larger batch's longer step hides a prompt's launch.
    Both go past the cap, where prompts alone would fill a replica (short outputs) and the capped
    utilization no longer tells such configurations apart."""
    step = _decode_step_s(static, batch)
    r = _replica_rate(static, qps)
    return r * np.exp(static["log_prompt_wall_ms"].to_numpy()) / 1e3, r * _prompt_extra_s(*_prompt_s(static), step)


def first_token_at_load(static: pd.DataFrame, batch: np.ndarray) -> tuple[np.ndarray, ...]:
    """The first token (ms) of the prompt at the input lengths' P50, P90 and P99 with its chunks
    beside ``batch`` decodes (one per row, e.g. the batch at the load, :func:`step_at_load`):
    :func:`first_token_s` priced at the batches of :data:`BATCH_GRID` (``_first_<q>_<batch>``,
    made non-decreasing in the batch) and interpolated linearly between, as the decode step is.
    At one decode it is the idle deployment's (``log_first_token_<q>_ms``); on a loaded deployment
    each chunk's step also prices the running batch's decodes, which take their tokens of the
    budget (a long prompt takes more chunks)."""
    n = np.maximum(np.asarray(batch, dtype=float), 1.0)
    return tuple(_interp(_batch_grid(static, f"_first_{q}"), n) for q in ("p50", "p90", "p99"))


def step_at_load(static: pd.DataFrame, qps: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(prompt utilization, decode batch / its cap, time per decode token in ms)`` of one
    replica at ``qps``.

    A mean-value model: a replica serves ``r = min(qps, capacity) / replicas`` (the saturated
    capacity ``capacity_rps``; past it the queue grows, the running batch does not).  A decode
    step of ``n`` sequences costs ``step(n)`` (the cost model at the batches of
    :data:`BATCH_GRID`, linearly between: concave for MoE models).  A prompt's steps replace
    decode steps and cost its priced steps ``p`` or, launched without CUDA graphs, its launch
    ``l`` less the decode step it is launched beside, so each prompt adds
    ``e(n) = max(p, l - step(n)) - step(n)`` (at least 0): prompts take a share
    ``u = min(r x e(n), 0.95)`` of the replica's time and a decode token comes every
    ``step(n) / (1 - u)``.  Little's law ``n = r x mean_out x step(n) / (1 - u)`` is solved for
    its least root in ``[0, B]`` (:func:`least_fixed_point`; ``B`` the batch cap): where a
    prompt's launch outlasts the decode step, a larger batch hides more of it and the right side
    can fall as ``n`` grows, so iterating it from 0 need not converge.  The reported utilization
    is ``min(r x w, 0.95)`` with ``w`` the idle prompt wall (``log_prompt_wall_ms``),
    non-decreasing in ``qps``; the batch share and the time per token are too while
    ``r x max(p, l) < 1``."""
    steps = _batch_grid(static, "_step", 1e3)
    cap = np.exp(static["log_batch"].to_numpy())
    r = _replica_rate(static, qps)
    prompt, launch = _prompt_s(static)
    mean_out = static["mean_out"].to_numpy()

    def per_token(n: np.ndarray) -> np.ndarray:
        step = _interp(steps, np.maximum(n, 1.0))
        return step / (1.0 - np.minimum(r * _prompt_extra_s(prompt, launch, step), 0.95))

    n = least_fixed_point(lambda n: np.minimum(cap, r * mean_out * per_token(n)), cap)
    wall = np.exp(static["log_prompt_wall_ms"].to_numpy()) / 1e3
    return np.minimum(r * wall, 0.95), n / cap, per_token(n) * 1e3


def least_fixed_point(f: Callable[[np.ndarray], np.ndarray], hi: np.ndarray, grid: int = 32,
                      halvings: int = 40) -> np.ndarray:
    """Per row, the least ``n`` in ``[0, hi]`` with ``f(n) <= n``, for a row-wise continuous ``f``
    with ``0 <= f <= hi`` (so ``n = hi`` always qualifies): 0 where ``f(0) = 0``, else the first of
    ``grid`` equal steps where ``f(n) - n`` turns non-positive, narrowed by ``halvings`` bisections
    (an excursion narrower than a step is not seen).  Needs no monotone ``f``, unlike iterating it."""
    hi = np.asarray(hi, dtype=float)
    zero = np.zeros_like(hi)
    if not len(hi):
        return zero
    points = hi[:, None] * (np.arange(1, grid + 1) / grid)[None, :]
    below = np.column_stack([f(points[:, k]) <= points[:, k] for k in range(grid)])
    first = np.argmax(below, axis=1)  # the last point always qualifies
    rows = np.arange(len(hi))
    upper = points[rows, first]
    lower = np.where(first > 0, points[rows, np.maximum(first - 1, 0)], 0.0)
    for _ in range(halvings):
        mid = 0.5 * (lower + upper)
        done = f(mid) <= mid
        upper = np.where(done, mid, upper)
        lower = np.where(done, lower, mid)
    out: np.ndarray = np.where(f(zero) <= 0.0, 0.0, upper)
    return out


def _batch_grid(static: pd.DataFrame, prefix: str, per: float = 1.0) -> np.ndarray:
    """The ``<prefix>_<batch>`` columns (one per :data:`BATCH_GRID` batch) over ``per``, made
    non-decreasing in the batch: a larger batch is never faster (a calibrated model's tables can
    dip by a fraction of a percent)."""
    return np.maximum.accumulate(static[[f"{prefix}_{g}" for g in BATCH_GRID]].to_numpy() / per, axis=1)


def _decode_step_s(static: pd.DataFrame, batch: np.ndarray) -> np.ndarray:
    """Seconds of a decode step of ``batch`` sequences (at least one), per row: the ``_step_<batch>``
    grid interpolated linearly."""
    return _interp(_batch_grid(static, "_step", 1e3), np.maximum(np.asarray(batch, dtype=float), 1.0))


def _replica_rate(static: pd.DataFrame, qps: np.ndarray) -> np.ndarray:
    """Requests per second one replica serves at ``qps``: up to the saturated capacity, shared
    evenly by the replicas."""
    rate: np.ndarray = np.minimum(qps, static["capacity_rps"].to_numpy()) / static["replicas"].to_numpy()
    return rate


def _prompt_s(static: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """``(priced steps, launch)`` of a prompt in seconds, per row."""
    return static["_prompt_step_ms"].to_numpy() / 1e3, static["_prompt_launch_ms"].to_numpy() / 1e3


def _prompt_extra_s(prompt: np.ndarray, launch: np.ndarray, step: np.ndarray) -> np.ndarray:
    """Seconds each prompt adds over the decode step ``step`` it replaces: its priced steps
    ``prompt`` or its ``launch`` less that step, whichever is longer, less the step (at least 0)."""
    extra: np.ndarray = np.maximum(np.maximum(prompt, launch - step) - step, 0.0)
    return extra


def _interp(steps: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Row-wise linear interpolation of ``steps`` (one column per :data:`BATCH_GRID` batch) at ``n``."""
    grid = np.asarray(BATCH_GRID, dtype=float)
    hi = np.clip(np.searchsorted(grid, n), 1, len(grid) - 1)
    lo = hi - 1
    rows = np.arange(len(n))
    w = np.clip((n - grid[lo]) / (grid[hi] - grid[lo]), 0.0, 1.0)
    return steps[rows, lo] * (1 - w) + steps[rows, hi] * w


def clear_caches() -> None:
    """Forget every deployment's cost model and static features (a benchmark's cold start)."""
    for cache in (_static, _replica_static, _priced, _gpu):
        cache.cache_clear()


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
    """The rate-independent features plus capacity (req/s) and the decode batch: one replica's
    (:func:`_replica_static`, shared by every replica count) with the deployment's capacities."""
    values, per_request, saturated_request = _replica_static(model, device, tp, weight_dtype, kv_dtype, max_num_seqs,
                                                             max_num_batched_tokens, in_median, in_sigma, out_median,
                                                             out_sigma, prefix_share)
    capacity, saturated = replicas / per_request, replicas / saturated_request
    row = list(values)
    row[_AT["log_capacity_rps"]] = float(np.log(capacity))
    row[_AT["replicas"]] = float(replicas)
    row[_AT["log_saturated_rps"]] = float(np.log(saturated))
    row[_AT["capacity_rps"]] = saturated
    return tuple(row)


@lru_cache(maxsize=65536)
def _replica_static(model: str, device: str, tp: int, weight_dtype: str, kv_dtype: str,
                    max_num_seqs: float | None, max_num_batched_tokens: float | None, in_median: float,
                    in_sigma: float, out_median: float, out_sigma: float,
                    prefix_share: float) -> tuple[tuple[float, ...], float, float]:
    """``(row, seconds per request, saturated seconds per request)`` of one replica: :func:`_static`'s
    row with NaN where it depends on the replica count, and the two per-request times whose
    inverse times the replica count are the capacities (a replica's cost model, memory and steps
    do not depend on how many replicas there are)."""
    from latsim.costmodel.batch import BatchShape

    d, engine, kv_tokens, cost = _priced(model, device, int(tp), 1, weight_dtype, kv_dtype,
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
    chunk = max(1, min(round(new_in), engine.max_num_batched_tokens))
    cached = round(mean_in - new_in)
    prefill = cost.step_time(BatchShape.from_chunks([(chunk, cached)], [])) * new_in / chunk
    first_token = first_token_s(cost, engine.max_num_batched_tokens, mean_in, prefix_share, ctx)
    firsts = [first_token_s(cost, engine.max_num_batched_tokens, x, prefix_share, ctx)
              for x in length_quantiles(in_median, in_sigma, INPUT_CLIP)]
    per_request = mean_out * step_full / seqs + prefill
    saturated_request = saturated_request_s(cost, engine.max_num_batched_tokens, seqs, ctx,
                                            (mean_in, in_median, in_sigma), prefix_share, mean_out)
    parts = np.array([prompt_parts_s(cost, engine.max_num_batched_tokens, x, prefix_share, ctx)
                      for x in np.clip(in_median * np.exp(in_sigma * _QUANTILES[2::4]), *INPUT_CLIP)])
    prompt_wall = float(np.maximum(parts[:, 0], parts[:, 1]).mean())
    prompt_step, prompt_launch = parts.mean(axis=0)
    flops = d.device.peak_flops.get(weight_dtype, d.device.peak_flops["bf16"])
    row = (np.log(step1 * 1e3), np.log(step_full * 1e3), np.log(prefill * 1e3), np.log(first_token * 1e3),
           np.log(_kv_bytes(d)), np.log(kv_tokens), np.log(batch), float(batch < engine.max_num_seqs),
           np.nan, mean_in, mean_out, in_sigma, out_sigma, prefix_share, np.nan, float(tp),
           np.log(_active_params(d.model)), np.log(d.device.hbm_bandwidth), np.log(flops),
           np.log(engine.max_num_batched_tokens), *(np.log(f * 1e3) for f in firsts), np.nan,
           *length_quantiles(out_median, out_sigma, OUTPUT_CLIP), np.log(prompt_wall * 1e3))
    grid = [cost.step_time(BatchShape(decode_seqs=min(g, seqs), decode_kv_tokens=int(min(g, seqs) * ctx))) * 1e3
            for g in BATCH_GRID]
    loaded = []
    for x, idle in zip(length_quantiles(in_median, in_sigma, INPUT_CLIP), firsts, strict=True):
        at = {1: idle}  # a batch above the cap is priced at the cap
        at.update({b: first_token_s(cost, engine.max_num_batched_tokens, x, prefix_share, ctx, b)
                   for b in sorted({min(g, seqs) for g in BATCH_GRID} - {1})})
        loaded += [at[min(g, seqs)] * 1e3 for g in BATCH_GRID]
    values = (*(float(x) for x in row), np.nan, batch, prompt_step * 1e3, prompt_launch * 1e3, float(in_median),
              *grid, *loaded)
    return values, per_request, saturated_request


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
    return d, resolved, float(plan.kv_tokens_unwindowed)  # the definition the shipped surrogate was trained on


def _kv_bytes(d) -> float:
    from latsim.catalog.sizing import kv_bytes_per_token

    return float(kv_bytes_per_token(d.model, d.kv_dtype))


def _active_params(model) -> float:
    from latsim.catalog.sizing import param_counts

    return float(param_counts(model)[1])
