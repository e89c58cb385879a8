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
- a heap of ``(finish step, seq, req)`` gives the next completion;
- ``readers`` counts the members reading each shared prefix (:func:`latsim.sim.shape.count_reader`),
  from which a step's co-reads are priced (:mod:`latsim.costmodel.coreads`).

Members leave only by finishing (:meth:`pop_finished`) or all at once (:meth:`dissolve`);
both write the current values back into the request (:meth:`_materialize`).

Invariants of every member: RUNNING; decoding (``num_computed == num_tokens - 1`` once
current); holds ``cdiv(num_computed, block_size)`` blocks; sampled its latest token at
``last_end``, the end of the latest step, so a step's inter-token gap is the same for all.

Sliding-window layers (:class:`~latsim.sim.kvlayout.KvLayout` with ``sliding`` groups).  A new
block is one per group (``layout.groups``), and a member frees one block in each sliding group
at every step whose context ``c`` satisfies ``c = window - 1 (mod block_size)`` and
``c >= window - 1 + block_size`` (vLLM frees the blocks behind the window before each
allocation).  Members past that context are counted in ``old_phases`` by phase, the others wait
in a heap keyed by the step at which they pass it; a run never crosses such a step
(:meth:`steps_to_aging`).  A member that joins with blocks still to free (a prompt longer than
the window, computed in one chunk) frees them at its first step (``catch_up``).
"""

from __future__ import annotations

import math
from heapq import heappop, heappush

from latsim.sim.kvlayout import KvLayout
from latsim.sim.request import Req
from latsim.sim.shape import Readers, count_reader


class DecodeCohort:
    """Requests decoding in lock-step, with O(1) aggregates (see the module note)."""

    def __init__(self, block_size: int, layout: KvLayout | None = None) -> None:
        self.block_size = block_size
        self.layout = layout = layout or KvLayout()
        self.groups = layout.groups  # blocks a member takes at a block boundary
        self.sliding = layout.sliding  # blocks a member frees each time its window passes a boundary
        self._free_from = layout.window - 1 + block_size  # the context from which a member frees
        self.old_phases = [0] * block_size
        self._young: list[tuple[int, int, Req]] = []  # (step at which it starts freeing, seq, member)
        self._young_ids: set[int] = set()
        self.catch_up = 0  # blocks the members that joined since the latest step free at the next
        self._joined: dict[int, int] = {}
        self.step = 0
        self.last_end = math.nan
        self.last_index = -1  # the scheduler's step index of the latest step
        self.size = 0
        self.phases = [0] * block_size
        self._offset = 0  # sum over members of num_computed - base
        self._offset_sq = 0  # sum over members of (num_computed - base) ** 2
        self._heap: list[tuple[int, int, Req]] = []
        self.readers: Readers = {}

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
        if req.prefix_blocks:
            count_reader(self.readers, req)
        if self.sliding:
            self._join_sliding(req, rel)

    def _join_sliding(self, req: Req, rel: int) -> None:
        """Place a joining member among the old or the young, and note the blocks it still has to free."""
        owed = self.layout.skipped(req.num_computed - 1, self.block_size) - req.skipped
        if owed > 0:
            self.catch_up += self.sliding * owed
            self._joined[id(req)] = self.sliding * owed
        if req.num_computed >= self._free_from:
            self.old_phases[rel % self.block_size] += 1
        else:
            heappush(self._young, (self._free_from - rel, req.seq, req))
            self._young_ids.add(id(req))

    def steps_to_finish(self) -> int:
        """Steps until the first member samples its last token (the cohort is not empty)."""
        return self._heap[0][0] - self.step

    def blocks_next(self) -> int:
        """Blocks the members take for the next step."""
        return self.groups * self.phases[-self.step % self.block_size]

    def frees_next(self) -> int:
        """Blocks the members free for the next step (sliding layers; after what they take)."""
        if not self.sliding:
            return 0
        return self.sliding * self.old_phases[(self.layout.window - 1 - self.step) % self.block_size] + self.catch_up

    def blocks_over(self, n: int) -> int:
        """Blocks the members take over the next ``n`` steps."""
        bs, g, phases = self.block_size, self.step, self.phases
        cycles, rest = divmod(n, bs)
        total = cycles * self.size
        for j in range(rest):
            total += phases[-(g + j) % bs]
        return self.groups * total

    def steps_to_aging(self) -> int | float:
        """Steps before a young member starts freeing blocks (a run stops there); inf when none will."""
        heap = self._young
        while heap and id(heap[0][2]) not in self._young_ids:
            heappop(heap)
        return heap[0][0] - self.step if heap else math.inf

    def run_pool(self, n: int, free: int, later: int = 0,
                 admit: float = math.inf) -> tuple[int, int, int, int, float]:
        """The pool over the next ``n`` steps (sliding layers; no member ages in them):
        ``(steps, taken, freed, peak_first, peak_rest)``.  ``steps``: the most whose blocks each
        fit what is free before that step (its own frees not counted: the running list's order
        could put them after another's allocation), ``later`` more free from the second step on
        (zombies released after the first decision); the blocks taken and freed in them; the
        blocks in use above the start right after the first decision, and the most right after
        a later one (``later`` not subtracted; ``-inf`` when there is none).  The steps stop before
        the first whose frees leave ``admit`` blocks free for the waiting head (admitted there)."""
        bs, g, groups, sliding = self.block_size, self.step, self.groups, self.sliding
        phases, old, first = self.phases, self.old_phases, self.layout.window - 1
        taken = freed = peak_first = 0
        peak_rest: float = -math.inf
        for j in range(n):
            take = groups * phases[-(g + j) % bs]
            if take > free - taken + freed + (later if j else 0):
                return j, taken, freed, peak_first, peak_rest
            out = sliding * old[(first - g - j) % bs] + (self.catch_up if j == 0 else 0)
            if out and free - taken - take + freed + out + later >= admit:
                return j, taken, freed, peak_first, peak_rest
            taken += take
            freed += out
            if j == 0:
                peak_first = taken - freed
            else:
                peak_rest = max(peak_rest, taken - freed)
        return n, taken, freed, peak_first, peak_rest

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
        if self.sliding and n:
            self.catch_up = 0
            self._joined.clear()
            self._age()

    def _age(self) -> None:
        """Move the young members that reached the context where they free blocks to ``old_phases``."""
        heap, ids = self._young, self._young_ids
        while heap and heap[0][0] <= self.step:
            _, _, req = heappop(heap)
            if id(req) in ids:
                ids.discard(id(req))
                self.old_phases[(req.num_computed - req.base) % self.block_size] += 1

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
            if req.prefix_blocks:
                count_reader(self.readers, req, -1)
            if self.sliding:
                self._leave_sliding(req, rel)
            self._materialize(req)
            out.append(req)
        return out

    def _leave_sliding(self, req: Req, rel: int) -> None:
        if id(req) in self._young_ids:
            self._young_ids.discard(id(req))
        else:
            self.old_phases[rel % self.block_size] -= 1
        self.catch_up -= self._joined.pop(id(req), 0)

    def dissolve(self) -> None:
        """Materialise every member and empty the cohort."""
        for _, _, req in self._heap:
            self._materialize(req)
        self._heap.clear()
        self.readers = {}
        self.phases = [0] * self.block_size
        self._offset = self._offset_sq = self.size = 0
        if self.sliding:
            self.old_phases = [0] * self.block_size
            self._young.clear()
            self._young_ids.clear()
            self._joined.clear()
            self.catch_up = 0

    def _materialize(self, req: Req) -> None:
        moved = self.step - req.base
        req.num_computed += moved
        req.generated += moved
        req.num_blocks = -(-req.num_computed // self.block_size)
        req.last_token = self.last_end
        if moved and self.sliding:  # its latest allocation freed what the window left behind
            req.skipped = max(req.skipped, self.layout.skipped(req.num_computed - 1, self.block_size))
        if moved:
            req.sampled_at = self.last_index
            req.lag = 1
        req.base = -1
