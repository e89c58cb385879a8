"""Request-level KV bookkeeping on top of :class:`BlockPool`, after vLLM v1's KVCacheManager.

``lookup`` is ``get_computed_blocks``: the longest run of leading full blocks whose content is
cached, at most ``num_tokens - 1`` tokens (the last prompt token is always recomputed so that
a token can be sampled).  ``allocate`` is ``allocate_slots``: check, then change, returning
False without side effects when the free blocks (cached-but-unreferenced ones included) do not
cover what the request needs.
"""

from __future__ import annotations

from latsim.engine.kvcache import BlockPool
from latsim.engine.request import Req


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


class KVManager:
    """Blocks of ``block_size`` tokens for the requests of one replica."""

    def __init__(self, num_blocks: int, block_size: int, max_model_len: int, prefix_caching: bool) -> None:
        self.pool = BlockPool(num_blocks)
        self.block_size = block_size
        self.max_model_len = max_model_len
        self.prefix_caching = prefix_caching

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
                key = req.block_key(i)
                pool.touch(key)
                req.keys[i] = key
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
        """Publish the newly filled blocks of a shared prefix (vLLM hashes them when scheduled)."""
        upto = min(full_blocks, req.prefix_blocks)
        for i in range(req.cached_upto, upto):
            key = req.block_key(i)
            if self.pool.register(key):
                req.keys[i] = key
        req.cached_upto = max(req.cached_upto, upto)

    def free(self, req: Req, preempted: bool) -> None:
        """Return all of ``req``'s blocks, last block first.

        A preempted request's full computed blocks stay findable (its resume hits them while
        they survive eviction); a finished request's private blocks become anonymous.  Keys
        only exist below ``cached_upto``, so the blocks past it and past the kept ones go back
        as one anonymous run, and only the leading blocks are visited one by one.
        """
        keep_upto = req.num_computed // self.block_size if preempted and self.prefix_caching else 0
        visit = min(max(keep_upto, req.cached_upto if req.keys else 0), req.num_blocks)
        self.pool.release_anonymous(req.num_blocks - visit)
        if visit:
            self.pool.release(self._release_order(req, preempted, keep_upto, visit))
        req.num_blocks = 0
        req.keys = {}
        req.cached_upto = 0

    def _release_order(self, req: Req, preempted: bool, keep_upto: int, visit: int) -> list:
        """Keys (or None) of blocks ``visit - 1`` down to 0, as they go back to the free queue."""
        order: list = []
        pool = self.pool
        for i in range(visit - 1, -1, -1):
            key = req.keys.get(i)
            if key is not None and key[0] == "r" and not preempted:
                pool.forget(key)
                key = None
            elif key is None and i < keep_upto:
                key = req.block_key(i)
                if not pool.register(key):
                    key = None
            order.append(key)
        return order
