"""Roofline cost model: each operator takes the slower of its compute and memory roofs.

Design note on the hot path.  ``step_time`` is called once per simulated engine step (about
50k times per 20k requests).  At construction every operator of :mod:`latsim.costmodel.ops`
is turned into three linear forms over the step's feature vector, already in seconds:

- ``compute``: FLOPs / (peak * eff) -- for GEMMs ``(FLOPs + 2 m_half W) / (peak * eff_max)``,
  which equals FLOPs / (peak * eff_max * M / (M + m_half)) with ``M = FLOPs / (2 W)`` rows
  and ``W`` weight elements read, without dividing by M (no special case for empty ops);
- ``memory``: bytes / (bandwidth * eff);
- ``fixed``: kernel launches (or all-reduce latency and link time), added, not overlapped.

A step is ``sum over ops of max(compute, memory) + fixed``, plus a step-overhead pseudo-op;
the hot path sums the maxima, then every linear term, in one fixed order (:class:`HotPath`).
``decode_run`` evaluates the very same code with the decode context as a numpy array (every
other feature a Python number), so element ``i`` is bitwise equal to ``step_time`` of step
``i``: each array element sees the same IEEE-754 operations as the scalar path, and
``np.maximum`` picks the same operand as ``max``.

Measured with bench/bench_costmodel.py (Python 3.11, numpy 2.4, a shared 2-core VM):
``step_time`` 4.5-5.6 us per call (dense and MoE alike); ``decode_run`` about 15 us per call
plus 0.015 us per step (1.6 us/step at 10 steps, 0.02 us/step at 1000).  Pricing one step
through the array path on length-1 arrays instead costs about 60 us, hence the shared
scalar/array code rather than one array-only path.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from latsim.catalog.devices import DeviceSpec
from latsim.catalog.models import ModelSpec
from latsim.costmodel.batch import BatchShape
from latsim.costmodel.ops import (
    DKV,
    HAS_T,
    WDKV,
    Num,
    OpForm,
    S,
    Terms,
    evaluate,
    op_forms,
    step_features,
)
from latsim.costmodel.roofline_params import (
    GemmEfficiency,
    RooflineParams,
    default_roofline_params,
    load_roofline_params,
)
from latsim.costmodel.shard import ShardSpec, shard_model

__all__ = ["GemmEfficiency", "HotPath", "OpTime", "RooflineCostModel", "RooflineParams", "TimeForm",
           "compile_time_forms", "hot_path", "load_roofline_params"]

STEP_OVERHEAD = "step_overhead"
CONTEXT_FEATURES = frozenset({DKV, WDKV})  # the features that vary along a decode run
SCALAR_RUN_MAX = 2  # decode runs this short are cheaper to step one by one (same results)


@dataclass(frozen=True)
class TimeForm:
    """One operator priced in seconds per unit of each feature (see the module note)."""

    name: str
    compute: Terms
    memory: Terms
    fixed: Terms


@dataclass(frozen=True)
class OpTime:
    """One operator's time in one step: both roofs, the fixed part and the total (seconds)."""

    name: str
    compute_s: float
    memory_s: float
    fixed_s: float
    seconds: float

    @property
    def bound(self) -> str:
        """``compute`` or ``memory``: which roof sets the time (ties count as memory)."""
        return "compute" if self.compute_s > self.memory_s else "memory"


def _scaled(terms: Terms, factor: float) -> Terms:
    return tuple((j, c * factor) for j, c in terms)


def _merged(*forms: Terms) -> Terms:
    acc: dict[int, float] = {}
    for terms in forms:
        for j, c in terms:
            acc[j] = acc.get(j, 0.0) + c
    return tuple(sorted(acc.items()))


def allreduce_per_byte_s(tp: int, device: DeviceSpec, params: RooflineParams) -> float:
    """Seconds per message byte of a ring all-reduce over ``tp`` GPUs at the roofline's bus
    efficiency (one call costs ``params.allreduce_latency_s`` plus this per byte)."""
    if device.interconnect_bw <= 0:
        raise ValueError(f"device {device.name!r}: interconnect_bw={device.interconnect_bw} must be > 0 for tp={tp}")
    return 2.0 * (tp - 1) / tp / (device.interconnect_bw * params.allreduce_efficiency)


def _op_time_form(f: OpForm, device: DeviceSpec, params: RooflineParams, tp: int) -> TimeForm:
    if f.kind == "comm":
        if not f.bytes:
            return TimeForm(f.name, (), (), ())
        per_byte = allreduce_per_byte_s(tp, device, params)
        return TimeForm(f.name, (), (), _merged(_scaled(f.launches, params.allreduce_latency_s),
                                                _scaled(f.bytes, per_byte)))
    peak = device.flops_for(f.compute_dtype)
    if f.kind == "gemm":
        inv = 1.0 / (peak * params.gemm.eff_max(f.matrix_elems))
        compute = _merged(_scaled(f.flops, inv), _scaled(f.weight_elems, 2.0 * params.gemm.m_half * inv))
    else:
        compute = _scaled(f.flops, 1.0 / (peak * params.compute_efficiency[f.kind]))
    memory = _scaled(f.bytes, 1.0 / (device.hbm_bandwidth * params.memory_efficiency[f.kind]))
    return TimeForm(f.name, compute, memory, _scaled(f.launches, params.kernel_launch_s))


def compile_time_forms(shard: ShardSpec, device: DeviceSpec, params: RooflineParams) -> tuple[TimeForm, ...]:
    """Time forms of every operator (``OP_NAMES`` order), then the step-overhead pseudo-op."""
    ops = tuple(_op_time_form(f, device, params, shard.tp) for f in op_forms(shard))
    overhead = TimeForm(STEP_OVERHEAD, (), (), ((S, params.seq_overhead_s), (HAS_T, params.step_overhead_s)))
    return (*ops, overhead)


def _maximum(a: Num, b: Num) -> Num:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.maximum(a, b)
    return a if a >= b else b


@dataclass(frozen=True)
class HotPath:
    """The time forms regrouped for speed: only operators with both roofs need a ``max``.

    ``maxed`` holds ``(compute, memory)`` pairs; everything else (launches, all-reduce,
    one-roof operators, step overhead) is linear and merged into ``linear``.  Merging is exact
    algebra because every coefficient and feature is non-negative (``max(c, 0) == c``).
    """

    maxed: tuple[tuple[Terms, Terms], ...]
    linear: Terms


def hot_path(forms: Sequence[TimeForm]) -> HotPath:
    """Regroup ``forms`` (see :class:`HotPath`).

    Terms that read the decode context come last, so that in ``decode_run`` (where only the
    context is an array) everything before them is plain float arithmetic.  The order is a
    property of the model, shared by both paths, so it cannot break their bitwise equality.
    """
    maxed, linear = [], []
    for f in forms:
        if f.compute and f.memory:
            maxed.append((f.compute, f.memory))
            linear.append(f.fixed)
        else:
            linear.extend((f.compute, f.memory, f.fixed))
    maxed.sort(key=lambda cm: any(j in CONTEXT_FEATURES for terms in cm for j, _ in terms))
    ordered = sorted(_merged(*linear), key=lambda term: (term[0] in CONTEXT_FEATURES, term[0]))
    return HotPath(tuple(maxed), tuple(ordered))


def _total(hot: HotPath, x: Sequence[Num], vector: bool = True) -> Num:
    """Sum of ``max(compute, memory)`` over operators plus the linear part: the one hot loop.

    ``vector=False`` promises that every feature is a plain number (``step_time``), which
    skips the array checks; the arithmetic is the same either way.
    """
    total: Num = 0.0
    for compute, memory in hot.maxed:
        c: Num = 0.0
        for j, k in compute:
            c = c + k * x[j]
        m: Num = 0.0
        for j, k in memory:
            m = m + k * x[j]
        total = total + (_maximum(c, m) if vector else (c if c >= m else m))
    for j, k in hot.linear:
        total = total + k * x[j]
    return total


class RooflineCostModel:
    """Prices engine steps from FLOPs, bytes and datasheet peaks scaled by efficiencies.

    One instance serves one (model, device, tp, dtypes).  Construction validates the
    sharding (ValueError for unknown dtypes or a ``tp`` vLLM would refuse) and compiles the
    time forms; ``params=None`` uses the shipped defaults (the data file is read once per
    process).  Implements the :class:`~latsim.costmodel.batch.StepPricer` protocol.
    """

    kind = "roofline"

    def __init__(self, model: ModelSpec, device: DeviceSpec, tp: int = 1, weight_dtype: str = "bf16",
                 kv_dtype: str = "bf16", params: RooflineParams | None = None) -> None:
        self.model, self.device, self.tp = model, device, tp
        self.weight_dtype, self.kv_dtype = weight_dtype, kv_dtype
        self.params = params if params is not None else default_roofline_params()
        self._shard = shard_model(model, tp, weight_dtype, kv_dtype)
        self._forms = compile_time_forms(self._shard, device, self.params)
        self._hot = hot_path(self._forms)
        self._experts_form = next((f for f in self._forms if f.name == "moe_experts"), None)
        self._experts: dict[int, float] = {}  # tokens -> the routed experts' seconds (a memo of pure values)

    def _features(self, batch: BatchShape) -> tuple[Num, ...]:
        return step_features(self._shard, batch.prefill_tokens, batch.prefill_seqs, batch.prefill_attn_pairs,
                             batch.prefill_kv_tokens, batch.decode_seqs, batch.decode_kv_tokens)

    def step_time(self, batch: BatchShape) -> float:
        """Seconds for one engine step on this deployment; 0.0 for an empty batch."""
        return float(_total(self._hot, self._features(batch), vector=False))

    def decode_run(self, seqs: int, kv_tokens: int, steps: int, kv_sq: int = 0) -> npt.NDArray[np.float64]:
        """Times of ``steps`` decode-only steps of ``seqs`` sequences, context ``kv_tokens + i*seqs``.

        Element ``i`` equals ``step_time(BatchShape(decode_seqs=seqs,
        decode_kv_tokens=kv_tokens + i * seqs))`` exactly (same code, see the module note); the
        roofline prices contexts by their sum, so ``kv_sq`` (their squares) is not used.
        """
        del kv_sq
        for name, value in (("seqs", seqs), ("kv_tokens", kv_tokens), ("steps", steps)):
            if value < 0:
                raise ValueError(f"decode_run: {name}={value} must be >= 0")
        if steps <= SCALAR_RUN_MAX:
            one = [BatchShape(decode_seqs=seqs, decode_kv_tokens=kv_tokens + i * seqs) for i in range(steps)]
            return np.array([self.step_time(b) for b in one], dtype=np.float64)
        context = kv_tokens + np.arange(steps, dtype=np.float64) * seqs
        x = step_features(self._shard, 0, 0, 0.0, 0, seqs, context)
        return np.broadcast_to(np.asarray(_total(self._hot, x), dtype=np.float64), (steps,)).copy()

    def moe_pad_s(self, tokens: int, padded: int) -> float:
        """Seconds the routed experts of a ``tokens``-token step add when it replays the CUDA graph
        captured for ``padded`` tokens (the padding is routed too): the experts' roofline time at
        ``padded`` less at ``tokens``; 0.0 for a dense model or no padding (as
        :meth:`~latsim.costmodel.calibrated.CalibratedCostModel.moe_pad_s`)."""
        if self._experts_form is None or not self._shard.moe_layers or padded <= tokens or tokens <= 0:
            return 0.0
        return self._experts_s(padded) - self._experts_s(tokens)

    def _experts_s(self, tokens: int) -> float:
        seconds = self._experts.get(tokens)
        if seconds is None:
            f = self._experts_form
            assert f is not None
            x = self._features(BatchShape(decode_seqs=tokens, decode_kv_tokens=tokens))
            c, m, k = (float(evaluate(t, x)) for t in (f.compute, f.memory, f.fixed))
            seconds = self._experts[tokens] = (c if c > m else m) + k
        return seconds

    def prefill_time(self, tokens: int, context: int = 0) -> float:
        """One step holding a single prefill chunk of ``tokens`` after ``context`` cached tokens."""
        return self.step_time(BatchShape.from_chunks([(tokens, context)], []))

    def op_times(self, batch: BatchShape) -> list[OpTime]:
        """Every operator's roofs and time for ``batch``, plus the step overhead (report use)."""
        x = self._features(batch)
        rows = []
        for f in self._forms:
            c, m, k = (float(evaluate(t, x)) for t in (f.compute, f.memory, f.fixed))
            rows.append(OpTime(f.name, c, m, k, (c if c > m else m) + k))
        return rows

    def breakdown(self, batch: BatchShape) -> dict[str, float]:
        """Seconds per operator (and ``step_overhead``); they sum to ``step_time(batch)`` up to rounding."""
        return {t.name: t.seconds for t in self.op_times(batch)}

    def describe(self) -> dict[str, object]:
        """What priced the prediction: kind, deployment, efficiencies and their source."""
        return {
            "kind": self.kind,
            "model": self.model.name,
            "device": self.device.name,
            "tp": self.tp,
            "weight_dtype": self.weight_dtype,
            "kv_dtype": self.kv_dtype,
            "efficiency": self.params.as_dict(),
            "source": self.params.source,
            "provenance": dict(self.params.provenance),
        }

