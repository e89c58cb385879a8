"""Raw trace columns with their source line numbers, and their checked conversion to arrays.

Readers (CSV, JSON lines, Azure) only split text into :class:`RawTable` columns; every value
check lives here so that all formats report the same errors, each as a
:class:`TraceFormatError` carrying the file name and the 1-based line of the offending value.

A fast reader may build a table without line numbers (``lines=None``).  Any problem found in
such a table raises :class:`LineUnknown` instead, and the caller re-reads the file with the
line-tracking reader, which either reports the error precisely or (if only the fast parser
objected) succeeds.  So the fast path changes speed, never results or messages.
"""

from __future__ import annotations

import gzip
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np

MAX_EXACT_INT = 2.0**53
"""Token counts above this cannot be represented exactly once parsed as floats."""


class TraceFormatError(ValueError):
    """A trace file that cannot be read; ``path`` and ``line`` (1-based, or None) locate it."""

    def __init__(self, path: str | Path, line: int | None, message: str) -> None:
        self.path = str(path)
        self.line = line
        self.reason = message
        where = f"{self.path}:{line}" if line is not None else self.path
        super().__init__(f"{where}: {message}")


class LineUnknown(Exception):
    """A table read without line numbers has a problem: re-read it with line tracking."""


def open_text(path: str | Path) -> IO[str]:
    """Open ``path`` for reading as UTF-8 text (BOM tolerated), decompressing ``.gz``."""
    if str(path).lower().endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8-sig", newline="")
    return open(path, encoding="utf-8-sig", newline="")


@dataclass(frozen=True, eq=False)
class RawTable:
    """Columns of raw cell values (strings, JSON numbers, or arrays from a fast parser).

    ``lines[i]`` is the 1-based line of row ``i``, or ``lines`` is None when unknown.
    """

    path: str
    columns: dict[str, Any]
    lines: list[int] | None

    def fail(self, row: int, message: str) -> Exception:
        """The error for ``row`` (an index into the columns), ready to raise."""
        if self.lines is None:
            return LineUnknown(message)
        return TraceFormatError(self.path, self.lines[row], message)


def floats(table: RawTable, name: str) -> np.ndarray:
    """Column ``name`` as finite float64 values; the first bad cell raises TraceFormatError."""
    raw = table.columns[name]
    try:
        values = np.asarray(raw, dtype=np.float64)
    except (ValueError, TypeError):
        raise _first_non_numeric(table, name) from None
    bad = np.flatnonzero(~np.isfinite(values))
    if bad.size:
        raise table.fail(int(bad[0]), f"{name}: expected a finite number, got {raw[bad[0]]!r}")
    return values


def whole_numbers(table: RawTable, name: str, minimum: int) -> np.ndarray:
    """Column ``name`` as int64 whole numbers >= ``minimum``, else TraceFormatError at the line."""
    values = floats(table, name)
    bad = np.flatnonzero((values != np.floor(values)) | (np.abs(values) > MAX_EXACT_INT))
    if bad.size:
        raise table.fail(int(bad[0]), f"{name}: expected a whole number, got {table.columns[name][bad[0]]!r}")
    low = np.flatnonzero(values < minimum)
    if low.size:
        got = table.columns[name][low[0]]
        raise table.fail(int(low[0]), f"{name}: must be >= {minimum}, got {got!r}")
    return values.astype(np.int64)


def arrivals(table: RawTable, name: str) -> np.ndarray:
    """Column ``name`` as arrival seconds (finite and >= 0), else TraceFormatError."""
    values = floats(table, name)
    neg = np.flatnonzero(values < 0)
    if neg.size:
        got = table.columns[name][neg[0]]
        raise table.fail(int(neg[0]), f"{name}: arrival time must be >= 0, got {got!r}")
    return values


def prefix_columns(table: RawTable, input_tokens: np.ndarray) -> tuple[np.ndarray | None, np.ndarray | None]:
    """Optional ``prefix_group`` (>= -1) and ``prefix_tokens`` (0..input_tokens), or (None, None)."""
    if "prefix_group" not in table.columns:
        return None, None
    group = whole_numbers(table, "prefix_group", minimum=-1)
    shared = whole_numbers(table, "prefix_tokens", minimum=0)
    over = np.flatnonzero(shared > input_tokens)
    if over.size:
        i = int(over[0])
        raise table.fail(i, f"prefix_tokens: {shared[i]} exceeds the {input_tokens[i]} input tokens")
    return group, shared


def _first_non_numeric(table: RawTable, name: str) -> Exception:
    for row, cell in enumerate(table.columns[name]):
        try:
            float(cell)
        except (ValueError, TypeError):
            return table.fail(row, f"{name}: expected a number, got {cell!r}")
    return table.fail(0, f"{name}: values are not numeric")
