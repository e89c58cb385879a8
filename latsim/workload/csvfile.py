"""CSV traces: the header contract, a fast columnar reader, a line-tracking reader, a writer.

The header decides the flavour: a ``TIMESTAMP`` column means the Azure trace (all of
``TIMESTAMP, ContextTokens, GeneratedTokens`` required), anything else must carry
``arrival_s, input_tokens, output_tokens`` (plus ``prefix_group`` and ``prefix_tokens``
together, or neither).  Column names are matched after stripping spaces; other columns are
ignored; blank lines are skipped but still counted for line numbers.

Two readers share that contract: :func:`read_csv_table_fast` (pyarrow's multi-threaded
parser: numbers as float64, Azure stamps as epoch nanoseconds, no line numbers; about 20x
faster on million-row traces) and :func:`read_csv_table_slow` (the :mod:`csv` module, cells
as strings, every row's line).  ``read_trace`` uses the slow one only when the fast one
objects, so results and error messages are those of the line-tracking reader.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import IO, Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

from latsim.workload.azure import AZURE_COLUMNS, TIMESTAMP, check_azure_columns, is_azure_header
from latsim.workload.table import RawTable, TraceFormatError, open_text

REQUIRED = ("arrival_s", "input_tokens", "output_tokens")
PREFIX = ("prefix_group", "prefix_tokens")


@dataclass(frozen=True)
class Header:
    """The header row: its ``line``, the raw and stripped ``names``, and the columns to read."""

    line: int
    raw: tuple[str, ...]
    names: tuple[str, ...]
    wanted: tuple[str, ...]


def read_header(path: str) -> Header:
    """The checked header of ``path``; TraceFormatError for an empty file or missing columns."""
    with open_text(path) as f:
        reader = csv.reader(f)
        line, row = next(_content_rows(reader), (1, []))
    if not row:
        raise TraceFormatError(path, 1, "empty file: expected a header row, then one request per row")
    names = tuple(cell.strip() for cell in row)
    return Header(line, tuple(row), names, _wanted_columns(path, line, list(names)))


def _wanted_columns(path: str, line: int, names: list[str]) -> tuple[str, ...]:
    if is_azure_header(names):
        check_azure_columns(path, line, names)
        return AZURE_COLUMNS
    wanted = REQUIRED + (PREFIX if any(p in names for p in PREFIX) else ())
    missing = [name for name in wanted if name not in names]
    if missing:
        raise TraceFormatError(
            path, line, f"missing column {missing[0]!r}; header has {names}, expected {', '.join(REQUIRED)} "
            f"(optional {', '.join(PREFIX)}) or the Azure {', '.join(AZURE_COLUMNS)}")
    return wanted


def read_csv_table_fast(path: str, header: Header) -> RawTable | None:
    """Columns via pyarrow (numbers as float64 arrays, lines unknown), or None if it objects."""
    if len(set(header.raw)) != len(header.raw):
        return None  # duplicate names: leave the first-wins rule to the slow reader
    raw_names = {name: header.raw[header.names.index(name)] for name in header.wanted}
    table = None
    for stamp_type in (pa.timestamp("ns"), pa.timestamp("ns", tz="UTC")):  # without, then with offsets
        types = {raw: (stamp_type if name == TIMESTAMP else pa.float64()) for name, raw in raw_names.items()}
        table = _arrow_read(path, types)
        if table is not None or TIMESTAMP not in raw_names:
            break
    if table is None or table.num_rows == 0 or any(c.null_count for c in table.columns):
        return None
    columns: dict[str, Any] = {name: _arrow_numbers(table.column(raw)) for name, raw in raw_names.items()}
    return RawTable(path, columns, None)


def _arrow_read(path: str, types: dict[str, pa.DataType]) -> pa.Table | None:
    options = pacsv.ConvertOptions(column_types=types, include_columns=list(types))
    try:
        return pacsv.read_csv(path, convert_options=options)
    except (pa.ArrowException, KeyError, ValueError):
        return None


def _arrow_numbers(column: pa.ChunkedArray) -> np.ndarray:
    """float64 values, or int64 epoch nanoseconds for a timestamp column."""
    if pa.types.is_timestamp(column.type):
        column = column.cast(pa.int64())
    return column.to_numpy()


def read_csv_table_slow(path: str, header: Header) -> RawTable:
    """Cells as strings with the line of every row; TraceFormatError for ragged or empty data."""
    index = [header.names.index(name) for name in header.wanted]
    rows: list[list[str]] = []
    lines: list[int] = []
    with open_text(path) as f:
        reader = csv.reader(f)
        for line, row in _content_rows(reader):
            if line <= header.line:
                continue
            if len(row) != len(header.names):
                message = f"expected {len(header.names)} fields (the header's), got {len(row)}"
                raise TraceFormatError(path, line, message)
            rows.append(row)
            lines.append(line)
    if not rows:
        raise TraceFormatError(path, header.line + 1, "no requests after the header")
    columns = {name: [row[i] for row in rows] for name, i in zip(header.wanted, index, strict=True)}
    return RawTable(path, columns, lines)


def _content_rows(reader: Any) -> Iterator[tuple[int, list[str]]]:
    """``(line, row)`` for each non-blank CSV row; ``line`` is where the row ends."""
    for row in reader:
        if len(row) > 1 or (row and row[0].strip()):
            yield reader.line_num, row


def write_csv(names: list[str], chunks: Iterable[list[tuple[Any, ...]]], f: IO[str]) -> None:
    """A header of ``names``, then each row (Python numbers, written with ``repr``)."""
    f.write(",".join(names) + "\n")
    for rows in chunks:
        f.write("".join(",".join(map(repr, row)) + "\n" for row in rows))
