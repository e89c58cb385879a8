"""Per-request scheduler state (one small mutable object per live request)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from latsim.sim.kvcache import Copy

WAITING, RUNNING, PREEMPTED, FINISHED, REJECTED = range(5)


class Req:
    """A request inside one replica.

    ``num_computed`` counts tokens whose KV is in the cache (prompt, recomputed output and
    decoded tokens); ``num_tokens = prompt + generated`` is what must be computed before the
    next token can be sampled.  ``keys`` maps block index -> the cached copy of the blocks this
    request references that can be found again (prefix-group blocks, or its own blocks after a
    preemption); every other block it holds is anonymous.  ``sampled_at`` is the scheduler's
    index of the latest step that sampled a token for it, and ``lag`` is 1 when it also
    sampled in the step before (asynchronous scheduling then had one unhashed token when the
    latest step was scheduled, which matters if it is preempted while that step is in flight).

    The fast engine (:mod:`latsim.engines.vllm.cohort`) may hold a decoding request *lazily*: while
    ``base >= 0`` the fields ``num_computed``, ``generated``, ``num_blocks`` and ``last_token``
    are those of cohort step ``base`` and the cohort knows how far it has moved since; ``base
    == -1`` means every field is current.  ``seq`` orders requests by when they (last) joined
    the running list, so finished requests are freed in running order.

    ``num_blocks`` is the length of the request's block table in each KV-cache group and
    ``skipped`` how many leading blocks of each sliding-window table were freed
    (:mod:`latsim.sim.kvlayout`; always 0 when no layer slides); ``xkeys`` holds the findable
    blocks of the KV-cache groups besides the first (:mod:`latsim.sim.kvgrouped`).
    """

    __slots__ = (
        "arrival",
        "base",
        "cached_tokens",
        "cached_upto",
        "finish",
        "first_scheduled",
        "first_token",
        "generated",
        "group",
        "idx",
        "keys",
        "lag",
        "last_token",
        "num_blocks",
        "num_computed",
        "preemptions",
        "prefix_blocks",
        "prompt",
        "ready",
        "replica",
        "sampled_at",
        "seq",
        "shared_tokens",
        "skipped",
        "state",
        "target",
        "xkeys",
    )

    def __init__(self, idx: int, arrival: float, prompt: int, target: int, group: int = -1,
                 prefix_tokens: int = 0, block_size: int = 16) -> None:
        self.idx = idx
        self.arrival = arrival
        self.ready = arrival  # when the engine core receives it (latsim.sim.frontend)
        self.prompt = prompt
        self.target = target
        self.group = group
        self.prefix_blocks = min(prefix_tokens, prompt) // block_size if group >= 0 else 0
        self.shared_tokens = self.prefix_blocks * block_size  # the tokens of its findable prefix blocks
        self.generated = 0
        self.replica = -1
        self.num_computed = 0
        self.num_blocks = 0
        self.skipped = 0
        self.keys: dict[int, Copy] = {}
        self.xkeys: dict[tuple[int, int], Copy] = {}
        self.cached_upto = 0
        self.cached_tokens = 0
        self.preemptions = 0
        self.state = WAITING
        self.base = -1
        self.seq = -1
        self.sampled_at = -1
        self.lag = 0
        self.first_scheduled = math.nan
        self.first_token = math.nan
        self.last_token = math.nan
        self.finish = math.nan

    @property
    def num_tokens(self) -> int:
        return self.prompt + self.generated

    def block_key(self, i: int) -> tuple:
        """Content key of block ``i``: shared within a prefix group, else private."""
        if i < self.prefix_blocks:
            return ("g", self.group, i)
        return ("r", self.idx, i)

    def __repr__(self) -> str:
        return (f"Req({self.idx}, prompt={self.prompt}, gen={self.generated}/{self.target}, "
                f"computed={self.num_computed}, blocks={self.num_blocks})")


def advance_request(req: Req, n: int, now: float, index: int, track_lag: bool,
                    gap: Callable[[float, float], None] | None) -> bool:
    """Apply ``n`` computed tokens of step ``index`` that ended at ``now``; True if a token was sampled.

    A token is sampled when the step reaches the end of the request's known tokens (its prompt
    or the previous token).  Records the first-token time, the inter-token gap (through
    ``gap``), and, when ``track_lag`` (asynchronous scheduling), whether the previous token came
    from the step just before (``Req.lag``).
    """
    req.num_computed += n
    if req.num_computed < req.num_tokens:
        return False
    req.generated += 1
    if track_lag:
        req.lag = 1 if req.sampled_at == index - 1 else 0
        req.sampled_at = index
    if req.generated == 1:
        req.first_token = now
    elif gap is not None:
        gap(req.last_token, now)
    req.last_token = now
    return True
