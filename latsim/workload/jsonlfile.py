"""JSON-lines traces: one object per request.

Each non-blank line is an object with numeric ``arrival_s``, ``input_tokens`` and
``output_tokens``; ``prefix_group`` and ``prefix_tokens`` are optional (a record without
them gets -1 and 0; if no record has them the trace has no prefix arrays).  Other keys are
ignored.  Numbers must be JSON numbers: strings, booleans and null are errors.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import IO, Any

from latsim.workload.table import RawTable, TraceFormatError

REQUIRED = ("arrival_s", "input_tokens", "output_tokens")
PREFIX_DEFAULTS = {"prefix_group": -1, "prefix_tokens": 0}
_MISSING = object()


def read_jsonl_table(f: IO[str], path: str) -> RawTable:
    """Records of ``f`` as columns with their lines; TraceFormatError names the bad line."""
    records: list[dict[str, Any]] = []
    lines: list[int] = []
    for line, text in enumerate(f, start=1):
        if text.strip():
            records.append(_record(path, line, text))
            lines.append(line)
    if not records:
        raise TraceFormatError(path, 1, "empty file: no JSON records")
    names = list(REQUIRED)
    if any(key in record for record in records for key in PREFIX_DEFAULTS):
        names += PREFIX_DEFAULTS
    table = RawTable(path, {name: _column(records, name) for name in names}, lines)
    for name in names:
        _check_numbers(table, name)
    return table


def _record(path: str, line: int, text: str) -> dict[str, Any]:
    try:
        record = json.loads(text)
    except json.JSONDecodeError as err:
        raise TraceFormatError(path, line, f"invalid JSON: {err.msg} (column {err.colno})") from None
    if not isinstance(record, dict):
        raise TraceFormatError(path, line, f"expected a JSON object per line, got {type(record).__name__}")
    return record


def _column(records: list[dict[str, Any]], name: str) -> list[Any]:
    default = PREFIX_DEFAULTS.get(name, _MISSING)
    return [record.get(name, default) for record in records]


def _check_numbers(table: RawTable, name: str) -> None:
    """TraceFormatError at the first record whose ``name`` is missing or not a JSON number."""
    cells = table.columns[name]
    bad = next((i for i, cell in enumerate(cells) if type(cell) not in (int, float)), None)
    if bad is None:
        return
    if cells[bad] is _MISSING:
        raise table.fail(bad, f"missing key {name!r}; expected {', '.join(REQUIRED)}")
    raise table.fail(bad, f"{name}: expected a number, got {cells[bad]!r}")


def write_jsonl(names: list[str], chunks: Iterable[list[tuple[Any, ...]]], f: IO[str]) -> None:
    """One object per row, keys ``names``; numbers written with ``repr`` (exact for floats)."""
    keys = [json.dumps(name) + ": " for name in names]
    for rows in chunks:
        f.write("".join(_object(keys, row) for row in rows))


def _object(keys: list[str], row: tuple[Any, ...]) -> str:
    return "{" + ", ".join(key + repr(value) for key, value in zip(keys, row, strict=True)) + "}\n"
