"""When arriving requests reach the engine core: the front end's input path under clustered arrivals.

vLLM's front end (the API server's event loop, or an ``AsyncLLM`` in the caller's process) turns
each arriving request into an engine-core request: parsing, tokenising, building the request,
then handing it to the core.  The hand-over is a second turn of the event loop, and a turn
runs only after the callbacks already queued: while requests keep arriving, the loop spends its
time on their first parts and the hand-overs wait.  A request arriving alone reaches the core
after the front end's fixed latency (``frontend_s``, added to its token times after the
simulation, not moved here); requests arriving close together reach it when the loop drains.

The model, per front end: each request brings ``input_s`` seconds of front-end work, served in
arrival order; the requests of one *busy period* (arrivals that each come before the work of
those before them is done) are handed over together at its end, less the lone request's own
``input_s`` (already in ``frontend_s``).  A request alone is therefore not delayed, and a burst
of ``N`` requests at once reaches the core ``(N - 1) x input_s`` after it arrives.  A long busy
period is not held whole: every ``window_s`` from its start the front end hands over the
requests whose work is done (the live bursts of 300-400 requests reached the core in two to
four batches, 50-90 ms apart).  With several replicas, request ``i`` is counted on the front end
of replica ``i mod replicas`` (each replica serves behind its own front end; a
least-outstanding router sends about as many to each).

Measured (``docs/validation.md``, "The front end's input path"): the saturation bursts of 200
requests of about 500 prompt tokens, sent over 20-130 ms, reached vLLM's core 1-80 ms after the
sending ended (longer prompts later still, which ``input_s`` does not follow), while the
simulator, without this, started its first step at the first arrival.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt


def engine_arrivals(arrival_s: npt.ArrayLike, input_s: float, fronts: int = 1,
                    window_s: float = math.inf) -> np.ndarray:
    """When each request reaches the engine core (see the module docstring): ``arrival_s``
    sorted ascending, ``input_s`` >= 0 seconds of front-end work per request (0: every request
    at its arrival), ``fronts`` >= 1 front ends taking the requests in turn, ``window_s`` > 0
    the longest a busy period holds its hand-overs (inf: to its end).  The result is at or
    after each arrival and ascending within each front end."""
    arrival = np.asarray(arrival_s, dtype=float)
    if input_s < 0.0 or not np.isfinite(input_s):
        raise ValueError(f"input_s must be a finite number >= 0, got {input_s!r}")
    if fronts < 1:
        raise ValueError(f"fronts must be at least 1, got {fronts!r}")
    if not window_s > 0.0:
        raise ValueError(f"window_s must be > 0 (inf: no window), got {window_s!r}")
    if input_s == 0.0 or arrival.size == 0:
        return arrival.copy()
    ready = np.empty_like(arrival)
    for front in range(fronts):
        mine = np.arange(front, arrival.size, fronts)
        ready[mine] = _hand_overs(arrival[mine], input_s, window_s) - input_s
    return np.maximum(ready, arrival)


def window_of(input_window_s: float) -> float:
    """The ``window_s`` of :func:`engine_arrivals` a host term ``input_window_s`` stands for
    (the host terms must be finite, so there 0 means no window: inf)."""
    return input_window_s if input_window_s > 0.0 else math.inf


def _hand_overs(arrival: np.ndarray, work: float, window: float) -> np.ndarray:
    """For ascending ``arrival`` times each bringing ``work`` seconds to one server taken in order,
    when each is handed over: at the end of its busy period, or at the first multiple of
    ``window`` after the period's start by which its work is done, whichever comes first."""
    out = np.empty_like(arrival)
    done = np.empty_like(arrival)
    start = 0
    free = -np.inf
    for i, t in enumerate(arrival.tolist()):
        if t > free and i > start:
            _close(out, done, start, i, arrival[start], free, window)
            start = i
        free = max(free, t) + work
        done[i] = free
    _close(out, done, start, arrival.size, arrival[start], free, window)
    return out


def _close(out: np.ndarray, done: np.ndarray, lo: int, hi: int, begin: float, end: float, window: float) -> None:
    """Hand-overs of the busy period of requests ``lo:hi`` that began at ``begin`` and ends at ``end``."""
    if math.isinf(window):
        out[lo:hi] = end
        return
    ticks = begin + np.ceil((done[lo:hi] - begin) / window - 1e-9) * window  # done at a tick: handed over there
    out[lo:hi] = np.minimum(ticks, end)
