"""The Azure LLM inference trace (``TIMESTAMP, ContextTokens, GeneratedTokens``).

Timestamps look like ``2023-11-16 18:15:46.6805900``: seven fractional digits, more than
:mod:`datetime` keeps, so they become integer nanoseconds since the Unix epoch and then
seconds after the earliest request (the first row of a time-ordered file).  Accepted:
``YYYY-MM-DD[( |T)HH:MM[:SS[.fraction of up to 9 digits]]]`` with an optional ``Z`` or
``+HH:MM`` offset, the ISO-8601 subset that Arrow's CSV parser (the fast path in
:mod:`latsim.workload.csvfile`) also accepts; offset-free stamps are taken as UTC.
"""

from __future__ import annotations

import re
from datetime import date
from functools import lru_cache

import numpy as np

from latsim.workload.table import RawTable, TraceFormatError, whole_numbers

TIMESTAMP, CONTEXT, GENERATED = "TIMESTAMP", "ContextTokens", "GeneratedTokens"
AZURE_COLUMNS = (TIMESTAMP, CONTEXT, GENERATED)

_STAMP = re.compile(
    r"\s*(\d{4}-\d{2}-\d{2})(?:[ T](\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,9}))?)?)?(Z|[+-]\d{2}:?\d{2})?\s*"
)
_NS = 1_000_000_000
_EPOCH_ORDINAL = date(1970, 1, 1).toordinal()


def is_azure_header(names: list[str]) -> bool:
    """True when the header names the timestamp column that marks an Azure trace."""
    return TIMESTAMP in names


def azure_arrays(table: RawTable) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(arrival_s, input_tokens, output_tokens)`` of an Azure table, arrivals from the earliest row.

    The TIMESTAMP column holds strings, or epoch nanoseconds (int64) from a fast parser.
    """
    raw = table.columns[TIMESTAMP]
    if isinstance(raw, np.ndarray) and raw.dtype == np.int64:
        stamps = raw
    else:
        stamps = np.asarray([_nanoseconds(table, row, text) for row, text in enumerate(raw)], dtype=np.int64)
    arrival = (stamps - stamps.min()).astype(np.float64) / _NS
    return arrival, whole_numbers(table, CONTEXT, 1), whole_numbers(table, GENERATED, 1)


def _nanoseconds(table: RawTable, row: int, text: object) -> int:
    """Nanoseconds since the Unix epoch (UTC), or TraceFormatError at the row's line."""
    match = _STAMP.fullmatch(text) if isinstance(text, str) else None
    if match is None:
        raise table.fail(row, f"{TIMESTAMP}: expected 'YYYY-MM-DD HH:MM:SS[.fffffff]', got {text!r}")
    day, hh, mm, ss, frac, zone = (g or "" for g in match.groups())
    try:
        days = _ordinal(day)
    except ValueError:
        raise table.fail(row, f"{TIMESTAMP}: invalid date {day!r}") from None
    h, m, s = int(hh or 0), int(mm or 0), int(ss or 0)
    if h > 23 or m > 59 or s > 60:
        raise table.fail(row, f"{TIMESTAMP}: invalid time in {text!r}")
    seconds = (days - _EPOCH_ORDINAL) * 86_400 + h * 3600 + m * 60 + s - _offset_s(zone)
    return seconds * _NS + int(frac.ljust(9, "0"))


@lru_cache(maxsize=4096)
def _ordinal(day: str) -> int:
    """Proleptic Gregorian ordinal of ``YYYY-MM-DD`` (memoised: a trace repeats a few dates)."""
    return date.fromisoformat(day).toordinal()


def _offset_s(zone: str) -> int:
    if zone in ("", "Z"):
        return 0
    digits = zone[1:].replace(":", "")
    sign = -1 if zone[0] == "-" else 1
    return sign * (int(digits[:2]) * 3600 + int(digits[2:]) * 60)


def check_azure_columns(path: str, line: int, names: list[str]) -> None:
    """TraceFormatError at the header line unless all Azure columns are present."""
    missing = [c for c in AZURE_COLUMNS if c not in names]
    if missing:
        raise TraceFormatError(
            path, line, f"Azure trace is missing column {missing[0]!r}; header has {names}")
