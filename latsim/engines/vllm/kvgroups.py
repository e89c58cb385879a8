"""vLLM 0.25.1's KV-cache groups for a model: which layers share a block table.

A model whose attention layers are all of one kind (full attention, or the same sliding window
on every layer: Mistral-7B-v0.1, Phi-3-mini) has one group of all its layers.  A model that
interleaves the two kinds (Gemma-2, Gemma-3) is split as vLLM's
``_get_kv_cache_groups_uniform_page_size`` does: the group size is the smaller of the two layer
counts (the larger, when it is under 1.5 times the smaller), each kind fills
``ceil(count / size)`` groups, the last one padded, and a pool block holds one group's ``size``
layers.  Gemma-3-27B's 10 full and 52 sliding layers make 1 full and 6 sliding groups of 10
layers (8 padding layers); Gemma-2-9B's 21 and 21 make one group of each.
"""

from __future__ import annotations

from dataclasses import dataclass

from latsim.catalog.models import ModelSpec
from latsim.sim.kvlayout import KvLayout, cdiv


@dataclass(frozen=True)
class KvGroups:
    """``full`` and ``sliding`` groups of ``layers`` layers each (of the model's ``total``
    attention layers); ``window``: the sliding layers' window."""

    layers: int
    full: int
    sliding: int
    window: int
    total: int

    def layout(self, max_num_batched_tokens: int, max_model_len: int, block_size: int) -> KvLayout:
        """The scheduler's view of these groups (:class:`~latsim.sim.kvlayout.KvLayout`)."""
        return KvLayout.for_engine(self.full, self.sliding, self.window, max_num_batched_tokens, max_model_len,
                                   block_size)

    def max_request_blocks(self, max_num_batched_tokens: int, max_model_len: int, block_size: int) -> int:
        """Pool blocks vLLM reserves for one request of ``max_model_len`` tokens (its
        ``max_memory_usage_bytes`` over the groups, in blocks), what its "GPU KV cache size" log
        line divides the pool by: a full group's whole context, a sliding group's admission cap
        (counted whole, even above the context's own blocks)."""
        layout = self.layout(max_num_batched_tokens, max_model_len, block_size)
        return self.full * cdiv(max_model_len, block_size) + self.sliding * layout.admission_blocks


def kv_groups(model: ModelSpec) -> KvGroups:
    """The KV-cache groups vLLM 0.25.1 makes for ``model`` (module docstring)."""
    full, sliding = model.num_full_attention_layers, model.num_sliding_window_layers
    window = model.sliding_window or 0
    layers = model.num_layers
    if not sliding:
        return KvGroups(layers, 1, 0, 0, layers)
    if not full:
        return KvGroups(layers, 0, 1, window, layers)
    small, large = min(full, sliding), max(full, sliding)
    size = large if large < small * 1.5 else small
    return KvGroups(size, cdiv(full, size), cdiv(sliding, size), window, layers)
