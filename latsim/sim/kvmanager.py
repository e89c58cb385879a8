"""Request-level KV bookkeeping on top of :class:`BlockPool`, after vLLM v1's KVCacheManager.

``lookup`` is ``get_computed_blocks``: the longest run of leading full blocks whose content is
cached, at most ``num_tokens - 1`` tokens (the last prompt token is always recomputed so that
a token can be sampled).  ``allocate`` is ``allocate_slots``: check, then change, returning
False without side effects when the free blocks (cached-but-unreferenced ones included) do not
cover what the request needs; ``full_sequence_fits`` is its admission gate
(``full_sequence_must_fit``, vLLM's ``scheduler_reserve_full_isl``).  ``free`` returns a
request's blocks in vLLM's order (``docs/vllm-v1-scheduling.md`` section 6).

The pool given here is the usable one: vLLM's ``num_gpu_blocks`` minus its null block.

KV-cache groups (:class:`~latsim.sim.kvlayout.KvLayout`).  With one full-attention group (every
model whose layers do not slide) a request holds ``num_blocks`` blocks and everything above is
exact.  With more groups, or a sliding window, the *primary* group (the first full-attention
one; the sliding one when every layer slides) keeps that exact bookkeeping, prefix-cache keys
included, and frees its skipped blocks as vLLM does; every other group holds the same table of
anonymous blocks (a sliding one without its skipped blocks), freed with it.  What that leaves
out, as an approximation: the other groups' blocks are never found again by content, so a
prefix-cache hit takes fresh blocks for them where vLLM would share a running request's or take
a cached one from the free queue (the same count in the second case); a request whose layers all
slide finds hits by the full-attention rule (its leading blocks), where vLLM searches for the
window's blocks before the hit.
"""

from __future__ import annotations

from latsim.sim.kvcache import BlockPool, Copy
from latsim.sim.kvlayout import KvLayout, cdiv
from latsim.sim.request import Req

ONE_GROUP = KvLayout()


class KVManager:
    """Blocks of ``block_size`` tokens for the requests of one replica, in ``layout``'s groups."""

    def __init__(self, num_blocks: int, block_size: int, max_model_len: int, prefix_caching: bool,
                 layout: KvLayout = ONE_GROUP) -> None:
        self.pool = BlockPool(num_blocks)
        self.block_size = block_size
        self.max_model_len = max_model_len
        self.prefix_caching = prefix_caching
        self.layout = layout
        self.grouped = layout != ONE_GROUP
        self.primary_slides = layout.full == 0
        self.extra_full = max(layout.full - 1, 0)
        self.extra_sliding = layout.sliding - (1 if self.primary_slides else 0)

    def held(self, req: Req) -> int:
        """Pool blocks ``req`` holds in all groups."""
        return self.layout.held(req.num_blocks, req.skipped)

    @property
    def num_free(self) -> int:
        return self.pool.num_free

    def lookup(self, req: Req) -> int:
        """Number of leading blocks of ``req`` found in the prefix cache."""
        if not self.prefix_caching or (req.prefix_blocks == 0 and req.preemptions == 0):
            return 0
        limit = (req.num_tokens - 1) // self.block_size
        pool = self.pool
        hits = 0
        while hits < limit and pool.is_cached(req.block_key(hits)):
            hits += 1
        return hits

    def blocks_needed(self, req: Req, num_new: int, hits: int = 0) -> int:
        """Blocks ``allocate`` must take from the free queue (evictable hits included)."""
        tokens = min(req.num_computed + hits * self.block_size + num_new, self.max_model_len)
        slots = cdiv(tokens, self.block_size)
        fresh = slots - req.num_blocks - hits
        if hits:
            first = self._first_touched(hits)
            fresh += sum(self.pool.is_queued(req.block_key(i)) for i in range(first, hits))
        if self.grouped:
            fresh += self._extra_fresh(req, slots, hits)
        return fresh

    def _first_touched(self, hits: int) -> int:
        """The first primary hit block a request references: sliding windows leave those before it null."""
        return self.layout.skipped(hits * self.block_size, self.block_size) if self.primary_slides else 0

    def _extra_fresh(self, req: Req, slots: int, hits: int) -> int:
        """Blocks the groups besides the primary take to reach ``slots`` (hits count as fresh there)."""
        fresh = self.extra_full * (slots - req.num_blocks)
        if self.extra_sliding:
            skipped = self.layout.skipped(req.num_computed + hits * self.block_size, self.block_size)
            fresh += self.extra_sliding * (slots - max(req.num_blocks, skipped))
        return fresh

    def admission_blocks(self, req: Req, hits: int = 0) -> int:
        """Blocks vLLM's admission gate (``full_sequence_must_fit``) asks the free queue for: a
        waiting request's whole ``min(num_tokens, max_model_len)``, each sliding group capped at
        ``layout.admission_blocks``, after ``hits`` cached blocks (evictable ones counted)."""
        bs, layout = self.block_size, self.layout
        slots = cdiv(min(req.num_tokens, self.max_model_len), bs)
        capped = min(slots, layout.admission_blocks) if layout.sliding else slots
        skipped = layout.skipped(hits * bs, bs)
        first = self._first_touched(hits)
        need = max((capped if self.primary_slides else slots) - hits, 0)
        if hits:
            need += sum(self.pool.is_queued(req.block_key(i)) for i in range(first, hits))
        need += self.extra_full * slots + self.extra_sliding * max(capped - skipped, 0)
        return need

    def full_sequence_fits(self, req: Req, hits: int) -> bool:
        """Whether the free queue holds the blocks of ``req``'s whole ``min(num_tokens, max_model_len)``.

        For a waiting request (nothing computed) with ``hits`` cached blocks: vLLM's admission
        gate, counting hit blocks that sit in the free queue against the free blocks.
        """
        if self.grouped:
            return self.admission_blocks(req, hits) <= self.pool.num_free
        full = min(req.num_tokens, self.max_model_len) - hits * self.block_size
        return self.blocks_needed(req, full, hits) <= self.pool.num_free

    def allocate(self, req: Req, num_new: int, hits: int = 0) -> bool:
        """Give ``req`` room for ``num_new`` more tokens after ``hits`` cached blocks, or refuse."""
        if self.grouped:
            return self._allocate_grouped(req, num_new, hits)
        bs = self.block_size
        tokens = min(req.num_computed + hits * bs + num_new, self.max_model_len)
        fresh = cdiv(tokens, bs) - req.num_blocks - hits
        pool = self.pool
        if hits:
            evictable = sum(pool.is_queued(req.block_key(i)) for i in range(hits))
            if fresh + evictable > pool.num_free:
                return False
            for i in range(hits):
                req.keys[i] = pool.touch(req.block_key(i))
            req.num_blocks += hits
            req.num_computed += hits * bs
            req.cached_upto = hits
        elif fresh > pool.num_free:
            return False
        if fresh > 0:
            pool.take(fresh)
            req.num_blocks += fresh
        if req.prefix_blocks > req.cached_upto and self.prefix_caching:
            self._cache_prefix_blocks(req, min(tokens, req.num_tokens) // bs)
        return True

    def _allocate_grouped(self, req: Req, num_new: int, hits: int) -> bool:
        """:meth:`allocate` over several groups or a window: vLLM first frees the blocks the
        window left behind (even when the allocation then fails), then takes what every group needs."""
        bs, pool = self.block_size, self.pool
        self.skip(req, req.num_computed + hits * bs)
        tokens = min(req.num_computed + hits * bs + num_new, self.max_model_len)
        slots = cdiv(tokens, bs)
        if self.blocks_needed(req, num_new, hits) > pool.num_free:
            return False
        extra = self._extra_fresh(req, slots, hits)
        if hits:
            first = self._first_touched(hits)
            for i in range(first, hits):
                req.keys[i] = pool.touch(req.block_key(i))
            req.num_blocks += hits
            req.num_computed += hits * bs
            req.cached_upto = hits
            req.skipped = self.layout.skipped(req.num_computed, bs)
        fresh = slots - req.num_blocks + extra
        if fresh > 0:
            pool.take(fresh)
        req.num_blocks = max(req.num_blocks, slots)
        if req.prefix_blocks > req.cached_upto and self.prefix_caching:
            self._cache_prefix_blocks(req, min(tokens, req.num_tokens) // bs)
        return True

    def skip(self, req: Req, computed: int) -> None:
        """Free the leading blocks of ``req``'s sliding tables that no token after ``computed``
        attends to (vLLM's ``remove_skipped_blocks``; at most its table's length)."""
        if not self.layout.sliding:
            return
        new = min(self.layout.skipped(computed, self.block_size), req.num_blocks)
        old = req.skipped
        if new <= old:
            return
        self.give_back(self.extra_sliding * (new - old))
        if self.primary_slides:
            self.pool.release([req.keys.pop(i, None) for i in range(new - 1, old - 1, -1)])
        req.skipped = new

    def give_back(self, n: int) -> None:
        """Return ``n`` anonymous full blocks: hashed (the queue tail) when prefix caching is on."""
        if self.prefix_caching:
            self.pool.release_anonymous(n)
        else:
            self.pool.prepend_anonymous(n)

    def _cache_prefix_blocks(self, req: Req, full_blocks: int) -> None:
        """Publish the newly filled blocks of a shared prefix (vLLM hashes them when scheduled).

        A block whose content is cached already becomes another copy of it (vLLM does not
        deduplicate), e.g. the recomputed last block of a fully cached prompt.
        """
        upto = min(full_blocks, req.prefix_blocks)
        register = self.pool.register
        for i in range(req.cached_upto, upto):
            req.keys[i] = register(req.block_key(i))
        req.cached_upto = max(req.cached_upto, upto)

    def free(self, req: Req, preempted: bool, lag: int = 0) -> None:
        """Return all of ``req``'s blocks as vLLM's ``free_blocks`` does.

        With prefix caching, the full blocks of computed tokens carry a hash: they go to the
        queue tail, last block first, and a preempted request's stay findable (its resume hits
        them while they survive eviction); a finished request's private ones become anonymous.
        The blocks past them (the partial last block) have no hash and go to the queue front.
        ``lag`` (0 or 1) is how many computed tokens had no hash yet: with asynchronous
        scheduling, a request preempted while decoding continuously had not seen its latest
        input token when that step was scheduled.  Keys only exist below ``cached_upto``, so
        the hashed blocks past it (and past the kept ones) go back as one anonymous run, and
        only the leading blocks are visited one by one.  Without prefix caching nothing is ever
        found again, so the order of the (anonymous) blocks does not matter.
        """
        if self.grouped:
            self._free_extras(req, lag)
        n, pool = req.num_blocks, self.pool
        lo = req.skipped if self.primary_slides else 0  # blocks the window freed already
        if not self.prefix_caching:
            pool.release_anonymous(n - lo)
        elif preempted or req.keys:
            hashed = min((req.num_computed - lag) // self.block_size, n)
            keep_upto = hashed if preempted else 0
            visit = min(max(keep_upto, req.cached_upto if req.keys else 0), hashed)
            pool.prepend_anonymous(n - max(hashed, lo))
            pool.release_anonymous(hashed - max(visit, lo))
            if visit > lo:
                pool.release(self._release_order(req, preempted, keep_upto, visit, lo))
        else:  # the common case: nothing to keep findable
            hashed = req.num_computed // self.block_size
            pool.prepend_anonymous(n - max(hashed, lo))
            pool.release_anonymous(hashed - lo)
        req.num_blocks = 0
        req.skipped = 0
        req.keys = {}
        req.cached_upto = 0

    def _free_extras(self, req: Req, lag: int) -> None:
        """Free the tables of the groups besides the primary (before it: vLLM frees groups in
        layer order, and the first layers of the interleaved models slide): hashed blocks to the
        queue tail, the rest to its front."""
        n, skipped = req.num_blocks, req.skipped
        hashed = min((req.num_computed - lag) // self.block_size, n) if self.prefix_caching else 0
        for groups, lo in ((self.extra_sliding, skipped), (self.extra_full, 0)):
            if groups:
                self.pool.prepend_anonymous(groups * (n - max(hashed, lo)))
                self.pool.release_anonymous(groups * max(hashed - lo, 0))

    def _release_order(self, req: Req, preempted: bool, keep_upto: int, visit: int,
                       lo: int = 0) -> list[Copy | None]:
        """Copies (or None) of blocks ``visit - 1`` down to ``lo``, as they go back to the free queue."""
        order: list[Copy | None] = []
        pool = self.pool
        for i in range(visit - 1, lo - 1, -1):
            copy = req.keys.get(i)
            if copy is not None:
                if not preempted and copy.key[0] == "r":
                    pool.forget(copy)  # its own block: nobody else will look it up
                    copy = None
            elif i < keep_upto:
                copy = pool.register(req.block_key(i))
            order.append(copy)
        return order
