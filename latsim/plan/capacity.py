"""How many requests per second a deployment completes on a workload: its capacity.

Method: a *burst replay*.  Requests with the workload's prompt and output lengths (and prefix
groups) all arrive at ``t = 0``; the engine then runs with its batch as full as its limits
allow (``max_num_seqs``, the token budget, the KV cache) for the whole replay, which is the
most it can ever complete per second.  The capacity is the completion rate between the
:data:`MIDDLE` quantiles of the finish times: the start (batches filling, prefill-heavy) and
the tail (the batch emptying as the last requests finish) are left out.

The burst needs many more requests than the deployment holds at once, or it never reaches the
full-batch regime: it has ``max(len(trace), BATCHES_PER_BURST * max_num_seqs * replicas)``
requests, capped at :data:`MAX_BURST`, drawn with replacement from the trace's rows by a
generator seeded with ``seed`` when the trace has too few (or too many) rows.  Cost: one
simulation of that many requests with no idle time, typically well under a second; results
are cached per (deployment, lengths, seed) in this process.

``saturation = offered_rps / capacity`` (:func:`saturation`): below 1 the deployment can keep
up on average; the stability verdict (:mod:`latsim.metrics.stability`) says whether it did.
"""

from __future__ import annotations

import hashlib
import math

import numpy as np

from latsim.deployment import Deployment, resolve_engine
from latsim.workload.trace import RequestTrace

MIDDLE = (0.25, 0.75)
"""Finish-time quantiles between which completions are counted."""
BATCHES_PER_BURST = 4
"""A burst holds at least this many full batches (``max_num_seqs`` per replica)."""
MAX_BURST = 6000
"""Most requests one burst replay simulates."""
_CACHE: dict[tuple, float] = {}
_CACHE_SIZE = 64


def estimate_capacity(deployment: Deployment, trace: RequestTrace, seed: int = 0) -> float:
    """Requests per second ``deployment`` completes on ``trace``'s request mix, at full load.

    Only the lengths (and prefix groups) of ``trace`` matter, not its arrival times.  Raises
    ValueError for an empty trace or one whose every request the deployment rejects.
    Deterministic for a fixed ``seed``.
    """
    if not len(trace):
        raise ValueError("the workload has no requests")
    key = (deployment, _fingerprint(trace), int(seed))
    if key not in _CACHE:
        if len(_CACHE) >= _CACHE_SIZE:
            _CACHE.pop(next(iter(_CACHE)))
        _CACHE[key] = _burst_capacity(deployment, trace, seed)
    return _CACHE[key]


def saturation(offered_rps: float | None, capacity_rps: float | None) -> float | None:
    """Offered load over capacity; ``None`` without an offered rate (a burst) or a capacity."""
    if offered_rps is None or capacity_rps is None or not capacity_rps > 0:
        return None
    return float(offered_rps) / float(capacity_rps)


def capacity_or_none(deployment: Deployment, trace: RequestTrace, seed: int = 0) -> float | None:
    """:func:`estimate_capacity`, or ``None`` where it is undefined (no request completes in the
    burst replay: every one rejected, or none finished within the simulated horizon)."""
    try:
        return estimate_capacity(deployment, trace, seed)
    except ValueError:
        return None


def burst_size(deployment: Deployment, trace_len: int) -> int:
    """Requests in the burst replay for a trace of ``trace_len`` requests (see the module docstring)."""
    seqs = resolve_engine(deployment).max_num_seqs or 1
    return min(max(trace_len, BATCHES_PER_BURST * seqs * deployment.replicas), MAX_BURST)


def _burst_capacity(deployment: Deployment, trace: RequestTrace, seed: int) -> float:
    from latsim import simulate

    n = burst_size(deployment, len(trace))
    rows = np.arange(len(trace))
    if n != len(trace):
        rows = np.random.default_rng([seed, n]).choice(len(trace), size=n, replace=True)
    burst = RequestTrace.from_arrays(
        np.zeros(n), trace.input_tokens[rows], trace.output_tokens[rows],
        None if trace.prefix_group is None else trace.prefix_group[rows],
        None if trace.prefix_tokens is None else trace.prefix_tokens[rows],
    )
    records = simulate(deployment, burst, seed=seed).records
    finish = np.sort(records.loc[records["status"] == "ok", "finish_s"].to_numpy(dtype=np.float64))
    if len(finish) < 4:
        raise ValueError(f"capacity needs completed requests; {len(finish)} of {n} completed in the burst replay")
    lo, hi = (math.floor(q * (len(finish) - 1)) for q in MIDDLE)
    span = finish[hi] - finish[lo]
    if not span > 0:
        raise ValueError("capacity is undefined: the burst's middle requests all finished at the same time")
    return (hi - lo) / span


def _fingerprint(trace: RequestTrace) -> str:
    digest = hashlib.sha256()
    for array in (trace.input_tokens, trace.output_tokens, trace.prefix_group, trace.prefix_tokens):
        digest.update(b"-" if array is None else np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()
