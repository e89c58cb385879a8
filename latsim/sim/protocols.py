"""The contracts between the engine-independent core (:mod:`latsim.sim`) and an engine.

A serving engine plugs in a :class:`Scheduler` (which requests run in the next step) and,
optionally, a :class:`FastForward` twin that runs several steps per call with identical
results.  Each scheduler owns a :class:`ReleaseClock`: when a step's outputs reach the
requests and when the next decision is taken (vLLM's asynchronous loop holds outputs while a
step without CUDA graphs is launched; a plain engine releases them at the step's end).
:class:`~latsim.sim.replica.Replica` reads nothing else of an engine.  The step's price comes
from a :class:`~latsim.costmodel.batch.CostModel`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from latsim.costmodel.batch import BatchShape, CostModel
    from latsim.sim.recorder import Recorder
    from latsim.sim.request import Req
    from latsim.sim.step import StepPlan


class ReleaseClock(Protocol):
    """When a replica's step outputs go out and when its next decision is taken."""

    def seed(self, seed: int, replica: int) -> None:
        """Restart any randomness for ``replica`` of a simulation seeded ``seed``."""

    def step(self, cost: CostModel, shape: BatchShape, decided: float, start: float,
             end: float) -> tuple[float, float]:
        """``(end, next decision)`` of a step decided at ``decided``, run from ``start`` to the
        priced ``end``."""

    def release(self, requests: Sequence[Req]) -> None:
        """Re-stamp the token times of ``requests`` whose outputs were held back."""


class Scheduler(Protocol):
    """One engine's scheduling policy: ``schedule()`` then ``update()`` per step.

    ``zombies`` are requests finished by the latest ``update`` that keep their seat until the
    next ``schedule()`` (asynchronous scheduling; always empty otherwise).
    """

    recorder: Recorder | None
    zombies: list[Req]

    @property
    def launch(self) -> ReleaseClock: ...

    @property
    def async_scheduling(self) -> bool: ...

    @property
    def num_preemptions(self) -> int: ...

    @property
    def peak_blocks_used(self) -> int: ...

    def add_request(self, req: Req) -> None: ...

    def has_work(self) -> bool: ...

    def schedule(self) -> StepPlan: ...

    def update(self, plan: StepPlan, now: float) -> list[Req]:
        """Apply ``plan``'s step, which ended at ``now``; the requests it finished."""


class FastForward(Scheduler, Protocol):
    """A scheduler that runs many steps per call with the same results as stepping one by one."""

    last_start: float
    """When the next step is decided (asynchronous scheduling): the latest step's start."""

    def advance(self, clock: float, cost: CostModel, next_arrival: float, horizon: float,
                unseen: float | None = None,
                reveal: Callable[[float], float] | None = None) -> tuple[float, int]:
        """Run steps from ``clock`` until a decision could see a new arrival; ``(clock, finished)``."""

    def settle(self) -> None:
        """Make every request's fields current (called once, when the simulation ends)."""
