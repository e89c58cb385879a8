"""Paged KV-cache blocks with vLLM v1's free queue and prefix cache, kept cheap.

vLLM hands out blocks from the front of an LRU free queue; a freed request returns its blocks
to the tail, last block first; a block whose content is known (a full block with a hash) stays
findable until it is handed out again.  Only two kinds of content can ever be found again in a
simulation: the shared prefix of a prefix group, and the full blocks of a preempted request
(which it finds when it resumes).  All other blocks are interchangeable, so this pool keeps
them as *counts* in anonymous runs and tracks identity only for "keyed" blocks.  That keeps
eviction order exact (the queue order is exact) while costing O(1) for ordinary requests.

Invariants: ``num_free`` equals the live blocks in the queue; a key is either in use
(``_in_use[key] > 0``) or queued (``key in _queued``) or absent, never two of these.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Iterable

Key = Hashable


class BlockPool:
    """``num_blocks`` usable KV blocks: a free queue of anonymous runs and keyed blocks."""

    def __init__(self, num_blocks: int) -> None:
        if num_blocks < 1:
            raise ValueError(f"num_blocks must be >= 1, got {num_blocks}")
        self.num_blocks = num_blocks
        self.num_free = num_blocks
        self._queue: deque[list] = deque([[None, num_blocks]])  # [key or None, live count]
        self._queued: dict[Key, list] = {}
        self._in_use: dict[Key, int] = {}

    @property
    def num_used(self) -> int:
        return self.num_blocks - self.num_free

    def is_cached(self, key: Key) -> bool:
        """True when a block with this content exists (in use or still in the free queue)."""
        return key in self._in_use or key in self._queued

    def is_queued(self, key: Key) -> bool:
        return key in self._queued

    def evicts_key(self, n: int) -> bool:
        """Whether taking ``n`` blocks (``n <= num_free``) would evict a keyed block."""
        if not self._queued:
            return False
        for key, live in self._queue:
            if n <= 0:
                return False
            if live and key is not None:
                return True
            n -= live
        return False

    def take(self, n: int) -> None:
        """Hand out ``n`` blocks from the front of the queue, evicting keyed ones reached.

        The caller checked ``n <= num_free``.
        """
        self.num_free -= n
        queue = self._queue
        while n:
            entry = queue[0]
            key, live = entry
            if live == 0:
                queue.popleft()
                continue
            if key is None:
                used = min(n, live)
                n -= used
                if used == live:
                    queue.popleft()
                else:
                    entry[1] = live - used
            else:
                queue.popleft()
                del self._queued[key]
                n -= 1

    def touch(self, key: Key) -> None:
        """Reference a cached block (a prefix-cache hit), taking it out of the queue if there."""
        entry = self._queued.pop(key, None)
        if entry is not None:
            entry[1] = 0
            self.num_free -= 1
            self._in_use[key] = 1
        else:
            self._in_use[key] += 1

    def register(self, key: Key) -> bool:
        """Give a freshly taken block the content ``key``; False if that content already exists."""
        if key in self._in_use or key in self._queued:
            return False
        self._in_use[key] = 1
        return True

    def release(self, blocks: Iterable[Key | None]) -> None:
        """Return blocks to the queue tail in the order given (callers pass last block first).

        ``None`` is an anonymous block; a key drops one reference and is queued at zero.
        """
        queue = self._queue
        for key in blocks:
            if key is None:
                self.num_free += 1
                tail = queue[-1] if queue else None
                if tail is not None and tail[0] is None and tail[1] > 0:
                    tail[1] += 1
                else:
                    queue.append([None, 1])
                continue
            refs = self._in_use[key] - 1
            if refs:
                self._in_use[key] = refs
                continue
            del self._in_use[key]
            entry = [key, 1]
            queue.append(entry)
            self._queued[key] = entry
            self.num_free += 1

    def release_anonymous(self, n: int) -> None:
        """Return ``n`` anonymous blocks to the queue tail (one merged run)."""
        if n <= 0:
            return
        self.num_free += n
        tail = self._queue[-1] if self._queue else None
        if tail is not None and tail[0] is None and tail[1] > 0:
            tail[1] += n
        else:
            self._queue.append([None, n])

    def forget(self, key: Key) -> None:
        """Drop the content of an in-use block whose owner will never be looked up again."""
        refs = self._in_use[key] - 1
        if refs:
            self._in_use[key] = refs
        else:
            del self._in_use[key]
