"""A loaded measurement: run metadata plus one row per request, in the simulator's terms.

Replay rule: the simulator must see the arrivals the engine saw.  A request's replay arrival is
its ``sent_s`` (when it actually left the client; in open-loop runs this trails the scheduled
``arrival_s`` by the event loop's lag, in fixed-concurrency runs it is when a slot freed) or,
with ``timing="scheduled"``, its ``arrival_s``.  Requests that were never sent are left out of
both :meth:`Measurement.to_trace` and :meth:`Measurement.records_frame`, and both list the
remaining requests in the same order (stable sort by replay arrival), so row ``i`` of one is
request ``i`` of the other.

ITL convention (:meth:`Measurement.itl_samples`): a chunk of ``k`` tokens that arrives ``g``
seconds after the previous token-carrying chunk counts as ``k`` inter-token gaps of ``g / k``
each, i.e. one sample of value ``g / k`` and weight ``k``; the ``k - 1`` extra tokens of the
first chunk count as gaps of 0.  Weights of a request then sum to ``tokens_received - 1`` and
``sum(value * weight)`` to ``last_chunk - first_chunk``, so the weighted mean ITL equals the
mean TPOT.  vLLM streams one token per chunk, where this is the plain gap list.  When a
protocol does not say how many tokens a chunk holds, one per chunk is assumed.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from latsim.measure.records import ENGINE_KEYS, OPTIONAL_KEYS, RECORD_KEYS, RequestRecord
from latsim.workload.trace import RequestTrace

SIM_STATUS = {"ok": "ok", "timeout": "unfinished", "error": "rejected"}
"""A client status in the simulator's words: a request the run's deadline cut off never
finished; one the server refused or failed is counted with the rejected."""

TIMINGS = ("sent", "scheduled")
SIM_COLUMNS = (
    "request_id", "replica", "arrival_s", "first_scheduled_s", "first_token_s", "finish_s",
    "input_tokens", "output_tokens", "cached_tokens", "preemptions", "status",
)
_FLOAT_KEYS = ("arrival_s", "sent_s", "first_token_s", "finish_s", *ENGINE_KEYS)
_INT_KEYS = ("input_tokens", "output_tokens", "output_tokens_received", *OPTIONAL_KEYS)


def _dtype(column: str) -> Any:
    """float64 times (None -> NaN), int64 counts, plain objects for the rest (None stays None)."""
    if column in _FLOAT_KEYS:
        return np.float64
    return np.int64 if column in _INT_KEYS else object


@dataclass(frozen=True, eq=False)
class Measurement:
    """Immutable view of one run: ``meta`` (read-only by convention) and ``requests``.

    ``requests`` has one row per request in recorded order, columns :data:`RECORD_KEYS` plus
    ``prefix_group``/``prefix_tokens``; missing times are NaN, ``chunk_times_s`` holds tuples
    and ``chunk_tokens`` tuples or ``None``.  ``source`` says where it came from.
    """

    meta: dict[str, Any]
    requests: pd.DataFrame
    source: str = field(default="")

    @staticmethod
    def from_records(records: Sequence[RequestRecord], meta: Mapping[str, Any],
                     source: str = "") -> Measurement:
        """Build from validated records (each is validated again here)."""
        for rec in records:
            rec.validate()
        columns = (*RECORD_KEYS, *OPTIONAL_KEYS, *ENGINE_KEYS)
        frame = pd.DataFrame({c: pd.Series([getattr(r, c) for r in records], dtype=_dtype(c))
                              for c in columns}, columns=list(columns))
        return Measurement(meta=dict(meta), requests=frame, source=source)

    def __len__(self) -> int:
        return len(self.requests)

    def records(self) -> Iterator[RequestRecord]:
        """The rows as :class:`RequestRecord` again (NaN times become ``None``)."""
        for row in self.requests.to_dict(orient="records"):
            values: dict[str, Any] = {str(k): v for k, v in row.items()}
            for key in _FLOAT_KEYS:
                values[key] = None if math.isnan(values[key]) else float(values[key])
            yield RequestRecord(**values)

    # ------------------------------------------------------------------ simulator views

    def _replay_rows(self, timing: str) -> pd.DataFrame:
        if timing not in TIMINGS:
            raise ValueError(f"timing={timing!r} is not one of {TIMINGS}")
        sent = self.requests[self.requests["sent_s"].notna()]
        column = "sent_s" if timing == "sent" else "arrival_s"
        return sent.assign(_replay_s=sent[column]).sort_values("_replay_s", kind="stable")

    def to_trace(self, timing: str = "sent") -> RequestTrace:
        """The sent requests' arrivals, prompt lengths and requested output lengths, to replay.

        Prefix arrays are included only when some request belongs to a prefix group.
        """
        rows = self._replay_rows(timing)
        shared = bool((rows["prefix_group"] >= 0).any())
        return RequestTrace.from_arrays(
            rows["_replay_s"].to_numpy(),
            rows["input_tokens"].to_numpy(),
            rows["output_tokens"].to_numpy(),
            prefix_group=rows["prefix_group"].to_numpy() if shared else None,
            prefix_tokens=rows["prefix_tokens"].to_numpy() if shared else None,
        )

    def records_frame(self, timing: str = "sent") -> pd.DataFrame:
        """Per-request results in the simulator's columns (:data:`SIM_COLUMNS`).

        ``arrival_s`` is the replay arrival, ``output_tokens`` the tokens actually received
        (the timings describe those); what the client cannot see (``first_scheduled_s``,
        ``cached_tokens``, ``preemptions``) is NaN, ``replica`` is 0, and ``status`` is the
        simulator's word for the client's (:data:`SIM_STATUS`).
        """
        rows = self._replay_rows(timing)
        nan = np.full(len(rows), np.nan)
        return pd.DataFrame({
            "request_id": rows["request_id"].to_numpy(),
            "replica": np.zeros(len(rows), dtype=np.int64),
            "arrival_s": rows["_replay_s"].to_numpy(),
            "first_scheduled_s": nan,
            "first_token_s": rows["first_token_s"].to_numpy(),
            "finish_s": rows["finish_s"].to_numpy(),
            "input_tokens": rows["input_tokens"].to_numpy(),
            "output_tokens": rows["output_tokens_received"].to_numpy(),
            "cached_tokens": nan.copy(),
            "preemptions": nan.copy(),
            "status": rows["status"].map(SIM_STATUS).to_numpy(),
        }, columns=list(SIM_COLUMNS))

    def itl_samples(self) -> tuple[np.ndarray, np.ndarray]:
        """Weighted inter-token gaps ``(values_s, weights)`` of the ``ok`` requests.

        See the module docstring for the chunk convention.  Both arrays are float64 and equally
        long; a request with a single token contributes nothing.
        """
        ok = self.requests[self.requests["status"] == "ok"]
        parts = [chunk_itl(t, k) for t, k in zip(ok["chunk_times_s"], ok["chunk_tokens"], strict=True)]
        if not parts:
            return np.zeros(0), np.zeros(0)
        return (np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]))


def chunk_itl(times: Sequence[float] | np.ndarray,
              tokens: Sequence[int] | None) -> tuple[np.ndarray, np.ndarray]:
    """One request's ITL samples from its chunk arrival times and tokens per chunk."""
    t = np.asarray(times, dtype=np.float64)
    k = np.ones(len(t)) if tokens is None else np.asarray(tokens, dtype=np.float64)
    if len(t) == 0:
        return np.zeros(0), np.zeros(0)
    gaps = np.diff(t)
    values = np.concatenate([[0.0], gaps / k[1:]])
    weights = np.concatenate([[k[0] - 1.0], k[1:]])
    keep = weights > 0
    return values[keep], weights[keep]
