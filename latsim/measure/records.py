"""The measurement file format: one run directory per load level.

A run directory holds two files:

``requests.jsonl.gz``
    One JSON object per line and per request, keys :data:`RECORD_KEYS`.  Times are seconds
    since the run's start (the driver's ``perf_counter`` at the first scheduled send; the live
    drivers round them to the microsecond):
    ``arrival_s`` the scheduled send offset, ``sent_s`` when the request actually left
    (``null`` if it never did), ``first_token_s`` the first streamed chunk that carried a token,
    ``chunk_times_s`` every token-carrying chunk's arrival, ``chunk_tokens`` the tokens in each
    of those chunks (``null`` when the protocol does not say; one per chunk is then assumed),
    ``finish_s`` the last token's arrival for ``ok`` requests or the moment the failure was
    seen otherwise.  ``output_tokens`` is what was asked for, ``output_tokens_received`` what
    came back.  ``status`` is ``"ok"``, ``"error"`` or ``"timeout"`` with ``error`` a message.
    Optional ``prefix_group`` / ``prefix_tokens`` (default -1 / 0) carry prefix sharing.
    Optional engine-side times (default ``null``: the engine did not say), on the same clock as
    the client's: ``engine_queued_s`` the engine core queued the request, ``engine_scheduled_s``
    its first scheduled step began, ``engine_first_token_s`` / ``engine_last_token_s`` the engine
    core emitted the step output carrying its first / last token.  With them TTFT splits into
    front-end (``sent_s`` to queued), queue, prefill (scheduled to first token) and output path
    (engine first token to ``first_token_s``).

``meta.json``
    One object: ``format`` (:data:`FORMAT`), ``driver``, ``num_requests``, and free-form run
    context the drivers fill in (``endpoint`` or ``engine``, ``model``, ``workload``, ``load``,
    ``start_time`` ISO-8601, ``duration_s``, ``engine_config`` snapshot, versions).

Both files are written atomically (temporary file in the same directory, then ``os.replace``);
``meta.json`` is written last, so a directory with a ``meta.json`` is complete.
"""

from __future__ import annotations

import gzip
import itertools
import json
import math
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from latsim.atomic import atomic_write_bytes

if TYPE_CHECKING:
    from latsim.measure.measurement import Measurement

FORMAT = "latsim-measurement/1"
REQUESTS_FILE = "requests.jsonl.gz"
META_FILE = "meta.json"
STATUSES = ("ok", "error", "timeout")
RECORD_KEYS = (
    "request_id", "arrival_s", "sent_s", "input_tokens", "output_tokens", "output_tokens_received",
    "first_token_s", "chunk_times_s", "chunk_tokens", "finish_s", "status", "error",
)
OPTIONAL_KEYS = {"prefix_group": -1, "prefix_tokens": 0}
ENGINE_KEYS = ("engine_queued_s", "engine_scheduled_s", "engine_first_token_s", "engine_last_token_s")
"""Optional engine-side timestamps (see the module docstring); ``None`` when unknown."""


@dataclass(frozen=True)
class RequestRecord:
    """What the client saw of one request; see the module docstring for each field's meaning.

    Invariants (checked by :meth:`validate`): ``status`` in :data:`STATUSES`; ``chunk_tokens``
    is ``None`` or as long as ``chunk_times_s``; chunk times never decrease; an ``ok`` record
    has a ``sent_s``, a ``first_token_s`` and a ``finish_s``.
    """

    request_id: str
    arrival_s: float
    sent_s: float | None
    input_tokens: int
    output_tokens: int
    output_tokens_received: int
    first_token_s: float | None
    chunk_times_s: tuple[float, ...]
    chunk_tokens: tuple[int, ...] | None
    finish_s: float | None
    status: str
    error: str | None = None
    prefix_group: int = -1
    prefix_tokens: int = 0
    engine_queued_s: float | None = None
    engine_scheduled_s: float | None = None
    engine_first_token_s: float | None = None
    engine_last_token_s: float | None = None

    def validate(self) -> None:
        """Raise ``ValueError`` naming the first broken invariant."""
        if self.status not in STATUSES:
            raise ValueError(f"status {self.status!r} is not one of {STATUSES}")
        for name in ("arrival_s", "sent_s", "first_token_s", "finish_s"):
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name}={value!r} must be a finite number >= 0 or null")
        for name in ENGINE_KEYS:
            value = getattr(self, name)
            if value is not None and not math.isfinite(value):
                raise ValueError(f"{name}={value!r} must be a finite number or null")
        if self.input_tokens < 1 or self.output_tokens < 1 or self.output_tokens_received < 0:
            raise ValueError(
                f"input_tokens={self.input_tokens}, output_tokens={self.output_tokens} must be >= 1 "
                f"and output_tokens_received={self.output_tokens_received} >= 0"
            )
        _check_chunks(self.chunk_times_s, self.chunk_tokens)
        if self.status == "ok" and None in (self.sent_s, self.first_token_s, self.finish_s):
            raise ValueError("an 'ok' record needs sent_s, first_token_s and finish_s")

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        for name in ENGINE_KEYS:
            if out[name] is None:
                del out[name]
        out["chunk_times_s"] = list(self.chunk_times_s)
        out["chunk_tokens"] = None if self.chunk_tokens is None else list(self.chunk_tokens)
        return out


def _check_chunks(times: Sequence[float], tokens: Sequence[int] | None) -> None:
    if tokens is not None and len(tokens) != len(times):
        raise ValueError(f"chunk_tokens has {len(tokens)} entries, chunk_times_s has {len(times)}")
    if any(b < a for a, b in itertools.pairwise(times)):
        raise ValueError("chunk_times_s must be non-decreasing")
    if tokens is not None and any(k < 1 for k in tokens):
        raise ValueError("chunk_tokens entries must be >= 1 (chunks without tokens are not recorded)")


def record_from_json(obj: Any) -> RequestRecord:
    """Parse one decoded JSON line; raise ``ValueError`` naming the missing or mistyped key."""
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
    missing = [k for k in RECORD_KEYS if k not in obj]
    if missing:
        raise ValueError(f"missing key(s) {missing}")
    try:
        record = RequestRecord(
            request_id=str(obj["request_id"]),
            arrival_s=float(obj["arrival_s"]),
            sent_s=_opt_float(obj["sent_s"]),
            input_tokens=_int(obj["input_tokens"], "input_tokens"),
            output_tokens=_int(obj["output_tokens"], "output_tokens"),
            output_tokens_received=_int(obj["output_tokens_received"], "output_tokens_received"),
            first_token_s=_opt_float(obj["first_token_s"]),
            chunk_times_s=tuple(float(t) for t in _list(obj["chunk_times_s"], "chunk_times_s")),
            chunk_tokens=_opt_int_tuple(obj["chunk_tokens"]),
            finish_s=_opt_float(obj["finish_s"]),
            status=str(obj["status"]),
            error=None if obj["error"] is None else str(obj["error"]),
            prefix_group=_int(obj.get("prefix_group", -1), "prefix_group"),
            prefix_tokens=_int(obj.get("prefix_tokens", 0), "prefix_tokens"),
            **{name: _opt_float(obj.get(name)) for name in ENGINE_KEYS},
        )
    except TypeError as exc:
        raise ValueError(f"mistyped value: {exc}") from None
    record.validate()
    return record


def _opt_float(value: Any) -> float | None:
    return None if value is None else float(value)


def _int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
        raise ValueError(f"{name}={value!r} must be an integer")
    return int(value)


def _list(value: Any, name: str) -> list[Any]:
    if not isinstance(value, list):
        raise ValueError(f"{name} must be a list, got {type(value).__name__}")
    return value


def _opt_int_tuple(value: Any) -> tuple[int, ...] | None:
    if value is None:
        return None
    return tuple(_int(k, "chunk_tokens[]") for k in _list(value, "chunk_tokens"))


# ---------------------------------------------------------------------------------- writing


def write_run(out_dir: str | os.PathLike[str], records: Iterable[RequestRecord],
              meta: Mapping[str, Any]) -> Path:
    """Write ``records`` and ``meta`` as a run directory (created if needed); return its path.

    Every record is validated first; ``meta`` gains ``format`` and ``num_requests``.  The
    requests file is replaced before the meta file, each atomically.
    """
    path = Path(out_dir)
    path.mkdir(parents=True, exist_ok=True)
    rows = list(records)
    for rec in rows:
        rec.validate()
    body = "".join(json.dumps(r.to_json(), allow_nan=False) + "\n" for r in rows)
    atomic_write_bytes(path / REQUESTS_FILE, gzip.compress(body.encode(), mtime=0))
    full_meta = {**dict(meta), "format": FORMAT, "num_requests": len(rows)}
    atomic_write_bytes(path / META_FILE, (json.dumps(full_meta, indent=2, default=str) + "\n").encode())
    return path


# ---------------------------------------------------------------------------------- reading


def read_meta(run_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """Load and check ``meta.json``; errors name the file."""
    path = Path(run_dir) / META_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file (is {Path(run_dir)} a run directory?)")
    try:
        meta = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(meta, dict):
        raise ValueError(f"{path}: expected a JSON object, got {type(meta).__name__}")
    if meta.get("format") != FORMAT:
        raise ValueError(f"{path}: format {meta.get('format')!r} is not {FORMAT!r}")
    if "driver" not in meta:
        raise ValueError(f"{path}: missing key 'driver'")
    return meta


def iter_records(run_dir: str | os.PathLike[str]) -> Iterator[RequestRecord]:
    """Yield the records of ``requests.jsonl.gz``; errors name the file and the line number."""
    path = Path(run_dir) / REQUESTS_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    seen: set[str] = set()
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        lineno = 0
        try:
            for lineno, line in enumerate(fh, start=1):
                if line.strip():
                    rec = _parse_line(line, path, lineno, seen)
                    seen.add(rec.request_id)
                    yield rec
        except (OSError, EOFError, UnicodeDecodeError) as exc:
            raise ValueError(f"{path}: corrupt gzip stream after line {lineno} ({exc})") from None


def _parse_line(line: str, path: Path, lineno: int, seen: set[str]) -> RequestRecord:
    try:
        rec = record_from_json(json.loads(line))
    except (json.JSONDecodeError, ValueError) as exc:
        raise ValueError(f"{path}:{lineno}: {exc}") from None
    if rec.request_id in seen:
        raise ValueError(f"{path}:{lineno}: duplicate request_id {rec.request_id!r}")
    return rec


def load_run(run_dir: str | os.PathLike[str]) -> Measurement:
    """Load a run directory as a :class:`~latsim.measure.measurement.Measurement`.

    Raises ``FileNotFoundError`` if a file is missing and ``ValueError`` naming the file (and
    line) for anything malformed, including a ``num_requests`` that disagrees with the lines.
    """
    from latsim.measure.measurement import Measurement

    meta = read_meta(run_dir)
    records = list(iter_records(run_dir))
    expected = meta.get("num_requests")
    if expected is not None and expected != len(records):
        raise ValueError(
            f"{Path(run_dir) / META_FILE}: num_requests={expected} but "
            f"{REQUESTS_FILE} holds {len(records)} records"
        )
    return Measurement.from_records(records, meta, source=str(run_dir))
