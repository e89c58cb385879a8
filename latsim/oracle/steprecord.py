"""A neutral record of one scheduling decision, for differential tests and debugging.

Both latsim's schedulers and the adapter around vLLM's own scheduler can emit these, so the
two can be compared step by step without either knowing the other's internals.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class StreamRequest:
    """A request of a step-indexed stream: added just before step ``arrival_step`` is scheduled.

    ``prefix_group`` >= 0 marks requests whose first ``prefix_tokens`` prompt tokens are
    identical across the group (prefix-cache hits); -1 shares nothing.
    """

    request_id: str
    arrival_step: int
    prompt_tokens: int
    output_tokens: int
    prefix_group: int = -1
    prefix_tokens: int = 0


@dataclass(frozen=True)
class StepRecord:
    """What one ``schedule()`` call decided, and what ``update`` reported after it.

    ``scheduled`` lists ``(request_id, num_tokens)`` in the order the scheduler chose them.
    ``new`` are requests admitted from the waiting queue this step (first time or resumed),
    ``preempted`` the victims chosen this step (in order), ``finished`` the requests that
    completed when this step's output was applied, ``rejected`` those refused at arrival
    (e.g. longer than max_model_len), and ``cached_tokens`` the prefix-cache hits of the
    admitted requests (request_id -> tokens).
    """

    step: int
    scheduled: tuple[tuple[str, int], ...]
    new: tuple[str, ...] = ()
    preempted: tuple[str, ...] = ()
    finished: tuple[str, ...] = ()
    rejected: tuple[str, ...] = ()
    cached_tokens: dict[str, int] = field(default_factory=dict)

    @property
    def total_tokens(self) -> int:
        return sum(n for _, n in self.scheduled)
