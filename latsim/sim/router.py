"""Routing arriving requests to replicas, and the arrival process that drives a simulation."""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from typing import Protocol

import simpy

from latsim.sim.replica import Replica
from latsim.sim.request import REJECTED, Req


class Router(Protocol):
    def choose(self, replicas: Sequence[Replica]) -> Replica: ...


class RoundRobin:
    """Replica ``i mod R`` for the ``i``-th accepted request."""

    def __init__(self) -> None:
        self._next = 0

    def choose(self, replicas: Sequence[Replica]) -> Replica:
        replica = replicas[self._next % len(replicas)]
        self._next += 1
        return replica


class LeastOutstanding:
    """The replica with the fewest requests in flight (lowest index on ties)."""

    def choose(self, replicas: Sequence[Replica]) -> Replica:
        return min(replicas, key=lambda r: (r.outstanding, r.index))


ROUTERS: dict[str, Callable[[], Router]] = {"round-robin": RoundRobin, "least-outstanding": LeastOutstanding}


def make_router(name: str) -> Router:
    try:
        return ROUTERS[name]()
    except KeyError:
        raise ValueError(f"router must be one of {', '.join(ROUTERS)}, got {name!r}") from None


def rejected_by_engine(prompt: int, output: int, max_model_len: int) -> bool:
    """vLLM refuses an empty prompt, and (its OpenAI server) ``prompt + max_tokens > max_model_len``.

    The latter covers the engine's own ``prompt >= max_model_len`` since ``output >= 1``.
    """
    return prompt <= 0 or prompt + output > max_model_len


class ArrivalFeed:
    """Releases requests when the engine receives them (``Req.ready``: the arrival, delayed by the
    front end's input path, :mod:`latsim.sim.frontend`), ahead of same-time engine events; the
    requests are in ``ready`` order."""

    def __init__(self, env: simpy.Environment, requests: Sequence[Req], replicas: Sequence[Replica],
                 router: Router, max_model_len: int) -> None:
        self.env = env
        self.requests = requests
        self.replicas = replicas
        self.router = router
        self.max_model_len = max_model_len
        self._next = 0

    def next_arrival(self) -> float:
        i = self._next
        return self.requests[i].ready if i < len(self.requests) else float("inf")

    def process(self) -> Generator[simpy.Event, None, None]:
        env = self.env
        for req in self.requests:
            if req.ready > env.now:
                wake = env.event()
                wake._ok = True
                wake._value = None
                env.schedule(wake, simpy.core.URGENT, req.ready - env.now)
                yield wake
            self._next += 1
            if rejected_by_engine(req.prompt, req.target, self.max_model_len):
                req.state = REJECTED
                continue
            self.router.choose(self.replicas).submit(req)
