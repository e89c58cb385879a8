"""A first-come-first-served single-server queue (M/M/1 with exponential service) as latsim records.

The Lindley recursion gives exact start and finish times; the sojourn time of M/M/1 in steady
state is exponential with rate ``mu - lam``, so its long-run P99 is ``ln(100) / (mu - lam)``:
a known answer for interval coverage studies.  The queue starts empty, like a simulation.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd


def mm1_records(lam: float, mu: float, n: int, rng: np.random.Generator,
                horizon_s: float = math.inf) -> pd.DataFrame:
    """``n`` requests arriving at rate ``lam`` served at rate ``mu``; ``status`` ``"unfinished"``
    for requests that had not finished by ``horizon_s`` (their finish and, if not started, start are NaN)."""
    arrival = np.cumsum(rng.exponential(1 / lam, n))
    arrival -= arrival[0]
    service = rng.exponential(1 / mu, n)
    start = np.empty(n)
    finish = np.empty(n)
    free = 0.0
    for i in range(n):
        start[i] = max(arrival[i], free)
        free = finish[i] = start[i] + service[i]
    done = finish <= horizon_s
    return pd.DataFrame({
        "request_id": np.arange(n), "replica": np.zeros(n, dtype=int), "arrival_s": arrival,
        "first_scheduled_s": np.where(start <= horizon_s, start, np.nan),
        "first_token_s": np.where(done, finish, np.nan), "finish_s": np.where(done, finish, np.nan),
        "input_tokens": np.full(n, 100), "output_tokens": np.ones(n, dtype=int),
        "cached_tokens": np.zeros(n, dtype=int),
        "preemptions": np.zeros(n, dtype=int), "status": np.where(done, "ok", "unfinished"),
    })


def mm1_p99_s(lam: float, mu: float) -> float:
    """Long-run P99 of the M/M/1 sojourn time (exponential with rate ``mu - lam``)."""
    return math.log(100) / (mu - lam)
