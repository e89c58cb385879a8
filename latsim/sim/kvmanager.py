"""Request-level KV bookkeeping on top of :class:`BlockPool`, after vLLM v1's KVCacheManager.

``lookup`` is ``get_computed_blocks``: the longest run of leading full blocks whose content is
cached, at most ``num_tokens - 1`` tokens (the last prompt token is always recomputed so that
a token can be sampled).  ``allocate`` is ``allocate_slots``: check, then change, returning
False without side effects when the free blocks (cached-but-unreferenced ones included) do not
cover what the request needs; ``full_sequence_fits`` is its admission gate
(``full_sequence_must_fit``, vLLM's ``scheduler_reserve_full_isl``).  ``free`` returns a
request's blocks in vLLM's order (``docs/vllm-v1-scheduling.md`` section 6).

The pool given here is the usable one: vLLM's ``num_gpu_blocks`` minus its null block.  This
is the one-group manager (every layer attends to the whole context);
:func:`kv_manager` gives the one for a :class:`~latsim.sim.kvlayout.KvLayout` of several groups
or a sliding window (:mod:`latsim.sim.kvgrouped`).
"""

from __future__ import annotations

from latsim.sim.kvcache import BlockPool, Copy
from latsim.sim.kvlayout import KvLayout, cdiv
from latsim.sim.request import Req

ONE_GROUP = KvLayout()


def kv_manager(num_blocks: int, block_size: int, max_model_len: int, prefix_caching: bool,
               layout: KvLayout = ONE_GROUP) -> KVManager:
    """The KV manager of ``layout``: this module's for one full-attention group, else the grouped one."""
    if layout == ONE_GROUP:
        return KVManager(num_blocks, block_size, max_model_len, prefix_caching)
    from latsim.sim.kvgrouped import GroupedKVManager

    return GroupedKVManager(num_blocks, block_size, max_model_len, prefix_caching, layout)


class KVManager:
    """Blocks of ``block_size`` tokens for the requests of one replica, one group of every layer."""

    grouped = False
    layout = ONE_GROUP

    def __init__(self, num_blocks: int, block_size: int, max_model_len: int, prefix_caching: bool) -> None:
        self.pool = BlockPool(num_blocks)
        self.block_size = block_size
        self.max_model_len = max_model_len
        self.prefix_caching = prefix_caching

    def held(self, req: Req) -> int:
        """Pool blocks ``req`` holds."""
        return req.num_blocks

    def will_free_findable(self, req: Req) -> bool:
        """Whether a sliding window of ``req`` will free a findable block (never, here)."""
        return False

    def give_back(self, n: int) -> None:
        """Return ``n`` anonymous full blocks: hashed (the queue tail) when prefix caching is on."""
        if self.prefix_caching:
            self.pool.release_anonymous(n)
        else:
            self.pool.prepend_anonymous(n)

    def admission_blocks(self, req: Req, hits: int = 0) -> int:
        """Blocks vLLM's admission gate asks the free queue for (see :meth:`full_sequence_fits`)."""
        full = min(req.num_tokens, self.max_model_len) - hits * self.block_size
        return self.blocks_needed(req, full, hits)

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
        fresh = cdiv(tokens, self.block_size) - req.num_blocks - hits
        if hits:
            fresh += sum(self.pool.is_queued(req.block_key(i)) for i in range(hits))
        return fresh

    def full_sequence_fits(self, req: Req, hits: int) -> bool:
        """Whether the free queue holds the blocks of ``req``'s whole ``min(num_tokens, max_model_len)``.

        For a waiting request (nothing computed) with ``hits`` cached blocks: vLLM's admission
        gate, counting hit blocks that sit in the free queue against the free blocks.
        """
        return self.admission_blocks(req, hits) <= self.pool.num_free

    def allocate(self, req: Req, num_new: int, hits: int = 0) -> bool:
        """Give ``req`` room for ``num_new`` more tokens after ``hits`` cached blocks, or refuse."""
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
        n, pool = req.num_blocks, self.pool
        if not self.prefix_caching:
            pool.release_anonymous(n)
        elif preempted or req.keys:
            hashed = min((req.num_computed - lag) // self.block_size, n)
            keep_upto = hashed if preempted else 0
            visit = min(max(keep_upto, req.cached_upto if req.keys else 0), hashed)
            pool.prepend_anonymous(n - hashed)
            pool.release_anonymous(hashed - visit)
            if visit:
                pool.release(self._release_order(req, preempted, keep_upto, visit))
        else:  # the common case: nothing to keep findable
            hashed = req.num_computed // self.block_size
            pool.prepend_anonymous(n - hashed)
            pool.release_anonymous(hashed)
        req.num_blocks = 0
        req.keys = {}
        req.cached_upto = 0

    def _release_order(self, req: Req, preempted: bool, keep_upto: int, visit: int) -> list[Copy | None]:
        """Copies (or None) of blocks ``visit - 1`` down to 0, as they go back to the free queue."""
        order: list[Copy | None] = []
        pool = self.pool
        for i in range(visit - 1, -1, -1):
            copy = req.keys.get(i)
            if copy is not None:
                if not preempted and copy.key[0] == "r":
                    pool.forget(copy)  # its own block: nobody else will look it up
                    copy = None
            elif i < keep_upto:
                copy = pool.register(req.block_key(i))
            order.append(copy)
        return order
