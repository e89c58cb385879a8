"""One JSON-ready summary of a simulated (or measured) run.

Conventions, chosen to match how serving benchmarks report:

- Latency statistics (TTFT, TPOT, E2E, queueing) are over completed requests
  (``status == "ok"``); TPOT also skips single-token outputs.  ITL comes from the separate
  weighted gap samples.  All latencies are reported in milliseconds.
- Rates divide by the run's span: ``duration_s`` when given, else last finish (of a
  completed request) minus first arrival (of any request).  Token rates count the input and
  output tokens of completed requests.
- Goodput counts completed requests that meet every target set in the :class:`SLO`; the SLO
  attainment is that count over *all* requests, so rejected and unfinished ones count as
  misses.  A single-token request meets any TPOT target.
- Undefined numbers (no samples, zero span) are ``None``, so ``json.dumps`` of the result
  is strict JSON.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

from latsim.metrics.per_request import add_latencies
from latsim.metrics.stats import bootstrap_ci, describe

LATENCIES_MS = {"ttft_ms": "ttft_s", "tpot_ms": "tpot_s", "e2e_ms": "e2e_s", "queue_ms": "queue_s"}


@dataclass(frozen=True)
class SLO:
    """Latency targets in milliseconds; ``None`` leaves that metric unconstrained."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2e_ms: float | None = None

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if value is not None and not _positive_number(value):
                raise ValueError(f"SLO {f.name} must be None or a finite number > 0, got {value!r}")
        if all(getattr(self, f.name) is None for f in fields(self)):
            raise ValueError("SLO needs at least one of ttft_ms, tpot_ms, e2e_ms")

    def met(self, frame: pd.DataFrame) -> np.ndarray:
        """Boolean mask: completed rows of ``add_latencies`` output meeting every set target."""
        ok = (frame["status"] == "ok").to_numpy(copy=True)
        for target, column in ((self.ttft_ms, "ttft_s"), (self.tpot_ms, "tpot_s"), (self.e2e_ms, "e2e_s")):
            if target is None:
                continue
            seconds = frame[column].to_numpy(dtype=np.float64)
            meets = seconds * 1e3 <= target
            if column == "tpot_s":
                meets |= np.isnan(seconds)  # one output token: no inter-token time to miss
            ok &= meets
        return ok


def summarize(
    records: pd.DataFrame,
    itl_values_s: ArrayLike,
    itl_weights: ArrayLike,
    *,
    slo: SLO | None = None,
    rng: np.random.Generator,
    duration_s: float | None = None,
) -> dict[str, Any]:
    """Counts, latency statistics with a 95% bootstrap CI on P99, rates and (with ``slo``) goodput.

    ``itl_values_s`` are distinct inter-token gaps in seconds and ``itl_weights`` how often
    each occurred (whole numbers).  ``rng`` drives the bootstrap; the same seed gives the
    same summary.  See the module docstring for what each number counts.
    """
    frame = add_latencies(records)
    done = frame[frame["status"] == "ok"]
    span = _span(frame, done, duration_s)
    out: dict[str, Any] = _counts(frame, done)
    for key, column in LATENCIES_MS.items():
        seconds = done[column].to_numpy(dtype=np.float64)
        out[key] = _latency_block(seconds[~np.isnan(seconds)] * 1e3, None, rng)
    out["itl_ms"] = _itl_block(itl_values_s, itl_weights, rng)
    out["duration_s"] = _json(span)
    out["throughput_rps"] = _rate(len(done), span)
    out["input_tokens_per_s"] = _rate(float(done["input_tokens"].sum()), span)
    out["output_tokens_per_s"] = _rate(float(done["output_tokens"].sum()), span)
    if slo is not None:
        good = int(slo.met(frame).sum())
        out["goodput_rps"] = _rate(good, span)
        out["slo_attainment"] = good / len(frame) if len(frame) else None
    return out


def littles_law(records: pd.DataFrame) -> tuple[float, float]:
    """``(L, lambda * W)`` over completed requests, which Little's law says are equal.

    ``L`` is the time-average number of requests in the system, integrated from the arrival
    (+1) and finish (-1) events over ``[first arrival, last finish]``; ``lambda`` is completed
    requests per second over that window and ``W`` their mean end-to-end time.  A mismatch
    flags inconsistent records.  ``(nan, nan)`` without completed requests or with a zero
    window.
    """
    done = add_latencies(records).query("status == 'ok'")
    arrival = done["arrival_s"].to_numpy(dtype=np.float64)
    finish = done["finish_s"].to_numpy(dtype=np.float64)
    window = float(finish.max() - arrival.min()) if len(done) else 0.0
    if not window > 0:
        return math.nan, math.nan
    times = np.concatenate([arrival, finish])
    order = np.argsort(times, kind="stable")
    in_system = np.cumsum(np.concatenate([np.ones(len(done)), -np.ones(len(done))])[order])
    area = float(np.sum(in_system[:-1] * np.diff(times[order])))
    return area / window, (len(done) / window) * float(np.mean(finish - arrival))


def _counts(frame: pd.DataFrame, done: pd.DataFrame) -> dict[str, Any]:
    status = frame["status"]
    inputs = float(done["input_tokens"].sum())
    return {
        "num_requests": len(frame),
        "num_completed": len(done),
        "num_rejected": int((status == "rejected").sum()),
        "num_unfinished": int((status == "unfinished").sum()),
        "preemptions": int(frame["preemptions"].sum()),
        "cached_token_fraction": float(done["cached_tokens"].sum()) / inputs if inputs else None,
    }


def _latency_block(ms: np.ndarray, weights: np.ndarray | None, rng: np.random.Generator) -> dict[str, Any]:
    stats: dict[str, Any] = {k: _json(v) for k, v in describe(ms, weights).items()}
    lo, hi = bootstrap_ci(ms, 99.0, rng, weights=weights)
    stats["p99_ci95"] = [_json(lo), _json(hi)]
    stats["ci_method"] = "bootstrap_one_run"
    stats["ci_covers"] = ("this run's requests resampled as if independent: too narrow for a queue's long-run "
                          "percentile (latsim predict replaces it with replications, latsim.plan.replicate)")
    stats["count"] = int(np.sum(weights)) if weights is not None else len(ms)
    return stats


def _itl_block(values_s: ArrayLike, weights: ArrayLike, rng: np.random.Generator) -> dict[str, Any]:
    values = np.asarray(values_s, dtype=np.float64)
    counts = np.asarray(weights, dtype=np.float64)
    if values.shape != counts.shape:
        raise ValueError(f"itl_weights have shape {counts.shape}, itl_values_s have shape {values.shape}")
    return _latency_block(values * 1e3, counts, rng)


def _span(frame: pd.DataFrame, done: pd.DataFrame, duration_s: float | None) -> float:
    if duration_s is not None:
        if not _positive_number(duration_s):
            raise ValueError(f"duration_s must be None or a finite number > 0, got {duration_s!r}")
        return float(duration_s)
    if len(done) == 0:
        return math.nan
    return float(done["finish_s"].max() - frame["arrival_s"].min())


def _rate(amount: float, span: float) -> float | None:
    return float(amount) / span if span > 0 else None


def _json(x: float) -> float | None:
    return None if math.isnan(x) else float(x)


def _positive_number(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and 0 < x < math.inf
