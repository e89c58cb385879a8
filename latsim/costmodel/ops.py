"""Operator decomposition of one engine step, for one GPU of a tensor-parallel group.

Design note.  Every operator's FLOPs, bytes moved, kernel launches and GEMM weight elements are
*linear forms* in a short feature vector of the step (tokens, attention pairs, KV entries read,
experts hit, activity flags; see :data:`FEATURES`).  The forms are built once per
(model, tp, dtypes); pricing a step is then a few multiply-adds per operator.  The same
evaluation runs on Python numbers (one step) and on numpy arrays (a run of decode steps), with
the same IEEE operations in the same order, so both give bitwise-identical results.

Operators (names are a contract with calibration, which fits one regressor per operator):
``embed qkv_proj rope attn_prefill attn_decode kv_write o_proj norm mlp_up act mlp_down
moe_router moe_experts act_quant allreduce lm_head sampling``.  Every table lists all of them; those a
model lacks (``moe_*`` for a dense model, ``allreduce`` at tp=1) are zero.

Assumptions (each is a statement about vLLM's kernels, not a fitted number):

- Activations are 2-byte (bf16); embedding, router and ``lm_head`` weights stay in bf16 even
  when the other weights are quantised (vLLM's fp8/int schemes skip them by default).
- GEMMs run on the tensor-core peak of ``shard.GEMM_COMPUTE_DTYPE[weight_dtype]`` (W8A8 for
  fp8/int8; int4 and w8a16 are weight-only, dequantised to bf16).  Quantisation scales are not
  counted.
- ``act_quant`` (W8A8 only, zero otherwise): the quantization of W8A8 GEMM inputs to 8 bits that
  runs as a kernel of its own before a CUTLASS scaled GEMM.  Under vLLM's default compilation the
  inputs produced by an RMSNorm (QKV, MLP-up, shared-expert-up) or a SiLU x mul (MLP-down,
  shared-expert-down) are quantized inside that kernel (RMSNorm + quant and SiLU-mul + quant
  fusion, or Inductor fusing the native ops), which then writes 8 instead of 16 bits (counted as
  unchanged).  What remains, per layer: the O-projection input (after attention, a graph
  boundary; query width), and in MoE layers the fused-MoE op's two inputs (hidden once per
  token, and ``top_k`` x expert width).  Each is one kernel that reads the 16-bit input and
  writes 8 bits plus one fp32 scale per row (per token or per group of a row alike; a static
  scale too).  Which inputs fuse is a statement about vLLM's compiled graph that the live
  FP8 runs must confirm.
- Sharding over ``tp`` GPUs as in vLLM: see :mod:`latsim.costmodel.shard`.
- Every prefill chunk samples a token: :class:`BatchShape` does not say which chunks finish
  their prompt, so ``lm_head`` and ``sampling`` run for ``prefill_seqs + decode_seqs`` rows.
  This overprices intermediate chunks of a chunked prompt by one ``lm_head`` row each.
- ``allreduce`` counts the two per layer (after attention and after the MLP) plus the one after
  vLLM's vocabulary-parallel embedding; the all-gather of ``lm_head`` logits is left out
  (about 1 % of a large tp>1 decode step).  Bytes are the message bytes.
- Sliding-window layers read at most ``window`` KV entries per sequence; with only aggregates
  available the bound ``min(total, seqs * window)`` is used (exact when every context is
  longer than the window, an overestimate otherwise).
- ``moe_experts`` reads the weights of the experts hit, ``E * (1 - (1 - k/E) ** T)`` for
  ``T`` tokens routed uniformly to ``k`` of ``E`` experts, and does ``T * k`` token-expert
  GEMM rows, plus the always-on shared expert when the model has one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeAlias

import numpy as np
import numpy.typing as npt

from latsim.catalog.models import ModelSpec
from latsim.costmodel.batch import BatchShape
from latsim.costmodel.shard import ACT_DTYPE, ShardSpec, shard_model

Num: TypeAlias = "float | npt.NDArray[np.float64]"
"""A Python number for one step, or an array with one element per step."""

Terms: TypeAlias = "tuple[tuple[int, float], ...]"
"""A linear form: ``(feature index, coefficient)`` pairs, zero coefficients dropped."""

OP_NAMES = (
    "embed", "qkv_proj", "rope", "attn_prefill", "attn_decode", "kv_write", "o_proj", "norm",
    "mlp_up", "act", "mlp_down", "moe_router", "moe_experts", "act_quant", "allreduce", "lm_head", "sampling",
)
OP_KINDS = ("gemm", "attention", "memory", "comm")

FEATURES = (
    "tokens", "prefill_tokens", "prefill_attn_pairs", "prefill_kv_tokens", "decode_seqs",
    "decode_kv_tokens", "sampled_seqs", "experts_hit", "window_attn_pairs", "window_prefill_kv",
    "window_decode_kv", "has_tokens", "has_prefill", "has_decode", "has_sampled",
)
(T, P, PAIRS, PKV, D, DKV, S, HIT, WPAIRS, WPKV, WDKV, HAS_T, HAS_P, HAS_D, HAS_S) = range(len(FEATURES))

VECTOR_DTYPE = "fp32"  # elementwise kernels run on the FP32 vector units, not tensor cores

# Structural counts read off vLLM's kernels (not fitted; calibration absorbs their error).
ROPE_FLOPS_PER_ELEM = 3.0  # x*cos + rotate(x)*sin
NORM_FLOPS_PER_ELEM = 5.0  # residual add, square, sum, scale, weight
NORM_PASSES = 4.0  # fused add+RMSNorm: read x and residual, write both
ACT_FLOPS_PER_ELEM = 5.0  # SiLU/GeLU (~4) and the gating multiply
MOE_KERNELS_PER_LAYER = 4.0  # align/sort tokens, grouped up GEMM, grouped down GEMM, weighted sum
SHARED_KERNELS_PER_LAYER = 5.0  # a shared expert's gate-up and down GEMMs, its gate's GEMM, sigmoid, product
ROUTER_KERNELS_PER_LAYER = 2.0  # gate GEMM, fused softmax+top-k
QUANT_FLOPS_PER_ELEM = 3.0  # |x|, running max, scale and round
QUANT_OUT_BYTES = 1.0  # 8-bit output
SCALE_BYTES = 4.0  # one fp32 scale per row
LOGIT_BYTES = 4.0  # the sampler works on fp32 logits
SAMPLER_PASSES = 6.0  # cast to fp32, temperature, softmax (read+write), exponential race
SAMPLER_FLOPS_PER_LOGIT = 8.0
SAMPLER_KERNELS = 8.0


@dataclass(frozen=True)
class OpCost:
    """One operator's work in one step on one GPU.

    ``flops`` and ``bytes`` are totals over layers; ``launches`` counts kernels; for GEMMs
    ``weight_elems`` is the weight elements read, so ``flops / (2 * weight_elems)`` is the
    GEMM row count M that sets its efficiency.  Fields are arrays in the vectorised variant.
    """

    name: str
    flops: Num
    bytes: Num
    kind: str
    launches: Num = 0.0
    weight_elems: Num = 0.0


@dataclass(frozen=True)
class OpForm:
    """An operator as linear forms over :data:`FEATURES` (see the module note).

    ``compute_dtype`` picks the device peak; ``matrix_elems`` is ``K * N`` of one weight
    matrix on one GPU (GEMM size class), zero for non-GEMMs.
    """

    name: str
    kind: str
    compute_dtype: str
    matrix_elems: float
    flops: Terms
    bytes: Terms
    launches: Terms
    weight_elems: Terms = ()


def _lin(*pairs: tuple[int, float]) -> Terms:
    """Sum coefficients per feature and drop zeros, in feature order."""
    acc: dict[int, float] = {}
    for j, c in pairs:
        acc[j] = acc.get(j, 0.0) + float(c)
    return tuple((j, c) for j, c in sorted(acc.items()) if c != 0.0)


def _gemm(name: str, s: ShardSpec, k: int, n: int, layers: int, *, rows: int = T, active: int = HAS_T,
          dtype: str | None = None, wbytes: float | None = None, kernels: float = 1.0) -> OpForm:
    """``rows x k`` activations times a ``k x n`` weight, in ``layers`` layers."""
    wb = s.weight_bytes if wbytes is None else wbytes
    w = float(k * n * layers)
    return OpForm(
        name, "gemm", dtype or s.gemm_dtype, float(k * n),
        flops=_lin((rows, 2.0 * w)),
        bytes=_lin((active, w * wb), (rows, (k + n) * s.act_bytes * layers)),
        launches=_lin((active, kernels * layers)),
        weight_elems=_lin((active, w)),
    )


def _memory(name: str, flops: Terms, nbytes: Terms, launches: Terms) -> OpForm:
    return OpForm(name, "memory", VECTOR_DTYPE, 0.0, flops, nbytes, launches)


def _embed(s: ShardSpec) -> OpForm:
    return _memory("embed", (), _lin((T, 2.0 * s.hidden * s.act_bytes)), _lin((HAS_T, 1.0)))


def _rope(s: ShardSpec) -> OpForm:
    elems = float((s.q_width + s.kv_width) * s.layers)
    return _memory("rope", _lin((T, ROPE_FLOPS_PER_ELEM * elems)), _lin((T, 2.0 * elems * s.act_bytes)),
                   _lin((HAS_T, float(s.layers))))


def _attention(s: ShardSpec, decode: bool) -> OpForm:
    """FLOPs 4 * head_dim * heads per (query, key) pair; bytes: Q in, O out, K and V reads."""
    full, win = float(s.layers - s.window_layers), float(s.window_layers)
    rows, pairs, wpairs, kv, wkv, active = (D, DKV, WDKV, DKV, WDKV, HAS_D) if decode else (
        P, PAIRS, WPAIRS, PKV, WPKV, HAS_P)
    per_pair = 4.0 * s.q_width
    per_kv = 2.0 * s.kv_width * s.kv_bytes
    return OpForm(
        "attn_decode" if decode else "attn_prefill", "attention", ACT_DTYPE, 0.0,
        flops=_lin((pairs, per_pair * full), (wpairs, per_pair * win)),
        bytes=_lin((rows, 2.0 * s.q_width * s.act_bytes * s.layers),
                   (kv, per_kv * full), (wkv, per_kv * win)),
        launches=_lin((active, float(s.layers))),
    )


def _kv_write(s: ShardSpec) -> OpForm:
    per_tok = 2.0 * s.kv_width * (s.act_bytes + s.kv_bytes) * s.layers
    return _memory("kv_write", (), _lin((T, per_tok)), _lin((HAS_T, float(s.layers))))


def _norm(s: ShardSpec) -> OpForm:
    """Hidden-size RMSNorms (``norms_per_layer`` per layer + final) and Qwen3's q/k norms."""
    elems = float(s.hidden * s.norms)
    qk = float((s.q_width + s.kv_width) * s.layers) if s.qk_norm else 0.0
    return _memory(
        "norm", _lin((T, NORM_FLOPS_PER_ELEM * (elems + qk))),
        _lin((T, s.act_bytes * (NORM_PASSES * elems + 2.0 * qk))),
        _lin((HAS_T, s.norms + (2.0 * s.layers if s.qk_norm else 0.0))),
    )


def _act(s: ShardSpec) -> OpForm:
    """SiLU*mul (gated) or GeLU on every MLP and expert output, per token."""
    out = float(s.mlp_width * s.dense_layers + (s.top_k * s.expert_width + s.shared_width) * s.moe_layers)
    ins = 2.0 if s.gated else 1.0
    kernels = s.dense_layers + s.moe_layers * (1.0 + (s.shared_width > 0))
    return _memory("act", _lin((T, ACT_FLOPS_PER_ELEM * out)), _lin((T, (ins + 1.0) * out * s.act_bytes)),
                   _lin((HAS_T, kernels)))


def _up_width(s: ShardSpec, width: int) -> int:
    return (2 if s.gated else 1) * width


def _moe_experts(s: ShardSpec) -> OpForm:
    h, a, lm = s.hidden, s.act_bytes, float(s.moe_layers)
    expert = float(h * _up_width(s, s.expert_width) + s.expert_width * h)
    shared = float(h * _up_width(s, s.shared_width) + s.shared_width * h)
    act_per_tok = s.top_k * (2 * h + _up_width(s, s.expert_width) + s.expert_width)
    if s.shared_width:
        act_per_tok += 2 * h + _up_width(s, s.shared_width) + s.shared_width
        act_per_tok += 2 * h  # the product of its output with the gate's sigmoid (read, write)
        shared += h  # the gate's weight (hidden x 1)
    return OpForm(
        "moe_experts", "gemm", s.gemm_dtype, float(h * _up_width(s, s.expert_width)),
        flops=_lin((T, 2.0 * (s.top_k * expert + shared) * lm)),
        bytes=_lin((HIT, expert * s.weight_bytes * lm), (HAS_T, shared * s.weight_bytes * lm),
                   (T, act_per_tok * a * lm)),
        launches=_lin((HAS_T, lm * (MOE_KERNELS_PER_LAYER + (SHARED_KERNELS_PER_LAYER if s.shared_width else 0.0)))),
        weight_elems=_lin((HIT, expert * lm), (HAS_T, shared * lm)),
    )


def _act_quant(s: ShardSpec) -> OpForm:
    """Quantization of every W8A8 GEMM input (see the module note); empty for other dtypes."""
    if s.act_quant == "none":
        return _memory("act_quant", (), (), ())
    moe = float(s.moe_layers)
    widths = [(float(s.q_width), float(s.layers))]  # o_proj: the one input no fused kernel produces
    if s.moe_layers:
        widths += [(float(s.hidden), moe), (float(s.top_k * s.expert_width), moe)]  # inside fused MoE
    elems = sum(w * n for w, n in widths)
    rows = sum(n for _, n in widths)
    return _memory("act_quant", _lin((T, QUANT_FLOPS_PER_ELEM * elems)),
                   _lin((T, elems * (s.act_bytes + QUANT_OUT_BYTES) + rows * SCALE_BYTES)), _lin((HAS_T, rows)))


def _allreduce(s: ShardSpec) -> OpForm:
    count = float(2 * s.layers + 1) if s.tp > 1 else 0.0
    return OpForm("allreduce", "comm", ACT_DTYPE, 0.0, (), _lin((T, count * s.hidden * s.act_bytes)),
                  _lin((HAS_T, count)))


def _sampling(s: ShardSpec) -> OpForm:
    return _memory(
        "sampling", _lin((S, SAMPLER_FLOPS_PER_LOGIT * s.vocab)),
        _lin((S, SAMPLER_PASSES * LOGIT_BYTES * s.vocab)), _lin((HAS_S, SAMPLER_KERNELS)),
    )


def op_forms(s: ShardSpec) -> tuple[OpForm, ...]:
    """All operators of one step on one GPU, in :data:`OP_NAMES` order."""
    h, a = s.hidden, s.act_bytes
    return (
        _embed(s),
        _gemm("qkv_proj", s, h, s.q_width + 2 * s.kv_width, s.layers),
        _rope(s),
        _attention(s, decode=False),
        _attention(s, decode=True),
        _kv_write(s),
        _gemm("o_proj", s, s.q_width, h, s.layers),
        _norm(s),
        _gemm("mlp_up", s, h, _up_width(s, s.mlp_width), s.dense_layers),
        _act(s),
        _gemm("mlp_down", s, s.mlp_width, h, s.dense_layers),
        _gemm("moe_router", s, h, s.experts, s.moe_layers, dtype=ACT_DTYPE, wbytes=a,
              kernels=ROUTER_KERNELS_PER_LAYER),
        _moe_experts(s),
        _act_quant(s),
        _allreduce(s),
        _gemm("lm_head", s, h, s.vocab_shard, 1, rows=S, active=HAS_S, dtype=ACT_DTYPE, wbytes=a),
        _sampling(s),
    )


def experts_hit(experts: int, top_k: int, tokens: Num) -> Num:
    """Expected distinct experts hit by ``tokens`` tokens each routed to ``top_k`` of ``experts``."""
    if experts == 0:
        return 0.0
    return experts * (1.0 - (1.0 - top_k / experts) ** tokens)


def _flag(v: Num) -> Num:
    if isinstance(v, np.ndarray):
        return (v > 0).astype(np.float64)
    return 1.0 if v > 0 else 0.0


def _minimum(a: Num, b: Num) -> Num:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.minimum(a, b)
    return a if a <= b else b


def step_features(s: ShardSpec, prefill_tokens: Num, prefill_seqs: Num, prefill_attn_pairs: Num,
                  prefill_kv_tokens: Num, decode_seqs: Num, decode_kv_tokens: Num) -> tuple[Num, ...]:
    """The feature vector (:data:`FEATURES` order) of a step given by :class:`BatchShape` fields.

    Each argument is a number or an array (broadcast together); scalars stay Python numbers
    so that one step costs no numpy call.
    """
    t = prefill_tokens + decode_seqs
    n = prefill_seqs + decode_seqs
    w = s.window
    if w:
        wpairs = _minimum(prefill_attn_pairs, prefill_tokens * w)
        wpkv = _minimum(prefill_kv_tokens, prefill_tokens + prefill_seqs * w)
        wdkv = _minimum(decode_kv_tokens, decode_seqs * w)
    else:
        wpairs = wpkv = wdkv = 0.0
    return (t, prefill_tokens, prefill_attn_pairs, prefill_kv_tokens, decode_seqs, decode_kv_tokens, n,
            experts_hit(s.experts, s.top_k, t), wpairs, wpkv, wdkv,
            _flag(t), _flag(prefill_tokens), _flag(decode_seqs), _flag(n))


def evaluate(terms: Terms, x: Sequence[Num]) -> Num:
    """Value of a linear form at feature vector ``x`` (left-to-right sum, fixed order)."""
    acc: Num = 0.0
    for j, c in terms:
        acc = acc + c * x[j]
    return acc


def _table(forms: Sequence[OpForm], x: Sequence[Num]) -> list[OpCost]:
    return [OpCost(f.name, evaluate(f.flops, x), evaluate(f.bytes, x), f.kind,
                   evaluate(f.launches, x), evaluate(f.weight_elems, x)) for f in forms]


def op_costs(model: ModelSpec, batch: BatchShape, tp: int = 1, weight_dtype: str = "bf16",
             kv_dtype: str = "bf16") -> list[OpCost]:
    """Per-operator work of ``batch`` on one GPU of a ``tp`` group, in :data:`OP_NAMES` order."""
    s = shard_model(model, tp, weight_dtype, kv_dtype)
    x = step_features(s, batch.prefill_tokens, batch.prefill_seqs, batch.prefill_attn_pairs,
                      batch.prefill_kv_tokens, batch.decode_seqs, batch.decode_kv_tokens)
    return _table(op_forms(s), x)


def op_costs_vectorized(model: ModelSpec, *, tp: int = 1, weight_dtype: str = "bf16", kv_dtype: str = "bf16",
                        prefill_tokens: npt.ArrayLike = 0, prefill_seqs: npt.ArrayLike = 0,
                        prefill_attn_pairs: npt.ArrayLike = 0.0, prefill_kv_tokens: npt.ArrayLike = 0,
                        decode_seqs: npt.ArrayLike = 0, decode_kv_tokens: npt.ArrayLike = 0) -> list[OpCost]:
    """:func:`op_costs` for many steps at once: each field an array (or scalar, broadcast).

    Every :class:`OpCost` field is a float64 array with one element per step.
    """
    fields = np.broadcast_arrays(*(np.asarray(v, dtype=np.float64) for v in (
        prefill_tokens, prefill_seqs, prefill_attn_pairs, prefill_kv_tokens, decode_seqs, decode_kv_tokens)))
    s = shard_model(model, tp, weight_dtype, kv_dtype)
    shape = fields[0].shape
    out = []
    for c in _table(op_forms(s), step_features(s, *fields)):
        f, b, n, w = (np.broadcast_to(v, shape).astype(np.float64)
                      for v in (c.flops, c.bytes, c.launches, c.weight_elems))
        out.append(OpCost(c.name, f, b, c.kind, n, w))
    return out
