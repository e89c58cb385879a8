"""Reading and writing request traces.

Formats, chosen by extension (each also as ``.gz``):

- ``.jsonl`` / ``.ndjson`` / ``.json``: JSON lines, one object per request with
  ``arrival_s``, ``input_tokens``, ``output_tokens`` and optionally ``prefix_group`` and
  ``prefix_tokens`` (missing in a record: -1 and 0).  Other keys and blank lines are ignored.
- ``.csv``: a header row, then one request per row.  Either the latsim columns
  ``arrival_s, input_tokens, output_tokens`` (optional ``prefix_group, prefix_tokens``, which
  go together) or, recognised by a ``TIMESTAMP`` column, the Azure LLM inference trace
  ``TIMESTAMP, ContextTokens, GeneratedTokens`` (see :mod:`latsim.workload.azure`).  Extra
  columns are ignored.

Reading sorts requests by arrival time (stable, so ties keep file order; the trace's
``source_index`` keeps each request's position in the file); every problem is a
:class:`TraceFormatError` naming the file and the 1-based line.  Writing is atomic: a
temporary file in the target's directory is filled, synced and renamed over the target.
"""

from __future__ import annotations

import gzip
import io
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from latsim.atomic import atomic_write
from latsim.workload.azure import TIMESTAMP, azure_arrays
from latsim.workload.csvfile import read_csv_table_fast, read_csv_table_slow, read_header, write_csv
from latsim.workload.jsonlfile import read_jsonl_table, write_jsonl
from latsim.workload.table import (
    LineUnknown,
    RawTable,
    TraceFormatError,
    arrivals,
    open_text,
    prefix_columns,
    whole_numbers,
)
from latsim.workload.trace import RequestTrace

__all__ = ["TraceFormatError", "open_text", "read_trace", "trace_format", "write_trace"]

_FORMATS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl", ".csv": "csv"}


def trace_format(path: str | Path) -> str:
    """``"jsonl"`` or ``"csv"`` from the extension (a trailing ``.gz`` is looked through)."""
    suffixes = [s.lower() for s in Path(path).suffixes]
    if suffixes and suffixes[-1] == ".gz":
        suffixes.pop()
    fmt = _FORMATS.get(suffixes[-1]) if suffixes else None
    if fmt is None:
        accepted = ", ".join(f"{ext}[.gz]" for ext in _FORMATS)
        raise ValueError(f"cannot tell the trace format of {str(path)!r} from its extension; "
                         f"accepted: {accepted}")
    return fmt


def read_trace(path: str | Path, *, time_scale: float = 1.0, max_requests: int | None = None) -> RequestTrace:
    """Read a trace file (format by extension, see the module docstring).

    ``time_scale`` multiplies every arrival time (0.5 replays twice as fast); it must be > 0.
    ``max_requests`` keeps only the earliest that many requests after sorting (>= 1).
    Raises TraceFormatError (a ValueError) with file name and line for malformed content,
    including an empty file or a file with no requests; OSError if the file cannot be read.
    """
    _check_replay_args(time_scale, max_requests)
    name = str(path)
    try:
        if trace_format(path) == "jsonl":
            with open_text(path) as f:
                trace = _to_trace(read_jsonl_table(f, name))
        else:
            trace = _read_csv(name)
    except UnicodeDecodeError:
        raise _not_text(name) from None
    except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
        raise TraceFormatError(name, None, f"damaged gzip file ({exc or type(exc).__name__})") from None
    return _replay(trace, time_scale, max_requests)


def _not_text(path: str) -> TraceFormatError:
    """The error for a trace that is not UTF-8 text, at the first line that does not decode."""
    opener = gzip.open if path.lower().endswith(".gz") else open
    with opener(path, "rb") as raw:
        for line, data in enumerate(raw, start=1):
            try:
                data.decode("utf-8")
            except UnicodeDecodeError as exc:
                return TraceFormatError(path, line, f"not UTF-8 text: byte 0x{data[exc.start]:02x} at column "
                                                    f"{exc.start + 1}; a trace is JSON lines or CSV text")
    return TraceFormatError(path, None, "not UTF-8 text; a trace is JSON lines or CSV text")


def write_trace(trace: RequestTrace, path: str | Path) -> None:
    """Write ``trace`` atomically in the format its extension names (latsim JSON lines or CSV).

    Arrival times are written with ``repr`` precision, so reading the file back gives equal
    arrays.  Raises ValueError for an empty trace (which :func:`read_trace` would reject).
    """
    if len(trace) == 0:
        raise ValueError(f"refusing to write an empty trace to {str(path)!r}: "
                         "read_trace rejects files with no requests")
    writer = write_jsonl if trace_format(path) == "jsonl" else write_csv
    columns = _named_columns(trace)
    _atomic_write(Path(path), lambda f: writer(list(columns), _row_chunks(columns), f))


def _read_csv(path: str) -> RequestTrace:
    """Fast columnar parse first; on any objection, the line-tracking reader decides."""
    header = read_header(path)
    fast = read_csv_table_fast(path, header)
    if fast is not None:
        try:
            return _to_trace(fast)
        except LineUnknown:
            pass
    return _to_trace(read_csv_table_slow(path, header))


def _to_trace(table: RawTable) -> RequestTrace:
    if TIMESTAMP in table.columns:
        return RequestTrace.from_arrays(*azure_arrays(table))
    arrival = arrivals(table, "arrival_s")
    input_tokens = whole_numbers(table, "input_tokens", 1)
    output_tokens = whole_numbers(table, "output_tokens", 1)
    group, shared = prefix_columns(table, input_tokens)
    return RequestTrace.from_arrays(arrival, input_tokens, output_tokens, group, shared)


def _check_replay_args(time_scale: float, max_requests: int | None) -> None:
    if not (isinstance(time_scale, (int, float)) and 0 < time_scale < float("inf")):
        raise ValueError(f"time_scale must be a finite number > 0, got {time_scale!r}")
    if max_requests is not None and (isinstance(max_requests, bool) or not isinstance(max_requests, int)
                                     or max_requests < 1):
        raise ValueError(f"max_requests must be None or an integer >= 1, got {max_requests!r}")


def _replay(trace: RequestTrace, time_scale: float, max_requests: int | None) -> RequestTrace:
    keep = slice(0, max_requests)
    cut = lambda a: None if a is None else a[keep]  # noqa: E731
    return RequestTrace(
        arrival_s=trace.arrival_s[keep] * time_scale,
        input_tokens=trace.input_tokens[keep],
        output_tokens=trace.output_tokens[keep],
        prefix_group=cut(trace.prefix_group),
        prefix_tokens=cut(trace.prefix_tokens),
        source_index=cut(trace.source_index),
    )


def _named_columns(trace: RequestTrace) -> dict[str, list[Any]]:
    """The trace's arrays as Python lists (prefix columns only when the trace has them)."""
    columns = {
        "arrival_s": trace.arrival_s.tolist(),
        "input_tokens": trace.input_tokens.tolist(),
        "output_tokens": trace.output_tokens.tolist(),
    }
    if trace.prefix_group is not None and trace.prefix_tokens is not None:
        columns["prefix_group"] = trace.prefix_group.tolist()
        columns["prefix_tokens"] = trace.prefix_tokens.tolist()
    return columns


def _row_chunks(columns: dict[str, list[Any]], size: int = 65_536) -> Iterator[list[tuple[Any, ...]]]:
    """Rows of ``columns`` in blocks of ``size``, so writing needs little extra memory."""
    values = list(columns.values())
    for start in range(0, len(values[0]), size):
        yield list(zip(*(column[start : start + size] for column in values), strict=True))


def _atomic_write(path: Path, fill: Callable[[IO[str]], None]) -> None:
    """Write text through ``fill`` atomically (gzip-compressed when ``path`` ends in .gz)."""
    atomic_write(path, lambda raw: _fill_binary(raw, fill, compress=path.name.lower().endswith(".gz")))


def _fill_binary(raw: IO[bytes], fill: Callable[[IO[str]], None], compress: bool) -> None:
    """Run ``fill`` on a UTF-8 text view of ``raw``, gzip-compressed (mtime 0) if asked."""
    sink: gzip.GzipFile | IO[bytes] = raw
    if compress:
        sink = gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=6, mtime=0)
    text = io.TextIOWrapper(sink, encoding="utf-8", newline="")
    fill(text)
    text.flush()
    text.detach()
    if compress:
        sink.close()

