"""What a simulation keeps: inter-token gaps as weighted samples, and KV/step counters.

Gaps are stored compactly: single gaps in one float array, and runs of identical gaps (a
decode run where every request sees the same step time) as (value, count) pairs, so 100k
requests of hundreds of tokens stay far below a few hundred MB.
"""

from __future__ import annotations

from array import array

import numpy as np


class Recorder:
    """Accumulates inter-token latency samples and engine counters across replicas."""

    def __init__(self) -> None:
        self._single = array("d")
        self._run_values = array("d")
        self._run_counts = array("d")
        self.num_steps = 0
        self.peak_blocks_used = 0

    def gap(self, seconds: float) -> None:
        self._single.append(seconds)

    def gaps(self, values: np.ndarray, count: int) -> None:
        """``count`` requests each saw every gap in ``values``."""
        if count > 0 and len(values):
            self._run_values.extend(values.tolist())
            self._run_counts.extend([float(count)] * len(values))

    def itl_samples(self) -> tuple[np.ndarray, np.ndarray]:
        """All gaps as ``(values_s, weights)``."""
        single = np.frombuffer(self._single, dtype=np.float64) if len(self._single) else np.empty(0)
        values = np.concatenate([single, np.frombuffer(self._run_values, dtype=np.float64)
                                 if len(self._run_values) else np.empty(0)])
        weights = np.concatenate([np.ones(len(single)), np.frombuffer(self._run_counts, dtype=np.float64)
                                  if len(self._run_counts) else np.empty(0)])
        return values, weights
