"""Measure vLLM in-process: one ``AsyncLLM`` with dummy weights, several load levels.

The engine is built the way vLLM's OpenAI server builds it (``UsageContext.OPENAI_API_SERVER``,
so its defaults are the server's), with ``load_format="dummy"`` (random weights; only a
``config.json`` is needed) and no tokenizer.  Each request sends random prompt token ids
(:func:`~latsim.measure.loadgen.prompt_token_ids`: seeded, distinct across requests unless
the trace asks for shared prefixes) with ``SamplingParams(max_tokens=n, min_tokens=n,
ignore_eos=True, detokenize=False, output_kind=DELTA)``, so every request produces exactly
``n`` tokens and every yielded output carries only the new ones; each output is timed with
``perf_counter``.  The arrival loop, modes and timeouts are :mod:`latsim.measure.loadgen`'s.

vLLM is imported only inside the functions that need it.  An ``AsyncLLM`` belongs to the event
loop it first ran in, so :func:`run_vllm` builds, uses and shuts it down inside one loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import inspect
import os
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from latsim.measure.gcwatch import GcWatch
from latsim.measure.hostprobe import HostProbe, baseline_s
from latsim.measure.loadgen import LoadSpec, Recorder, RequestSpec, prompt_token_ids, run_load, run_meta
from latsim.measure.loadgen import specs_from_trace as _specs
from latsim.measure.measurement import Measurement
from latsim.measure.records import write_run
from latsim.workload.trace import RequestTrace

MISSING_VLLM = ("vllm is not importable; install latsim[vllm] (vLLM >= 0.25) or put a vLLM build "
                "on PYTHONPATH")
ParamsFactory = Callable[[int], Any]


class EngineStartError(RuntimeError):
    """vLLM is importable but could not start an engine here (no GPU, bad settings, ...)."""


@dataclass(frozen=True)
class EngineSettings:
    """Engine arguments; ``None`` leaves a knob to vLLM's own default (defaults are part of
    what is measured).  ``extra`` holds any further ``AsyncEngineArgs`` keyword arguments.

    This is vLLM's own argument surface, not latsim's settings (:class:`latsim.config.Settings`):
    a measurement must be able to leave every knob to the engine, and this module runs on GPU
    machines without the simulator's dependencies."""

    model_dir: str
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    block_size: int | None = None
    gpu_memory_utilization: float | None = None
    max_model_len: int | None = None
    enable_chunked_prefill: bool | None = None
    enable_prefix_caching: bool | None = None
    async_scheduling: bool | None = None
    tensor_parallel_size: int | None = None
    dtype: str | None = None
    seed: int | None = 0
    extra: Mapping[str, Any] = field(default_factory=dict)

    def engine_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``AsyncEngineArgs`` (the fixed dummy/no-tokenizer ones included)."""
        knobs = {k: v for k, v in self.__dict__.items() if k not in ("model_dir", "extra")}
        return {"model": self.model_dir, "load_format": "dummy", "skip_tokenizer_init": True,
                **{k: v for k, v in knobs.items() if v is not None}, **self.extra}


@dataclass(frozen=True)
class Level:
    """One load level: a name (its run directory), the trace, and how to offer it."""

    name: str
    trace: RequestTrace
    load: LoadSpec = field(default_factory=LoadSpec)

    def __post_init__(self) -> None:
        if not self.name or "/" in self.name or self.name.startswith("."):
            raise ValueError(f"level name {self.name!r} must be a plain, non-hidden directory name")


def _import_vllm() -> Any:
    try:
        import vllm
    except ImportError as exc:
        raise ImportError(f"{MISSING_VLLM} ({exc})") from exc
    return vllm


def build_engine(settings: EngineSettings) -> Any:
    """Start an ``AsyncLLM`` (takes 0.5-2 minutes on a GPU); call inside the loop that uses it."""
    _import_vllm()
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.usage.usage_lib import UsageContext
    from vllm.v1.engine.async_llm import AsyncLLM

    args = AsyncEngineArgs(**settings.engine_kwargs())
    return AsyncLLM.from_engine_args(args, usage_context=UsageContext.OPENAI_API_SERVER)


def vllm_sampling_params(n: int) -> Any:
    """Exactly ``n`` new tokens, streamed as deltas, no detokenisation."""
    _import_vllm()
    from vllm.sampling_params import RequestOutputKind, SamplingParams

    return SamplingParams(max_tokens=n, min_tokens=n, ignore_eos=True, detokenize=False,
                          output_kind=RequestOutputKind.DELTA)


class VllmBackend:
    """Sends one request to an ``AsyncLLM`` (or anything with the same ``generate``)."""

    def __init__(self, engine: Any, params: ParamsFactory, seed: int, vocab_size: int) -> None:
        self._engine, self._params, self._seed, self._vocab = engine, params, seed, vocab_size

    async def send(self, spec: RequestSpec, rec: Recorder) -> None:
        prompt = {"prompt_token_ids": prompt_token_ids(spec, self._seed, self._vocab)}
        stream = self._engine.generate(prompt, self._params(spec.output_tokens), request_id=spec.request_id)
        async for out in stream:
            rec.chunk(sum(len(c.token_ids) for c in out.outputs[:1]))
            if not rec.engine or out.finished:  # the first output carries the early times, the last the end
                record_engine_times(rec, getattr(out, "metrics", None), last=out.finished)
            if out.finished:
                break


_ENGINE_STATS = (("engine_queued_s", "queued_ts"), ("engine_scheduled_s", "scheduled_ts"),
                 ("engine_first_token_s", "first_token_ts"))
_LAST_TOKEN = ("engine_last_token_s", "last_token_ts")


def record_engine_times(rec: Recorder, stats: Any, *, last: bool) -> None:
    """Copy vLLM's per-request engine timestamps (``RequestOutput.metrics``, a
    ``RequestStateStats`` on the engine core's monotonic clock; ``None`` when the engine does
    not log stats) into ``rec``: queued, first scheduled and first token as soon as they are
    known, the last token with the finishing output."""
    if stats is None:
        return
    for key, attr in (*_ENGINE_STATS, _LAST_TOKEN) if last else _ENGINE_STATS:
        value = getattr(stats, attr, 0.0)
        if isinstance(value, (int, float)):
            rec.engine_time(key, float(value))


# ---------------------------------------------------------------------------- config snapshot


def _get(obj: Any, *names: str) -> Any:
    for name in names:
        value = getattr(obj, name, None)
        if value is not None:
            return value if isinstance(value, (bool, int, float, str)) else str(value)
    return None


def engine_config_snapshot(engine: Any) -> dict[str, Any]:
    """The resolved knobs of a running engine (``engine.vllm_config``), JSON-ready.

    Missing attributes (other vLLM versions) come out as ``None`` rather than failing.
    """
    cfg = getattr(engine, "vllm_config", None)
    sched, cache = getattr(cfg, "scheduler_config", None), getattr(cfg, "cache_config", None)
    model, par = getattr(cfg, "model_config", None), getattr(cfg, "parallel_config", None)
    comp = getattr(cfg, "compilation_config", None)
    blocks, block_size = _get(cache, "num_gpu_blocks"), _get(cache, "block_size")
    return {
        "max_num_seqs": _get(sched, "max_num_seqs"),
        "max_num_batched_tokens": _get(sched, "max_num_batched_tokens"),
        "chunked_prefill": _get(sched, "enable_chunked_prefill", "chunked_prefill_enabled"),
        "async_scheduling": _get(sched, "async_scheduling"),
        "block_size": block_size,
        "num_gpu_blocks": blocks,
        "kv_capacity_tokens": blocks * block_size if blocks and block_size else None,
        "kv_cache_size_tokens": _get(cache, "kv_cache_size_tokens"),
        "gpu_memory_utilization": _get(cache, "gpu_memory_utilization"),
        "prefix_caching": _get(cache, "enable_prefix_caching"),
        "kv_cache_dtype": _get(cache, "cache_dtype"),
        "max_model_len": _get(model, "max_model_len"),
        "dtype": _get(model, "dtype"),
        "tp": _get(par, "tensor_parallel_size"),
        "pp": _get(par, "pipeline_parallel_size"),
        "executor": _get(par, "distributed_executor_backend"),
        "cudagraph_mode": _get(comp, "cudagraph_mode"),
    }


def engine_vocab_size(engine: Any, default: int = 32000) -> int:
    model = getattr(getattr(engine, "vllm_config", None), "model_config", None)
    getter = getattr(model, "get_vocab_size", None)
    vocab = getter() if callable(getter) else getattr(getattr(model, "hf_config", None), "vocab_size", None)
    return int(vocab) if isinstance(vocab, int) and vocab > 10 else default


def versions() -> dict[str, Any]:
    """vLLM, torch, GPU name and driver; ``None`` where unknown.  Never initialises CUDA."""
    out: dict[str, Any] = {"vllm": None, "torch": None, "gpu": None, "driver": None}
    for mod in ("vllm", "torch"):
        with contextlib.suppress(ImportError):
            out[mod] = __import__(mod).__version__
    try:
        line = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                               "--format=csv,noheader"], capture_output=True, text=True,
                              timeout=10, check=True).stdout.splitlines()[0]
        out["gpu"], out["driver"], out["gpu_memory"] = (p.strip() for p in line.split(",")[:3])
    except (OSError, subprocess.SubprocessError, IndexError, ValueError):
        pass
    return out


# ---------------------------------------------------------------------------------- running


@dataclass(frozen=True)
class RunOptions:
    """Prompt seed, warm-up size, and the sampling-params factory (tests pass a fake).

    The warm-up is a burst of ``warmup_requests`` with input lengths spread evenly over
    ``[16, warmup_max_input_tokens]`` and output lengths over ``[1, warmup_max_output_tokens]``,
    so the running batch shrinks through every size and prefills of many lengths run once
    before anything is measured (kernels compiled on first use stay out of the levels).

    ``warmup_sweep_requests`` more follow one at a time (:func:`sweep_lengths`): single prompts
    whose lengths cover ``[16, min(token budget, max_model_len - 2)]``, so every step size
    class runs once alone.  Kernels that vLLM does not capture in CUDA graphs (Triton's MoE
    kernel above 512 tokens) compile one variant per tuned block-size bucket and per
    alignment of the token count; a burst leaves many of them for the first measured level.

    With ``host_probe`` every level runs beside a :class:`~latsim.measure.hostprobe.HostProbe`
    (the host's CPU speed, steal and the engine processes' CPU waits, into ``meta.json``); its
    baseline is timed once when the session starts, before the warm-up.
    """

    seed: int = 0
    warmup_requests: int = 8
    warmup_max_input_tokens: int = 64
    warmup_max_output_tokens: int = 16
    warmup_sweep_requests: int = 0
    reset_prefix_cache: bool = True
    host_probe: bool = False
    params: ParamsFactory | None = None
    vocab_size: int | None = None


def warmup_trace(opt: RunOptions) -> RequestTrace:
    """The warm-up burst of :class:`RunOptions` (deterministic, lengths interleaved)."""
    n = opt.warmup_requests
    inputs = np.linspace(16, max(16, opt.warmup_max_input_tokens), n).round().astype(np.int64)
    outputs = np.linspace(1, max(1, opt.warmup_max_output_tokens), n).round().astype(np.int64)
    order = np.random.default_rng([opt.seed, 7]).permutation(n)
    return RequestTrace.from_arrays(np.zeros(n), inputs[order], outputs)


def sweep_lengths(count: int, max_tokens: int) -> np.ndarray:
    """``count`` prompt lengths (about) for the one-at-a-time warm-up sweep, sorted.

    Geometrically spaced anchors over ``[16, max_tokens]``, each rounded to a multiple of 16
    and taken three ways (``16k``, ``16k + 1``, ``16k + 2``): Triton specialises integer
    arguments on divisibility by 16, and a top-k-scaled count is a multiple of 16 only for even
    token counts, so the three cover each kernel variant of the anchor's block-size bucket.
    """
    if count <= 0 or max_tokens < 16:
        return np.zeros(0, dtype=np.int64)
    anchors = np.unique((np.geomspace(16, max_tokens, max(1, count // 3)) // 16 * 16).astype(np.int64))
    lengths = np.concatenate([anchors, anchors + 1, anchors + 2])
    return np.unique(lengths[lengths <= max_tokens])


def sweep_limit(snapshot: Mapping[str, Any]) -> int:
    """The longest prompt one step can take whole: ``min(budget, max_model_len - 2)``."""
    budget = snapshot.get("max_num_batched_tokens") or 2048
    max_len = snapshot.get("max_model_len") or budget + 2
    return int(min(budget, max_len - 2))


async def warm_up(backend: VllmBackend, opt: RunOptions, sweep_max_tokens: int = 0) -> None:
    """An unrecorded burst, then the one-at-a-time sweep, so compilation and first-use costs
    stay out of level 1 (see :class:`RunOptions`)."""
    if opt.warmup_requests > 0:
        load = LoadSpec(mode="burst", request_timeout_s=300.0)
        await run_load(backend, _specs(warmup_trace(opt), load, id_prefix="warmup"), load)
    lengths = sweep_lengths(opt.warmup_sweep_requests, sweep_max_tokens)
    if len(lengths):
        trace = RequestTrace.from_arrays(np.zeros(len(lengths)), lengths, np.full(len(lengths), 2))
        load = LoadSpec(mode="concurrency", concurrency=1, request_timeout_s=300.0)
        await run_load(backend, _specs(trace, load, id_prefix="warmup-sweep"), load)


async def reset_prefix_cache(engine: Any) -> bool | None:
    """Empty the engine's prefix cache (``AsyncLLM.reset_prefix_cache``); ``None`` if it has none.

    Called before each level so that no level is served from blocks an earlier one cached.
    """
    method = getattr(engine, "reset_prefix_cache", None)
    if method is None:
        return None
    result = method()
    if inspect.isawaitable(result):
        result = await result
    return bool(result) if result is not None else True


class EngineSession:
    """An engine ready for measured levels: call ``await start()`` once (warm-up and config
    snapshot), then ``await run(level, out_root)`` per level, in any order or number.

    ``meta`` (model, workload description, ...) is merged into every level's ``meta.json``
    together with the engine snapshot and versions.
    """

    def __init__(self, engine: Any, options: RunOptions | None = None,
                 meta: Mapping[str, Any] | None = None) -> None:
        self.options = options or RunOptions()
        vocab = self.options.vocab_size or engine_vocab_size(engine)
        self.engine = engine
        self.backend = VllmBackend(engine, self.options.params or vllm_sampling_params,
                                   self.options.seed, vocab)
        self.meta: dict[str, Any] = {"engine": "vllm-asyncllm", **(meta or {})}
        self.probe_baseline: float | None = None

    async def start(self) -> EngineSession:
        snapshot = engine_config_snapshot(self.engine)  # resolved at start-up; the warm-up changes none of it
        self.probe_baseline = baseline_s() if self.options.host_probe else None
        await warm_up(self.backend, self.options, sweep_limit(snapshot))
        self.meta["engine_config"] = {**snapshot, "versions": versions()}
        return self

    async def run(self, level: Level, out_root: str | os.PathLike[str] | None) -> Measurement:
        """Offer one level; with ``out_root`` also write ``out_root/<level.name>/``."""
        specs = _specs(level.trace, level.load, id_prefix=level.name)
        reset = await reset_prefix_cache(self.engine) if self.options.reset_prefix_cache else None
        started = dt.datetime.now(dt.timezone.utc).isoformat()
        probe = HostProbe(self.probe_baseline) if self.options.host_probe else None
        with GcWatch() as gc_watch, probe or contextlib.nullcontext():
            records, duration = await run_load(self.backend, specs, level.load)
        full_meta = {**run_meta("vllm", level.trace, level.load, records, started, duration),
                     "client_gc": gc_watch.stats(),
                     **({"host_probe": probe.result()} if probe else {}),
                     "level": level.name, "prefix_cache_reset": reset, **self.meta}
        out_dir = None if out_root is None else Path(out_root) / level.name
        if out_dir is not None:
            write_run(out_dir, records, full_meta)
        return Measurement.from_records(records, full_meta, source=str(out_dir or level.name))


async def run_levels(engine: Any, levels: Sequence[Level], out_root: str | os.PathLike[str] | None,
                     options: RunOptions | None = None,
                     meta: Mapping[str, Any] | None = None) -> list[Measurement]:
    """Warm up, then run each level in order on ``engine``; write ``out_root/<level.name>/``
    (nothing when ``out_root`` is ``None``).  Must run in the engine's event loop."""
    session = await EngineSession(engine, options, meta).start()
    return [await session.run(level, out_root) for level in levels]


def run_vllm(settings: EngineSettings, levels: Sequence[Level],
             out_root: str | os.PathLike[str] | None, options: RunOptions | None = None,
             meta: Mapping[str, Any] | None = None) -> list[Measurement]:
    """Build one engine from ``settings``, run every level on it, shut it down; needs a GPU."""

    async def main() -> list[Measurement]:
        try:
            engine = build_engine(settings)
        except ImportError:
            raise
        except Exception as exc:
            raise EngineStartError("vLLM could not start an engine here: "
                                   f"{type(exc).__name__}: {exc}") from exc
        try:
            return await run_levels(engine, levels, out_root, options,
                                    {"engine_args": settings.engine_kwargs(), **(meta or {})})
        finally:
            engine.shutdown()

    return asyncio.run(main())
