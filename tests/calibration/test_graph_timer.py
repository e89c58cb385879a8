"""The CUDA-graph replay timer, on a fake device clock (no GPU): what it times and how it falls back.

The fake device runs each kernel for its cost plus a gap: :data:`EAGER_GAP_S` when launched one
at a time between events (what a pair of events around one kernel reads on a GPU),
:data:`GRAPH_GAP_S` between two kernels of a replayed graph.  The graph timer must read cost plus
the graph's gap per call; the event timer cost plus the eager gap.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import numpy as np
import pandas as pd
import pytest

from latsim.calibration.context import BenchContext
from latsim.calibration.timing import (
    GRAPH_MAX_ROWS,
    GRAPH_TARGET_S,
    MAX_GRAPH_CALLS,
    MIN_GRAPH_CALLS,
    CudaTimer,
    GraphTimer,
    TimerSettings,
    graph_calls,
)
from latsim.costmodel.profile.floor import GRAPH_TIMER, without_floor

EAGER_GAP_S = 3e-6
GRAPH_GAP_S = 1e-6


class FakeDevice:
    """A device clock; kernels launched outside a capture run at once, inside one are recorded."""

    def __init__(self, capturable: bool = True) -> None:
        self.now = 0.0
        self.capturing: list[float] | None = None
        self.capturable = capturable

    def launch(self, cost_s: float) -> None:
        if self.capturing is not None:
            if not self.capturable:
                raise RuntimeError("operation not permitted when stream is capturing")
            self.capturing.append(cost_s)
        else:
            self.now += cost_s + EAGER_GAP_S

    def torch(self) -> Any:
        """A namespace with the slice of ``torch.cuda`` the timers use."""
        dev = self

        class Event:
            def __init__(self, enable_timing: bool = True) -> None:
                self.t = 0.0

            def record(self) -> None:
                self.t = dev.now

            def elapsed_time(self, end: Event) -> float:
                return (end.t - self.t) * 1e3

        class Graph:
            def __init__(self) -> None:
                self.ops: list[float] = []

            def replay(self) -> None:
                dev.now += sum(c + GRAPH_GAP_S for c in self.ops)

        @contextlib.contextmanager
        def graph(g: Graph) -> Iterator[None]:
            dev.capturing = g.ops
            try:
                yield
            finally:
                dev.capturing = None

        stream = SimpleNamespace(wait_stream=lambda other: None)
        cuda = SimpleNamespace(
            Event=Event, CUDAGraph=Graph, graph=graph, synchronize=lambda: None, _sleep=lambda cycles: None,
            Stream=lambda: stream, current_stream=lambda: stream, stream=lambda s: contextlib.nullcontext(),
        )
        return SimpleNamespace(cuda=cuda)


def _kernel(dev: FakeDevice, cost_s: float, seen: list[int]) -> Callable[[int], None]:
    def fn(i: int) -> None:
        seen.append(i)
        dev.launch(cost_s)
    return fn


@pytest.mark.parametrize("cost_s", [2e-6, 30e-6, 5e-3])
def test_graph_timer_reads_cost_plus_the_graph_gap_and_events_the_eager_gap(cost_s: float) -> None:
    dev = FakeDevice()
    settings = TimerSettings(warmup=2, min_reps=5, max_reps=10, target_s=1e-3)
    graph = GraphTimer(dev.torch(), settings).time(_kernel(dev, cost_s, []))
    events = CudaTimer(dev.torch(), settings).time(_kernel(dev, cost_s, []))
    assert graph.method == "cuda-graph" == GRAPH_TIMER
    assert graph.median_s == pytest.approx(cost_s + GRAPH_GAP_S, rel=1e-9)
    assert events.method == "cuda-events"
    assert events.median_s == pytest.approx(cost_s + EAGER_GAP_S, rel=1e-9)


def test_a_graph_holds_consecutive_input_sets() -> None:
    """Captured calls take the sets 0 .. c-1 in turn, so the rotation keeps the L2 cold in a replay."""
    dev, seen = FakeDevice(), []
    timer = GraphTimer(dev.torch(), TimerSettings(warmup=1, min_reps=3, max_reps=3))
    timer.time(_kernel(dev, 100e-6, seen))
    calls = graph_calls(100e-6 + EAGER_GAP_S)
    # warm-up (1), estimate (3), side-stream warm-up (c), capture (c)
    assert seen[4:] == list(range(calls)) * 2


def test_an_operator_the_graph_cannot_hold_is_timed_with_events() -> None:
    dev = FakeDevice(capturable=False)
    t = GraphTimer(dev.torch(), TimerSettings(warmup=1, min_reps=3, max_reps=3)).time(_kernel(dev, 50e-6, []))
    assert t.method == "cuda-events"
    assert t.median_s == pytest.approx(50e-6 + EAGER_GAP_S)


def test_graph_calls_bounds() -> None:
    assert graph_calls(1e-7) == MAX_GRAPH_CALLS
    assert graph_calls(0.0) == MAX_GRAPH_CALLS
    assert graph_calls(1.0) == MIN_GRAPH_CALLS
    assert graph_calls(GRAPH_TARGET_S / 5) == 5


def test_fit_takes_the_event_floor_from_event_rows_and_the_graph_gap_from_replayed_rows() -> None:
    df = pd.DataFrame({"median_s": [10e-6, 10e-6, 10e-6, 3e-6],
                       "timer": ["cuda-events", GRAPH_TIMER, None, GRAPH_TIMER]})
    got = without_floor(df, floor_s=2.5e-6, graph_gap_s=1e-6)["median_s"].to_numpy()
    np.testing.assert_allclose(got, [7.5e-6, 9e-6, 7.5e-6, 2e-6])
    old = without_floor(df.drop(columns="timer"), floor_s=2.5e-6, graph_gap_s=1e-6)["median_s"].to_numpy()
    np.testing.assert_allclose(old, [7.5e-6, 7.5e-6, 7.5e-6, 1.5e-6])


def test_only_graph_sized_operators_are_replayed() -> None:
    """vLLM replays steps of up to 512 tokens from graphs and runs larger ones without."""
    dev = FakeDevice()
    events, graph = CudaTimer(dev.torch()), GraphTimer(dev.torch())
    ctx = BenchContext(dev.torch(), "cuda", events, 0, None, op_timer=graph)
    assert ctx.op_timer_for(1) is graph and ctx.op_timer_for(GRAPH_MAX_ROWS) is graph
    assert ctx.op_timer_for(GRAPH_MAX_ROWS + 1) is events
    plain = BenchContext(dev.torch(), "cuda", events, 0, None)
    assert plain.op_timer_for(1) is events  # --op-timing events: one timer for everything
