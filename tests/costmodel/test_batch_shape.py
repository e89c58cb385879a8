"""BatchShape.from_chunks: the aggregates, exact, as the array formula gives them."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from latsim.costmodel.batch import BatchShape

chunk = st.tuples(st.integers(1, 16384), st.integers(0, 131072))


@settings(max_examples=200, deadline=None)
@given(st.lists(chunk, max_size=300), st.lists(st.integers(1, 131072), max_size=50))
def test_from_chunks_equals_the_float64_array_sums(chunks: list[tuple[int, int]], decodes: list[int]) -> None:
    b = BatchShape.from_chunks(chunks, decodes)
    q = np.asarray([c[0] for c in chunks], dtype=np.float64)
    ctx = np.asarray([c[1] for c in chunks], dtype=np.float64)
    assert b.prefill_tokens == int(q.sum()) and b.prefill_seqs == len(chunks)
    assert b.prefill_attn_pairs == float((q * ctx + q * (q + 1) / 2).sum())  # bit for bit
    assert b.prefill_kv_tokens == int((q + ctx).sum())
    assert b.max_prefill_chunk == (int(q.max()) if chunks else 0)
    assert b.decode_seqs == len(decodes) and b.decode_kv_tokens == sum(decodes)
    assert isinstance(b.prefill_attn_pairs, float)


def test_one_chunk_counts_its_causal_pairs() -> None:
    b = BatchShape.from_chunks([(3, 2)], [])
    # 3 queries after 2 cached keys: 3 x 2 + (1 + 2 + 3)
    assert b.prefill_attn_pairs == 12.0 and b.prefill_kv_tokens == 5 and b.max_prefill_chunk == 3


def test_the_decodes_squared_contexts_are_summed_exactly() -> None:
    from latsim.costmodel.batch import BatchShape

    contexts = [3, 70_000, 512, 1]
    shape = BatchShape.from_chunks([(100, 20)], contexts)
    assert shape.decode_kv_sq == 9 + 70_000**2 + 512**2 + 1
    assert BatchShape.from_chunks([(100, 20)], []).decode_kv_sq == 0
