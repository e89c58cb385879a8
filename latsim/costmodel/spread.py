"""Decode attention over contexts of different lengths: what a batch priced at its mean misses.

vLLM's FA3 decode call (CUDA-graph steps, up to 32 splits) costs the same for every batch of
equal contexts with the same total, but a batch whose contexts differ costs more: its work
units (one per sequence, KV head and split) no longer fill the GPU's SMs evenly.  On the H200
(``data/kernels/h200-skew-probe``, ``scripts/device_skew_probe.py --grid``) a batch of log-normal
contexts (sigma 0.8) took 1.0-1.5 x the equal batch of the same total; the excess follows the
number of work units before splitting, ``sequences x KV heads`` (none at 16 or fewer, most at
64-512, less past 2,000 at short contexts), and the mean context; it takes a spread of about
``cv_full`` (coefficient of variation of the contexts) to reach it.

:class:`DecodeSpread` holds the fitted tables (``<profile>/decode_spread.json``, written by
``scripts/fit_decode_spread.py``; one per KV-head count the grid measured, since head shapes of
the same work units did not cost the same) and prices the factor
``1 + excess(units, mean context) x min(1, cv / cv_full)``; ``excess`` is bilinear in units and
context between the table's knots (both clamped to the measured range; linear in units first,
the row kept per unit count, then in context).  Scalar and vector paths
perform the same IEEE operations (no transcendental function: ``sqrt`` is correctly rounded), so
a decode run priced at once equals its steps priced one by one, bit for bit.
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from latsim.costmodel.profile.interp import interp1, interp1_vec

SPREAD_FILE = "decode_spread.json"
Arr = npt.NDArray[np.float64]


@dataclass(frozen=True)
class KvTable:
    """The excess measured on head shapes of ``kv_heads`` KV heads: ``excess[i][j]`` at
    ``unit_knots[i]`` work units and ``ctx_knots[j]`` tokens of mean context."""

    kv_heads: int
    unit_knots: tuple[float, ...]
    ctx_knots: tuple[float, ...]
    excess: tuple[tuple[float, ...], ...]
    _rows: dict[int, tuple[tuple[float, ...], Arr]] = field(default_factory=dict, init=False, repr=False,
                                                            compare=False)
    _ctx_array: Arr = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if len(self.unit_knots) < 2 or len(self.ctx_knots) < 2:
            raise ValueError("decode spread table needs at least two knots on each axis")
        if any(len(row) != len(self.ctx_knots) for row in self.excess) or len(self.excess) != len(self.unit_knots):
            raise ValueError("decode spread table: excess must have one row per unit knot, one column per context knot")
        for knots in (self.unit_knots, self.ctx_knots):
            if any(b <= a for a, b in itertools.pairwise(knots)):
                raise ValueError(f"decode spread knots must increase, got {knots}")
        if self.kv_heads < 1:
            raise ValueError(f"decode spread table kv_heads must be >= 1, got {self.kv_heads!r}")
        object.__setattr__(self, "_ctx_array", np.asarray(self.ctx_knots, dtype=np.float64))

    def row_at(self, units: int) -> tuple[tuple[float, ...], Arr]:
        """The excess at every context knot for ``units`` work units (clamped to the knots), linear
        between the unit knots around it, as a tuple (scalar path) and an array (vector path);
        kept per ``units`` (a step's decode count repeats)."""
        found = self._rows.get(units)
        if found is None:
            u = _clamp(self.unit_knots, float(units))
            row = tuple(interp1(self.unit_knots, column, u) for column in zip(*self.excess, strict=True))
            found = (row, np.asarray(row, dtype=np.float64))
            self._rows[units] = found
        return found

    def excess_at(self, units: int, ctx: float) -> float:
        """The excess at ``units`` work units and mean context ``ctx`` (both clamped to the knots)."""
        return interp1(self.ctx_knots, self.row_at(units)[0], _clamp(self.ctx_knots, ctx))

    def excess_vec(self, units: int, ctx: Arr) -> Arr:
        """:meth:`excess_at` for an array of contexts (bitwise equal element by element)."""
        return interp1_vec(self._ctx_array, self.row_at(units)[1], np.clip(ctx, self.ctx_knots[0], self.ctx_knots[-1]))


def _clamp(knots: tuple[float, ...], x: float) -> float:
    return knots[0] if x < knots[0] else (knots[-1] if x > knots[-1] else x)


@dataclass(frozen=True)
class DecodeSpread:
    """The fitted tables (one per KV-head count measured) and the spread at which the excess
    is reached.  A deployment reads the table of the KV-head count nearest its own per GPU (in
    ratio; a tie takes the smaller)."""

    tables: tuple[KvTable, ...]
    cv_full: float
    source: str

    def __post_init__(self) -> None:
        if not self.tables:
            raise ValueError("decode spread needs at least one table")
        if not self.cv_full > 0.0:
            raise ValueError(f"decode spread cv_full must be > 0, got {self.cv_full!r}")

    def table_for(self, kv_heads: int) -> KvTable:
        """The table measured on the KV-head count nearest ``kv_heads`` (by ratio)."""
        return min(self.tables, key=lambda t: (max(t.kv_heads, kv_heads) / min(t.kv_heads, kv_heads), t.kv_heads))

    def bind(self, kv_heads: int) -> SpreadFactor:
        """The factor of a deployment of ``kv_heads`` KV heads per GPU (its table resolved once)."""
        return SpreadFactor(self.table_for(kv_heads), kv_heads, self.cv_full)

    def factor(self, seqs: int, kv_heads: int, kv: float, kv_sq: float) -> float:
        """:meth:`SpreadFactor.factor` for ``kv_heads`` KV heads."""
        return self.bind(kv_heads).factor(seqs, kv, kv_sq)

    def factor_vec(self, seqs: int, kv_heads: int, kv: Arr, kv_sq: Arr) -> Arr:
        """:meth:`SpreadFactor.factor_vec` for ``kv_heads`` KV heads."""
        return self.bind(kv_heads).factor_vec(seqs, kv, kv_sq)


@dataclass(frozen=True)
class SpreadFactor:
    """The spread factor of one deployment: its table, KV heads per GPU and ``cv_full``."""

    table: KvTable
    kv_heads: int
    cv_full: float

    def factor(self, seqs: int, kv: float, kv_sq: float) -> float:
        """Price multiplier of one decode call: ``seqs`` sequences whose contexts sum to ``kv``
        and their squares to ``kv_sq`` (0: unknown, taken as equal contexts).  Hot: plain floats."""
        if seqs < 2 or kv_sq <= 0.0:
            return 1.0
        mean = kv / seqs
        var = kv_sq / seqs - mean * mean
        if var <= 0.0 or mean <= 0.0:
            return 1.0
        share = math.sqrt(var) / mean / self.cv_full
        excess = self.table.excess_at(seqs * self.kv_heads, mean)
        return 1.0 + excess * (share if share < 1.0 else 1.0)

    def factor_vec(self, seqs: int, kv: Arr, kv_sq: Arr) -> Arr:
        """:meth:`factor` for arrays of context sums (bitwise equal element by element; a decode
        run's contexts all spread, its variance constant, takes the path without masks)."""
        if seqs < 2:
            return np.ones_like(kv)
        mean = kv / seqs
        var = kv_sq / seqs - mean * mean
        known = (kv_sq > 0.0) & (var > 0.0) & (mean > 0.0)
        if known.all():
            share = np.minimum(np.sqrt(var) / mean / self.cv_full, 1.0)
            out: Arr = 1.0 + self.table.excess_vec(seqs * self.kv_heads, mean) * share
            return out
        safe_mean = np.where(known, mean, 1.0)
        share = np.sqrt(np.where(known, var, 0.0)) / safe_mean / self.cv_full
        excess = self.table.excess_vec(seqs * self.kv_heads, safe_mean)
        out = np.where(known, 1.0 + excess * np.where(share < 1.0, share, 1.0), 1.0)
        return out


def load_decode_spread(folder: Path) -> DecodeSpread | None:
    """``folder/decode_spread.json`` as a :class:`DecodeSpread`, None when the profile has none;
    ValueError naming the file when it is unreadable or malformed."""
    path = Path(folder) / SPREAD_FILE
    if not path.is_file():
        return None
    try:
        data: dict[str, Any] = json.loads(path.read_text())
        tables = tuple(KvTable(int(t["kv_heads"]), tuple(float(x) for x in t["unit_knots"]),
                               tuple(float(x) for x in t["ctx_knots"]),
                               tuple(tuple(float(x) for x in row) for row in t["excess"])) for t in data["tables"])
        return DecodeSpread(tables, float(data["cv_full"]), str(path))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{path}: not a decode-spread file ({exc}); "
                         "rebuild it with scripts/fit_decode_spread.py") from exc
