"""One arrival loop for every live driver; the drivers only say how to send one request.

Modes (:class:`LoadSpec`):

``open``
    Open loop: request ``i`` is sent ``trace.arrival_s[i] - trace.arrival_s[0]`` seconds after
    the start, whether or not earlier requests finished.  ``concurrency`` optionally caps the
    requests in flight (a request waits for a slot; its ``sent_s`` then trails ``arrival_s``).
``burst``
    Every request is due at time 0 (the trace's arrival times are ignored); optional cap.
``concurrency``
    Closed loop: exactly ``concurrency`` requests in flight, the next sent as one finishes;
    a request's ``arrival_s`` is then the moment its slot freed.

A backend implements :class:`Backend`: ``send(spec, rec)`` streams one request, calling
``rec.chunk(tokens)`` per token-carrying chunk, and returns when the response is complete or
raises :class:`RequestFailed`.  The loop times out each request after ``request_timeout_s`` and
stops the whole run at ``deadline_s``: requests still in flight are then recorded as
``timeout`` and requests never sent as ``error``.  No run outlives its deadline by more than
:data:`CANCEL_GRACE_S`.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from latsim.measure.records import RequestRecord
from latsim.workload.trace import RequestTrace

MODES = ("open", "burst", "concurrency")
CANCEL_GRACE_S = 2.0


class RequestFailed(Exception):
    """A backend's way to say the server answered with an error (message = ``error``)."""


@dataclass(frozen=True)
class LoadSpec:
    """How to offer a trace to the engine; see the module docstring for the modes.

    ``deadline_s=None`` means: last scheduled arrival + ``request_timeout_s`` + 10 s for
    ``open``/``burst``; ``ceil(n / concurrency) * request_timeout_s`` + 10 s for
    ``concurrency``.
    """

    mode: str = "open"
    concurrency: int | None = None
    request_timeout_s: float = 600.0
    deadline_s: float | None = None

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode={self.mode!r} is not one of {MODES}")
        if self.mode == "concurrency" and self.concurrency is None:
            raise ValueError("mode='concurrency' needs concurrency=N (N >= 1)")
        if self.concurrency is not None and self.concurrency < 1:
            raise ValueError(f"concurrency={self.concurrency} must be >= 1 or None")
        if not self.request_timeout_s > 0:
            raise ValueError(f"request_timeout_s={self.request_timeout_s} must be > 0")
        if self.deadline_s is not None and not self.deadline_s > 0:
            raise ValueError(f"deadline_s={self.deadline_s} must be > 0 or None")

    def resolved_deadline_s(self, offsets: np.ndarray) -> float:
        if self.deadline_s is not None:
            return self.deadline_s
        if self.mode == "concurrency":
            waves = math.ceil(len(offsets) / (self.concurrency or 1))
            return waves * self.request_timeout_s + 10.0
        last = float(offsets[-1]) if len(offsets) else 0.0
        return last + self.request_timeout_s + 10.0

    def describe(self) -> dict[str, object]:
        return {"mode": self.mode, "concurrency": self.concurrency,
                "request_timeout_s": self.request_timeout_s, "deadline_s": self.deadline_s}


@dataclass(frozen=True)
class RequestSpec:
    """One request to send: row ``index`` of the trace, due ``arrival_s`` after the start."""

    index: int
    request_id: str
    arrival_s: float
    input_tokens: int
    output_tokens: int
    prefix_group: int = -1
    prefix_tokens: int = 0


def specs_from_trace(trace: RequestTrace, load: LoadSpec, id_prefix: str = "req") -> list[RequestSpec]:
    """Request specs with offsets relative to the first arrival (all 0 in ``burst`` mode)."""
    arrivals = np.asarray(trace.arrival_s, dtype=np.float64)
    offsets = arrivals - arrivals[0] if len(arrivals) else arrivals
    if load.mode == "burst":
        offsets = np.zeros_like(offsets)
    groups = trace.prefix_group if trace.prefix_group is not None else np.full(len(trace), -1)
    plens = trace.prefix_tokens if trace.prefix_tokens is not None else np.zeros(len(trace))
    ids = trace.request_ids.tolist()  # the position in the trace file, also when it was sorted
    return [
        RequestSpec(i, f"{id_prefix}-{ids[i]}", float(offsets[i]), int(trace.input_tokens[i]),
                    int(trace.output_tokens[i]), int(groups[i]), int(plens[i]))
        for i in range(len(trace))
    ]


def prompt_stream(seed: int, request_id: str) -> np.random.Generator:
    """The random stream of one request's prompt: seeded by ``seed`` and the request id.

    Keying by the id (which carries the level or run prefix) rather than by position keeps
    prompts of different levels distinct: with the same index they would repeat, and the
    engine's prefix cache would serve later levels' prompts from earlier ones.
    """
    key = int.from_bytes(hashlib.blake2b(request_id.encode(), digest_size=8).digest(), "little")
    return np.random.default_rng([seed, key])


def prompt_token_ids(spec: RequestSpec, seed: int, vocab_size: int) -> list[int]:
    """Deterministic random prompt ids in ``[10, vocab_size)``.

    Different requests draw from independent streams (:func:`prompt_stream`), so they share no
    prefix by accident; requests of one prefix group start with the same ``prefix_tokens`` ids
    (drawn from a stream seeded by the group; a shorter prefix is the head of a longer one).
    """
    if vocab_size <= 10:
        raise ValueError(f"vocab_size={vocab_size} must be > 10")
    ids = prompt_stream(seed, spec.request_id).integers(10, vocab_size, spec.input_tokens)
    shared = min(spec.prefix_tokens, spec.input_tokens) if spec.prefix_group >= 0 else 0
    if shared:
        group_rng = np.random.default_rng([seed, 1 << 40, spec.prefix_group])
        ids[:shared] = group_rng.integers(10, vocab_size, shared)
    return ids.tolist()


class Recorder:
    """Mutable per-request log filled by the loop and the backend; ``record()`` freezes it.

    The first ``close`` wins, so a late chunk or a second failure cannot rewrite a result.
    """

    def __init__(self, spec: RequestSpec, clock: Callable[[], float]) -> None:
        self.spec = spec
        self._clock = clock
        self.arrival_s = spec.arrival_s
        self.sent_s: float | None = None
        self.times: list[float] = []
        self.tokens: list[int | None] = []
        self.tokens_reported: int | None = None
        self.input_reported: int | None = None
        self.status: str | None = None
        self.error: str | None = None
        self.finish_s: float | None = None
        self.engine: dict[str, float] = {}

    def now(self) -> float:
        return self._clock()

    def engine_time(self, name: str, monotonic_s: float) -> None:
        """The engine's own timestamp ``name`` (one of records.ENGINE_KEYS), given on the
        system's monotonic clock, kept on this recorder's clock; the first value wins."""
        if name not in self.engine and monotonic_s > 0:
            offset = time.monotonic() - self._clock()
            self.engine[name] = round(monotonic_s - offset, 6)

    def mark_sent(self) -> None:
        self.sent_s = self._clock()

    def chunk(self, tokens: int | None = 1) -> None:
        """A chunk arrived now carrying ``tokens`` tokens (``None`` = unknown; 0 = ignored)."""
        if self.status is None and tokens != 0:
            self.times.append(self._clock())
            self.tokens.append(tokens)

    def usage(self, output_tokens: int | None = None, input_tokens: int | None = None) -> None:
        """The server's own token counts (e.g. an OpenAI ``usage`` object); last one wins."""
        self.tokens_reported = output_tokens if output_tokens is not None else self.tokens_reported
        self.input_reported = input_tokens if input_tokens is not None else self.input_reported

    def close(self, status: str, error: str | None = None) -> None:
        if self.status is not None:
            return
        if status == "ok" and not self.times:
            status, error = "error", "stream ended without any token"
        self.status, self.error = status, error
        self.finish_s = self.times[-1] if status == "ok" else self._clock()

    def record(self) -> RequestRecord:
        if self.status is None:  # the run deadline overtook this request
            self.close(*(("timeout", "run deadline reached") if self.sent_s is not None
                         else ("error", "not sent before the run deadline")))
        known = None if None in self.tokens else tuple(int(k or 0) for k in self.tokens)
        counted = sum(known) if known is not None else len(self.times)
        spec = self.spec
        return RequestRecord(
            request_id=spec.request_id, arrival_s=self.arrival_s, sent_s=self.sent_s,
            input_tokens=self.input_reported or spec.input_tokens, output_tokens=spec.output_tokens,
            output_tokens_received=self.tokens_reported if self.tokens_reported is not None else counted,
            first_token_s=self.times[0] if self.times else None,
            chunk_times_s=tuple(self.times), chunk_tokens=known, finish_s=self.finish_s,
            status=self.status or "error", error=self.error,
            prefix_group=spec.prefix_group, prefix_tokens=spec.prefix_tokens, **self.engine,
        )


class Backend(Protocol):
    """Sends one request and streams its chunks into ``rec`` (see the module docstring)."""

    def send(self, spec: RequestSpec, rec: Recorder) -> Awaitable[None]: ...


async def _one(backend: Backend, rec: Recorder, timeout_s: float) -> None:
    rec.mark_sent()
    try:
        await asyncio.wait_for(backend.send(rec.spec, rec), timeout_s)
    except asyncio.TimeoutError:
        rec.close("timeout", f"no complete response within {timeout_s:g} s")
    except RequestFailed as exc:
        rec.close("error", str(exc))
    except Exception as exc:  # a client bug or transport failure is data, not a crash
        rec.close("error", f"{type(exc).__name__}: {exc}")
    else:
        rec.close("ok")


async def _open_loop(backend: Backend, recs: list[Recorder], load: LoadSpec,
                     start: float, tasks: set[asyncio.Task[None]]) -> None:
    cap = asyncio.Semaphore(load.concurrency) if load.concurrency else None

    async def capped(rec: Recorder) -> None:
        if cap is None:
            return await _one(backend, rec, load.request_timeout_s)
        async with cap:
            await _one(backend, rec, load.request_timeout_s)

    for rec in recs:
        delay = start + rec.arrival_s - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.add(asyncio.ensure_future(capped(rec)))
    await asyncio.gather(*tasks)


async def _closed_loop(backend: Backend, recs: list[Recorder], load: LoadSpec,
                       start: float, tasks: set[asyncio.Task[None]]) -> None:
    queue = iter(recs)

    async def worker() -> None:
        for rec in queue:
            rec.arrival_s = rec.now()
            await _one(backend, rec, load.request_timeout_s)

    tasks.update(asyncio.ensure_future(worker()) for _ in range(load.concurrency or 1))
    await asyncio.gather(*tasks)


async def run_load(backend: Backend, specs: list[RequestSpec],
                   load: LoadSpec) -> tuple[list[RequestRecord], float]:
    """Offer ``specs`` to ``backend`` as ``load`` says; return the records and the run's duration.

    The clock starts now: every time in the records is ``perf_counter() - start``, rounded to
    the microsecond (finer digits are noise and would double the size of the files).
    """
    start = time.perf_counter()
    recs = [Recorder(s, lambda: round(time.perf_counter() - start, 6)) for s in specs]
    tasks: set[asyncio.Task[None]] = set()
    loop_fn = _closed_loop if load.mode == "concurrency" else _open_loop
    driver = asyncio.ensure_future(loop_fn(backend, recs, load, start, tasks))
    deadline = load.resolved_deadline_s(np.array([s.arrival_s for s in specs]))
    done, _ = await asyncio.wait({driver}, timeout=deadline)
    if not done:
        await _cancel_all({driver, *tasks})
    return [r.record() for r in recs], time.perf_counter() - start


async def _cancel_all(tasks: set[asyncio.Task[None]]) -> None:
    for task in tasks:
        task.cancel()
    await asyncio.wait(tasks, timeout=CANCEL_GRACE_S)


def run_meta(driver: str, trace: RequestTrace, load: LoadSpec, records: list[RequestRecord],
             started_at: str, duration_s: float) -> dict[str, object]:
    """The driver-independent part of ``meta.json``: load, trace summary, send-lag quantiles."""
    lags = np.array([r.sent_s - r.arrival_s for r in records if r.sent_s is not None])
    n = len(trace)
    return {
        "driver": driver,
        "load": load.describe(),
        "start_time": started_at,
        "duration_s": duration_s,
        "trace": {
            "num_requests": n,
            "span_s": trace.duration_s,
            "offered_qps": (n - 1) / trace.duration_s if n > 1 and trace.duration_s > 0 else None,
            "mean_input_tokens": float(np.mean(trace.input_tokens)) if n else None,
            "mean_output_tokens": float(np.mean(trace.output_tokens)) if n else None,
        },
        "send_lag_s": {
            "p50": float(np.quantile(lags, 0.5)) if len(lags) else None,
            "p99": float(np.quantile(lags, 0.99)) if len(lags) else None,
            "max": float(lags.max()) if len(lags) else None,
        },
        "status_counts": {s: sum(r.status == s for r in records) for s in ("ok", "error", "timeout")},
    }
