"""What a simulation keeps: inter-token gaps as weighted samples, and KV/step counters.

Gaps are stored compactly: single gaps in one float array, and gaps that several requests
saw in the same step as (value, count) pairs, so 100k requests of hundreds of tokens stay far
below a few hundred MB.  :meth:`Recorder.itl_samples` returns the samples in one canonical
form (distinct values, ascending, with their total counts), so two runs that saw the same
multiset of gaps -- stepped one by one or fast-forwarded -- give identical arrays, and hence
identical summaries down to the bootstrap.
"""

from __future__ import annotations

from array import array
from itertools import pairwise

import numpy as np


class Recorder:
    """Accumulates inter-token latency samples and engine counters across replicas."""

    def __init__(self) -> None:
        self._single = array("d")
        self._run_values = array("d")
        self._run_counts = array("d")
        self.num_steps = 0

    def gap(self, seconds: float) -> None:
        """One request saw a gap of ``seconds``."""
        self._single.append(seconds)

    def same_gap(self, seconds: float, count: int) -> None:
        """``count`` requests each saw a gap of ``seconds``."""
        self._run_values.append(seconds)
        self._run_counts.append(count)

    def step_gaps(self, ends: list[float], count: int) -> None:
        """``count`` requests each saw every gap between consecutive step ``ends``."""
        if len(ends) == 2:
            self._run_values.append(ends[1] - ends[0])
            self._run_counts.append(count)
            return
        self._run_values.extend([b - a for a, b in pairwise(ends)])
        self._run_counts.extend([float(count)] * (len(ends) - 1))

    def itl_samples(self) -> tuple[np.ndarray, np.ndarray]:
        """All gaps as ``(values_s, weights)``: distinct values ascending, with total counts."""
        values = np.concatenate([np.frombuffer(self._single, dtype=np.float64),
                                 np.frombuffer(self._run_values, dtype=np.float64)])
        weights = np.concatenate([np.ones(len(self._single)), np.frombuffer(self._run_counts, dtype=np.float64)])
        distinct, inverse = np.unique(values, return_inverse=True)
        return distinct, np.bincount(inverse, weights=weights, minlength=len(distinct))
