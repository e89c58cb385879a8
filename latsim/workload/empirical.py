"""Reading a file of token lengths for ``empirical:PATH[#COLUMN]`` distributions.

Accepted files (each may be ``.gz`` compressed):

- ``.json``: a JSON array of numbers, or of objects from which ``COLUMN`` is taken.
- anything else: text.  Blank lines and lines starting with ``#`` are skipped.  Without a
  header, every line holds one or more numbers separated by commas or whitespace.  If the
  first line is not numeric it is a CSV header: the column named ``COLUMN`` is read (with a
  single column, ``COLUMN`` may be omitted), so a latsim trace CSV works with
  ``#input_tokens``.

Every length must be a whole number >= 1; errors name the file and the line (or entry).
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path
from typing import Any

import numpy as np

from latsim.workload.table import TraceFormatError, open_text

_SEPARATORS = re.compile(r"[,\s]+")


def read_lengths_file(path: str | Path, column: str | None = None) -> np.ndarray:
    """Lengths in ``path`` as an int64 array (see the module docstring for the formats)."""
    name = str(path)
    with open_text(path) as f:
        text = f.read()
    if name.lower().removesuffix(".gz").endswith(".json"):
        lengths = _json_lengths(name, text, column)
    else:
        cells = _text_cells(name, text.splitlines(), column)
        lengths = [_length(name, line, "", cell) for line, cell in cells]
    if not lengths:
        raise TraceFormatError(name, None, "holds no lengths")
    return np.asarray(lengths, dtype=np.int64)


def _length(path: str, line: int | None, where: str, cell: Any) -> int:
    """One whole-number length >= 1; ``where`` prefixes the message (e.g. a JSON entry)."""
    try:
        value = float(cell) if not isinstance(cell, bool) else None
    except (TypeError, ValueError):
        value = None
    if value is None or not value.is_integer() or value < 1:
        raise TraceFormatError(path, line, f"{where}expected a whole-number length >= 1, got {cell!r}")
    return int(value)


def _json_lengths(path: str, text: str, column: str | None) -> list[int]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise TraceFormatError(path, err.lineno, f"invalid JSON: {err.msg}") from None
    if not isinstance(data, list):
        raise TraceFormatError(path, 1, f"expected a JSON array of lengths, got {type(data).__name__}")
    cells = data if column is None else [_field(path, i, item, column) for i, item in enumerate(data, 1)]
    return [_length(path, None, f"entry {i}: ", cell) for i, cell in enumerate(cells, 1)]


def _field(path: str, entry: int, item: Any, column: str) -> Any:
    if not isinstance(item, dict) or column not in item:
        raise TraceFormatError(path, None, f"entry {entry}: expected an object with key {column!r}")
    return item[column]


def _text_cells(path: str, lines: list[str], column: str | None) -> list[tuple[int, Any]]:
    content = [(n, text) for n, text in enumerate(lines, start=1) if text.strip() and text.lstrip()[0] != "#"]
    if not content:
        return []
    first = _SEPARATORS.split(content[0][1].strip())
    if all(_is_number(cell) for cell in first):
        if column is not None:
            raise TraceFormatError(path, content[0][0], f"column {column!r} requested but there is no header")
        return [(n, cell) for n, text in content for cell in _SEPARATORS.split(text.strip())]
    return _csv_column(path, content, column)


def _csv_column(path: str, content: list[tuple[int, str]], column: str | None) -> list[tuple[int, Any]]:
    header_line, header = content[0]
    names = [name.strip() for name in next(csv.reader([header]))]
    if column is None and len(names) != 1:
        raise TraceFormatError(path, header_line, f"several columns {names}: pick one with PATH#COLUMN")
    wanted = column if column is not None else names[0]
    if wanted not in names:
        raise TraceFormatError(path, header_line, f"no column {wanted!r}; header has {names}")
    index = names.index(wanted)
    out = []
    for line, text in content[1:]:
        row = next(csv.reader([text]))
        if len(row) != len(names):
            raise TraceFormatError(path, line, f"expected {len(names)} fields (the header's), got {len(row)}")
        out.append((line, row[index].strip()))
    return out


def _is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True
