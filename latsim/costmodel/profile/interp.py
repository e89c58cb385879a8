"""Piecewise-linear interpolation with bitwise-identical scalar and numpy paths.

The calibrated cost model prices one step with the scalar functions (pure Python floats,
``bisect``) and a run of decode steps with the vector ones (``numpy.searchsorted``).  Both do
the same IEEE-754 operations in the same order -- index, ``t = (x - x0) / (x1 - x0)``,
``v0 + t * (v1 - v0)`` -- and use no transcendental function, so element ``i`` of a vector
result equals the scalar result at ``x[i]`` exactly.  Outside the knots the end segments are
extended linearly (callers clamp where that would be wrong).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

Arr = npt.NDArray[np.float64]


def _index(knots: Sequence[float], x: float) -> int:
    i = bisect_right(knots, x) - 1
    return 0 if i < 0 else (len(knots) - 2 if i > len(knots) - 2 else i)


def interp1(knots: Sequence[float], vals: Sequence[float], x: float) -> float:
    """Value at ``x`` of the line through the knots (scalar path)."""
    i = _index(knots, x)
    t = (x - knots[i]) / (knots[i + 1] - knots[i])
    return vals[i] + t * (vals[i + 1] - vals[i])


def interp1_vec(knots: Arr, vals: Arr, x: Arr) -> Arr:
    """:func:`interp1` for an array ``x`` (bitwise equal element by element)."""
    i = np.minimum(np.maximum(np.searchsorted(knots, x, side="right") - 1, 0), len(knots) - 2)
    t = (x - knots[i]) / (knots[i + 1] - knots[i])
    out: Arr = vals[i] + t * (vals[i + 1] - vals[i])
    return out


def bilinear(xk: Sequence[float], yk: Sequence[float], rows: Sequence[Sequence[float]], x: float, y: float) -> float:
    """Value at scalar ``(x, y)`` of the table ``rows[i][j]`` over knots ``xk[i], yk[j]``."""
    i = _index(xk, x)
    tx = (x - xk[i]) / (xk[i + 1] - xk[i])
    a = interp1(yk, rows[i], y)
    b = interp1(yk, rows[i + 1], y)
    return a + tx * (b - a)


def bilinear_vec(xk: Sequence[float], yk: Arr, rows: Arr, x: float, y: Arr) -> Arr:
    """:func:`bilinear` for a scalar ``x`` and an array ``y`` (bitwise equal to the scalar path)."""
    i = _index(xk, x)
    tx = (x - xk[i]) / (xk[i + 1] - xk[i])
    a = interp1_vec(yk, rows[i], y)
    b = interp1_vec(yk, rows[i + 1], y)
    out: Arr = a + tx * (b - a)
    return out


def knots(lo: int, dense_to: int, hi: float, ratio: float) -> list[float]:
    """Every integer ``lo..dense_to``, then geometric steps of ``ratio`` (rounded) up to ``hi``."""
    out = [float(v) for v in range(lo, dense_to + 1)]
    v = float(dense_to)
    while v < hi:
        v = float(max(round(v * ratio), v + 1))
        out.append(min(v, float(hi)))
    return out
