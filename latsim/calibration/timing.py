"""Timing primitives shared by every microbenchmark family.

Contract of :meth:`Timer.time`: ``fn(i)`` runs the measured operation once on input set
``i % sets`` (the caller rotates among buffer sets so that repeats do not hit a warm L2); the
timer warms up, estimates the per-call time, picks the repeat count so that the measured part
lasts about ``target_s`` (between ``min_reps`` and ``max_reps``) and returns the median, p10 and
p90 of the per-call times in seconds.

The CUDA timer records a pair of CUDA events around every call.  Before the timed calls it
enqueues a GPU sleep long enough for the host to enqueue all of them, so the events measure
kernel time on the device and not the host's launch rate (launch overhead is measured on its
own by :mod:`latsim.calibration.overhead`).  The CPU timer (``backend="cpu"``) uses
``time.perf_counter`` and exists for tests and CI.

The graph timer prices an operator the way a decode step runs it: vLLM replays each step's
per-token operators (linear layers, norms, activations, MoE) from CUDA graphs, back to back.  It
captures ``c`` consecutive calls (``fn(0) .. fn(c-1)``, so the rotation over input sets still
keeps the L2 cold) in one graph and times each replay between two events, per call: kernel time
plus the device's gap between two kernels of a graph (``graph_per_kernel_s`` of the overhead
family), without the few microseconds a pair of events around one kernel reads.  ``c`` makes a
replay last about :data:`GRAPH_TARGET_S` (between :data:`MIN_GRAPH_CALLS` and
:data:`MAX_GRAPH_CALLS`).  An operator that cannot be captured is timed with events instead; a
:class:`Timing` names its ``method`` either way (``cuda-graph``, ``cuda-events``, ``perf_counter``).
On the H200, the Llama-3.1-8B linear layers at 64 rows read 8 % less replayed than one call at a
time, and match a live decode trace (``data/kernels/h200-gemm-probe``).  Only operators of at
most :data:`GRAPH_MAX_ROWS` rows are replayed: vLLM runs larger steps without graphs, and there
the events' reading is the engine's (replayed, bf16 GEMMs of 1,024-4,096 rows read up to 1.17x
the events' time: ``data/kernels/README.md``).
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from latsim.costmodel.profile.floor import GRAPH_TIMER

BACKENDS = ("cuda", "cpu")
OP_TIMINGS = ("graph", "events")
"""How the per-token operators are timed on a GPU: replayed in CUDA graphs (as vLLM runs them) or
one call at a time between events (how profiles before the eighteenth session were measured)."""
HEAVY_TIMINGS = ("burst", "cool")
"""How the per-token operators of steps too large for CUDA graphs (more than :data:`GRAPH_MAX_ROWS`
rows) are timed on a GPU: ``burst``, between events right after the point before (every profile
to the twentieth session: a long call's burst runs partly at the power cap's clock, by how much
depending on the points before it, ``data/power/README.md``), or ``cool``, at the full clock
(:class:`CoolTimer`), for a power model that applies the cap's clock ratio itself."""
COOL_PAUSE_S = 0.25
"""Longest idle before a ``cool`` point: the H200's clock is back to full after 200 ms idle."""
COOL_IDLE_PER_BUSY = 6.0
"""Idle seconds a ``cool`` point waits per second the GPU may have been busy since the last pause
(at most :data:`COOL_PAUSE_S`): the H200's fitted power model refills 0.85 s of full-clock budget
per idle second (``power.json``), so 1.2 x would do; 6 x keeps the duty cycle under 1/7, where
the chip's slower warming stays out too."""
COOL_BUDGET_S = 0.03
"""Seconds of work a ``cool`` point may run: inside the 30-50 ms the H200 holds its full clock for."""
GRAPH_TARGET_S = 2e-3
MIN_GRAPH_CALLS = 2
MAX_GRAPH_CALLS = 32
REPLAY_ENQUEUE_S = 20e-6
"""Host seconds to enqueue one graph replay between two events (sizes the GPU sleep before them)."""
GRAPH_MAX_ROWS = 512
"""Rows (tokens) of the largest step vLLM 0.25.1 replays from a CUDA graph (its largest capture size)."""
SLEEP_CLOCK_HZ = 1.5e9  # cycles -> seconds for torch.cuda._sleep; only sets a lower bound on the wait
MAX_SLEEP_S = 0.2


@dataclass(frozen=True)
class Timing:
    """Per-call seconds over ``reps`` timed repeats."""

    median_s: float
    p10_s: float
    p90_s: float
    reps: int
    method: str = "cuda-events"


@dataclass(frozen=True)
class TimerSettings:
    """How long to measure one point: warm-up calls, repeat bounds and the target duration."""

    warmup: int = 3
    min_reps: int = 5
    max_reps: int = 40
    target_s: float = 0.015


def summarize(times: list[float], method: str = "cuda-events") -> Timing:
    """Median and p10/p90 of per-call seconds."""
    arr = np.asarray(times, dtype=np.float64)
    p10, med, p90 = np.percentile(arr, [10, 50, 90])
    return Timing(float(med), float(p10), float(p90), len(times), method)


def graph_calls(est_s: float) -> int:
    """Calls per captured graph for an operator of about ``est_s`` seconds a call."""
    if est_s <= 0:
        return MAX_GRAPH_CALLS
    return int(min(MAX_GRAPH_CALLS, max(MIN_GRAPH_CALLS, math.ceil(GRAPH_TARGET_S / est_s))))


def rotation_sets(bytes_per_set: float, l2_bytes: float, max_sets: int = 32) -> int:
    """Input sets to rotate among so that one pass over them exceeds twice the L2 cache.

    One set already larger than ``2 * l2_bytes`` needs no rotation (it cannot stay cached).
    """
    if bytes_per_set >= 2 * l2_bytes:
        return 1
    return int(min(max_sets, math.ceil(2 * l2_bytes / max(bytes_per_set, 1.0)) + 1))


def _reps(est_s: float, s: TimerSettings) -> int:
    if est_s <= 0:
        return s.max_reps
    return int(min(s.max_reps, max(s.min_reps, math.ceil(s.target_s / est_s))))


def event_times(torch: Any, reps: int, call: Callable[[int], object]) -> list[float]:
    """Seconds of each of ``reps`` calls ``call(0) .. call(reps - 1)``, each between two CUDA events
    recorded around it (the caller has enqueued a GPU sleep so the host runs ahead)."""
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        starts[i].record()
        call(i)
        ends[i].record()
    torch.cuda.synchronize()
    return [a.elapsed_time(b) * 1e-3 for a, b in zip(starts, ends, strict=True)]


def estimate(torch: Any, fn: Callable[[int], object], first: int) -> tuple[float, float]:
    """(GPU seconds per call, host seconds to enqueue one call) over three calls ``fn(first)``,
    ``fn(first + 1)``, ``fn(first + 2)``."""
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0 = time.perf_counter()
    a.record()
    for i in range(3):
        fn(first + i)
    b.record()
    host = (time.perf_counter() - t0) / 3
    torch.cuda.synchronize()
    return a.elapsed_time(b) * 1e-3 / 3, host


def gpu_sleep(torch: Any, seconds: float) -> None:
    """Enqueue a GPU busy-wait of about ``seconds`` (at most :data:`MAX_SLEEP_S`) so the host
    can enqueue the timed calls ahead of the GPU; nothing where torch lacks ``cuda._sleep``."""
    sleep = getattr(torch.cuda, "_sleep", None)
    if sleep is not None and seconds > 0:
        sleep(int(min(seconds, MAX_SLEEP_S) * SLEEP_CLOCK_HZ))


class CudaTimer:
    """CUDA-event timer (see the module note).  ``torch`` is the imported module."""

    name = "cuda-events"

    def __init__(self, torch: Any, settings: TimerSettings | None = None) -> None:
        self.torch = torch
        self.settings = settings or TimerSettings()

    def time(self, fn: Callable[[int], object]) -> Timing:
        torch, s = self.torch, self.settings
        for i in range(s.warmup):
            fn(i)
        torch.cuda.synchronize()
        est_gpu, est_host = estimate(torch, fn, s.warmup)
        reps = self._count(est_gpu)
        gpu_sleep(torch, reps * est_host * 1.3)
        return summarize(event_times(torch, reps, lambda i: fn(s.warmup + 3 + i)), self.name)

    def _count(self, est_gpu: float) -> int:
        """Timed calls for an operator of about ``est_gpu`` seconds a call."""
        return _reps(est_gpu, self.settings)


class CoolTimer(CudaTimer):
    """CUDA-event timer at the GPU's full clock, for compute-bound calls the power cap slows.

    Waits with the GPU idle (``pause``: the host's sleep; :meth:`idle_s`, at most ``pause_s``), so
    the clock recovers from the points before; then one warm-up call, the three of the estimate,
    and as many timed calls as keep the point's work within ``budget_s`` (at least
    ``settings.min_reps``).  ``clock``: the host's wall clock.  Same contract as
    :class:`CudaTimer`; its :class:`Timing` names the method ``cuda-events-cool``.
    """

    name = "cuda-events-cool"

    def __init__(self, torch: Any, settings: TimerSettings | None = None, *, pause_s: float = COOL_PAUSE_S,
                 budget_s: float = COOL_BUDGET_S, pause: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        super().__init__(torch, settings or TimerSettings(warmup=1, min_reps=3, max_reps=40, target_s=0.015))
        self.pause_s, self.budget_s, self.pause, self.clock = pause_s, budget_s, pause, clock
        self.resumed_at: float | None = None
        """When the last pause ended (None: no point timed yet)."""

    def time(self, fn: Callable[[int], object]) -> Timing:
        self.torch.cuda.synchronize()
        self.pause(self.idle_s())
        self.resumed_at = self.clock()
        return super().time(fn)

    def idle_s(self) -> float:
        """The pause before the next point: :data:`COOL_IDLE_PER_BUSY` x the wall seconds since
        the last pause ended (every second of them counted as GPU work, whoever ran it), at most
        ``pause_s``; ``pause_s`` before the first point."""
        if self.resumed_at is None:
            return self.pause_s
        busy = max(0.0, self.clock() - self.resumed_at)
        return min(self.pause_s, COOL_IDLE_PER_BUSY * busy)

    def _count(self, est_gpu: float) -> int:
        """:class:`CudaTimer`'s count, cut to the calls that fit the budget after the warm-up and
        the estimate's three (never below ``min_reps``)."""
        reps, s = super()._count(est_gpu), self.settings
        if est_gpu <= 0:
            return reps
        room = int((self.budget_s - (s.warmup + 3) * est_gpu) // est_gpu)
        return max(s.min_reps, min(reps, room))


class GraphTimer:
    """CUDA-graph replay timer (see the module note); same contract as :class:`CudaTimer`."""

    name = GRAPH_TIMER

    def __init__(self, torch: Any, settings: TimerSettings | None = None) -> None:
        self.torch = torch
        self.events = CudaTimer(torch, settings)
        self.settings = self.events.settings

    def time(self, fn: Callable[[int], object]) -> Timing:
        torch, s = self.torch, self.settings
        for i in range(s.warmup):
            fn(i)
        torch.cuda.synchronize()
        est_gpu, _ = estimate(torch, fn, s.warmup)
        calls = graph_calls(est_gpu)
        try:
            graph = self._capture(fn, calls)
        except Exception:  # an operator the graph cannot hold: one call at a time
            torch.cuda.synchronize()
            return self.events.time(fn)
        reps = _reps(est_gpu * calls, s)
        graph.replay()
        gpu_sleep(torch, reps * REPLAY_ENQUEUE_S * 1.3)
        replays = event_times(torch, reps, lambda _: graph.replay())
        return summarize([t / calls for t in replays], self.name)

    def _capture(self, fn: Callable[[int], object], calls: int) -> Any:
        """A CUDA graph of ``fn(0) .. fn(calls - 1)`` (:func:`capture_graph`)."""
        return capture_graph(self.torch, [functools.partial(fn, i) for i in range(calls)])


def capture_graph(torch: Any, calls: Sequence[Callable[[], object]]) -> Any:
    """One CUDA graph of ``calls`` in order, run once on a side stream first (torch captures
    after a warm-up off the default stream); the caller replays it."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for call in calls:
            call()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for call in calls:
            call()
    return graph


class CpuTimer:
    """Host-clock timer for the CPU backend (tests, CI): same contract, fewer repeats."""

    name = "perf_counter"

    def __init__(self, settings: TimerSettings | None = None) -> None:
        self.settings = settings or TimerSettings(warmup=1, min_reps=3, max_reps=5, target_s=0.002)

    def time(self, fn: Callable[[int], object]) -> Timing:
        s = self.settings
        for i in range(s.warmup):
            fn(i)
        t0 = time.perf_counter()
        fn(s.warmup)
        reps = _reps(time.perf_counter() - t0, s)
        times = []
        for i in range(reps):
            t0 = time.perf_counter()
            fn(s.warmup + 1 + i)
            times.append(time.perf_counter() - t0)
        return summarize(times, self.name)
