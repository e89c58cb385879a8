"""The front end's input path: requests that arrive together reach the engine core together,
after the front end's work for all of them (latsim.sim.frontend)."""

from __future__ import annotations

import numpy as np
import pytest

from latsim.sim.frontend import engine_arrivals, window_of
from latsim.sim.simulate import simulate
from latsim.workload.trace import RequestTrace
from tests.sim.conftest import LinearCost, small_deployment


def test_spaced_arrivals_are_not_held_back() -> None:
    arrivals = np.array([0.0, 0.01, 0.02, 0.5])
    assert engine_arrivals(arrivals, 1e-3).tolist() == arrivals.tolist()


def test_a_burst_reaches_the_core_after_the_work_of_all_its_requests() -> None:
    ready = engine_arrivals(np.zeros(200), 5e-4)
    assert ready == pytest.approx(np.full(200, 199 * 5e-4))


def test_a_stream_closer_than_the_work_is_held_until_it_stops() -> None:
    """Arrivals every 0.3 ms bring 0.5 ms each: one busy period, handed over at its end; a
    request after the backlog has drained is alone again."""
    arrivals = np.append(np.arange(10) * 3e-4, 1.0)
    ready = engine_arrivals(arrivals, 5e-4)
    assert ready[:10] == pytest.approx(np.full(10, 9 * 5e-4))
    assert ready[10] == 1.0
    assert (ready >= arrivals).all()


def test_several_front_ends_take_the_requests_in_turn() -> None:
    ready = engine_arrivals(np.zeros(10), 1e-3, fronts=2)
    assert ready == pytest.approx(np.full(10, 4e-3))
    assert engine_arrivals(np.zeros(10), 0.0).tolist() == [0.0] * 10


@pytest.mark.parametrize(("input_s", "fronts", "match"), [(-1e-3, 1, "input_s"), (float("nan"), 1, "input_s"),
                                                           (1e-3, 0, "fronts")])
def test_bad_terms_are_named(input_s: float, fronts: int, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        engine_arrivals([0.0, 1.0], input_s, fronts)


class FrontCost(LinearCost):
    def __init__(self, input_s: float) -> None:
        super().__init__()
        self.input_s = input_s


def burst(n: int) -> RequestTrace:
    return RequestTrace(arrival_s=np.zeros(n), input_tokens=np.full(n, 64), output_tokens=np.full(n, 4))


@pytest.mark.parametrize("fast_forward", [True, False])
def test_the_engine_sees_a_burst_only_once_the_front_end_has_handed_it_over(fast_forward: bool) -> None:
    """TTFT counts from the arrival; the first step starts after (n - 1) x input_s; without the
    term nothing changes."""
    dep = small_deployment()
    plain = simulate(dep, burst(20), cost_model=FrontCost(0.0), fast_forward=fast_forward).records
    held = simulate(dep, burst(20), cost_model=FrontCost(2e-3), fast_forward=fast_forward).records
    assert (held["arrival_s"] == 0.0).all()
    assert held["first_scheduled_s"].min() == pytest.approx(19 * 2e-3)
    assert plain["first_scheduled_s"].min() == 0.0
    shift = (held["first_token_s"] - plain["first_token_s"]).to_numpy()
    assert shift == pytest.approx(np.full(20, 19 * 2e-3))


def test_a_long_busy_period_hands_over_every_window() -> None:
    """400 requests at once, 0.5 ms each (200 ms of work), a 60 ms window: hand-overs at 60, 120
    and 180 ms of those done by then, the rest at the end."""
    ready = engine_arrivals(np.zeros(400), 5e-4, window_s=0.06)
    times, counts = np.unique(np.round(ready + 5e-4, 9), return_counts=True)
    assert times.tolist() == pytest.approx([0.06, 0.12, 0.18, 0.2])
    assert counts.tolist() == [120, 120, 120, 40]
    assert (np.diff(ready) >= 0).all()
    assert engine_arrivals(np.zeros(100), 5e-4, window_s=1.0) == pytest.approx(engine_arrivals(np.zeros(100), 5e-4))
    with pytest.raises(ValueError, match="window_s"):
        engine_arrivals(np.zeros(3), 5e-4, window_s=0.0)
    assert window_of(0.0) == np.inf and window_of(0.06) == 0.06  # the host term's 0: no window
