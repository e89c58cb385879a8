"""How a replica's KV blocks are grouped when some attention layers slide (vLLM's KV-cache groups).

vLLM 0.25.1 splits the attention layers into groups of equal size, each of one kind (full
attention or a sliding window of ``window`` tokens), and gives every group its own block table
over one shared pool: a block of the pool holds one group's layers for ``block_size`` tokens.
A request holds, in each full group, a block for every ``block_size`` tokens of its context; in
each sliding group only the blocks its window still reaches: before each allocation vLLM frees
(``SlidingWindowManager.remove_skipped_blocks``) the leading blocks wholly before
``num_computed - window + 1``.  A model whose layers are all of one kind has one group.

:class:`KvLayout` is that arithmetic for one replica; which layers form the groups is the
engine's rule (:func:`latsim.engines.vllm.kvgroups.kv_groups`).  The default layout is one
full-attention group: a block per ``block_size`` tokens, nothing freed early.
"""

from __future__ import annotations

from dataclasses import dataclass


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class KvLayout:
    """``full`` full-attention groups and ``sliding`` sliding-window groups of ``window`` tokens.

    ``admission_blocks``: the most blocks one sliding group may need for a request
    (``SlidingWindowSpec.max_admission_blocks_per_request``: ``window - 1`` computed tokens plus
    one step's new ones, plus one block for a window that starts inside a block), the cap on
    what vLLM's admission gate reserves for it; 0 when nothing slides.
    """

    full: int = 1
    sliding: int = 0
    window: int = 0
    admission_blocks: int = 0

    def __post_init__(self) -> None:
        if self.full < 0 or self.sliding < 0 or self.full + self.sliding < 1:
            raise ValueError(f"a KV layout needs at least one group, got full={self.full}, sliding={self.sliding}")
        if (self.sliding > 0) != (self.window > 0):
            raise ValueError(f"sliding groups need a window and a window needs sliding groups "
                             f"(sliding={self.sliding}, window={self.window})")
        if self.sliding and self.admission_blocks < 1:
            raise ValueError(f"a sliding layout needs admission_blocks >= 1, got {self.admission_blocks}")

    @property
    def groups(self) -> int:
        return self.full + self.sliding

    def skipped(self, computed: int, block_size: int) -> int:
        """Leading blocks a sliding group frees once ``computed`` tokens are in the cache."""
        if not self.sliding:
            return 0
        over = computed - self.window + 1
        return over // block_size if over > 0 else 0

    def held(self, slots: int, skipped: int) -> int:
        """Pool blocks a request holds with ``slots`` blocks per table, ``skipped`` freed per sliding table."""
        return self.full * slots + self.sliding * (slots - skipped)

    def admission(self, tokens: int, block_size: int) -> int:
        """Blocks vLLM's admission gate reserves for a request of ``tokens`` (nothing cached)."""
        slots = cdiv(tokens, block_size)
        return self.full * slots + self.sliding * min(slots, self.admission_blocks)

    @classmethod
    def for_engine(cls, full: int, sliding: int, window: int, max_num_batched_tokens: int, max_model_len: int,
                   block_size: int) -> KvLayout:
        """The layout of ``full`` and ``sliding`` groups with the admission cap of this engine's
        token budget and context (:meth:`sliding_admission_blocks`; none when nothing slides)."""
        cap = cls.sliding_admission_blocks(window, max_num_batched_tokens, max_model_len, block_size) if sliding else 0
        return cls(full, sliding, window, cap)

    @staticmethod
    def sliding_admission_blocks(window: int, max_num_batched_tokens: int, max_model_len: int,
                                 block_size: int) -> int:
        """vLLM's ``SlidingWindowSpec.max_admission_blocks_per_request``."""
        return cdiv(min(window - 1 + max_num_batched_tokens, max_model_len), block_size) + 1
