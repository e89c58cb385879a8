"""Calibrated cost model: per-operator regressors fitted on microbenchmarks of the GPU.

Design note on the hot path.  Loading (:func:`load_calibrated`) tabulates the regressors of a
profile for this deployment (:mod:`latsim.costmodel.profile.tabulate`): seconds vs step tokens T,
vs sampled sequences S, decode attention vs (D sequences, mean context), and a prefill
attention efficiency grid.  A step is then

    per_token(T) + per_sample(S) + prefill attention + decode attention + fixed costs,

added left to right in that order, each table read by piecewise-linear interpolation
(:mod:`latsim.costmodel.profile.interp`).  ``decode_run`` keeps T, S and D as Python numbers and
only the decode context as an array, and runs the same IEEE operations, so element ``i`` equals
``step_time`` of step ``i`` bitwise.  Fixed costs: CUDA-graph replay plus a per-kernel gap
(both measured; kernel counts from :mod:`latsim.costmodel.ops`), and the engine's CPU time per
step and per sequence, parameters that live vLLM measurements will fit (until then the roofline
defaults, with their provenance).

``kind="transferred"``: the regressors of another GPU's profile applied to this device's
roofline (efficiency curves carried over); lower confidence, and ``describe()`` says so.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import asdict, dataclass
from math import log2
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from latsim.catalog.devices import DeviceSpec
from latsim.catalog.models import ModelSpec
from latsim.catalog.sizing import param_breakdown
from latsim.costmodel.batch import BatchShape, run_squares
from latsim.costmodel.ops import (
    DKV,
    HAS_T,
    PAIRS,
    PKV,
    WDKV,
    WPAIRS,
    WPKV,
    S,
    T,
    Terms,
    evaluate,
    op_forms,
    step_features,
)
from latsim.costmodel.power import PowerCap, load_power_cap
from latsim.costmodel.profile.interp import bilinear, bilinear_vec, interp1
from latsim.costmodel.profile.tabulate import BATCH_COUNTS, StepTables, shared_stream_summary
from latsim.costmodel.shard import ShardSpec, shard_model
from latsim.costmodel.spread import DecodeSpread, SpreadFactor, load_decode_spread

KINDS = ("calibrated", "transferred")
SIXTEEN_BIT = ("bf16", "fp16")


@dataclass(frozen=True)
class FixedCosts:
    """Seconds per step outside the operators (see the module note); ``source`` per field."""

    graph_base_s: float
    per_kernel_s: float
    step_s: float
    per_seq_s: float
    source: tuple[tuple[str, str], ...] = ()


def _launch_terms(shard: ShardSpec) -> Terms:
    acc: dict[int, float] = {}
    for f in op_forms(shard):
        for j, c in f.launches:
            acc[j] = acc.get(j, 0.0) + c
    return tuple(sorted(acc.items()))


class CalibratedCostModel:
    """Prices steps from tabulated regressors; implements the StepPricer protocol.

    Build with :func:`load_calibrated` (reads the profile); the constructor only stores.
    """

    def __init__(self, model: ModelSpec, device: DeviceSpec, shard: ShardSpec, tables: StepTables,
                 fixed: FixedCosts, *, weight_dtype: str, kv_dtype: str, kind: str = "calibrated",
                 source: dict[str, Any] | None = None) -> None:
        if kind not in KINDS:
            raise ValueError(f"kind={kind!r}; accepted: {', '.join(KINDS)}")
        self.kind, self.model, self.device, self.shard = kind, model, device, shard
        self.tables, self.fixed = tables, fixed
        self.tp, self.weight_dtype, self.kv_dtype = shard.tp, weight_dtype, kv_dtype
        self.source = source or {}
        self.label = kind
        self.power: PowerCap | None = None
        """The GPU's power-cap terms (:mod:`latsim.costmodel.power`), set by :func:`load_calibrated`."""
        self._kv_heads = max(1, shard.kv_width // model.head_dim)
        self._spread: DecodeSpread | None = None
        self._factor: SpreadFactor | None = None
        self._launches = _launch_terms(shard)
        peak = device.flops_for("bf16")
        self._token_tflop = 2e-12 * param_breakdown(model).linear_active / shard.tp
        self._peak_weight = peak / device.flops_for(shard.gemm_dtype)
        self._full = float(shard.layers - shard.window_layers)
        self._win = float(shard.window_layers)
        self._decode_rows = np.asarray(tables.decode, dtype=np.float64)
        self._c_knots = np.asarray(tables.c_knots, dtype=np.float64)
        self._pair_s = 4.0 * shard.q_width / peak
        self._q_byte_s = (shard.kv_bytes + 2.0) * shard.q_width / device.hbm_bandwidth
        self._kv_byte_s = 2.0 * shard.kv_width * shard.kv_bytes / device.hbm_bandwidth

    @property
    def spread(self) -> DecodeSpread | None:
        """Decode attention's price over spread contexts (:mod:`latsim.costmodel.spread`), set by
        :func:`load_calibrated` when the profile has it (None: a batch priced at its mean context)."""
        return self._spread

    @spread.setter
    def spread(self, value: DecodeSpread | None) -> None:
        self._spread = value
        self._factor = None if value is None else value.bind(self._kv_heads)

    def _features(self, b: BatchShape) -> tuple[Any, ...]:
        return step_features(self.shard, b.prefill_tokens, b.prefill_seqs, b.prefill_attn_pairs,
                             b.prefill_kv_tokens, b.decode_seqs, b.decode_kv_tokens)

    def _head(self, tokens: float, sampled: float) -> float:
        """per_token(T) + per_sample(S), the part a decode run keeps constant."""
        tb = self.tables
        total = interp1(tb.t_knots, tb.per_token, tokens) if tokens > 0 else 0.0
        return total + (interp1(tb.t_knots, tb.per_sample, sampled) if sampled > 0 else 0.0)

    def _prefill(self, b: BatchShape, x: tuple[Any, ...]) -> float:
        if b.prefill_tokens <= 0:
            return 0.0
        t = self._prefill_layers(b, x[PAIRS], x[PKV]) * self._full
        return t + self._prefill_layers(b, x[WPAIRS], x[WPKV]) * self._win if self._win else t

    def _prefill_layers(self, b: BatchShape, pairs: float, kv: float) -> float:
        """One layer: roofline of the aggregate chunks times the tabulated inefficiency of one call
        over ``n`` chunks of their mean size and context (:meth:`_prefill_ratio`)."""
        n, p = b.prefill_seqs, b.prefill_tokens
        ctx = (kv - p) / n
        ratio = self._prefill_ratio(n, p / n, ctx if ctx > 0.0 else 0.0)
        compute, memory = pairs * self._pair_s, p * self._q_byte_s + kv * self._kv_byte_s
        return (compute if compute > memory else memory) * ratio

    def _prefill_ratio(self, n: int, q: float, ctx: float) -> float:
        """measured / roofline of one FlashAttention call over ``n`` chunks of ``q`` tokens after
        ``ctx`` cached: one chunk's ratio for ``n`` = 1 or where the profile prices chunks as lone
        calls, else the batched tables (one chunk under ``n`` times the heads,
        :mod:`~latsim.costmodel.profile.tabulate`), linear in log2 ``n`` between their counts and
        the last one's past them."""
        tb = self.tables
        if n <= 1 or not tb.prefill_batched:
            return bilinear(tb.q_knots, tb.pc_knots, tb.prefill_ratio, q, ctx)
        counts = BATCH_COUNTS
        i = bisect_right(counts, n) - 1
        lo = bilinear(tb.batch_q_knots, tb.batch_pc_knots, tb.prefill_batched[i], q, ctx)
        if i + 1 >= len(counts) or n == counts[i]:
            return lo
        hi = bilinear(tb.batch_q_knots, tb.batch_pc_knots, tb.prefill_batched[i + 1], q, ctx)
        w = log2(n / counts[i]) / log2(counts[i + 1] / counts[i])
        return lo + w * (hi - lo)

    def _decode(self, seqs: int, kv: float, wkv: float, kv_sq: int = 0) -> float:
        """Decode attention over all layers for one step (scalar twin of :meth:`_decode_vec`):
        the table at the mean context, times the spread factor when the profile has one.  Layers
        under a sliding window read at most the window: their contexts' squares are taken to
        shrink with their mean (``kv_sq x (wkv / kv)**2``, an approximation: the spread of
        clipped contexts is not known from the sums)."""
        tb = self.tables
        c = kv / seqs
        t = bilinear(tb.d_knots, tb.c_knots, tb.decode, seqs, c if c > 1.0 else 1.0) * self._full
        spread = self._factor
        if spread is not None and kv_sq > 0:
            t = t * spread.factor(seqs, kv, float(kv_sq))
        if not self._win:
            return t
        cw = wkv / seqs
        w = bilinear(tb.d_knots, tb.c_knots, tb.decode, seqs, cw if cw > 1.0 else 1.0) * self._win
        if spread is not None and kv_sq > 0 and kv > 0.0:
            shrink = wkv / kv
            w = w * spread.factor(seqs, wkv, float(kv_sq) * shrink * shrink)
        return t + w

    def _decode_vec(self, seqs: int, kv: npt.NDArray[np.float64], wkv: Any,
                    kv_sq: npt.NDArray[np.float64] | None = None) -> npt.NDArray[np.float64]:
        """:meth:`_decode` for arrays of contexts: the same operations, element by element."""
        knots_d, knots_c, rows = self.tables.d_knots, self._c_knots, self._decode_rows
        t = bilinear_vec(knots_d, knots_c, rows, seqs, np.maximum(kv / seqs, 1.0)) * self._full
        spread = self._factor if kv_sq is not None else None
        if spread is not None:  # unknown squares (0) give a factor of exactly 1.0, as in _decode
            assert kv_sq is not None
            t = t * spread.factor_vec(seqs, kv, kv_sq)
        if not self._win:
            return t
        wkv = np.asarray(wkv, dtype=np.float64)
        cw = np.maximum(wkv / seqs, 1.0)
        w = bilinear_vec(knots_d, knots_c, rows, seqs, cw) * self._win
        if spread is not None:
            assert kv_sq is not None
            shrink = np.where(kv > 0.0, wkv / np.where(kv > 0.0, kv, 1.0), 0.0)
            w = w * spread.factor_vec(seqs, wkv, kv_sq * shrink * shrink)
        out: npt.NDArray[np.float64] = t + w
        return out

    def _fixed_s(self, x: tuple[Any, ...]) -> float:
        f = self.fixed
        kernels = float(evaluate(self._launches, x))
        return (f.graph_base_s + f.step_s) * x[HAS_T] + kernels * f.per_kernel_s + f.per_seq_s * x[S]

    def step_time(self, batch: BatchShape) -> float:
        """Seconds for one engine step; 0.0 for an empty batch."""
        x = self._features(batch)
        if x[T] <= 0:
            return 0.0
        total = self._head(float(x[T]), float(x[S]))
        total = total + self._prefill(batch, x)
        d = batch.decode_seqs
        total = total + (self._decode(d, float(x[DKV]), float(x[WDKV]), batch.decode_kv_sq) if d > 0 else 0.0)
        return float(total + self._fixed_s(x))

    def moe_pad_s(self, tokens: int, padded: int) -> float:
        """Seconds the routed experts of a step of ``tokens`` tokens add when it replays the CUDA
        graph captured for ``padded`` tokens (vLLM pads the graph's inputs and routes the padding
        too): their price at ``padded`` less at ``tokens``; 0.0 for a dense model or no padding.
        Traced (``data/traces/h200/s26``, ``data/traces/h100/s48``): Qwen3-30B-A3B's decode steps of
        5 and 11 sequences took the kernel time of 8 and 16."""
        table = self.tables.moe_per_token
        if not table or padded <= tokens or tokens <= 0:
            return 0.0
        knots = self.tables.t_knots
        return interp1(knots, table, float(padded)) - interp1(knots, table, float(tokens))

    def attention_s(self, batch: BatchShape) -> float:
        """The attention part of :meth:`step_time`: prefill attention over the step's chunks plus
        decode attention over its decode rows (0.0 for an empty step).  The rest of the price is
        the step's GEMMs, per-token operators and fixed costs."""
        x = self._features(batch)
        if x[T] <= 0:
            return 0.0
        d = batch.decode_seqs
        return self._prefill(batch, x) + (self._decode(d, float(x[DKV]), float(x[WDKV]), batch.decode_kv_sq)
                                          if d > 0 else 0.0)

    def heavy_parts(self, batch: BatchShape, light: bool = False) -> tuple[float, float, float]:
        """``(heavy seconds, full-clock ratio, capped ratio)`` of a step (:mod:`latsim.costmodel.power`):
        the seconds of its price the power data covers (its GEMMs and per-token operators when
        their GEMM class has ratios, its prefill attention when the KV cache is 16-bit) and their
        ratios, averaged by seconds over the two (``light``: the capped ratio a GEMM class has for
        steps under the heavy threshold, when measured); ``(0.0, 1.0, 1.0)`` when none is covered."""
        cap = self.power
        if cap is None:
            return 0.0, 1.0, 1.0
        x = self._features(batch)
        gemm_r = cap.ratios(self.gemm_class, light)
        attn_r = cap.attention_ratios() if self.kv_dtype in SIXTEEN_BIT else None
        gemm = interp1(self.tables.t_knots, self.tables.per_token, float(x[T])) if gemm_r and x[T] > 0 else 0.0
        attn = self._prefill(batch, x) if attn_r else 0.0
        heavy = gemm + attn
        if heavy <= 0.0:
            return 0.0, 1.0, 1.0
        if attn <= 0.0 and gemm_r:
            return heavy, gemm_r[0], gemm_r[1]
        if attn_r and (gemm <= 0.0 or gemm_r == attn_r):
            return heavy, attn_r[0], attn_r[1]
        assert gemm_r and attn_r
        return (heavy, (gemm * gemm_r[0] + attn * attn_r[0]) / heavy, (gemm * gemm_r[1] + attn * attn_r[1]) / heavy)

    @property
    def tflop_per_token(self) -> float:
        """Tensor work per token of each GPU's linear layers in bf16-equivalent TFLOP, as the
        power model's tensor-rate state counts it: weighted by the power data's factor for this
        GEMM class (:meth:`~latsim.costmodel.power.PowerCap.rate_weight`, measured for 4-bit
        weights), else by bf16's peak over the class's (fp8: half)."""
        weight = None if self.power is None else self.power.rate_weight(self.gemm_class)
        return self._token_tflop * (self._peak_weight if weight is None else weight)

    def decode_tflops(self, batch: BatchShape) -> float:
        """The sustained tensor rate (bf16-equivalent TFLOP/s per GPU) of ``batch``'s decoders run
        on their own: :attr:`tflop_per_token` x the decode sequences over the price of that
        decode-only step (0.0 without decoders); the power model reads it
        (:mod:`latsim.costmodel.power`)."""
        if batch.decode_seqs <= 0:
            return 0.0
        alone = BatchShape(decode_seqs=batch.decode_seqs, decode_kv_tokens=batch.decode_kv_tokens,
                           decode_kv_sq=batch.decode_kv_sq)
        price = self.step_time(alone)
        return self.tflop_per_token * batch.decode_seqs / price if price > 0.0 else 0.0

    @property
    def gemm_class(self) -> str:
        """The power data's class of this deployment's linear layers: ``bf16`` (16-bit weights),
        ``int4`` (vLLM's W4A16 kernels), ``fp8`` (W8A8 fp8), else the weight dtype (not covered)."""
        if self.weight_dtype in SIXTEEN_BIT:
            return "bf16"
        if self.shard.w4a16:
            return "int4"
        return "fp8" if self.shard.gemm_dtype == "fp8" else f"other-{self.weight_dtype}"

    def decode_run(self, seqs: int, kv_tokens: int, steps: int, kv_sq: int = 0) -> npt.NDArray[np.float64]:
        """Times of ``steps`` decode-only steps (context ``kv_tokens + i * seqs``, squared contexts
        from ``kv_sq``: :func:`~latsim.costmodel.batch.run_squares`); element ``i`` equals
        ``step_time`` of that step bitwise (same operations, see the module note)."""
        for name, value in (("seqs", seqs), ("kv_tokens", kv_tokens), ("steps", steps)):
            if value < 0:
                raise ValueError(f"decode_run: {name}={value} must be >= 0")
        if seqs == 0:
            return np.zeros(steps, dtype=np.float64)
        context = kv_tokens + np.arange(steps, dtype=np.float64) * seqs
        x = step_features(self.shard, 0, 0, 0.0, 0, seqs, context)
        scalar = step_features(self.shard, 0, 0, 0.0, 0, seqs, kv_tokens)
        total = self._head(float(seqs), float(seqs))
        total = total + 0.0
        squares = run_squares(seqs, kv_tokens, kv_sq, steps) if kv_sq > 0 else None
        vec = total + self._decode_vec(seqs, context, x[WDKV], squares)
        return np.asarray(vec + self._fixed_s(scalar), dtype=np.float64)

    def describe(self) -> dict[str, object]:
        """What priced the prediction: kind, deployment, profile provenance and resolution."""
        out: dict[str, object] = {
            "kind": self.kind, "model": self.model.name, "device": self.device.name, "tp": self.tp,
            "weight_dtype": self.weight_dtype, "kv_dtype": self.kv_dtype, "source": self.source,
            "fixed_costs": {k: getattr(self.fixed, k) for k in ("graph_base_s", "per_kernel_s", "step_s", "per_seq_s")},
            "fixed_cost_sources": dict(self.fixed.source), "notes": list(self.tables.notes),
            "shared_experts": shared_stream_summary(self.shard, self.device),
            "power_cap": None if self.power is None else asdict(self.power),
            "decode_spread": None if self.spread is None else {"source": self.spread.source,
                                                                "cv_full": self.spread.cv_full},
            "resolution": "tables: T/S every integer to 512 then 2 % steps; decode 8 % steps in D and "
                          "context; prefill 10 % steps (latsim.costmodel.profile.tabulate)",
        }
        if self.kind == "transferred":
            out["confidence"] = (f"lower: efficiency curves measured on {self.source.get('gpu_name')!r} applied "
                                 f"to the {self.device.name} roofline; no measurement on this GPU")
        return out


def load_calibrated(model: ModelSpec, device: DeviceSpec, tp: int = 1, weight_dtype: str = "bf16",
                    kv_dtype: str = "bf16", profile: Path | None = None, kind: str = "calibrated",
                    step_s: float | None = None, per_seq_s: float | None = None) -> CalibratedCostModel:
    """Load a fitted profile and tabulate it for this deployment.

    ``profile=None`` uses the shipped profile of ``device`` (``kind="calibrated"``) or, for
    ``kind="transferred"``, the first shipped profile of another GPU.  ValueError when none
    fits, or when a ``calibrated`` profile was measured on a different GPU.
    """
    from latsim.costmodel.profile.origin import label
    from latsim.costmodel.profile.regressors import describe_source, load_predictors
    from latsim.costmodel.profile.store import check_device, has_profile, shipped_profiles
    from latsim.costmodel.profile.tabulate import build_tables
    from latsim.costmodel.roofline_params import default_roofline_params

    if kind not in KINDS:
        raise ValueError(f"kind={kind!r}; accepted: {', '.join(KINDS)}")
    if profile is None:
        shipped = shipped_profiles()
        found = has_profile(device.name, device.aliases) if kind == "calibrated" else (shipped[0] if shipped else None)
        if found is None:
            raise ValueError(f"no shipped calibration profile for {kind} model of device {device.name!r}")
        profile = found
    pred = load_predictors(profile)
    if kind == "calibrated":
        check_device(pred.profile, Path(profile), device.name, device.aliases)
    shard = shard_model(model, tp, weight_dtype, kv_dtype)
    params = default_roofline_params()
    over = pred.overheads or {}
    fixed = FixedCosts(
        graph_base_s=float(over.get("graph_base_s", 0.0)),
        per_kernel_s=float(over.get("graph_per_kernel_s", params.kernel_launch_s)),
        step_s=params.step_overhead_s if step_s is None else step_s,
        per_seq_s=params.seq_overhead_s if per_seq_s is None else per_seq_s,
        source=(("graph", f"{profile}/overheads.json" if over else f"{params.source} (no overhead data)"),
                ("step_s", "argument" if step_s is not None else f"{params.source} (assumed; to be fitted live)"),
                ("per_seq_s", "argument" if per_seq_s is not None else f"{params.source} (assumed)")),
    )
    cm = CalibratedCostModel(model, device, shard, build_tables(pred, shard, device, model.head_dim), fixed,
                             weight_dtype=weight_dtype, kv_dtype=kv_dtype, kind=kind, source=describe_source(pred))
    cm.label = label(kind, pred.profile)
    cm.power = load_power_cap(Path(profile)) if kind == "calibrated" else None
    cm.spread = load_decode_spread(Path(profile)) if kind == "calibrated" else None
    return cm
