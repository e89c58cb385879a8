"""What a microbenchmark needs: torch, the device, a timer, random inputs and a scratch cache.

:class:`BenchContext` is the one mutable object of the benchmark side: ``cache`` holds the
buffers a family reuses across consecutive points (weights of one GEMM shape, a KV cache) and
:meth:`clear` drops them (after an out-of-memory error, or when a family ends); ``probes``
keeps which kernel implementation each family settled on.  Inputs are
random normal, never zeros (a matrix product runs measurably faster on zeros).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any

from latsim.calibration.timing import (
    BACKENDS,
    GRAPH_MAX_ROWS,
    HEAVY_TIMINGS,
    OP_TIMINGS,
    CoolTimer,
    CpuTimer,
    CudaTimer,
    GraphTimer,
)

H200_L2_BYTES = 60 * 2**20
CPU_CACHE_BYTES = 4 * 2**20
SEED = 20240607


def import_torch() -> Any:
    """torch, or ValueError telling how to install it (the ``latsim[gpu]`` extra)."""
    try:
        return importlib.import_module("torch")
    except ImportError as exc:
        raise ValueError("calibration needs torch: pip install 'latsim[gpu]' (or torch for --backend cpu)") from exc


@dataclass
class BenchContext:
    """Shared state of one benchmark run; ``backend`` is ``cuda`` or ``cpu``.

    ``timer`` times attention and the overhead benchmarks one call at a time; ``op_timer`` times
    the per-token operators (GEMMs, memory-bound ops, MoE layers) of graph-sized steps
    (:meth:`op_timer_for`), which vLLM replays from CUDA graphs
    (:class:`~latsim.calibration.timing.GraphTimer`; the same as ``timer`` when the run asks for
    events, and on the CPU); ``heavy_timer`` those of larger steps (``timer``, or
    :class:`~latsim.calibration.timing.CoolTimer` when the run asks for the full clock)."""

    torch: Any
    backend: str
    timer: Any
    l2_bytes: int
    generator: Any
    cache: dict[str, Any] = field(default_factory=dict)
    probes: dict[str, Any] = field(default_factory=dict)
    op_timer: Any = None
    heavy_timer: Any = None

    def __post_init__(self) -> None:
        if self.op_timer is None:
            self.op_timer = self.timer
        if self.heavy_timer is None:
            self.heavy_timer = self.timer

    @property
    def device(self) -> str:
        return "cuda" if self.backend == "cuda" else "cpu"

    @property
    def is_cuda(self) -> bool:
        return self.backend == "cuda"

    def randn(self, *shape: int, dtype: Any = None) -> Any:
        """Random normal tensor on the device (bf16 unless ``dtype``); fp8 is cast from bf16."""
        torch = self.torch
        want = dtype or torch.bfloat16
        make = want if want in (torch.bfloat16, torch.float16, torch.float32) else torch.bfloat16
        x = torch.randn(*shape, dtype=make, device=self.device, generator=self.generator)
        return x if make is want else x.to(want)

    def op_timer_for(self, rows: int) -> Any:
        """The timer of a per-token operator over ``rows`` tokens: ``op_timer`` for the steps vLLM
        replays from CUDA graphs (at most ``GRAPH_MAX_ROWS``), ``heavy_timer`` for the larger ones
        it runs without."""
        return self.op_timer if rows <= GRAPH_MAX_ROWS else self.heavy_timer

    def clear(self) -> None:
        """Drop cached buffers and return freed memory to the device."""
        self.cache.clear()
        if self.is_cuda:
            self.torch.cuda.empty_cache()

    def synchronize(self) -> None:
        if self.is_cuda:
            self.torch.cuda.synchronize()


def make_context(backend: str, op_timing: str = "graph", heavy_timing: str = "burst") -> BenchContext:
    """A context for ``backend`` (``cuda`` or ``cpu``) whose per-token operators are timed by
    ``op_timing`` (``graph`` or ``events``) up to ``GRAPH_MAX_ROWS`` rows and by ``heavy_timing``
    (``burst`` or ``cool``, :data:`~latsim.calibration.timing.HEAVY_TIMINGS`) above (the CPU has
    one timer); ValueError if it cannot run here."""
    if backend not in BACKENDS:
        raise ValueError(f"backend={backend!r} is not supported; accepted: {', '.join(BACKENDS)}")
    if op_timing not in OP_TIMINGS:
        raise ValueError(f"op_timing={op_timing!r} is not supported; accepted: {', '.join(OP_TIMINGS)}")
    if heavy_timing not in HEAVY_TIMINGS:
        raise ValueError(f"heavy_timing={heavy_timing!r} is not supported; accepted: {', '.join(HEAVY_TIMINGS)}")
    torch = import_torch()
    if backend == "cuda":
        if not torch.cuda.is_available():
            raise ValueError("no CUDA GPU found; use --backend cpu for a test run")
        props = torch.cuda.get_device_properties(0)
        l2 = int(getattr(props, "L2_cache_size", 0) or H200_L2_BYTES)
        gen = torch.Generator(device="cuda")
        gen.manual_seed(SEED)
        torch.backends.cuda.matmul.allow_tf32 = True
        events = CudaTimer(torch)
        ops = GraphTimer(torch) if op_timing == "graph" else events
        heavy = CoolTimer(torch) if heavy_timing == "cool" else events
        return BenchContext(torch, backend, events, l2, gen, op_timer=ops, heavy_timer=heavy)
    gen = torch.Generator()
    gen.manual_seed(SEED)
    return BenchContext(torch, backend, CpuTimer(), CPU_CACHE_BYTES, gen)


def is_oom(exc: BaseException) -> bool:
    """True for a device out-of-memory error (torch's class or its message)."""
    name = type(exc).__name__
    return name == "OutOfMemoryError" or "out of memory" in str(exc).lower()


class Skip(Exception):
    """Raised by a benchmark for a point this machine cannot measure; the message is the reason."""
