"""What the cost model sees of a step: a scheduling plan reduced to a :class:`BatchShape`."""

from __future__ import annotations

from latsim.costmodel.batch import BatchShape
from latsim.sim.step import StepPlan


def step_shape(plan: StepPlan, decodes: int = 0, decode_kv: int = 0, decode_sq: int = 0) -> BatchShape:
    """The shape of ``plan``, plus ``decodes`` decodes it does not list reading ``decode_kv`` KV entries
    (their squared contexts summing to ``decode_sq``).

    A scheduled request is a decode when it computes one token after all its others and has
    sampled before; everything else is a prefill chunk.  Prefill attention pairs are summed in
    plan order, so equal plans give bitwise-equal shapes.  (Hot: plain ints, no arrays.)
    """
    p_tokens = p_seqs = p_kv = max_chunk = 0
    pairs = 0.0
    for req, n in plan.scheduled:
        ctx = req.num_computed
        if n == 1 and req.generated > 0 and ctx == req.num_tokens - 1:
            decodes += 1
            decode_kv += ctx + 1
            decode_sq += (ctx + 1) * (ctx + 1)
            continue
        p_tokens += n
        p_seqs += 1
        p_kv += ctx + n
        pairs += n * ctx + n * (n + 1) / 2
        max_chunk = max(max_chunk, n)
    return BatchShape(p_tokens, p_seqs, pairs, p_kv, decodes, decode_kv, max_chunk, decode_sq)
