"""Tabulate the fitted regressors onto dense grids for one deployment (model, TP, dtypes).

Design note.  Predicting with xgboost per operator per step would cost ~100 us or more; a step
must cost a few.  So at load time every operator is evaluated on grids and summed into four
tables that :class:`~latsim.costmodel.calibrated.CalibratedCostModel` interpolates:

- ``per_token``: seconds vs tokens T in the step, summing every operator whose work depends on
  T only (QKV/O/MLP/router GEMMs, MoE experts, norms, rotary, KV write, activation, embedding,
  all-reduce), each times its layer count;
- ``moe_per_token``: the MoE experts' part of ``per_token`` alone (empty for a dense model), so a
  step replayed in a CUDA graph of more tokens can price its padded tokens' experts
  (:meth:`~latsim.costmodel.calibrated.CalibratedCostModel.moe_pad_s`);
- ``per_sample``: seconds vs sampled sequences S (``lm_head`` GEMM and the sampler);
- ``decode``: one decode-attention layer vs (decode sequences D, mean context c);
- ``prefill``: measured/roofline ratio of prefill attention vs (mean chunk q, mean cached
  context c), applied to the step's roofline attention time.  A step of ``n`` > 1 prompts'
  chunks runs them in one FlashAttention call in vLLM; with a profile that says so
  (``profile.json``'s ``prefill_batching: heads``, :data:`PREFILL_BATCHING`) its ratio is that of
  one chunk under ``n`` times the heads, tabulated at :data:`BATCH_COUNTS` (``prefill_batched``),
  whose thread blocks are the same; without it, one chunk's ratio whatever ``n`` (``n`` lone
  calls).  Measured (fifty-seventh session, H100): the batched call over ``n`` = 2-16 chunks of
  128-2,048 tokens under six head shapes at 0.97-1.15 of the heads price (median per shape and
  count, ``data/kernels/h100-prefill-batch``), ``n`` lone calls at 1.3-3.5 x; in the live
  engine's burst steps (``data/traces/h100/s57``) the heads price within 0.75-1.26 x of the
  attention kernels, ``n`` lone calls 1.7-9.8 x.  The H100 and H200 profiles say so since the
  fifty-eighth session (``docs/validation.md``, "The front end's input path, and the
  batched-prefill rule turned on"); the imported ones (A100, L40S, B200, the ``-aic`` imports)
  do not, no live run having checked them.

Resolution (knots): T and S every integer 1..512, then steps of 2 % up to 131072 (beyond,
linear extrapolation: time per token is flat there); D every integer 1..32, then 8 % steps to
4096; c 1..16 then 8 % steps to 2**19; prefill q 1..16 then 10 % steps to 65536, c 0..16 then
10 % steps to 2**19; the batched prefill tables every other one of those q and c knots (their
ratio is as smooth, and each costs a regressor pass at load), interpolated in log2 n between
:data:`BATCH_COUNTS`.  ``tests/calibration`` checks the interpolation against the regressors.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from latsim.catalog.devices import DeviceSpec
from latsim.costmodel.host import MAX_CUDAGRAPH_TOKENS
from latsim.costmodel.ops import FEATURES, OpForm, evaluate, op_forms
from latsim.costmodel.profile.interp import knots
from latsim.costmodel.profile.regressors import Arr, Predictors
from latsim.costmodel.shard import ShardSpec

T_KNOTS = knots(1, 512, 131072, 1.02)
D_KNOTS = knots(1, 32, 4096, 1.08)
C_KNOTS = knots(1, 16, 2**19, 1.08)
Q_KNOTS = knots(1, 16, 65536, 1.10)
PC_KNOTS = knots(0, 16, 2**19, 1.10)
BATCH_Q_KNOTS = Q_KNOTS[::2] + ([] if len(Q_KNOTS) % 2 else Q_KNOTS[-1:])
BATCH_PC_KNOTS = PC_KNOTS[::2] + ([] if len(PC_KNOTS) % 2 else PC_KNOTS[-1:])
BATCH_COUNTS = (2, 4, 8, 16, 32, 64, 128)
"""Prompts' chunks in one step at which the batched prefill ratio is tabulated (more are priced at
the last)."""
PREFILL_BATCHING = ("lone", "heads")
"""``profile.json``'s ``prefill_batching``: how one attention call over several chunks is priced,
as ``n`` lone chunks (the default) or as one chunk under ``n`` times the heads."""
FUSED_AS = "copy"
"""Memory-bound operators are priced on the measured *copy* curve at the operator's bytes per
kernel: vLLM runs RMSNorm, rotary and SiLU x mul as single fused streaming kernels, while the
benchmark's PyTorch-eager versions (``rmsnorm``, ``rotary``, ``silu_mul`` rows, kept for
reference) launch several kernels each and would overprice small steps several-fold."""


@dataclass(frozen=True)
class StepTables:
    """Dense tables of one deployment (see the module note); lists for the scalar path."""

    t_knots: list[float]
    per_token: list[float]
    moe_per_token: list[float]
    per_sample: list[float]
    d_knots: list[float]
    c_knots: list[float]
    decode: list[list[float]]
    q_knots: list[float]
    pc_knots: list[float]
    prefill_ratio: list[list[float]]
    batch_q_knots: list[float]
    batch_pc_knots: list[float]
    prefill_batched: list[list[list[float]]]
    """One ratio grid per :data:`BATCH_COUNTS` count over (``batch_q_knots``, ``batch_pc_knots``);
    empty (and the knots too) where the profile prices a step's chunks as lone calls."""
    notes: tuple[str, ...]


def _at_tokens(form: OpForm, terms_of: str, t: Arr, sampled: bool) -> Arr:
    """A T- (or S-) dependent linear form of ``form`` evaluated on ``t`` (flags set)."""
    x = [np.zeros_like(t) for _ in FEATURES]
    for name in (("sampled_seqs", "has_sampled") if sampled else ("tokens", "has_tokens")):
        idx = FEATURES.index(name)
        x[idx] = t if not name.startswith("has_") else np.ones_like(t)
    return np.asarray(evaluate(getattr(form, terms_of), x), dtype=np.float64)


def _memory_op(p: Predictors, form: OpForm, t: Arr, device: DeviceSpec, sampled: bool = False) -> Arr:
    nbytes, launches = _at_tokens(form, "bytes", t, sampled), _at_tokens(form, "launches", t, sampled)
    kernels = np.maximum(launches, 1.0)
    return kernels * p.memory_s(FUSED_AS, nbytes / kernels, device)


def _act_s(p: Predictors, s: ShardSpec, t: Arr, device: DeviceSpec) -> Arr:
    """SiLU x mul of the dense MLPs (a shared expert's is in :func:`shared_expert_s`, routed
    experts' inside ``moe_s``)."""
    if not (s.mlp_width and s.dense_layers):
        return np.zeros_like(t)
    return s.dense_layers * p.memory_s(FUSED_AS, 6.0 * t * s.mlp_width, device)


SHARED_STREAM_TOKENS = 256
"""vLLM 0.25.1 runs a MoE layer's shared expert on a second CUDA stream, beside the routed experts'
top-k and kernels, in steps of at most this many tokens (``VLLM_SHARED_EXPERTS_STREAM_TOKEN_THRESHOLD``'s
default) on NVIDIA GPUs (``SharedExperts._determine_shared_experts_order``; not on ROCm or Gaudi).  Since
256 is a captured CUDA-graph size, a graph step's padded size is under it exactly when its own is."""


def shared_expert_s(p: Predictors, s: ShardSpec, t: Arr, device: DeviceSpec) -> Arr:
    """Seconds of every MoE layer's shared expert at ``t`` tokens, each kernel on its own (as in a
    step of more than :data:`SHARED_STREAM_TOKENS`): its GEMMs (gate-up, down, the gate's
    ``hidden`` x 1), SiLU x mul, the sigmoid of its gate and the product of its output with it."""
    if not (s.shared_width and s.moe_layers):
        return np.zeros_like(t)
    gemms = sum((g.layers * step_gemm_s(p, g, t, device) for g in step_gemms(s) if g.op.startswith("shared_")),
                np.zeros_like(t))
    silu = p.memory_s(FUSED_AS, 6.0 * t * s.shared_width, device)
    gating = p.memory_s(FUSED_AS, 4.0 * t, device) + p.memory_s(FUSED_AS, 4.0 * t * s.hidden, device)
    return gemms + s.moe_layers * (silu + gating)


def shared_beside_s(s: ShardSpec, t: Arr, device: DeviceSpec) -> Arr:
    """What the shared experts add to a step that runs them on the second stream: the bytes they
    move at the HBM bandwidth plus their FLOPs at the dense peak, every layer.  Beside the routed
    experts (which keep the memory busy) the shared path's kernels lose their own latency, launch
    gaps and partly idle GPU; its traffic and arithmetic stay (both paid in full: an upper bound
    of what it adds).  Measured on the H100 (``data/traces/h100/s53``, Qwen1.5-MoE-A2.7B decode at
    8-256 sequences, the second stream off and on, ``scripts/shared_overlap.py``): the two-stream
    block took 18-23 us a layer longer than the one-stream routed path alone at 8-128 tokens and 36
    at 256, where this gives 21-33 and 45 (the shared path alone took 44-53 us)."""
    up = 2 if s.gated else 1
    # activations a token: gate-up in and out, SiLU x mul in and out, down in and out, the gate's
    # input, the product's two reads and its write (5 x hidden + 2 x up-width + 2 x width)
    weights = float(s.hidden * up * s.shared_width + s.shared_width * s.hidden)
    nbytes = (weights * s.weight_bytes + 2.0 * s.hidden
              + t * s.act_bytes * (5.0 * s.hidden + 2.0 * up * s.shared_width + 2.0 * s.shared_width))
    flops = 2.0 * t * (weights + s.hidden)
    return s.moe_layers * (nbytes / device.hbm_bandwidth + flops / device.flops_for(s.gemm_dtype))


def runs_second_stream(s: ShardSpec, device: DeviceSpec) -> bool:
    """Whether vLLM runs this shard's shared experts on the second stream (up to
    :data:`SHARED_STREAM_TOKENS`): a model with a shared expert on an NVIDIA GPU."""
    return bool(s.shared_width and s.moe_layers) and device.vendor == "nvidia"


def shared_in_step_s(p: Predictors, s: ShardSpec, t: Arr, device: DeviceSpec) -> Arr:
    """The shared experts' seconds in a step of ``t`` tokens: beside the routed experts
    (:func:`shared_beside_s`, never more than alone) up to :data:`SHARED_STREAM_TOKENS` on an
    NVIDIA GPU, alone (:func:`shared_expert_s`) otherwise."""
    alone = shared_expert_s(p, s, t, device)
    if not runs_second_stream(s, device):
        return alone
    return np.where(t <= SHARED_STREAM_TOKENS, np.minimum(alone, shared_beside_s(s, t, device)), alone)


def shared_stream_summary(s: ShardSpec, device: DeviceSpec) -> dict[str, object] | None:
    """How the step prices a shared expert (for ``describe``): ``None`` without one."""
    if not (s.shared_width and s.moe_layers):
        return None
    if not runs_second_stream(s, device):
        return {"priced": "alone (one stream: vLLM's second stream is CUDA-only)"}
    return {"priced": f"beside the routed experts up to {SHARED_STREAM_TOKENS} tokens (vLLM's second CUDA stream): "
                      "its bytes at the HBM bandwidth plus its FLOPs at the peak; alone above",
            "second_stream_tokens": SHARED_STREAM_TOKENS}


class StepGemm(NamedTuple):
    """One T-row GEMM of a step on one GPU: its operator name, shape, layer count and kernel."""

    op: str
    k: int
    n: int
    layers: int
    dtype: str
    """The compute dtype the kernel runs in."""
    weight_bytes: float
    w4a16: bool
    """Whether it runs the W4A16 kernel."""
    bnb: bool = False
    """Whether it runs bitsandbytes' 4-bit matmul (:mod:`latsim.costmodel.bnb`)."""


def step_gemms(s: ShardSpec) -> list[StepGemm]:
    """Every T-row GEMM of one GPU (:class:`StepGemm`): the linear layers in the checkpoint's
    quantization, the MoE router and a shared expert's gate (``hidden`` x 1, replicated, never
    quantized) in bf16.  The LM head is a per-sample GEMM, not listed.  Under bitsandbytes a fused
    layer is one call per shard (q, k, v; gate, up), as vLLM makes them."""
    up = 2 if s.gated else 1
    quant = (s.gemm_dtype, s.weight_bytes, s.w4a16, s.bnb)
    if s.bnb:
        out = [StepGemm(op, s.hidden, width, s.layers, *quant)
               for op, width in (("q", s.q_width), ("k", s.kv_width), ("v", s.kv_width))]
    else:
        out = [StepGemm("qkv", s.hidden, s.q_width + 2 * s.kv_width, s.layers, *quant)]
    out.append(StepGemm("o", s.q_width, s.hidden, s.layers, *quant))
    if s.mlp_width and s.dense_layers:
        out += _mlp("", s.hidden, s.mlp_width, up, s.dense_layers, quant, s.bnb)
    if s.experts and s.moe_layers:
        out.append(StepGemm("router", s.hidden, s.experts, s.moe_layers, "bf16", 2.0, False))
    if s.shared_width and s.moe_layers:
        out += _mlp("shared_", s.hidden, s.shared_width, up, s.moe_layers, quant, s.bnb)
        out.append(StepGemm("shared_expert_gate", s.hidden, 1, s.moe_layers, "bf16", 2.0, False))
    return out


def _mlp(prefix: str, hidden: int, width: int, up: int, layers: int, quant: tuple[str, float, bool, bool],
         split: bool) -> list[StepGemm]:
    """An MLP's GEMMs: gate and up fused (``split``: one call each; ``up`` 1: no gate) and down."""
    if not split:
        ins = [StepGemm(f"{prefix}gate_up", hidden, up * width, layers, *quant)]
    else:
        ins = [StepGemm(f"{prefix}{name}", hidden, width, layers, *quant) for name in ("gate", "up")[2 - up:]]
    return [*ins, StepGemm(f"{prefix}down", width, hidden, layers, *quant)]


def step_gemm_s(p: Predictors, g: StepGemm, t: Arr, device: DeviceSpec) -> Arr:
    """One call of ``g`` at ``t`` rows on its kernel (bitsandbytes', W4A16 or the compute dtype's)."""
    if g.bnb:
        return bnb_gemm_s(p, g, t, device)
    return p.gemm_s(t, g.k, g.n, device, g.dtype, g.weight_bytes, w4a16=g.w4a16)


def bnb_gemm_s(p: Predictors, g: StepGemm, t: Arr, device: DeviceSpec) -> Arr:
    """One bitsandbytes 4-bit shard at ``t`` rows (:mod:`latsim.costmodel.bnb`): its own kernel
    (the bf16 curve on the 4-bit roofline) up to the rows its dispatch gives it on ``device``,
    beyond: the weight dequantized to bf16 (read packed, write bf16: the copy curve at those bytes)
    and a bf16 GEMM."""
    from latsim.costmodel.bnb import own_kernel_rows

    own = p.gemm_s(t, g.k, g.n, device, "bf16", g.weight_bytes)
    limit = own_kernel_rows(g.k, g.n, device)
    if limit is None:
        return own
    dequant = p.memory_s(FUSED_AS, np.full_like(t, g.k * g.n * (g.weight_bytes + 2.0)), device)
    return np.where(t <= limit, own, dequant + p.gemm_s(t, g.k, g.n, device, "bf16", 2.0))


def per_token(p: Predictors, s: ShardSpec, device: DeviceSpec, t: Arr,
              experts: Arr | None = None) -> tuple[Arr, list[str]]:
    """Seconds of every T-dependent operator at ``t`` tokens, and notes on fallbacks; ``experts``:
    the routed experts' part already priced (:func:`moe_experts_s`), else priced here."""
    notes: list[str] = []
    total = np.zeros_like(t)
    for g in step_gemms(s):
        if not g.op.startswith("shared_"):  # the shared expert's: shared_in_step_s
            total = total + g.layers * step_gemm_s(p, g, t, device)
    total = total + (moe_experts_s(p, s, device, t) if experts is None else experts)
    forms = {f.name: f for f in op_forms(s)}
    for name in ("embed", "rope", "kv_write", "norm") + (("act_quant",) if s.act_quant != "none" else ()):
        total = total + _memory_op(p, forms[name], t, device)
    total = total + _act_s(p, s, t, device) + shared_in_step_s(p, s, t, device)
    return total + _allreduce(p, s, t, device, notes), notes


def moe_experts_s(p: Predictors, s: ShardSpec, device: DeviceSpec, t: Arr) -> Arr:
    """Seconds of the routed experts of every MoE layer at ``t`` tokens (zeros for a dense model)."""
    if not (s.experts and s.moe_layers):
        return np.zeros_like(t)
    shape = (s.experts, s.top_k, s.hidden, s.expert_width)
    return np.asarray(s.moe_layers * p.moe_s(t, shape, device, s.weight_bytes), dtype=np.float64)


CUSTOM_AR_MAX_BYTES = 8 * 1024 * 1024
"""The largest message vLLM 0.25.1's custom all-reduce takes (``CustomAllreduce``'s default ``max_size``,
8 MiB, kept where torch's symmetric memory is off); larger ones go to NCCL (or, with NVLink
multicast on, to symmetric memory up to 64 MiB: priced as NCCL here)."""
CUSTOM_AR_WORLDS = (2, 4, 6, 8)
"""World sizes vLLM's custom all-reduce supports (``CustomAllreduce._SUPPORTED_WORLD_SIZES``)."""


def custom_allreduce(tp: int, device: DeviceSpec) -> bool:
    """Whether vLLM runs its custom all-reduce over ``tp`` GPUs of ``device``: a supported world
    size, and two GPUs or all of them linked to each other (NVLink, AMD's Infinity Fabric; vLLM
    turns it off for more than two PCIe-only GPUs)."""
    linked = device.interconnect.startswith("nvlink") or device.interconnect == "infinity-fabric"
    return tp in CUSTOM_AR_WORLDS and (tp == 2 or linked)


def _allreduce(p: Predictors, s: ShardSpec, t: Arr, device: DeviceSpec, notes: list[str]) -> Arr:
    """All-reduce seconds of a step of ``t`` tokens (two per layer plus one after the embedding).

    Steps of at most :data:`~latsim.costmodel.host.MAX_CUDAGRAPH_TOKENS` tokens replay a CUDA
    graph in vLLM, which then runs its custom all-reduce: the profile's in-graph tables when it
    has them, else the roofline's all-reduce (its latency is the custom kernel's,
    ``data/costmodel/roofline.yaml``).  Larger steps run eagerly: the profile's eager table, else
    the ring formula.  vLLM 0.25.1 tries its custom all-reduce in eager steps too
    (:func:`custom_allreduce`), for messages under :data:`CUSTOM_AR_MAX_BYTES`: where the eager
    table timed NCCL (the H200's own profile; an imported profile's source timed the custom
    kernel eagerly), those messages take the custom price instead, plus the copy of the input into
    the kernel's registered buffer (read and write at the HBM bandwidth).
    """
    if s.tp == 1:
        return np.zeros_like(t)
    count, nbytes = 2.0 * s.layers + 1.0, t * s.hidden * s.act_bytes
    custom = custom_allreduce(s.tp, device)
    in_graph = p.allreduce_s(nbytes, s.tp, graph=True) if p.has_graph_allreduce(s.tp) else None
    if in_graph is None:
        notes.append(f"all-reduce over {s.tp} GPUs inside CUDA graphs not measured: roofline (custom all-reduce)")
        in_graph = _roofline_allreduce(nbytes, s.tp, device)
    eager = p.allreduce_s(nbytes, s.tp)
    if eager is None:
        notes.append(f"eager all-reduce over {s.tp} GPUs not measured: ring formula on the catalog's interconnect "
                     "bandwidth" + (f" past {CUSTOM_AR_MAX_BYTES >> 20} MiB" if custom else ""))
        eager = 2.0 * (s.tp - 1) / s.tp * nbytes / device.interconnect_bw
    if custom and not p.eager_allreduce_is_custom():
        eager = np.where(nbytes < CUSTOM_AR_MAX_BYTES, in_graph + 2.0 * nbytes / device.hbm_bandwidth, eager)
    return count * np.where(t <= MAX_CUDAGRAPH_TOKENS, in_graph, eager)


def _roofline_allreduce(nbytes: Arr, tp: int, device: DeviceSpec) -> Arr:
    from latsim.costmodel.roofline import allreduce_per_byte_s
    from latsim.costmodel.roofline_params import default_roofline_params

    params = default_roofline_params()
    per_byte = allreduce_per_byte_s(tp, device, params)
    return np.asarray(params.allreduce_latency_s + nbytes * per_byte, dtype=np.float64)


def per_sample(p: Predictors, s: ShardSpec, device: DeviceSpec, t: Arr) -> Arr:
    forms = {f.name: f for f in op_forms(s)}
    lm = p.gemm_s(t, s.hidden, s.vocab_shard, device, "bf16", 2.0)
    return lm + _memory_op(p, forms["sampling"], t, device, sampled=True)


def heads_of(s: ShardSpec, head_dim: int) -> tuple[int, int, int]:
    """(query heads, KV heads, head size) on one GPU."""
    return s.q_width // head_dim, s.kv_width // head_dim, head_dim


def decode_grid(p: Predictors, s: ShardSpec, device: DeviceSpec, heads: tuple[int, int, int]) -> Arr:
    d, c = np.meshgrid(np.asarray(D_KNOTS), np.asarray(C_KNOTS), indexing="ij")
    return p.attn_decode_s(d.ravel(), c.ravel(), heads, s.kv_bytes, device).reshape(d.shape)


def prefill_grid(p: Predictors, device: DeviceSpec, heads: tuple[int, int, int], kv_bytes: float = 2.0,
                 q_knots: list[float] = Q_KNOTS, pc_knots: list[float] = PC_KNOTS) -> Arr:
    """One prefill chunk's ratio under ``heads`` over (``q_knots``, ``pc_knots``)."""
    q, c = np.meshgrid(np.asarray(q_knots), np.asarray(pc_knots), indexing="ij")
    return p.attn_prefill_ratio(q.ravel(), c.ravel(), heads, device, kv_bytes).reshape(q.shape)


def batched_prefill_grids(p: Predictors, device: DeviceSpec, heads: tuple[int, int, int],
                          kv_bytes: float = 2.0) -> list[Arr]:
    """The prefill ratio of ``n`` chunks in one call, one grid per :data:`BATCH_COUNTS` count: one
    chunk's ratio under ``n`` times the query and KV heads, on the batched knots."""
    hq, hkv, d = heads
    return [prefill_grid(p, device, (n * hq, n * hkv, d), kv_bytes, BATCH_Q_KNOTS, BATCH_PC_KNOTS)
            for n in BATCH_COUNTS]


def prefill_batching(p: Predictors) -> str:
    """The profile's ``prefill_batching`` (:data:`PREFILL_BATCHING`; ``lone`` when absent);
    ValueError naming the value otherwise."""
    rule = str(p.profile.get("prefill_batching", "lone"))
    if rule not in PREFILL_BATCHING:
        raise ValueError(f"{p.folder}/profile.json: prefill_batching={rule!r}; accepted: {', '.join(PREFILL_BATCHING)}")
    return rule


def build_tables(p: Predictors, s: ShardSpec, device: DeviceSpec, head_dim: int) -> StepTables:
    """Every table of one deployment; ValueError when the profile lacks a needed family."""
    if s.experts and "moe" not in p.boosters:
        raise ValueError(f"{p.folder}: the model is a mixture of experts but the profile has no MoE fit")
    t, heads = np.asarray(T_KNOTS), heads_of(s, head_dim)
    batched = prefill_batching(p) == "heads"
    experts = moe_experts_s(p, s, device, t)
    tok, notes = per_token(p, s, device, t, experts)
    return StepTables(
        t_knots=list(T_KNOTS), per_token=tok.tolist(),
        moe_per_token=experts.tolist() if s.experts and s.moe_layers else [],
        per_sample=per_sample(p, s, device, t).tolist(),
        d_knots=list(D_KNOTS), c_knots=list(C_KNOTS), decode=decode_grid(p, s, device, heads).tolist(),
        q_knots=list(Q_KNOTS), pc_knots=list(PC_KNOTS),
        prefill_ratio=prefill_grid(p, device, heads, s.kv_bytes).tolist(),
        batch_q_knots=list(BATCH_Q_KNOTS) if batched else [], batch_pc_knots=list(BATCH_PC_KNOTS) if batched else [],
        prefill_batched=[g.tolist() for g in batched_prefill_grids(p, device, heads, s.kv_bytes)] if batched else [],
        notes=tuple(notes),
    )
