"""The timer's floor taken off measured kernel rows, for the regressors' fit and the rows priced as measured.

A pair of CUDA events around one kernel reads a few microseconds even for an empty kernel; inside
vLLM's CUDA graphs a tiny kernel costs about one.  The graph benchmark measures that floor with the
same timer (``graph_base_s``: replay of a graph, intercept over kernel counts), so every operator
time is used as ``max(median - floor, median / 2)`` and the cost model adds the per-kernel graph
cost separately.  Rows timed as graph replays (``timer`` = :data:`GRAPH_TIMER`) carry no event
floor but the gap between two kernels of a graph, which the cost model adds per kernel: they are
used as ``max(median - graph_per_kernel_s, median / 2)``.  A profile's ``fit_report.json`` records
both (``timer_floor_s``, ``graph_gap_s``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

GRAPH_TIMER = "cuda-graph"
"""The ``timer`` of rows timed as CUDA-graph replays (:class:`latsim.calibration.timing.GraphTimer`)."""


def without_floor(df: pd.DataFrame, floor_s: float, graph_gap_s: float = 0.0) -> pd.DataFrame:
    """``median_s`` less the timer floor (``graph_gap_s`` for rows replayed in graphs), never below
    half the measurement."""
    med = df["median_s"].to_numpy(np.float64)
    graph = (df["timer"] == GRAPH_TIMER).to_numpy() if "timer" in df else np.zeros(len(df), dtype=bool)
    less = np.where(graph, graph_gap_s, floor_s)
    return df.assign(median_s=np.maximum(med - less, 0.5 * med))
