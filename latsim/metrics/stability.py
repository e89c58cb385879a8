"""Is a run in steady state?  A verdict with the tests behind it.

A deployment is *stable* under a workload when, in steady state, it serves what it is
offered.  An overloaded queue never reaches steady state: its backlog and delays grow for as
long as requests keep arriving, so any percentile it reports depends on how long the trace
was, not on the deployment.  :func:`stability_verdict` decides from one run's records with
two tests over the *steady window*, which runs from the end of the warm-up to the last
arrival (after which the system only drains).  The warm-up (the system starts empty) is the
later of the first :data:`WARMUP_FRACTION` of arrivals and :data:`WARMUP_E2E` median
end-to-end latencies after the first arrival (the time the number of requests in the system
takes to reach its steady level, by Little's law about one mean latency), but at most half the
arrivals.

1. **Served fraction** = requests completed inside the window / requests arriving inside it.
   In a stable system the two counts differ only by the change in the number of requests in
   the system between the window's ends (zero on average); an overloaded one completes at its
   capacity ``mu`` while ``lambda`` arrive, so the fraction tends to ``mu / lambda``.  It fails
   below ``1 - TOLERANCE - margin``.  The margin is the noise of a stable system's shortfall:
   ``SERVED_Z * sqrt(2) * sd(N) / arrivals``, with ``sd(N)`` the standard deviation of the number
   in the system around its Theil-Sen line, sampled at :data:`COUNT_SAMPLES` instants of the
   window (two independent draws of a stationary count differ by ``sqrt(2) sd(N)``), so a
   deployment holding hundreds of requests at once is not called overloaded because a short
   run ended in a busy spell.  Counting arrivals in the same window (rather than using the
   nominal rate) removes the arrival process's own noise.
2. **Trend in the number of requests in the system** (waiting and running: arrived, not yet
   finished; the queue length of the issue, measured where vLLM actually keeps its backlog,
   which sits in the running batch until ``max_num_seqs`` or the KV cache caps it, and only
   then in the waiting queue, so the queueing delay alone misses a mild overload in a short
   run).  The window is cut into :data:`TREND_BATCHES` equal spans and the time-averaged count
   of each is tested with a one-sided Mann-Kendall test (``scipy.stats.kendalltau`` against the
   span index, ``alternative="greater"``): distribution-free, it asks only whether later spans
   hold more requests.  Span averages rather than single instants, because the count is
   strongly autocorrelated and Mann-Kendall assumes independent points.  Significance is not
   enough: a stable queue at high load has long busy periods that look like trends in a short
   run.  The *size* of the trend is the Theil-Sen slope (``scipy.stats.theilslopes``) of the
   count against time, divided by the window's arrival rate: the share of the arrivals the
   system does not serve (``1 - mu / lambda`` for a fluid queue).  It fails when the trend is
   both significant (p < :data:`TREND_ALPHA`) and larger than ``TOLERANCE + margin``, the
   margin of test 1: the growth over the window must exceed what a stationary count's noise
   gives (span means of a count that is correlated over longer than a span make the
   Mann-Kendall p-value too small on its own).  Both tests so draw the line at the same load.

The run is unstable when it fails either test.  Too few requests in the window for a test
leaves that test out and says so in ``reasons``; a run whose requests all arrive at once (a
burst) has no steady state, and is called stable only when every request finished.
Requests still unfinished when the simulation stopped stay in the system (test 2) and count
as not served (test 1).  :func:`pooled_verdict` combines the verdicts of independent
replications: served fraction from the summed counts (margin from the summed variances),
trend p-values by Fisher's method and the median slope, with the same thresholds.

The steady-state *latency sample* (:func:`steady_latency_window_s`) also leaves out the
drain.  After the last arrival the batch only empties, so requests still running then decode
with fewer neighbours than the endless arrival process would give them, and finish early: in
runs of 1,000 requests of llama-3.1-8b on an A100 at 0.7x capacity the last 15 % of arrivals
exceeded the long-run E2E P99 0.1 % of the time instead of 1 % (TPOT: the last 5 %, 0.2 %),
which biased the pooled E2E P99 of five such runs 4.4 % low (0.4 % with the cut; a 1B model
at 0.8x: 2.4 %, 0.5 %).  The sample ends at the last arrival less ``T``, the run's P99 end-to-end latency
(:data:`DRAIN_PERCENTILE`).  This is exact where it matters: a request arriving before that
instant either finished before the last arrival (it saw only arrivals an endless run gives it
too) or had been in the system longer than ``T`` at the last arrival; so whether its TTFT or
E2E exceeds any threshold up to ``T`` is the same as in an endless run, and so are their
percentiles up to the P99.  TPOT is touched only through the about 1 % of requests still
running at the last arrival, for the part of their decoding that follows it.

Measured boundary (``scripts/interval_coverage.py``, single runs of 1,000 requests, loads in
units of the burst-replay capacity): llama-3.1-8b on an A100 with the default workload, 10
seeds: right 10/10 at 0.5x, 0.8x, 1.2x and 1.5x, 9/10 at 0.9x and 8/10 at 1.1x; a 1B model
with 32 sequences, 5 seeds: 5/5 at 0.5x-0.9x, 1.2x, 1.5x and 4/5 at 1.1x.  Within about 10 %
of capacity a 1,000-request run cannot always tell.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from latsim.metrics.per_request import check_records

WARMUP_FRACTION = 0.2
"""Least share of the arrivals, from the start, left out of the steady window."""
WARMUP_E2E = 2.0
"""The warm-up lasts at least this many median end-to-end latencies after the first arrival."""
TOLERANCE = 0.05
"""A served fraction below ``1 - TOLERANCE``, or a backlog growing by more than ``TOLERANCE`` of
the arrival rate, is overload."""
TREND_ALPHA = 0.01
"""One-sided significance level of the Mann-Kendall trend test."""
SERVED_Z = 2.33
"""One-sided 1 % normal quantile: the served-fraction margin is this many standard deviations."""
COUNT_SAMPLES = 200
"""Instants of the steady window at which the number in the system is sampled for its spread."""
TREND_BATCHES = 20
"""Equal spans of the steady window whose mean number in the system the trend test compares."""
MIN_BATCH = 5
"""Requests per span the trend test needs on average; fewer than ``MIN_TREND_BATCHES`` spans skips it."""
MIN_TREND_BATCHES = 8
DRAIN_PERCENTILE = 99.0
"""The latency sample ends at the last arrival less this percentile of the run's end-to-end latency."""
MIN_WINDOW_REQUESTS = 20
"""Fewest requests arriving in the steady window for the served-fraction test."""

TEST_DESCRIPTION = (
    f"steady window = arrivals after max({WARMUP_FRACTION:.0%} of them, {WARMUP_E2E:g} median E2E); "
    f"unstable if served fraction < {1 - TOLERANCE:g} - m, or the number in the system grows by more than "
    f"{TOLERANCE:g} + m of the arrival rate (Theil-Sen) with one-sided Mann-Kendall p < {TREND_ALPHA:g} on "
    f"{TREND_BATCHES} span means; m = {SERVED_Z:g} sqrt(2) sd(number in system) / arrivals"
)


@dataclass(frozen=True)
class StabilityVerdict:
    """The verdict, the statistics behind it, and why (the tests: module docstring).

    ``served_fraction``: ``window_completed / window_requests`` (``None`` when not tested), and
    ``served_floor`` the least that passes; ``in_system_sd``: the spread of the number of requests
    in the system around its trend (the floor's noise margin).
    ``trend_tau`` / ``trend_p_value``: Kendall's tau of the spans' mean number in the system
    against span index, and its one-sided p-value; ``trend_slope``: Theil-Sen growth of that
    number as a share of the arrival rate (``None`` when the trend test was skipped).
    ``throughput_rps``: completions per second inside the window; ``offered_rps``: the offered
    rate passed in.  ``reasons``: one sentence per failed or skipped test, empty for a clean
    pass.  ``test``: what was tested.  ``replications``: how many runs the verdict pools.
    """

    stable: bool
    served_fraction: float | None
    trend_tau: float | None
    trend_p_value: float | None
    trend_slope: float | None
    throughput_rps: float | None
    offered_rps: float | None
    unfinished: int
    window_requests: int
    window_completed: int
    reasons: tuple[str, ...]
    served_floor: float | None = None
    in_system_sd: float | None = None
    test: str = TEST_DESCRIPTION
    replications: int = 1

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: a plain dict with ``reasons`` as a list."""
        out = asdict(self)
        out["reasons"] = list(self.reasons)
        return out


@dataclass(frozen=True)
class _Window:
    start_s: float
    end_s: float
    arrived: int
    completed: int


def stability_verdict(records: pd.DataFrame, offered_rps: float | None) -> StabilityVerdict:
    """The stability verdict of one run's per-request ``records`` (see the module docstring).

    ``offered_rps`` is the rate the workload offered, reported beside the measured throughput
    (the tests count the arrivals themselves).  Raises ValueError for records that lack a
    column, or an ``offered_rps`` that is neither ``None`` nor a finite number > 0.
    """
    check_records(records)
    if offered_rps is not None and not _positive(offered_rps):
        raise ValueError(f"offered_rps must be None or a finite number > 0, got {offered_rps!r}")
    frame = records[records["status"] != "rejected"].sort_values("arrival_s", kind="stable")
    unfinished = int((frame["status"] == "unfinished").sum())
    arrival = frame["arrival_s"].to_numpy(dtype=np.float64)
    if len(arrival) == 0 or arrival[-1] <= arrival[0]:
        return _burst_verdict(unfinished, len(arrival), offered_rps)
    window = _window(frame, arrival, _warmup(frame, arrival))
    reasons: list[str] = []
    served = window.completed / window.arrived if window.arrived >= MIN_WINDOW_REQUESTS else None
    tau, p_value, slope, spread = _trend(frame, window)
    floor = _served_floor(spread * spread, window.arrived)
    failed = _judge(served, floor, p_value, slope, window.arrived, reasons)
    if unfinished:
        reasons.append(f"{unfinished} requests were unfinished when the simulation stopped")
    span = window.end_s - window.start_s
    return StabilityVerdict(
        stable=not failed, served_fraction=served, trend_tau=tau, trend_p_value=p_value, trend_slope=slope,
        throughput_rps=window.completed / span, offered_rps=offered_rps, unfinished=unfinished,
        window_requests=window.arrived, window_completed=window.completed, reasons=tuple(reasons),
        served_floor=floor, in_system_sd=spread,
    )


def pooled_verdict(verdicts: Sequence[StabilityVerdict]) -> StabilityVerdict:
    """One verdict from independent replications' verdicts, with the same thresholds.

    Served fraction: summed window completions over summed window arrivals.  Trend: Fisher's
    combination of the one-sided p-values (``scipy.stats.combine_pvalues``) and the median
    slope, over the replications that ran the test.  Throughput and offered rate: means.
    Replications without a steady state (bursts) are stable only when all of them are.
    Raises ValueError for an empty sequence.
    """
    if not verdicts:
        raise ValueError("pooled_verdict needs at least one verdict")
    arrived = sum(v.window_requests for v in verdicts)
    completed = sum(v.window_completed for v in verdicts)
    unfinished = sum(v.unfinished for v in verdicts)
    tested = [v for v in verdicts if v.trend_p_value is not None]
    if all(v.served_fraction is None and v.trend_p_value is None for v in verdicts):
        stable = all(v.stable for v in verdicts)
        reasons = tuple(dict.fromkeys(r for v in verdicts for r in v.reasons))
        return _combine(verdicts, stable, None, (None, None, None), completed, reasons)
    trend: tuple[float | None, float | None, float | None] = (None, None, None)
    if tested:
        p_value = float(stats.combine_pvalues([v.trend_p_value for v in tested], method="fisher").pvalue)
        trend = (float(np.median([v.trend_tau for v in tested])), p_value,
                 float(np.median([v.trend_slope for v in tested])))
    served = completed / arrived if arrived >= MIN_WINDOW_REQUESTS else None
    floor = _served_floor(sum((v.in_system_sd or 0.0) ** 2 for v in verdicts), arrived)
    reasons_list: list[str] = []
    failed = _judge(served, floor, trend[1], trend[2], arrived, reasons_list)
    if unfinished:
        reasons_list.append(f"{unfinished} requests were unfinished when the simulations stopped")
    return replace(_combine(verdicts, not failed, served, trend, completed, tuple(reasons_list)), served_floor=floor)


def _combine(verdicts: Sequence[StabilityVerdict], stable: bool, served: float | None,
             trend: tuple[float | None, float | None, float | None], completed: int,
             reasons: tuple[str, ...]) -> StabilityVerdict:
    rates = [v.throughput_rps for v in verdicts if v.throughput_rps is not None]
    offered = [v.offered_rps for v in verdicts if v.offered_rps is not None]
    return StabilityVerdict(
        stable=stable, served_fraction=served, trend_tau=trend[0], trend_p_value=trend[1], trend_slope=trend[2],
        throughput_rps=float(np.mean(rates)) if rates else None,
        offered_rps=float(np.mean(offered)) if offered else None,
        unfinished=sum(v.unfinished for v in verdicts), window_requests=sum(v.window_requests for v in verdicts),
        window_completed=completed, reasons=reasons, replications=sum(v.replications for v in verdicts),
    )


def _served_floor(variance: float, arrived: int) -> float | None:
    """``1 - TOLERANCE`` less the noise margin for a summed in-system variance over ``arrived``."""
    if arrived < MIN_WINDOW_REQUESTS:
        return None
    return 1 - TOLERANCE - SERVED_Z * math.sqrt(2 * variance) / arrived


def _judge(served: float | None, floor: float | None, p_value: float | None, slope: float | None, arrived: int,
           reasons: list[str]) -> bool:
    """Append a sentence per failed or skipped test to ``reasons``; True when a test failed."""
    failed = False
    if served is None or floor is None:
        reasons.append(f"skipped served-fraction test: {arrived} requests in the steady window "
                       f"(needs {MIN_WINDOW_REQUESTS})")
    elif served < floor:
        failed = True
        reasons.append(f"served fraction {served:.3f} < {floor:.3f}: of the requests arriving in the "
                       "steady window, too few completed in it")
    if p_value is None or slope is None:
        reasons.append(f"skipped trend test: too few requests in the steady window for "
                       f"{MIN_TREND_BATCHES} spans of {MIN_BATCH}")
    elif p_value < TREND_ALPHA and slope > (limit := TOLERANCE if floor is None else 1 - floor):
        failed = True
        reasons.append(f"requests in the system grow by {slope:.3f} of the arrival rate > {limit:.3f} "
                       f"(Theil-Sen; Mann-Kendall one-sided p {p_value:.2g} < {TREND_ALPHA:g})")
    return failed


def steady_start_s(records: pd.DataFrame) -> float:
    """Arrival time at which the steady window of ``records`` begins (the warm-up rule above).

    Requests arriving at or after it are the steady-state sample; ``records`` are one run's.
    Rejected requests are ignored; raises ValueError for records that lack a column or have
    no request left.
    """
    check_records(records)
    frame = records[records["status"] != "rejected"].sort_values("arrival_s", kind="stable")
    if not len(frame):
        raise ValueError("no request was admitted: every request was rejected")
    arrival = frame["arrival_s"].to_numpy(dtype=np.float64)
    return float(arrival[_warmup(frame, arrival)])


def steady_latency_window_s(records: pd.DataFrame) -> tuple[float, float]:
    """Arrival times ``(start, end)``, both inclusive, of the requests whose latencies describe
    the long run: from :func:`steady_start_s` to the last arrival less the run's
    :data:`DRAIN_PERCENTILE` end-to-end latency (the drain rule in the module docstring).

    The end is never before the middle of the steady window's arrivals, so that a run whose
    latencies span most of it (an overloaded or very short run) keeps half its steady window
    rather than nothing.  Rejected requests are ignored; raises ValueError as
    :func:`steady_start_s` does.
    """
    check_records(records)
    frame = records[records["status"] != "rejected"].sort_values("arrival_s", kind="stable")
    if not len(frame):
        raise ValueError("no request was admitted: every request was rejected")
    arrival = frame["arrival_s"].to_numpy(dtype=np.float64)
    start = _warmup(frame, arrival)
    done = (frame["status"] == "ok").to_numpy()
    e2e = frame["finish_s"].to_numpy(dtype=np.float64)[done] - arrival[done]
    drain = float(np.percentile(e2e, DRAIN_PERCENTILE, method="inverted_cdf")) if len(e2e) else 0.0
    floor = float(arrival[start + (len(arrival) - 1 - start) // 2])
    return float(arrival[start]), max(float(arrival[-1]) - drain, floor)


def _warmup(frame: pd.DataFrame, arrival: np.ndarray) -> int:
    """Index (in arrival order) of the first request of the steady window."""
    done = (frame["status"] == "ok").to_numpy()
    e2e = frame["finish_s"].to_numpy(dtype=np.float64)[done] - arrival[done]
    ramp = arrival[0] + WARMUP_E2E * (float(np.median(e2e)) if len(e2e) else 0.0)
    start = max(math.floor(WARMUP_FRACTION * len(arrival)), int(np.searchsorted(arrival, ramp)))
    return min(start, len(arrival) // 2)


def _window(frame: pd.DataFrame, arrival: np.ndarray, start: int) -> _Window:
    lo, hi = float(arrival[start]), float(arrival[-1])
    finish = frame.loc[frame["status"] == "ok", "finish_s"].to_numpy(dtype=np.float64)
    completed = int(np.count_nonzero((finish >= lo) & (finish <= hi)))
    return _Window(lo, hi, len(arrival) - start, completed)


def _trend(frame: pd.DataFrame, window: _Window) -> tuple[float | None, float | None, float | None, float]:
    """Mann-Kendall tau and one-sided p, the Theil-Sen slope over the arrival rate, and the spread
    of the number in the system around its Theil-Sen line (0 when the window is too short)."""
    if not window.end_s > window.start_s:
        return None, None, None, 0.0
    times, count = _in_system(frame)
    instants = np.linspace(window.start_s, window.end_s, COUNT_SAMPLES)
    sampled = count[np.searchsorted(times, instants, side="right") - 1]
    fit = stats.theilslopes(sampled, instants)
    spread = float(np.std(sampled - (fit.intercept + fit.slope * instants)))
    batches = min(TREND_BATCHES, window.arrived // MIN_BATCH)
    if batches < MIN_TREND_BATCHES:
        return None, None, None, spread
    edges = np.linspace(window.start_s, window.end_s, batches + 1)
    area = np.concatenate([[0.0], np.cumsum(count[:-1] * np.diff(times))])
    means = np.diff(np.interp(edges, times, area)) / np.diff(edges)
    tau, p_value = stats.kendalltau(np.arange(batches), means, alternative="greater")
    if math.isnan(tau):  # a constant count: no trend
        tau, p_value = 0.0, 1.0
    rate = window.arrived / (window.end_s - window.start_s)
    slope = float(stats.theilslopes(means, (edges[:-1] + edges[1:]) / 2).slope) / rate
    return float(tau), float(p_value), slope, spread


def _in_system(frame: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Event times and the number of requests in the system just after each (a step function)."""
    arrival = frame["arrival_s"].to_numpy(dtype=np.float64)
    finish = frame["finish_s"].to_numpy(dtype=np.float64)
    finish = finish[~np.isnan(finish)]
    times = np.concatenate([arrival, finish])
    order = np.argsort(times, kind="stable")
    count = np.cumsum(np.concatenate([np.ones(len(arrival)), -np.ones(len(finish))])[order])
    return times[order], count


def _burst_verdict(unfinished: int, n: int, offered_rps: float | None) -> StabilityVerdict:
    reason = ("no steady state to test: every request arrived at the same time; "
              + (f"{unfinished} were unfinished" if unfinished else "all finished"))
    return StabilityVerdict(stable=unfinished == 0, served_fraction=None, trend_tau=None, trend_p_value=None,
                            trend_slope=None, throughput_rps=None, offered_rps=offered_rps,
                            unfinished=unfinished, window_requests=n, window_completed=n - unfinished,
                            reasons=(reason,))


def _positive(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and 0 < x < math.inf
