"""The decode cohort: running requests that decode one token per step, held lazily.

Design note.  Between two events (an admission, a completion, a preemption, a chunk of a
prefill) most running requests of a vLLM engine do the same thing every step: compute one
token, sample one token, and every ``block_size`` steps take one more KV block.  The cohort
holds such requests without visiting them per step.  It counts its own steps (``step``) and
leaves each member's fields as they were at the step it joined (``Req.base``); a member's
current context is ``num_computed + step - base``.  Aggregates answer what a step needs in
O(1):

- ``size``, :meth:`context` (the sum of current contexts) and :meth:`context_sq` (the sum of
  their squares, from ``sum(rel)`` and ``sum(rel**2)``) price the decode part;
- ``phases[p]`` counts members with ``num_computed - base == p (mod block_size)``.  A member
  whose context is a multiple of ``block_size`` has filled its last block and takes a new one
  for its next token, so the step taken at counter ``g`` allocates ``phases[-g % block_size]``
  blocks; a run of steps allocates a sum of bins (:meth:`blocks_over`);
- a heap of ``(finish step, seq, req)`` gives the next completion.

Members leave only by finishing (:meth:`pop_finished`) or all at once (:meth:`dissolve`);
both write the current values back into the request (:meth:`_materialize`).

Invariants of every member: RUNNING; decoding (``num_computed == num_tokens - 1`` once
current); holds ``cdiv(num_computed, block_size)`` blocks; sampled its latest token at
``last_end``, the end of the latest step, so a step's inter-token gap is the same for all.
"""

from __future__ import annotations

import math
from heapq import heappop, heappush

from latsim.sim.request import Req


class DecodeCohort:
    """Requests decoding in lock-step, with O(1) aggregates (see the module note)."""

    def __init__(self, block_size: int) -> None:
        self.block_size = block_size
        self.step = 0
        self.last_end = math.nan
        self.last_index = -1  # the scheduler's step index of the latest step
        self.size = 0
        self.phases = [0] * block_size
        self._offset = 0  # sum over members of num_computed - base
        self._offset_sq = 0  # sum over members of (num_computed - base) ** 2
        self._heap: list[tuple[int, int, Req]] = []

    def context(self) -> int:
        """Sum of the members' current ``num_computed``."""
        return self._offset + self.size * self.step

    def context_sq(self) -> int:
        """Sum of the squares of the members' current ``num_computed``."""
        g = self.step
        return self._offset_sq + 2 * g * self._offset + self.size * g * g

    def join(self, req: Req) -> None:
        """Add ``req``, which sampled a token at ``last_end`` and still has tokens to generate."""
        rel = req.num_computed - self.step
        req.base = self.step
        self._offset += rel
        self._offset_sq += rel * rel
        self.phases[rel % self.block_size] += 1
        self.size += 1
        heappush(self._heap, (self.step + req.target - req.generated, req.seq, req))

    def steps_to_finish(self) -> int:
        """Steps until the first member samples its last token (the cohort is not empty)."""
        return self._heap[0][0] - self.step

    def blocks_next(self) -> int:
        """Blocks the members take for the next step."""
        return self.phases[-self.step % self.block_size]

    def blocks_over(self, n: int) -> int:
        """Blocks the members take over the next ``n`` steps."""
        bs, g, phases = self.block_size, self.step, self.phases
        cycles, rest = divmod(n, bs)
        total = cycles * self.size
        for j in range(rest):
            total += phases[-(g + j) % bs]
        return total

    def steps_within(self, n_max: int, free: int) -> int:
        """Largest ``n <= n_max`` whose next ``n`` steps take at most ``free`` blocks; O(block_size)."""
        size, bs = self.size, self.block_size
        if size * -(-n_max // bs) <= free:
            return n_max
        cycles = min(n_max // bs, free // size)
        n, used, g, phases = cycles * bs, cycles * size, self.step, self.phases
        while n < n_max:
            used += phases[-(g + n) % bs]
            if used > free:
                break
            n += 1
        return n

    def advance(self, n: int, end: float, index: int) -> None:
        """``n`` steps happened, the last one (step ``index``) ending at ``end``: every member decoded in each."""
        self.step += n
        self.last_end = end
        self.last_index = index

    def pop_finished(self) -> list[Req]:
        """Remove and materialise the members that sampled their last token in the latest step."""
        heap, out = self._heap, []
        while heap and heap[0][0] == self.step:
            req = heappop(heap)[2]
            rel = req.num_computed - req.base
            self._offset -= rel
            self._offset_sq -= rel * rel
            self.phases[rel % self.block_size] -= 1
            self.size -= 1
            self._materialize(req)
            out.append(req)
        return out

    def dissolve(self) -> None:
        """Materialise every member and empty the cohort."""
        for _, _, req in self._heap:
            self._materialize(req)
        self._heap.clear()
        self.phases = [0] * self.block_size
        self._offset = self._offset_sq = self.size = 0

    def _materialize(self, req: Req) -> None:
        moved = self.step - req.base
        req.num_computed += moved
        req.generated += moved
        req.num_blocks = -(-req.num_computed // self.block_size)
        req.last_token = self.last_end
        if moved:
            req.sampled_at = self.last_index
            req.lag = 1
        req.base = -1
