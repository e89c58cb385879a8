"""Paged KV-cache blocks with vLLM v1's free queue and prefix cache, kept cheap.

vLLM hands out blocks from the front of an LRU free queue.  A freed request returns its blocks
last block first: those with a content hash (full blocks) to the *tail*, where they stay
findable until handed out again; those without one (the partial last block) to the *front*,
so they are reused first (``BlockPool.free_blocks``).  Only two kinds of content can ever be
found again in a simulation: the shared prefix of a prefix group, and the full blocks of a
preempted request (which it finds when it resumes).  All other blocks are interchangeable, so
this pool keeps them as *counts* in anonymous runs and tracks identity only for keyed blocks.
That keeps eviction order exact (the queue order is exact) while costing O(1) for ordinary
requests.

Content is not deduplicated (vLLM's ``BlockHashToBlockMap``): every full block gets its hash,
even when a block with the same content exists, so a key maps to its physical :class:`Copy`
objects in registration order, and a lookup takes the earliest one that survives.

Invariants: ``num_free`` equals the live blocks in the queue; a copy is referenced
(``refs > 0``, ``entry is None``), or queued (``refs == 0``, ``entry`` its live queue entry),
or evicted (gone from ``_copies``); ``_copies`` holds no empty list.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

Key = tuple  # ("g", group, block) or ("r", request, block): see Req.block_key


class Copy:
    """One physical block holding the content ``key``."""

    __slots__ = ("entry", "key", "refs")

    def __init__(self, key: Key) -> None:
        self.key = key
        self.refs = 1
        self.entry: list | None = None  # its queue entry [self, 1] while free

    def __repr__(self) -> str:
        return f"Copy({self.key!r}, refs={self.refs}, queued={self.entry is not None})"


class BlockPool:
    """``num_blocks`` usable KV blocks: a free queue of anonymous runs and keyed copies.

    Queue entries are ``[None, live count]`` (an anonymous run) or ``[copy, 1 or 0]``; an entry
    whose count dropped to 0 is dead and skipped.
    """

    def __init__(self, num_blocks: int) -> None:
        if num_blocks < 0:
            raise ValueError(f"num_blocks must be >= 0, got {num_blocks}")
        self.num_blocks = num_blocks
        self.num_free = num_blocks
        self._queue: deque[list] = deque([[None, num_blocks]])
        self._copies: dict[Key, list[Copy]] = {}

    @property
    def num_used(self) -> int:
        return self.num_blocks - self.num_free

    def is_cached(self, key: Key) -> bool:
        """True when a block with this content exists (in use or still in the free queue)."""
        return key in self._copies

    def is_queued(self, key: Key) -> bool:
        """Whether the copy a lookup of ``key`` would take sits in the free queue (evictable)."""
        copies = self._copies.get(key)
        return copies is not None and copies[0].entry is not None

    def runs(self) -> list[tuple[Key | None, int]]:
        """The free queue, front first, as ``(key or None, live)``; adjacent anonymous runs merged."""
        out: list[tuple[Key | None, int]] = []
        for owner, live in self._queue:
            key = None if owner is None else owner.key
            if live and key is None and out and out[-1][0] is None:
                out[-1] = (None, out[-1][1] + live)
            elif live:
                out.append((key, live))
        return out

    def evicts_key(self, n: int) -> bool:
        """Whether taking ``n`` blocks (``n <= num_free``) would evict a keyed block."""
        if not self._copies:
            return False
        for owner, live in self._queue:
            if n <= 0:
                return False
            if live and owner is not None:
                return True
            n -= live
        return False

    def take(self, n: int) -> None:
        """Hand out ``n`` blocks from the front of the queue, evicting keyed copies reached.

        The caller checked ``n <= num_free``.
        """
        self.num_free -= n
        queue = self._queue
        while n:
            entry = queue[0]
            owner, live = entry
            if live == 0:
                queue.popleft()
            elif owner is None:
                used = n if n < live else live
                n -= used
                if used == live:
                    queue.popleft()
                else:
                    entry[1] = live - used
            else:
                queue.popleft()
                self._evict(owner)
                n -= 1

    def _evict(self, copy: Copy) -> None:
        copy.entry = None
        copies = self._copies[copy.key]
        copies.remove(copy)
        if not copies:
            del self._copies[copy.key]

    def touch(self, key: Key) -> Copy:
        """Reference the earliest surviving copy of ``key`` (a hit), taking it out of the queue."""
        copy = self._copies[key][0]
        entry = copy.entry
        if entry is not None:
            entry[1] = 0
            copy.entry = None
            self.num_free -= 1
            copy.refs = 1
        else:
            copy.refs += 1
        return copy

    def register(self, key: Key) -> Copy:
        """Give a freshly taken block the content ``key`` (another copy if the content exists)."""
        copy = Copy(key)
        copies = self._copies.get(key)
        if copies is None:
            self._copies[key] = [copy]
        else:
            copies.append(copy)
        return copy

    def release(self, blocks: Iterable[Copy | None]) -> None:
        """Return blocks to the queue tail in the order given (callers pass last block first).

        ``None`` is an anonymous block; a copy drops one reference and is queued at zero.
        """
        queue = self._queue
        for copy in blocks:
            if copy is None:
                self.release_anonymous(1)
                continue
            copy.refs -= 1
            if copy.refs:
                continue
            entry = [copy, 1]
            queue.append(entry)
            copy.entry = entry
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

    def prepend_anonymous(self, n: int) -> None:
        """Return ``n`` anonymous blocks to the queue *front* (vLLM's blocks without a hash)."""
        if n <= 0:
            return
        self.num_free += n
        head = self._queue[0] if self._queue else None
        if head is not None and head[0] is None and head[1] > 0:
            head[1] += n
        else:
            self._queue.appendleft([None, n])

    def forget(self, copy: Copy) -> None:
        """Drop the content of a copy held by one request that nobody will look up again.

        The caller (its only holder, ``refs == 1``) then returns the block as anonymous.
        """
        copy.refs = 0
        self._evict(copy)
