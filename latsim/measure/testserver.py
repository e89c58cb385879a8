"""A tiny OpenAI-style streaming server with a known token schedule, for driver tests.

``StreamingTestServer(ServerSchedule(...))`` listens on ``127.0.0.1`` at an ephemeral port, in
a background thread with its own event loop, and answers ``POST /v1/completions``.  In
``normal`` mode a request for ``max_tokens`` tokens gets its first chunk ``first_token_s``
after the request arrived and chunk ``j`` at ``first_token_s + j * token_interval_s`` (absolute
times, so sleeps do not drift), each chunk carrying ``tokens_per_chunk`` tokens, then a
``usage`` event and ``data: [DONE]``.  Other modes: ``stall`` sends the first chunk and then
nothing until the client leaves; ``error500`` answers HTTP 500; ``malformed`` sends one good
chunk, then a ``data:`` line that is not JSON; ``no_done`` ends the stream without ``[DONE]``.
The ``usage`` event counts a token-id prompt's ids, or a text prompt's words.

The server notes, per request, when it arrived and when it began to write each token chunk
(``perf_counter``, comparable with the client's in the same process), its JSON body, and tracks
the peak number of requests in flight.  On a loaded machine the server's own timers run late;
the written times are what a client should have seen.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any

from aiohttp import web

MODES = ("normal", "stall", "error500", "malformed", "no_done")


@dataclass(frozen=True)
class ServerSchedule:
    """When the server streams what; see the module docstring."""

    mode: str = "normal"
    first_token_s: float = 0.02
    token_interval_s: float = 0.005
    tokens_per_chunk: int = 1
    include_token_ids: bool = False

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode={self.mode!r} is not one of {MODES}")
        if self.first_token_s < 0 or self.token_interval_s < 0:
            raise ValueError("first_token_s and token_interval_s must be >= 0")
        if self.tokens_per_chunk < 1:
            raise ValueError(f"tokens_per_chunk={self.tokens_per_chunk} must be >= 1")


class StreamingTestServer:
    """Context manager running the server; ``url`` is its base URL once entered."""

    def __init__(self, schedule: ServerSchedule | None = None) -> None:
        self.schedule = schedule or ServerSchedule()
        self.arrivals: list[float] = []
        self.bodies: list[dict[str, Any]] = []
        self.chunk_writes: list[list[float]] = []
        """Per request, in arrival order: when each token chunk was written."""
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None
        self._stop: asyncio.Event | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> StreamingTestServer:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(timeout=10)
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    async def _start(self) -> None:
        self._stop = asyncio.Event()
        app = web.Application()
        app.router.add_post("/v1/completions", self._handle)
        self._runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=1.0)
        await self._runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        await web.SockSite(self._runner, sock).start()

    async def _shutdown(self) -> None:
        assert self._stop is not None and self._runner is not None
        self._stop.set()
        await self._runner.cleanup()

    def _enter_request(self, body: dict[str, Any]) -> list[float]:
        """Note the request; the list its chunks' write times go into."""
        with self._lock:
            self.arrivals.append(time.perf_counter())
            self.bodies.append(body)
            self.chunk_writes.append([])
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            return self.chunk_writes[-1]

    def _leave_request(self) -> None:
        with self._lock:
            self.in_flight -= 1

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        start = time.perf_counter()
        body = await request.json()
        writes = self._enter_request(body)
        try:
            if self.schedule.mode == "error500":
                return web.Response(status=500, text="synthetic failure")
            prompt = body.get("prompt", [])
            prompt_tokens = len(prompt) if isinstance(prompt, list) else len(str(prompt).split())
            return await self._stream(request, int(body["max_tokens"]), prompt_tokens, start, writes)
        finally:
            self._leave_request()

    async def _stream(self, request: web.Request, n: int, prompt_tokens: int,
                      start: float, writes: list[float]) -> web.StreamResponse:
        sch = self.schedule
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        sent, j = 0, 0
        while sent < n:
            await _sleep_until(start + sch.first_token_s + j * sch.token_interval_s)
            k = min(sch.tokens_per_chunk, n - sent)
            writes.append(time.perf_counter())  # before the write: the client cannot see it earlier
            await resp.write(_event(_chunk(k, sent, sch.include_token_ids)))
            sent, j = sent + k, j + 1
            if sch.mode == "stall":
                assert self._stop is not None
                await self._stop.wait()
                return resp
            if sch.mode == "malformed":
                await resp.write(b"data: {not json\n\n")
                return resp
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": sent}
        await resp.write(_event({"choices": [], "usage": usage}))
        if sch.mode != "no_done":
            await resp.write(b"data: [DONE]\n\n")
        return resp


async def _sleep_until(target: float) -> None:
    delay = target - time.perf_counter()
    if delay > 0:
        await asyncio.sleep(delay)


def _chunk(k: int, offset: int, with_ids: bool) -> dict[str, Any]:
    choice: dict[str, Any] = {"index": 0, "text": " tok" * k, "finish_reason": None}
    if with_ids:
        choice["token_ids"] = list(range(offset, offset + k))
    return {"object": "text_completion", "choices": [choice]}


def _event(obj: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"
