"""Per-request records: their schema and the latencies derived from them.

The simulator emits one row per request with the columns in :data:`RECORD_COLUMNS`; times
are seconds on the simulation clock and NaN where a request never reached that point (a
rejected request has no ``first_scheduled_s``; an unfinished one has no ``finish_s``).
``status`` is one of :data:`STATUSES`: ``"ok"`` (finished), ``"rejected"`` (prompt + output
longer than ``max_model_len``) or ``"unfinished"`` (the simulation horizon came first).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

RECORD_COLUMNS = (
    "request_id", "replica", "arrival_s", "first_scheduled_s", "first_token_s", "finish_s",
    "input_tokens", "output_tokens", "cached_tokens", "preemptions", "status",
)
STATUSES = ("ok", "rejected", "unfinished")
LATENCY_COLUMNS = ("ttft_s", "tpot_s", "e2e_s", "queue_s")


def check_records(records: pd.DataFrame) -> None:
    """Raise ValueError naming the first missing column or unknown status value."""
    missing = [c for c in RECORD_COLUMNS if c not in records.columns]
    if missing:
        raise ValueError(f"records lack column {missing[0]!r}; expected {', '.join(RECORD_COLUMNS)}")
    unknown = sorted(set(records["status"].unique()) - set(STATUSES), key=str)
    if unknown:
        raise ValueError(f"records have unknown status {unknown[0]!r}; accepted: {', '.join(STATUSES)}")


def add_latencies(records: pd.DataFrame) -> pd.DataFrame:
    """A copy of ``records`` with the latency columns, in seconds (NaN where undefined).

    - ``ttft_s  = first_token_s - arrival_s`` (time to first token)
    - ``tpot_s  = (finish_s - first_token_s) / (output_tokens - 1)``, NaN when
      ``output_tokens <= 1`` (a single token has no inter-token time)
    - ``e2e_s   = finish_s - arrival_s``
    - ``queue_s = first_scheduled_s - arrival_s`` (waiting before the first scheduled step)
    """
    check_records(records)
    out = records.copy()
    arrival = out["arrival_s"].to_numpy(dtype=np.float64)
    first = out["first_token_s"].to_numpy(dtype=np.float64)
    finish = out["finish_s"].to_numpy(dtype=np.float64)
    gaps = out["output_tokens"].to_numpy(dtype=np.float64) - 1.0
    out["ttft_s"] = first - arrival
    out["tpot_s"] = np.divide(finish - first, gaps, out=np.full(len(out), np.nan), where=gaps > 0)
    out["e2e_s"] = finish - arrival
    out["queue_s"] = out["first_scheduled_s"].to_numpy(dtype=np.float64) - arrival
    return out
