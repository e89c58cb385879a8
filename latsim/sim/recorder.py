"""What a simulation keeps: inter-token gaps as weighted samples, and KV/step counters.

Gaps are stored compactly as the two token times that bound them: single gaps in two float
arrays, and gaps that several requests saw in the same step as (start, end, count) triples,
so 100k requests of hundreds of tokens stay far below a few hundred MB.  Keeping the times,
not the differences, lets :meth:`Recorder.itl_samples` move a token that the engine handed
out later than its step ended (the outputs of the step before a graph-less step wait for that
step's launch: :mod:`latsim.engines.vllm.launch`): a gap then runs from the release of its
first token to the release of its second, as a client sees it.  The samples come in one
canonical form (distinct values, ascending, with their total counts;
:func:`canonical_samples`), so two runs that saw the same multiset of gaps -- stepped one by
one or fast-forwarded -- give identical arrays, and hence identical summaries down to the
bootstrap.  Each replica keeps its own recorder (its releases are its own).
"""

from __future__ import annotations

from array import array
from collections.abc import Mapping, Sequence

import numpy as np


class Recorder:
    """Accumulates one replica's inter-token gaps (as token times) and its step count."""

    def __init__(self) -> None:
        self._single_start = array("d")
        self._single_end = array("d")
        self._run_start = array("d")
        self._run_end = array("d")
        self._run_counts = array("d")
        self.num_steps = 0

    def gap(self, start: float, end: float) -> None:
        """One request received tokens at ``start`` and then at ``end``."""
        self._single_start.append(start)
        self._single_end.append(end)

    def same_gap(self, start: float, end: float, count: int) -> None:
        """``count`` requests each received tokens at ``start`` and then at ``end``."""
        self._run_start.append(start)
        self._run_end.append(end)
        self._run_counts.append(count)

    def step_gaps(self, ends: list[float], count: int) -> None:
        """``count`` requests each received a token at every one of the step ``ends``."""
        self._run_start.extend(ends[:-1])
        self._run_end.extend(ends[1:])
        self._run_counts.extend([float(count)] * (len(ends) - 1))

    def itl_samples(self, released: Mapping[float, float] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """All gaps as ``(values_s, weights)`` in canonical form, a token stamped at a step end
        found in ``released`` counted from the time that step's outputs were released instead."""
        start = np.concatenate([np.frombuffer(self._single_start, dtype=np.float64),
                                np.frombuffer(self._run_start, dtype=np.float64)])
        end = np.concatenate([np.frombuffer(self._single_end, dtype=np.float64),
                              np.frombuffer(self._run_end, dtype=np.float64)])
        weights = np.concatenate([np.ones(len(self._single_start)), np.frombuffer(self._run_counts, dtype=np.float64)])
        if released:
            start, end = _released(start, released), _released(end, released)
        return canonical_samples([(end - start, weights)])


def _released(times: np.ndarray, released: Mapping[float, float]) -> np.ndarray:
    """``times`` with each one found in ``released`` replaced by its release time."""
    keys = np.fromiter(released.keys(), dtype=np.float64, count=len(released))
    order = np.argsort(keys)
    keys, values = keys[order], np.fromiter(released.values(), dtype=np.float64, count=len(released))[order]
    at = np.clip(np.searchsorted(keys, times), 0, len(keys) - 1)
    hit = keys[at] == times
    return np.where(hit, values[at], times)


def canonical_samples(parts: Sequence[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Weighted samples ``(values, weights)`` pooled: distinct values ascending, total weights."""
    values = np.concatenate([np.asarray(v, dtype=np.float64) for v, _ in parts]) if parts else np.zeros(0)
    weights = np.concatenate([np.asarray(w, dtype=np.float64) for _, w in parts]) if parts else np.zeros(0)
    distinct, inverse = np.unique(values, return_inverse=True)
    return distinct, np.bincount(inverse, weights=weights, minlength=len(distinct))
