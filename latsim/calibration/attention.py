"""Attention kernels: prefill chunks over a cached context, and decode over a batch.

Implementation, first that works (probed once per run on a small case and checked against a
float32 reference with the bottom-right causal mask vLLM uses for chunked prefill):

1. ``vllm``: vLLM's FlashAttention varlen kernel (``vllm.vllm_flash_attn``), when vLLM imports;
2. ``flash-varlen``: PyTorch's bundled FlashAttention-2 varlen op
   (``torch.ops.aten._flash_attention_forward``), packed sequences, native GQA;
3. ``sdpa``: ``scaled_dot_product_attention`` with KV heads repeated to the query heads and,
   for decode, a padded batch with a key mask (the CPU backend always uses this).

Decode with the ``uniform`` mix and no vLLM uses ``flash-padded``: the same op on a
``batch x length x heads`` batch (no ``cu_seqlens``), whose decode path packs the query heads
of a GQA group together and splits long contexts, as vLLM's kernels do; the varlen op re-reads
K and V once per query head and overprices decode by up to the group size.  The cost model
prices decode from the uniform rows (a paged kernel's cost follows total KV, not its spread);
``skewed`` rows (varlen) are kept for reference.

With ``vllm`` both phases run the way vLLM 0.25.1's FlashAttention backend runs them
(``vllm-fa3-paged``): K and V in a paged cache of 16-token blocks (``[blocks, 16, kv heads, head
dim]``, a seeded shuffled block table; a prefill chunk's own keys are in the cache beside its
cached context, as vLLM writes them before attending), ``seqused_k``, FA3's ahead-of-time
scheduler metadata and, for steps a CUDA graph holds (at most 512 tokens), the graph's fixed 32
splits.  Paging costs decode 15-38 % over a contiguous cache at contexts up to 512 (grid
``paged``), and long prefill chunks 14-28 % in a live trace (``data/traces/``).  The H200 profile's
prefill rows predate this (contiguous, ``vllm-fa3``); every row records the implementation that
produced it.

Two options of a point run only on that paged path (elsewhere the point is skipped, reason
recorded): ``kv=fp8``, an FP8 KV cache as ``--kv-cache-dtype fp8`` runs it (queries, keys and
values in float8_e4m3, unit per-sequence, per-KV-head descales, bf16 output:
``vllm-fa3-paged-fp8kv``), and ``window=W``, a sliding window of ``W`` tokens (FA3's
``window_size=(W - 1, 0)``, as vLLM passes a model's ``sliding_window``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from latsim.calibration.context import BenchContext, Skip
from latsim.calibration.timing import rotation_sets

MIXES = ("uniform", "skewed")


def prefill_pairs(q: int, ctx: int) -> float:
    return q * ctx + q * (q + 1) / 2


def decode_lengths(batch: int, ctx: int, mix: str) -> list[int]:
    """Context lengths of a decode batch averaging ``ctx``: equal, or exponential (seeded)."""
    if mix not in MIXES:
        raise ValueError(f"decode mix={mix!r}; accepted: {', '.join(MIXES)}")
    if mix == "uniform" or batch == 1:
        return [ctx] * batch
    w = np.random.default_rng(batch * 7919 + ctx).exponential(1.0, batch)
    return [max(1, round(ctx * x)) for x in w / w.mean()]


KV_BYTES = {"bf16": 2.0, "fp8": 1.0}


def work(hq: int, hkv: int, d: int, q_rows: int, pairs: float, kv_tokens: int, kv: str = "bf16") -> tuple[float, float]:
    """(FLOPs, minimum bytes): QK and PV products; Q in (in the cache's dtype), bf16 O out, K and V
    read once."""
    b = KV_BYTES[kv]
    return 4.0 * d * hq * pairs, d * (q_rows * hq * (b + 2.0) + 2.0 * kv_tokens * hkv * b)


def windowed(k_lens: list[int], q_lens: list[int], window: int) -> tuple[list[int], float]:
    """(KV tokens each sequence reads, query-key pairs) under a sliding window of ``window``
    tokens (0: none): a query attends to itself and the ``window - 1`` tokens before it."""
    if not window:
        return list(k_lens), float(sum(prefill_pairs(q, k - q) for q, k in zip(q_lens, k_lens, strict=True)))
    reads, pairs = [], 0.0
    for q, k in zip(q_lens, k_lens, strict=True):
        first = k - q  # position of the first query
        reads.append(min(k, window + q - 1))
        pairs += _window_pairs(first, k, window)
    return reads, pairs


def _window_pairs(first: int, k: int, window: int) -> float:
    """Closed form of ``sum(min(p + 1, window) for p in range(first, k))``."""
    lo, hi = first + 1, k  # sum of min(x, window) for x in lo..hi
    below = max(0, min(hi, window) - lo + 1)
    s = below * (lo + min(hi, window)) / 2 if below else 0.0
    return s + max(0, hi - max(lo, window + 1) + 1) * window


def run(ctx: BenchContext, p: dict[str, Any]) -> dict[str, Any]:
    """Time one point ``{phase: prefill, q, ctx, hq, hkv, d}`` or ``{phase: decode, batch, ctx, mix, ...}``."""
    hq, hkv, d = int(p["hq"]), int(p["hkv"]), int(p["d"])
    kv, window = str(p.get("kv", "bf16")), int(p.get("window", 0))
    if kv not in KV_BYTES:
        raise ValueError(f"attention kv={kv!r}; accepted: {', '.join(KV_BYTES)}")
    if p["phase"] == "prefill":
        q_lens, k_lens = [int(p["q"])], [int(p["q"]) + int(p["ctx"])]
    elif p["phase"] == "decode":
        k_lens = decode_lengths(int(p["batch"]), int(p["ctx"]), str(p["mix"]))
        q_lens = [1] * len(k_lens)
    else:
        raise ValueError(f"attention phase={p['phase']!r}; accepted: prefill, decode")
    reads, pairs = windowed(k_lens, q_lens, window)
    impl = _backend(ctx)
    if impl == "flash-varlen" and p["phase"] == "decode" and p["mix"] == "uniform" and _padded_backend(ctx):
        impl = "flash-padded"
    if impl == "vllm" and _paged_ok(ctx):
        impl = "vllm-fa3-paged"
    if (kv != "bf16" or window) and impl != "vllm-fa3-paged":
        raise Skip(f"kv={kv}, window={window} run only on vLLM's paged FA3 path (found {impl})")
    if kv == "fp8":
        if not _probed(ctx, "attention_paged_fp8", _fp8_matches):
            raise Skip("vLLM's FA3 over an fp8 KV cache did not match the reference here")
        impl = "vllm-fa3-paged-fp8kv"
    fn = _build(ctx, impl, q_lens, k_lens, hq, hkv, d, causal=p["phase"] == "prefill", kv=kv, window=window)
    t = ctx.timer.time(fn)
    if impl == "vllm":
        impl = "vllm-fa3" if ctx.probes.get("attention_fa3", True) else "vllm-fa2"
    flops, nbytes = work(hq, hkv, d, sum(q_lens), pairs, sum(reads), kv)
    return {"median_s": t.median_s, "p10_s": t.p10_s, "p90_s": t.p90_s, "reps": t.reps, "timer": t.method, "impl": impl,
            "flops": flops, "bytes": nbytes, "kv_tokens": sum(k_lens), "max_kv": max(k_lens)}


def _build(ctx: BenchContext, impl: str, q_lens: list[int], k_lens: list[int], hq: int, hkv: int, d: int,
           causal: bool, kv: str = "bf16", window: int = 0) -> Any:
    nbytes = 4.0 * d * (sum(q_lens) * hq + sum(k_lens) * hkv)
    sets = rotation_sets(nbytes, ctx.l2_bytes, max_sets=16)
    if impl == "sdpa":
        inputs = [_padded(ctx, q_lens, k_lens, hq, hkv, d) for _ in range(sets)]
        return lambda i: _sdpa(ctx, inputs[i % sets])
    if impl == "flash-padded":
        batched = [_batched(ctx, len(k_lens), k_lens[0], hq, hkv, d) for _ in range(sets)]
        return lambda i: _flash_padded(ctx, batched[i % sets])
    if impl.startswith("vllm-fa3-paged"):
        caches = [_paged(ctx, q_lens, k_lens, hq, hkv, d, seed=j, kv=kv, window=window) for j in range(sets)]
        return lambda i: _flash_paged(ctx, caches[i % sets])
    packed = [_packed(ctx, q_lens, k_lens, hq, hkv, d) for _ in range(sets)]
    meta = _cu(ctx, q_lens), _cu(ctx, k_lens), max(q_lens), max(k_lens)
    call = _flash_vllm if impl == "vllm" else _flash_torch
    return lambda i: call(ctx, packed[i % sets], meta, causal)


def _cu(ctx: BenchContext, lens: list[int]) -> Any:
    return ctx.torch.tensor(np.concatenate([[0], np.cumsum(lens)]), dtype=ctx.torch.int32, device=ctx.device)


def _packed(ctx: BenchContext, q_lens: list[int], k_lens: list[int], hq: int, hkv: int, d: int) -> tuple[Any, ...]:
    return ctx.randn(sum(q_lens), hq, d), ctx.randn(sum(k_lens), hkv, d), ctx.randn(sum(k_lens), hkv, d)


def _flash_torch(ctx: BenchContext, qkv: tuple[Any, ...], meta: tuple[Any, ...], causal: bool) -> Any:
    """PyTorch's FlashAttention-2 varlen op on packed ``(q, k, v)``; ``meta`` = cu_q, cu_k, max_q, max_k."""
    q, k, v = qkv
    cu_q, cu_k, max_q, max_k = meta
    return ctx.torch.ops.aten._flash_attention_forward(q, k, v, cu_q, cu_k, max_q, max_k, 0.0, causal, False)[0]


def _flash_vllm(ctx: BenchContext, qkv: tuple[Any, ...], meta: tuple[Any, ...], causal: bool) -> Any:
    """vLLM's FlashAttention varlen kernel (FA3 on Hopper when the build has it)."""
    from vllm.vllm_flash_attn import flash_attn_varlen_func

    q, k, v = qkv
    cu_q, cu_k, max_q, max_k = meta
    kwargs: dict[str, Any] = {"fa_version": 3} if ctx.probes.get("attention_fa3", True) else {}
    try:
        return flash_attn_varlen_func(q, k, v, max_seqlen_q=max_q, cu_seqlens_q=cu_q, max_seqlen_k=max_k,
                                      cu_seqlens_k=cu_k, causal=causal, **kwargs)
    except (TypeError, RuntimeError):
        if not kwargs:
            raise
        ctx.probes["attention_fa3"] = False
        return _flash_vllm(ctx, qkv, meta, causal)


PAGE = 16
"""vLLM's default KV block size (tokens per page)."""
GRAPH_SPLITS, GRAPH_MAX_TOKENS = 32, 512
"""FA3 splits vLLM fixes for steps its CUDA graphs hold (``flash_attn_max_num_splits_for_cuda_graph``);
larger steps leave the split count to FA3's heuristics (0)."""


def pages_of(k_lens: list[int]) -> list[int]:
    """Cache blocks (of :data:`PAGE` tokens) each sequence's keys take."""
    return [-(-n // PAGE) for n in k_lens]


def block_table(pages: list[int], ids: np.ndarray) -> np.ndarray:
    """A block table: row ``i`` holds the next ``pages[i]`` of ``ids`` (the rest of the row 0)."""
    table = np.zeros((len(pages), max(pages)), dtype=np.int32)
    start = 0
    for row, n in enumerate(pages):
        table[row, :n] = ids[start:start + n]
        start += n
    return table


def _paged(ctx: BenchContext, q_lens: list[int], k_lens: list[int], hq: int, hkv: int, d: int,
           seed: int = 0, kv: str = "bf16", window: int = 0) -> dict[str, Any]:
    """A batch over a paged KV cache, as vLLM's FlashAttention backend runs it: queries (one per
    decode sequence, ``q`` rows of a prefill chunk whose keys, cached context included, are in the
    cache), k/v caches, a shuffled block table, lengths and FA3's scheduler metadata; with
    ``kv="fp8"`` queries and caches in float8_e4m3 with unit descales, with ``window`` FA3's
    sliding window."""
    from vllm.vllm_flash_attn.flash_attn_interface import get_scheduler_metadata

    torch, b = ctx.torch, len(k_lens)
    pages = pages_of(k_lens)
    table = block_table(pages, np.random.default_rng(seed).permutation(sum(pages)).astype(np.int32))
    lens = torch.tensor(k_lens, dtype=torch.int32, device=ctx.device)
    cu_q = _cu(ctx, q_lens)
    splits = GRAPH_SPLITS if sum(q_lens) <= GRAPH_MAX_TOKENS else 0
    dtype = torch.float8_e4m3fn if kv == "fp8" else torch.bfloat16
    win = [window - 1, 0] if window else [-1, -1]
    sched = get_scheduler_metadata(batch_size=b, max_seqlen_q=max(q_lens), max_seqlen_k=max(k_lens), num_heads_q=hq,
                                   num_heads_kv=hkv, headdim=d, cache_seqlens=lens, qkv_dtype=dtype,
                                   cu_seqlens_q=cu_q, page_size=PAGE, causal=True, window_size=win,
                                   num_splits=splits)
    blocks = sum(pages)
    c = {"q": ctx.randn(sum(q_lens), hq, d, dtype=dtype), "k": ctx.randn(blocks, PAGE, hkv, d, dtype=dtype),
         "v": ctx.randn(blocks, PAGE, hkv, d, dtype=dtype), "table": torch.tensor(table, device=ctx.device),
         "lens": lens, "cu_q": cu_q, "max_q": max(q_lens), "max_k": max(k_lens), "sched": sched, "splits": splits,
         "window": win, "descale": {}}
    if kv == "fp8":
        one = torch.ones((b, hkv), dtype=torch.float32, device=ctx.device)
        c["descale"] = {"q_descale": one, "k_descale": one, "v_descale": one}
        c["out"] = torch.empty(sum(q_lens), hq, d, dtype=torch.bfloat16, device=ctx.device)
    return c


def _flash_paged(ctx: BenchContext, c: dict[str, Any]) -> Any:
    """vLLM's FA3 call over a paged cache (see the module docstring); ``c["softcap"]``, when a
    ``prepare`` step sets it, soft-caps the logits as Gemma-2's layers do (0: none)."""
    from vllm.vllm_flash_attn import flash_attn_varlen_func

    return flash_attn_varlen_func(c["q"], c["k"], c["v"], max_seqlen_q=c["max_q"], cu_seqlens_q=c["cu_q"],
                                  max_seqlen_k=c["max_k"], seqused_k=c["lens"], causal=True,
                                  window_size=c["window"], block_table=c["table"], scheduler_metadata=c["sched"],
                                  num_splits=c["splits"], out=c.get("out"), fa_version=3, softcap=c.get("softcap", 0.0),
                                  **c["descale"])


def time_paged_decode(ctx: BenchContext, heads: tuple[int, int, int], k_lens: list[int],
                      prepare: Callable[[dict[str, Any]], dict[str, Any]] | None = None) -> dict[str, float]:
    """The grid's paged FA3 decode call over contexts ``k_lens`` (``prepare`` may rework the batch
    first, e.g. scatter its blocks): median, p10 and p90 microseconds and the repetitions."""
    return time_paged(ctx, heads, [1] * len(k_lens), k_lens, prepare)


def time_paged(ctx: BenchContext, heads: tuple[int, int, int], q_lens: list[int], k_lens: list[int],
               prepare: Callable[[dict[str, Any]], dict[str, Any]] | None = None) -> dict[str, float]:
    """The grid's paged FA3 call over sequences of ``q_lens`` query rows and ``k_lens`` keys (a
    prefill chunk's keys include its own rows; decode rows have one query): median, p10 and p90
    microseconds and the repetitions (see :func:`time_paged_decode`)."""
    hq, hkv, d = heads
    c = _paged(ctx, q_lens, k_lens, hq, hkv, d)
    if prepare is not None:
        c = prepare(c)
    t = ctx.timer.time(lambda i: _flash_paged(ctx, c))
    c.clear()
    ctx.clear()
    return {"us": t.median_s * 1e6, "p10_us": t.p10_s * 1e6, "p90_us": t.p90_s * 1e6, "reps": t.reps}


def _probed(ctx: BenchContext, key: str, check: Any) -> bool:
    """``check(ctx)``'s verdict, computed once per run and kept in ``ctx.probes[key]``."""
    if key not in ctx.probes:
        ctx.probes[key] = check(ctx)
    ok: bool = ctx.probes[key]
    return ok


def _paged_ok(ctx: BenchContext) -> bool:
    """Whether the paged FA3 call matches the float32 reference here, for decode and for prefill
    chunks over a cached context (probed once)."""
    return _probed(ctx, "attention_paged", _paged_matches)


def _paged_matches(ctx: BenchContext) -> bool:
    try:
        return all(_paged_case_matches(ctx, q_lens, k_lens) for q_lens, k_lens in
                   (([1, 1, 1], [40, 7, 33]), ([3, 5], [40, 5])))
    except Exception:
        return False


def _fp8_matches(ctx: BenchContext) -> bool:
    """Whether the paged FA3 call over an fp8 cache matches the float32 reference (of the fp8
    values) within fp8's precision, for decode and for a prefill chunk."""
    try:
        return all(_paged_case_matches(ctx, q_lens, k_lens, kv="fp8", tol=6e-2) for q_lens, k_lens in
                   (([1, 1, 1], [40, 7, 33]), ([3, 5], [40, 5])))
    except Exception:
        return False


def _paged_case_matches(ctx: BenchContext, q_lens: list[int], k_lens: list[int], kv: str = "bf16",
                        tol: float = 2e-2) -> bool:
    hq, hkv, d = 8, 2, 64
    c = _paged(ctx, q_lens, k_lens, hq, hkv, d, seed=1, kv=kv)
    out = _flash_paged(ctx, c).float()
    table = c["table"].long()
    k = ctx.torch.cat([c["k"][table[i]].reshape(-1, hkv, d)[:n] for i, n in enumerate(k_lens)]).float()
    v = ctx.torch.cat([c["v"][table[i]].reshape(-1, hkv, d)[:n] for i, n in enumerate(k_lens)]).float()
    ref = _reference(ctx.torch, c["q"].float(), k, v, q_lens, k_lens, hq // hkv)
    return bool(((out - ref).norm() / ref.norm()) < tol)


def _padded(ctx: BenchContext, q_lens: list[int], k_lens: list[int], hq: int, hkv: int, d: int) -> tuple[Any, ...]:
    """(q, k, v, mask) for SDPA: batch x heads x len x d, KV heads repeated, bottom-right mask."""
    torch, b, lq, lk = ctx.torch, len(q_lens), max(q_lens), max(k_lens)
    q = ctx.randn(b, hq, lq, d)
    k = ctx.randn(b, hkv, lk, d).repeat_interleave(hq // hkv, dim=1)
    v = ctx.randn(b, hkv, lk, d).repeat_interleave(hq // hkv, dim=1)
    qi = torch.arange(lq, device=ctx.device).view(1, lq, 1)
    kj = torch.arange(lk, device=ctx.device).view(1, 1, lk)
    lens = torch.tensor(k_lens, device=ctx.device).view(b, 1, 1)
    qlen = torch.tensor(q_lens, device=ctx.device).view(b, 1, 1)
    mask = (kj < lens) & (kj <= qi + (lens - qlen))
    return q, k, v, mask.unsqueeze(1)


def _batched(ctx: BenchContext, batch: int, length: int, hq: int, hkv: int, d: int) -> tuple[Any, ...]:
    return ctx.randn(batch, 1, hq, d), ctx.randn(batch, length, hkv, d), ctx.randn(batch, length, hkv, d)


def _flash_padded(ctx: BenchContext, qkv: tuple[Any, ...]) -> Any:
    """Non-varlen FlashAttention-2 decode: q ``B x 1 x Hq x d``, k/v ``B x L x Hkv x d``."""
    q, k, v = qkv
    return ctx.torch.ops.aten._flash_attention_forward(q, k, v, None, None, 1, k.shape[1], 0.0, False, False)[0]


def _padded_backend(ctx: BenchContext) -> bool:
    """Whether ``flash-padded`` matches the float32 reference here (probed once)."""
    return _probed(ctx, "attention_padded", _padded_matches)


def _padded_matches(ctx: BenchContext) -> bool:
    try:
        b, length, hq, hkv, d = 3, 40, 8, 2, 64
        q, k, v = _batched(ctx, b, length, hq, hkv, d)
        out = _flash_padded(ctx, (q, k, v)).float().reshape(b, hq, d)
        ref = _reference(ctx.torch, q.float().reshape(b, hq, d), k.float().reshape(b * length, hkv, d),
                         v.float().reshape(b * length, hkv, d), [1] * b, [length] * b, hq // hkv)
        return bool(((out - ref).norm() / ref.norm()) < 2e-2)
    except Exception:
        return False


def _sdpa(ctx: BenchContext, inputs: tuple[Any, ...]) -> Any:
    """SDPA on padded ``(q, k, v, mask)``; the mask carries causality and padding."""
    q, k, v, mask = inputs
    return ctx.torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def _backend(ctx: BenchContext) -> str:
    if "attention" not in ctx.probes:
        ctx.probes["attention"] = _probe(ctx)
    impl: str = ctx.probes["attention"]
    return impl


def _probe(ctx: BenchContext) -> str:
    """The first implementation that matches the float32 reference on a small GQA chunk."""
    if not ctx.is_cuda:
        return "sdpa"
    for impl in ("vllm", "flash-varlen"):
        try:
            if _matches_reference(ctx, impl):
                return impl
        except Exception:
            continue
    return "sdpa"


def _matches_reference(ctx: BenchContext, impl: str) -> bool:
    torch, hq, hkv, d, q_lens, k_lens = ctx.torch, 4, 2, 64, [3, 5], [8, 5]
    q, k, v = _packed(ctx, q_lens, k_lens, hq, hkv, d)
    call = _flash_vllm if impl == "vllm" else _flash_torch
    out = call(ctx, (q, k, v), (_cu(ctx, q_lens), _cu(ctx, k_lens), max(q_lens), max(k_lens)), True).float()
    ref = _reference(torch, q.float(), k.float(), v.float(), q_lens, k_lens, hq // hkv)
    err = float((out - ref).norm() / ref.norm())
    return bool(err < 2e-2)


def _reference(torch: Any, q: Any, k: Any, v: Any, q_lens: list[int], k_lens: list[int], rep: int) -> Any:
    outs, qo, ko = [], 0, 0
    for lq, lk in zip(q_lens, k_lens, strict=True):
        qs = q[qo:qo + lq].transpose(0, 1)
        ks = k[ko:ko + lk].repeat_interleave(rep, dim=1).transpose(0, 1)
        vs = v[ko:ko + lk].repeat_interleave(rep, dim=1).transpose(0, 1)
        s = qs @ ks.transpose(1, 2) / qs.shape[-1] ** 0.5
        allowed = torch.arange(lk, device=q.device)[None, :] <= torch.arange(lq, device=q.device)[:, None] + lk - lq
        s = s.masked_fill(~allowed, float("-inf"))
        outs.append((s.softmax(-1) @ vs).transpose(0, 1))
        qo, ko = qo + lq, ko + lk
    return torch.cat(outs)
