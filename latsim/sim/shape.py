"""What the cost model sees of a step: a scheduling plan reduced to a :class:`BatchShape`."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from latsim.costmodel.batch import BatchShape
from latsim.sim.step import StepPlan

if TYPE_CHECKING:
    from latsim.costmodel.coreads import BoundCoReads
    from latsim.sim.request import Req


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


Readers = dict[int, list[int]]
"""Decoders reading each shared prefix: ``id`` of the prefix's first cached block -> ``[decoders,
their shared tokens summed]`` (:func:`count_reader`)."""


def count_reader(readers: Readers, req: Req, sign: int = 1) -> None:
    """Count ``req`` (``sign`` -1: uncount it) among the readers of its shared prefix, when it
    holds one: the cached copy of a prefix group's first block (requests holding the same copy
    read the same blocks, as far as the shorter of their prefixes goes)."""
    if not req.prefix_blocks:
        return
    first = req.keys.get(0)
    if first is None or first.key[0] != "g":
        return
    entry = readers.get(id(first))
    if entry is None:
        readers[id(first)] = [sign, sign * req.shared_tokens]
    else:
        entry[0] += sign
        entry[1] += sign * req.shared_tokens
        if not entry[0]:
            del readers[id(first)]


def plan_readers(plan: StepPlan, base: Readers | None = None) -> Readers:
    """``base`` (not changed) plus the decoders ``plan`` lists (as :func:`step_shape` tells them)."""
    readers = {k: list(v) for k, v in base.items()} if base else {}
    for req, n in plan.scheduled:
        if n == 1 and req.generated > 0 and req.num_computed == req.num_tokens - 1:
            count_reader(readers, req)
    return readers


def coread_groups(readers: Readers) -> list[tuple[int, float]]:
    """``(decoders, mean shared tokens)`` of the prefixes two or more decoders read, sorted (so
    equal batches give bitwise-equal prices whatever order their requests came in).  Readers of
    one prefix with prefixes of different lengths are priced at their mean (the co-reads of
    ``n`` equal prefixes of that length; the exact count, their sum less the longest, is lower
    by at most the spread)."""
    return sorted((n, total / n) for n, total in readers.values() if n >= 2)


def coread_tokens(coreads: BoundCoReads, seqs: int, readers: Readers, prompt: bool = False) -> int:
    """Whole KV tokens the step's ``seqs`` decoders read from L2 instead of HBM (0 when none share);
    ``prompt``: the step carries a prompt chunk too (:attr:`BoundCoReads.prompt_saving`)."""
    groups = coread_groups(readers)
    return round(coreads.discount(seqs, groups, prompt)) if groups else 0


def discounted_kv(kv: int, kv_sq: int, seqs: int, saved: int) -> tuple[int, int]:
    """``(KV tokens, sum of squared contexts)`` of ``seqs`` decoders after ``saved`` tokens are
    taken off, evenly: each context ``c - saved / seqs``, so the squares lose
    ``(2 x saved x kv - saved**2) / seqs`` (rounded half up in integers: the step after, with
    every context one longer, loses exactly ``2 x saved`` more, as a decode run assumes)."""
    if not saved:
        return kv, kv_sq
    if not kv_sq:  # squares unknown: they stay unknown
        return kv - saved, 0
    num = saved * saved - 2 * saved * kv
    return kv - saved, kv_sq + (2 * num + seqs) // (2 * seqs)


def plan_coreads(shape: BatchShape, plan: StepPlan, coreads: BoundCoReads | None,
                 base: Readers | None = None) -> BatchShape:
    """``shape`` (of ``plan``, plus the decoders ``base`` counts) with its co-read tokens taken off
    (:func:`with_coreads`), at the prompt-carrying saving when it has prefill tokens; unchanged
    without co-read terms or with fewer than two decoders.  The reference and the fast engine both
    price a step through here."""
    if coreads is None or shape.decode_seqs < 2:
        return shape
    saved = coread_tokens(coreads, shape.decode_seqs, plan_readers(plan, base), shape.prefill_tokens > 0)
    return with_coreads(shape, saved)


def with_coreads(shape: BatchShape, saved: int) -> BatchShape:
    """``shape`` with ``saved`` decode KV tokens read from L2 (:mod:`latsim.costmodel.coreads`)."""
    if not saved:
        return shape
    kv, sq = discounted_kv(shape.decode_kv_tokens, shape.decode_kv_sq, shape.decode_seqs, saved)
    return replace(shape, decode_kv_tokens=kv, decode_kv_sq=sq)
