"""Read other benchmark clients' per-request results as a :class:`Measurement`.

``vllm bench serve --save-result --save-detailed`` (:func:`import_vllm_bench`)
    One JSON object (or several, one per line, with ``--append-result``) holding per-request
    lists: ``input_lens``, ``output_lens`` (tokens received; 0 for failures), ``ttfts`` (s),
    ``itls`` (list of chunk gaps per request, s), ``start_times`` (``perf_counter`` at send,
    s; newer versions), ``latencies`` (s), ``errors`` ("" when fine).  Arrivals are
    ``start_times`` relative to the earliest; without ``start_times`` every arrival is 0 and
    ``meta["arrivals_known"]`` is false.  Chunk ``j`` arrives at ``start + ttft + sum(itls[:j])``.

AIPerf ``profile_export.jsonl`` (:func:`import_aiperf`)
    One record per line: ``metadata`` (``request_start_ns``, ``request_end_ns`` wall-clock
    ns, optional ``credit_issued_ns``, ``benchmark_phase``), ``metrics`` (name ->
    ``{"value", "unit"}``: ``time_to_first_token``, ``inter_chunk_latency`` (list),
    ``request_latency``, ``input_sequence_length``, ``output_sequence_length``; failed records
    carry only ``error_isl``) and ``error`` (``null`` or ``{code, type, message}``).  Warm-up
    records are skipped.  ``sent_s`` is ``request_start_ns``; ``arrival_s`` is
    ``credit_issued_ns`` when present (when the rate limiter released it), else the same.

Neither format records the output length that was *asked for*; it is taken to be the length
received, and for failed requests (which received nothing) the median of the successful
ones (1 if none succeeded).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from latsim.measure.measurement import Measurement
from latsim.measure.records import RequestRecord, write_run

VLLM_REQUIRED = ("input_lens", "output_lens", "ttfts", "itls")
_UNIT_S = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0, "sec": 1.0, "seconds": 1.0}


def _chunk_times(start: float, ttft: float, gaps: Sequence[float]) -> tuple[float, ...]:
    return tuple((start + ttft + np.concatenate([[0.0], np.cumsum(gaps)])).tolist())


def _fill_requested(outputs: list[int]) -> list[int]:
    ok = [n for n in outputs if n > 0]
    fill = int(np.median(ok)) if ok else 1
    return [n if n > 0 else fill for n in outputs]


def _finish(records: list[RequestRecord], meta: dict[str, Any], path: Path,
            out_dir: str | os.PathLike[str] | None) -> Measurement:
    if out_dir is not None:
        write_run(out_dir, records, meta)
    return Measurement.from_records(records, meta, source=str(path))


# ----------------------------------------------------------------------------- vllm bench


def _read_json_docs(path: Path) -> list[Any]:
    text, docs, pos = path.read_text(), [], 0
    decoder = json.JSONDecoder()
    while pos < len(text):
        if text[pos].isspace():
            pos += 1
            continue
        try:
            doc, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}: not valid JSON at line {exc.lineno} ({exc.msg})") from None
        docs.append(doc)
    if not docs:
        raise ValueError(f"{path}: empty file")
    return docs


def _vllm_columns(doc: Any, path: Path) -> dict[str, list[Any]]:
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: expected a JSON object, got {type(doc).__name__}")
    missing = [k for k in VLLM_REQUIRED if k not in doc]
    if missing:
        raise ValueError(f"{path}: missing per-request key(s) {missing}; was it saved with "
                         "`vllm bench serve --save-result --save-detailed`?")
    n = len(doc["input_lens"])
    cols = {k: list(doc[k]) for k in (*VLLM_REQUIRED, "start_times", "errors") if k in doc}
    bad = {k: len(v) for k, v in cols.items() if len(v) != n}
    if bad:
        raise ValueError(f"{path}: per-request lists differ in length: input_lens has {n}, {bad}")
    cols.setdefault("start_times", [0.0] * n)
    cols.setdefault("errors", [""] * n)
    return cols


def _vllm_record(i: int, c: dict[str, list[Any]], t0: float, requested: int) -> RequestRecord:
    start = float(c["start_times"][i]) - t0
    error = c["errors"][i] or None
    ok = error is None and c["output_lens"][i] > 0
    times = _chunk_times(start, float(c["ttfts"][i]), c["itls"][i] or []) if ok else ()
    return RequestRecord(
        request_id=f"bench-{i}", arrival_s=start, sent_s=start,
        input_tokens=max(1, int(c["input_lens"][i])), output_tokens=requested,
        output_tokens_received=int(c["output_lens"][i]), first_token_s=times[0] if ok else None,
        chunk_times_s=times, chunk_tokens=None, finish_s=times[-1] if ok else start,
        status="ok" if ok else "error", error=None if ok else str(error or "no tokens received"),
    )


def import_vllm_bench(path: str | os.PathLike[str], out_dir: str | os.PathLike[str] | None = None,
                      which: int = -1) -> Measurement:
    """Import a ``vllm bench serve --save-detailed`` result (``which`` picks one of several
    appended results); optionally also write it as a run directory."""
    src = Path(path)
    doc = _read_json_docs(src)[which]
    cols = _vllm_columns(doc, src)
    n = len(cols["input_lens"])
    t0 = min(map(float, cols["start_times"]), default=0.0)
    requested = _fill_requested([int(v) for v in cols["output_lens"]])
    records = [_vllm_record(i, cols, t0, requested[i]) for i in range(n)]
    rate = doc.get("request_rate", "inf")
    meta = {
        "driver": "vllm-bench-serve", "imported_from": str(src),
        "arrivals_known": "start_times" in doc,
        "model": {"name": doc.get("model_id")}, "backend": doc.get("backend"),
        "start_time": doc.get("date"), "duration_s": doc.get("duration"),
        "load": {"mode": "burst" if str(rate) == "inf" else "open", "qps": rate,
                 "burstiness": doc.get("burstiness"), "concurrency": doc.get("max_concurrency")},
    }
    return _finish(records, meta, src, out_dir)


# ----------------------------------------------------------------------------------- aiperf


def _metric(metrics: dict[str, Any], name: str, scale_to_s: bool = False) -> Any:
    entry = metrics.get(name)
    if not isinstance(entry, dict) or "value" not in entry:
        return None
    value = entry["value"]
    if not scale_to_s:
        return value
    unit = str(entry.get("unit", "ms"))
    if unit not in _UNIT_S:
        raise ValueError(f"metric {name!r} has unit {unit!r}; known time units: {sorted(_UNIT_S)}")
    factor = _UNIT_S[unit]
    return [float(v) * factor for v in value] if isinstance(value, list) else float(value) * factor


def _aiperf_lines(path: Path) -> list[tuple[int, dict[str, Any]]]:
    rows = []
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{lineno}: not valid JSON ({exc.msg})") from None
            meta = obj.get("metadata") if isinstance(obj, dict) else None
            if not isinstance(meta, dict) or "request_start_ns" not in meta:
                raise ValueError(f"{path}:{lineno}: missing metadata.request_start_ns")
            if meta.get("benchmark_phase", "profiling") != "warmup":
                rows.append((lineno, obj))
    return rows


def _aiperf_status(error: Any) -> tuple[str, str | None]:
    if not error:
        return "ok", None
    if not isinstance(error, dict):
        return "error", str(error)
    kind = str(error.get("type") or "")
    text = f"{kind} ({error.get('code')}): {error.get('message')}"
    return ("timeout" if "timeout" in kind.lower() else "error"), text


def _aiperf_record(obj: dict[str, Any], t0_ns: int, requested: int) -> RequestRecord:
    md, metrics = obj["metadata"], obj.get("metrics") or {}
    sent = (int(md["request_start_ns"]) - t0_ns) * 1e-9
    arrival = (int(md.get("credit_issued_ns") or md["request_start_ns"]) - t0_ns) * 1e-9
    status, error = _aiperf_status(obj.get("error"))
    ttft = _metric(metrics, "time_to_first_token", scale_to_s=True)
    if status == "ok" and ttft is None:
        status, error = "error", "no time_to_first_token metric"
    ok = status == "ok"
    gaps = _metric(metrics, "inter_chunk_latency", scale_to_s=True) or []
    times = _chunk_times(sent, ttft, gaps) if ok else ()
    received = _metric(metrics, "output_sequence_length") or _metric(metrics, "output_token_count")
    isl = _metric(metrics, "input_sequence_length") or _metric(metrics, "error_isl") or 1
    end = (int(md.get("request_end_ns") or md["request_start_ns"]) - t0_ns) * 1e-9
    return RequestRecord(
        request_id=str(md.get("x_request_id") or f"aiperf-{md.get('session_num')}-{md.get('turn_index')}"),
        arrival_s=max(0.0, arrival), sent_s=sent, input_tokens=max(1, int(isl)),
        output_tokens=requested, output_tokens_received=int(received or (len(times) if ok else 0)),
        first_token_s=times[0] if ok else None, chunk_times_s=times, chunk_tokens=None,
        finish_s=times[-1] if ok else max(end, sent), status=status, error=error,
    )


def import_aiperf(path: str | os.PathLike[str],
                  out_dir: str | os.PathLike[str] | None = None) -> Measurement:
    """Import AIPerf's ``profile_export.jsonl``; errors name the file and line."""
    src = Path(path)
    rows = _aiperf_lines(src)
    if not rows:
        raise ValueError(f"{src}: no profiling records")
    t0 = min(int(o["metadata"].get("credit_issued_ns") or o["metadata"]["request_start_ns"])
             for _, o in rows)
    outputs = [int(_metric(o.get("metrics") or {}, "output_sequence_length") or 0) for _, o in rows]
    requested = _fill_requested(outputs)
    records = []
    for (lineno, obj), want in zip(rows, requested, strict=True):
        try:
            records.append(_aiperf_record(obj, t0, want))
        except (ValueError, TypeError, KeyError) as exc:
            raise ValueError(f"{src}:{lineno}: {exc}") from None
    meta = {"driver": "aiperf", "imported_from": str(src), "arrivals_known": True,
            "load": {"mode": "unknown"}, "duration_s": max((r.finish_s or 0.0) for r in records)}
    return _finish(records, meta, src, out_dir)
