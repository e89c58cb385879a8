"""The full-clock timer for steps too large for CUDA graphs, on a fake device that heats up."""

from __future__ import annotations

import pytest

from latsim.calibration.context import make_context
from latsim.calibration.timing import (
    COOL_BUDGET_S,
    COOL_IDLE_PER_BUSY,
    HEAVY_TIMINGS,
    CoolTimer,
    CpuTimer,
    CudaTimer,
    TimerSettings,
)
from tests.calibration.test_graph_timer import FakeDevice

CAPPED = 1.2
"""The fake GPU's slowdown once its full-clock budget of work is spent (the H200's is about 1.17)."""
REFILL = 0.85
"""Seconds of work the fake GPU forgets per idle second (the H200's fitted refill)."""


class HotDevice(FakeDevice):
    """:class:`FakeDevice`'s clock, whose kernels slow by :data:`CAPPED` once its work, less
    :data:`REFILL` x its idle time (:meth:`idle`), reaches ``budget_s``, as the H200 does at its
    power cap."""

    def __init__(self, budget_s: float = 0.045) -> None:
        super().__init__()
        self.work, self.budget_s = 0.0, budget_s

    def launch(self, cost_s: float) -> None:
        took = cost_s * (CAPPED if self.work >= self.budget_s else 1.0)
        self.now += took
        self.work += took

    def idle(self, seconds: float) -> None:
        self.now += seconds
        self.work = max(0.0, self.work - REFILL * seconds)


def _kernel(dev: HotDevice, cost_s: float):
    return lambda i: dev.launch(cost_s)


def test_after_heavy_points_the_burst_timer_reads_the_capped_clock_and_the_cool_one_the_full() -> None:
    dev = HotDevice()
    for _ in range(30):  # the points before: 90 ms of heavy work
        dev.launch(3e-3)
    burst = CudaTimer(dev.torch(), TimerSettings(warmup=3, min_reps=5, max_reps=40, target_s=0.015))
    assert burst.time(_kernel(dev, 3e-3)).median_s == pytest.approx(3e-3 * CAPPED)
    cool = CoolTimer(dev.torch(), pause=dev.idle)
    t = cool.time(_kernel(dev, 3e-3))
    assert t.median_s == pytest.approx(3e-3) and t.method == "cuda-events-cool"


@pytest.mark.parametrize(("cost_s", "reps"), [(1e-3, 15), (5e-3, 3), (20e-6, 40)])
def test_a_cool_point_keeps_its_work_inside_the_budget(cost_s: float, reps: int) -> None:
    dev = HotDevice()
    pauses: list[float] = []
    t = CoolTimer(dev.torch(), pause=lambda s: (pauses.append(s), dev.idle(s))).time(_kernel(dev, cost_s))
    assert t.reps == reps and pauses == [0.25]
    spent = (1 + 3 + t.reps) * cost_s
    assert spent <= COOL_BUDGET_S or t.reps == 3  # only the minimum of timed calls may run past it


def _cool(dev: HotDevice, pauses: list[float]) -> CoolTimer:
    return CoolTimer(dev.torch(), pause=lambda s: (pauses.append(s), dev.idle(s)), clock=lambda: dev.now)


def test_back_to_back_cool_points_all_read_the_full_clock_with_pauses_sized_by_the_work() -> None:
    dev, pauses = HotDevice(), []
    cool = _cool(dev, pauses)
    heavy = [cool.time(_kernel(dev, 3e-3)) for _ in range(20)]
    assert [t.median_s for t in heavy] == pytest.approx([3e-3] * 20)
    work = [(1 + 3 + t.reps) * 3e-3 for t in heavy]  # warm-up, estimate, timed calls: 27-30 ms
    assert pauses == pytest.approx([0.25] + [COOL_IDLE_PER_BUSY * w for w in work[:-1]])
    light = [cool.time(_kernel(dev, 20e-6)).median_s for _ in range(20)]
    assert light == pytest.approx([20e-6] * 20)
    assert 0.0 < max(pauses[21:]) < 0.01  # 44 calls of 20 us: a few milliseconds of pause


def test_a_cool_point_after_other_timers_work_pauses_for_it() -> None:
    dev, pauses = HotDevice(), []
    cool = _cool(dev, pauses)
    cool.time(_kernel(dev, 20e-6))
    for _ in range(20):  # a burst timer's points in between: 60 ms of heavy work
        dev.launch(3e-3)
    assert cool.time(_kernel(dev, 3e-3)).median_s == pytest.approx(3e-3)
    assert pauses[-1] == 0.25


def test_the_context_refuses_an_unknown_heavy_timing_before_it_needs_torch() -> None:
    assert HEAVY_TIMINGS == ("burst", "cool")
    with pytest.raises(ValueError, match="heavy_timing='warm' is not supported; accepted: burst, cool"):
        make_context("cpu", heavy_timing="warm")


def test_a_cpu_context_times_every_size_with_its_one_timer() -> None:
    pytest.importorskip("torch")
    ctx = make_context("cpu", heavy_timing="cool")
    assert isinstance(ctx.heavy_timer, CpuTimer) and ctx.op_timer_for(4096) is ctx.heavy_timer
