"""One step's scheduling decision, the record every scheduler returns from ``schedule()``."""

from __future__ import annotations

from dataclasses import dataclass, field

from latsim.sim.request import Req


@dataclass
class StepPlan:
    """One step's decision: ``(request, tokens)`` in schedule order, plus what changed."""

    scheduled: list[tuple[Req, int]] = field(default_factory=list)
    new: list[Req] = field(default_factory=list)
    preempted: list[Req] = field(default_factory=list)
    admission_blocked: bool = False

    @property
    def num_tokens(self) -> int:
        return sum(n for _, n in self.scheduled)
