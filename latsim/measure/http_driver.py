"""Measure an OpenAI-compatible server (``/v1/completions``, streamed) with aiohttp.

Each request asks for exactly ``output_tokens`` tokens (``max_tokens = min_tokens``,
``ignore_eos``), streams with ``stream_options.include_usage`` so the last event reports the
server's token counts, and sends its prompt as token ids (vLLM accepts a list of ints as
``prompt``) or, with ``prompt="text"``, as synthetic words of roughly one token each.  Every
``data:`` event that carries a choice is timed with ``perf_counter`` on arrival; a
``token_ids`` list in the choice (servers that return them) gives the tokens per chunk.

A request fails (status ``error``) on a non-200 answer, an ``error`` object in the stream, a
``data:`` line that is not JSON, or a stream that ends before ``data: [DONE]``.  Timeouts and
the run deadline are the arrival loop's (:mod:`latsim.measure.loadgen`).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import platform
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import numpy as np

from latsim.measure.gcwatch import GcWatch
from latsim.measure.loadgen import (
    LoadSpec,
    Recorder,
    RequestFailed,
    RequestSpec,
    prompt_stream,
    prompt_token_ids,
    run_load,
    run_meta,
    specs_from_trace,
)
from latsim.measure.measurement import Measurement
from latsim.measure.records import write_run
from latsim.workload.trace import RequestTrace

PROMPT_STYLES = ("token_ids", "text")
COMPLETIONS_PATH = "/v1/completions"
_WORDS = (
    "the", "of", "and", "to", "in", "is", "was", "for", "on", "that", "with", "as", "by", "at",
    "from", "his", "her", "are", "be", "this", "an", "not", "or", "have", "one", "all", "had",
    "but", "were", "which", "their", "time", "can", "more", "out", "will", "there", "when", "up",
    "who", "so", "said", "some", "what", "about", "into", "than", "them", "other", "then", "its",
    "only", "two", "may", "new", "first", "most", "like", "over", "such",
)


@dataclass(frozen=True)
class HttpOptions:
    """Client choices: prompt style, id range and seed, extra JSON body keys, headers.

    ``extra_body`` is merged last into every request body (it may override the defaults).
    Prompts are drawn from streams keyed by ``seed`` and the request id ``<run_id>-<index>``;
    ``run_id`` defaults to one new per run (the start time), so that two runs against the same
    server never share prompts and the server's prefix cache cannot serve one run from another.
    Give ``run_id`` to replay exactly the prompts of an earlier run (it is in ``meta.json``).
    """

    prompt: str = "token_ids"
    vocab_size: int = 32000
    seed: int = 0
    run_id: str | None = None
    extra_body: Mapping[str, Any] = field(default_factory=dict)
    headers: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.prompt not in PROMPT_STYLES:
            raise ValueError(f"prompt={self.prompt!r} is not one of {PROMPT_STYLES}")
        if self.vocab_size <= 10:
            raise ValueError(f"vocab_size={self.vocab_size} must be > 10")


def completions_url(endpoint: str) -> str:
    """``http://host:port`` (or ``.../v1``) -> ``http://host:port/v1/completions``."""
    base = endpoint.rstrip("/")
    if not base.startswith(("http://", "https://")):
        raise ValueError(f"endpoint={endpoint!r} must start with http:// or https://")
    if base.endswith(COMPLETIONS_PATH):
        return base
    return base[:-3] + COMPLETIONS_PATH if base.endswith("/v1") else base + COMPLETIONS_PATH


def text_prompt(spec: RequestSpec, seed: int) -> str:
    """About ``input_tokens`` common words; a prefix group's requests share their first words."""
    words = prompt_stream(seed, spec.request_id).integers(0, len(_WORDS), spec.input_tokens)
    shared = min(spec.prefix_tokens, spec.input_tokens) if spec.prefix_group >= 0 else 0
    if shared:
        words[:shared] = np.random.default_rng([seed, 1 << 40, spec.prefix_group]).integers(
            0, len(_WORDS), shared)
    return " ".join(_WORDS[w] for w in words)


class HttpBackend:
    """Sends one streamed completion per request over a shared ``aiohttp`` session."""

    def __init__(self, session: aiohttp.ClientSession, url: str, model_name: str,
                 options: HttpOptions) -> None:
        self._session, self._url, self._model, self._opt = session, url, model_name, options

    def payload(self, spec: RequestSpec) -> dict[str, Any]:
        opt = self._opt
        prompt: Any = (prompt_token_ids(spec, opt.seed, opt.vocab_size) if opt.prompt == "token_ids"
                       else text_prompt(spec, opt.seed))
        return {
            "model": self._model, "prompt": prompt, "max_tokens": spec.output_tokens,
            "min_tokens": spec.output_tokens, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}, **opt.extra_body,
        }

    async def send(self, spec: RequestSpec, rec: Recorder) -> None:
        headers = {"Content-Type": "application/json", **self._opt.headers}
        async with self._session.post(self._url, json=self.payload(spec), headers=headers) as resp:
            if resp.status != 200:
                body = (await resp.text(errors="replace"))[:300]
                raise RequestFailed(f"HTTP {resp.status}: {body}")
            await consume_sse(resp.content, rec)


async def consume_sse(content: aiohttp.StreamReader, rec: Recorder) -> None:
    """Read SSE lines until ``data: [DONE]``, feeding token chunks and usage into ``rec``."""
    async for raw in content:
        line = raw.decode("utf-8", errors="replace").strip()
        if not line.startswith("data:"):
            continue  # blank separators, ":" comments, event:/id: fields
        data = line[5:].strip()
        if data == "[DONE]":
            return
        handle_event(data, rec)
    raise RequestFailed("stream ended before 'data: [DONE]'")


def handle_event(data: str, rec: Recorder) -> None:
    """Apply one ``data:`` payload: a choice is a chunk, ``usage`` the server's counts."""
    try:
        event = json.loads(data)
    except json.JSONDecodeError:
        raise RequestFailed(f"malformed SSE data (not JSON): {data[:80]!r}") from None
    if not isinstance(event, dict):
        raise RequestFailed(f"malformed SSE data (not an object): {data[:80]!r}")
    if event.get("error"):
        raise RequestFailed(f"error in stream: {str(event['error'])[:200]}")
    choices = event.get("choices") or []
    if choices:
        ids = choices[0].get("token_ids") if isinstance(choices[0], dict) else None
        rec.chunk(len(ids) if isinstance(ids, list) else None)
    usage = event.get("usage")
    if isinstance(usage, dict):
        rec.usage(usage.get("completion_tokens"), usage.get("prompt_tokens"))


async def run_http_async(endpoint: str, model_name: str, trace: RequestTrace, load: LoadSpec,
                         out_dir: str | os.PathLike[str] | None = None, *,
                         options: HttpOptions | None = None,
                         meta: Mapping[str, Any] | None = None) -> Measurement:
    """Coroutine behind :func:`run_http`, for callers that already run an event loop."""
    opt = options or HttpOptions()
    url = completions_url(endpoint)
    run_id = opt.run_id or dt.datetime.now(dt.timezone.utc).strftime("http-%Y%m%dT%H%M%S%f")
    specs = specs_from_trace(trace, load, id_prefix=run_id)
    started = dt.datetime.now(dt.timezone.utc).isoformat()
    connector = aiohttp.TCPConnector(limit=load.concurrency or 0)
    timeout = aiohttp.ClientTimeout(total=None)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        with GcWatch() as gc_watch:
            records, duration = await run_load(HttpBackend(session, url, model_name, opt), specs, load)
    full_meta = {
        **run_meta("http", trace, load, records, started, duration), "client_gc": gc_watch.stats(),
        "endpoint": url, "model": {"name": model_name},
        "client": {"prompt": opt.prompt, "seed": opt.seed, "run_id": run_id, "aiohttp": aiohttp.__version__,
                   "python": platform.python_version()},
        **(meta or {}),
    }
    if out_dir is not None:
        write_run(out_dir, records, full_meta)
    return Measurement.from_records(records, full_meta, source=str(out_dir or url))


def run_http(endpoint: str, model_name: str, trace: RequestTrace, load: LoadSpec,
             out_dir: str | os.PathLike[str] | None = None, *, options: HttpOptions | None = None,
             meta: Mapping[str, Any] | None = None) -> Measurement:
    """Offer ``trace`` to the server at ``endpoint`` as ``load`` says; return the measurement.

    With ``out_dir`` the run directory is written too (see :mod:`latsim.measure.records`).
    ``meta`` entries (e.g. ``workload``, ``engine_config`` the caller knows) are merged into
    ``meta.json`` last.  Runs its own event loop; inside a running loop use
    :func:`run_http_async`.
    """
    return asyncio.run(run_http_async(endpoint, model_name, trace, load, out_dir,
                                      options=options, meta=meta))
