"""A request stream as parallel arrays: the simulator's input and the measurement's skeleton.

Row ``i`` is request ``i``: it arrives ``arrival_s[i]`` seconds after the start with a prompt of
``input_tokens[i]`` tokens and asks for exactly ``output_tokens[i]`` tokens.  Optional prefix
sharing: requests with the same ``prefix_group`` (>= 0) share their first
``prefix_tokens[i]`` prompt tokens (group -1 shares nothing), which the prefix cache can reuse.

Rows are in arrival order.  A source that was not (a trace file with arrivals out of order) is
sorted, and ``source_index[i]`` keeps row ``i``'s 0-based position in the source, so results
still map to the file's records: :attr:`RequestTrace.request_ids` is that position.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, eq=False)
class RequestTrace:
    """Immutable request stream, sorted by arrival time (ties keep their order)."""

    arrival_s: np.ndarray
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    prefix_group: np.ndarray | None = None
    prefix_tokens: np.ndarray | None = None
    source_index: np.ndarray | None = None
    """Row ``i``'s 0-based position in the source before sorting; None: the source was in order."""

    def __post_init__(self) -> None:
        n = len(self.arrival_s)
        for name in ("input_tokens", "output_tokens", "prefix_group", "prefix_tokens", "source_index"):
            arr = getattr(self, name)
            if arr is not None and len(arr) != n:
                raise ValueError(f"{name} has {len(arr)} entries, arrival_s has {n}")
        if n and np.any(np.diff(self.arrival_s) < 0):
            raise ValueError("arrival_s must be sorted in non-decreasing order")
        if n and (np.min(self.input_tokens) < 1 or np.min(self.output_tokens) < 1):
            raise ValueError("input_tokens and output_tokens must be >= 1 for every request")
        if n and np.min(self.arrival_s) < 0:
            raise ValueError("arrival_s must be >= 0")

    def __len__(self) -> int:
        return len(self.arrival_s)

    @property
    def has_prefixes(self) -> bool:
        return self.prefix_group is not None and bool(np.any(self.prefix_group >= 0))

    @property
    def request_ids(self) -> np.ndarray:
        """Each row's id: its position in the source (0-based), so ids follow the source's records."""
        return self.source_index if self.source_index is not None else np.arange(len(self), dtype=np.int64)

    @property
    def duration_s(self) -> float:
        return float(self.arrival_s[-1] - self.arrival_s[0]) if len(self) else 0.0

    @staticmethod
    def from_arrays(arrival_s, input_tokens, output_tokens, prefix_group=None, prefix_tokens=None) -> RequestTrace:
        """Build from any array-likes, sorting by arrival (stable; ``source_index`` then records
        the original positions) and fixing dtypes."""
        arrival = np.asarray(arrival_s, dtype=np.float64)
        order = np.argsort(arrival, kind="stable")
        moved = bool(np.any(order != np.arange(len(order))))
        def pick(a) -> np.ndarray | None:
            return None if a is None else np.asarray(a, dtype=np.int64)[order]

        return RequestTrace(
            arrival_s=arrival[order],
            input_tokens=np.asarray(input_tokens, dtype=np.int64)[order],
            output_tokens=np.asarray(output_tokens, dtype=np.int64)[order],
            prefix_group=pick(prefix_group),
            prefix_tokens=pick(prefix_tokens),
            source_index=order.astype(np.int64) if moved else None,
        )
