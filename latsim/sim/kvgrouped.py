"""KV blocks over several KV-cache groups, some of them sliding windows (vLLM 0.25.1's hybrid manager).

:class:`GroupedKVManager` keeps :class:`~latsim.sim.kvmanager.KVManager`'s contract over a
:class:`~latsim.sim.kvlayout.KvLayout`: every group has a block table of the same length
(``Req.num_blocks``), a sliding group's leading ``Req.skipped`` entries freed.  Group 0 is the
*primary*: the first full-attention group, else the sliding one; its findable blocks are
``Req.keys`` as in the one-group manager, the other groups' are ``Req.xkeys[(group, block)]``
under the key ``("x", group, *block_key)``.  What vLLM does, per ``allocate_slots``:

- first free the blocks each sliding table's window left behind (``remove_skipped_blocks``,
  tail first, a findable one as a copy), even when the allocation then fails;
- a request needs, in every group, a block for every ``block_size`` tokens past its table; a
  cache hit of ``h`` blocks references them in each full group and the window's part
  (``[skipped(h), h)``) in each sliding one, the blocks before it left null;
- the admission gate reserves the whole prompt per full group and at most
  ``layout.admission_blocks`` per sliding one;
- a hit (``HybridKVCacheCoordinator.find_longest_cache_hit``, one type of each kind): the
  leading blocks cached in every full group, then, within those, the rightmost run of
  ``cdiv(window - 1, block_size)`` blocks cached in every sliding group (the leading run when
  there is none); a model whose layers all slide searches its one group that way.

Prefix-group blocks are findable in every group from the step that computes them; a preempted
request's computed blocks from its preemption, as in the one-group manager.  The one difference
left: a block a sliding window freed before the request was preempted is anonymous here, where
vLLM keeps its hash, so a resumed request of a window that is not a multiple of the block size
can find a shorter hit than vLLM's.
"""

from __future__ import annotations

from latsim.sim.kvcache import Copy
from latsim.sim.kvlayout import KvLayout, cdiv
from latsim.sim.kvmanager import KVManager
from latsim.sim.request import Req


class GroupedKVManager(KVManager):
    """:class:`KVManager` over ``layout``'s groups (module docstring)."""

    grouped = True

    def __init__(self, num_blocks: int, block_size: int, max_model_len: int, prefix_caching: bool,
                 layout: KvLayout) -> None:
        super().__init__(num_blocks, block_size, max_model_len, prefix_caching)
        self.layout = layout
        kinds = [False] * layout.full + [True] * layout.sliding  # by group: does it slide
        self.full_groups = [g for g, slides in enumerate(kinds) if not slides]
        self.sliding_groups = [g for g, slides in enumerate(kinds) if slides]
        self.groups = len(kinds)
        self.window_blocks = cdiv(layout.window - 1, block_size) if layout.sliding else 0

    def held(self, req: Req) -> int:
        return self.layout.held(req.num_blocks, req.skipped)

    def will_free_findable(self, req: Req) -> bool:
        """Whether a window of ``req`` will, before it finishes, pass a findable block of a sliding
        table (a cached prefix, or its own blocks after a preemption): those go back one by one."""
        keyed = [i for g, i in req.xkeys if g in self.sliding_groups]
        if self.sliding_groups and self.sliding_groups[0] == 0:
            keyed.extend(req.keys)
        if not keyed:
            return False
        last = min(req.prompt + req.target, self.max_model_len)  # more than its last allocation's context
        return self.layout.skipped(last, self.block_size) > min(keyed)

    def _key(self, req: Req, g: int, i: int) -> tuple:
        return req.block_key(i) if g == 0 else ("x", g, *req.block_key(i))

    def _get(self, req: Req, g: int, i: int) -> Copy | None:
        return req.keys.get(i) if g == 0 else req.xkeys.get((g, i))

    def _set(self, req: Req, g: int, i: int, copy: Copy) -> None:
        if g == 0:
            req.keys[i] = copy
        else:
            req.xkeys[(g, i)] = copy

    def _pop(self, req: Req, g: int, i: int) -> Copy | None:
        return req.keys.pop(i, None) if g == 0 else req.xkeys.pop((g, i), None)

    def _cached(self, req: Req, groups: list[int], i: int) -> bool:
        is_cached = self.pool.is_cached
        return all(is_cached(self._key(req, g, i)) for g in groups)

    # -- hits ------------------------------------------------------------------------------

    def lookup(self, req: Req) -> int:
        """Blocks of ``req`` found in the prefix cache, by vLLM's hybrid rule (module docstring)."""
        if not self.prefix_caching or (req.prefix_blocks == 0 and req.preemptions == 0):
            return 0
        limit = (req.num_tokens - 1) // self.block_size
        hits = 0
        if self.full_groups:
            while hits < limit and self._cached(req, self.full_groups, hits):
                hits += 1
        else:
            hits = limit
        return self._sliding_hit(req, hits) if self.sliding_groups else hits

    def _sliding_hit(self, req: Req, most: int) -> int:
        """The rightmost run of ``window_blocks`` blocks cached in every sliding group ending at
        most at block ``most``: its end; else the run of cached blocks from block 0."""
        run = 0
        for i in range(most - 1, -1, -1):
            if not self._cached(req, self.sliding_groups, i):
                run = 0
                continue
            run += 1
            if run >= self.window_blocks:
                return i + run
        return run

    def _touched(self, g: int, hits: int) -> range:
        """The hit blocks group ``g`` references: all, or the window's in a sliding group."""
        if g in self.sliding_groups:
            return range(self.layout.skipped(hits * self.block_size, self.block_size), hits)
        return range(hits)

    def _evictable(self, req: Req, hits: int) -> int:
        """The referenced hit blocks that sit in the free queue (touching takes them out of it)."""
        is_queued = self.pool.is_queued
        return sum(is_queued(self._key(req, g, i)) for g in range(self.groups) for i in self._touched(g, hits))

    # -- what a request needs ----------------------------------------------------------------

    def blocks_needed(self, req: Req, num_new: int, hits: int = 0) -> int:
        tokens = min(req.num_computed + hits * self.block_size + num_new, self.max_model_len)
        fresh = self.groups * (cdiv(tokens, self.block_size) - req.num_blocks - hits)
        return fresh + self._evictable(req, hits) if hits else fresh

    def admission_blocks(self, req: Req, hits: int = 0) -> int:
        """Blocks vLLM's admission gate (``full_sequence_must_fit``) asks the free queue for: a
        waiting request's whole ``min(num_tokens, max_model_len)`` in each full group, at most
        ``layout.admission_blocks`` in each sliding one, after ``hits`` cached blocks."""
        slots = cdiv(min(req.num_tokens, self.max_model_len), self.block_size)
        capped = min(slots, self.layout.admission_blocks)
        need = len(self.full_groups) * (slots - hits) + len(self.sliding_groups) * max(capped - hits, 0)
        return need + self._evictable(req, hits) if hits else need

    # -- allocation ------------------------------------------------------------------------

    def allocate(self, req: Req, num_new: int, hits: int = 0) -> bool:
        """Give ``req`` room for ``num_new`` more tokens after ``hits`` cached blocks, or refuse;
        the blocks its windows left behind are freed first, whatever the answer."""
        bs, pool = self.block_size, self.pool
        self.skip(req, req.num_computed + hits * bs)
        tokens = min(req.num_computed + hits * bs + num_new, self.max_model_len)
        slots = cdiv(tokens, bs)
        if self.blocks_needed(req, num_new, hits) > pool.num_free:
            return False
        if hits:
            for g in range(self.groups):
                for i in self._touched(g, hits):
                    self._set(req, g, i, pool.touch(self._key(req, g, i)))
            req.num_blocks += hits
            req.num_computed += hits * bs
            req.cached_upto = hits
            req.skipped = self.layout.skipped(req.num_computed, bs)
        fresh = self.groups * (slots - req.num_blocks)
        if fresh > 0:
            pool.take(fresh)
            req.num_blocks = slots
        if req.prefix_blocks > req.cached_upto and self.prefix_caching:
            self._cache_prefix_blocks(req, min(tokens, req.num_tokens) // bs)
        return True

    def _cache_prefix_blocks(self, req: Req, full_blocks: int) -> None:
        """Publish the newly filled prefix blocks of every group (a sliding table's live ones)."""
        upto = min(full_blocks, req.prefix_blocks)
        register = self.pool.register
        for i in range(req.cached_upto, upto):
            for g in range(self.groups):
                if g in self.sliding_groups and i < req.skipped:
                    continue
                self._set(req, g, i, register(self._key(req, g, i)))
        req.cached_upto = max(req.cached_upto, upto)

    def skip(self, req: Req, computed: int) -> None:
        """Free the leading blocks of ``req``'s sliding tables that no token after ``computed``
        attends to (vLLM's ``remove_skipped_blocks``, tail first; at most the table's length)."""
        new = min(self.layout.skipped(computed, self.block_size), req.num_blocks)
        old = req.skipped
        if new <= old:
            return
        keyed = req.keys or req.xkeys
        for g in self.sliding_groups:
            if keyed:
                self.pool.release([self._pop(req, g, i) for i in range(new - 1, old - 1, -1)])
            else:
                self.give_back(new - old)
        req.skipped = new

    # -- freeing ---------------------------------------------------------------------------

    def free(self, req: Req, preempted: bool, lag: int = 0) -> None:
        """Return every table of ``req`` as vLLM's ``free`` does, group by group (the sliding ones
        first: the interleaved models' first layer slides): per table, the unhashed tail to the
        queue front, the hashed blocks to its tail last block first, a preempted request's kept
        findable (:meth:`KVManager.free`)."""
        n = req.num_blocks
        hashed = min((req.num_computed - lag) // self.block_size, n) if self.prefix_caching else 0
        keep_upto = hashed if preempted else 0
        for g in self.sliding_groups + self.full_groups:
            lo = req.skipped if g in self.sliding_groups else 0
            self._free_table(req, g, lo, hashed, keep_upto, preempted)
        req.num_blocks = 0
        req.skipped = 0
        req.keys = {}
        req.xkeys = {}
        req.cached_upto = 0

    def _free_table(self, req: Req, g: int, lo: int, hashed: int, keep_upto: int, preempted: bool) -> None:
        pool, n = self.pool, req.num_blocks
        if not self.prefix_caching:
            pool.release_anonymous(n - lo)
            return
        visit = min(max(keep_upto, req.cached_upto), hashed)
        pool.prepend_anonymous(n - max(hashed, lo))
        pool.release_anonymous(hashed - max(visit, lo))
        if visit <= lo:
            return
        order: list[Copy | None] = []
        for i in range(visit - 1, lo - 1, -1):
            copy = self._get(req, g, i)
            if copy is not None:
                if not preempted and copy.key[-3] == "r":
                    pool.forget(copy)  # its own block: nobody else will look it up
                    copy = None
            elif i < keep_upto:
                copy = pool.register(self._key(req, g, i))
            order.append(copy)
        pool.release(order)
