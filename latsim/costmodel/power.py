"""The GPU's clock under its power cap: compute-bound steps run slower the busier the GPU has been.

A GPU draws more power for dense math than its cap allows at full clock; its power management
then lowers the SM clock within tens of milliseconds, and raises it again when the work stops.
On the H200 (``data/power/README.md``) a long prefill, step after step, runs at 1,450-1,650 MHz
instead of 1,980, and its GEMMs and prefill attention take 18-25 % longer than at full clock;
a calibration row, timed in a short burst, lies between the two.  Memory-bound work (decode)
hardly moves.

The model, per replica (:class:`PowerClock`, owned by the engine's launch clock so that the
fast and the reference engine apply it at the same steps):

- a step is *heavy* when it runs prefill work and at least :attr:`PowerCap.heavy_tokens` tokens;
  its heavy seconds are the cost model's price of the kernels the power data covers
  (:meth:`~latsim.costmodel.calibrated.CalibratedCostModel.heavy_parts`: bf16 GEMMs, the
  quantized GEMMs of a class with its own ratios, bf16 prefill attention), every other step is
  light;
- the GPU holds a *budget* of heavy seconds it may run at full clock, at most ``budget_s``: heavy
  work spends it, light work and idle time refill it at ``refill`` seconds per second (refilled
  lazily at the next heavy step, so decode runs need no work).  Within a heavy step its light
  share refills as the heavy share spends; once the budget is gone the rest of the step's heavy
  work runs at the cap;
- heavy seconds at full clock cost ``full_clock_ratio`` x the profile's price, at the cap
  ``capped_ratio`` x: the pair of prefill attention, and of every GEMM class without its own; a
  GEMM class measured on its own (``gemm_ratios``: ``bf16``, ``fp8`` W8A8 CUTLASS, ``int4`` W4A16
  Machete) has its own pair, and a step mixing classes pays their average weighted by seconds.
  The H200's bf16 GEMMs past the CUDA-graph size are timed at the full clock in its profile
  (``--heavy-timing cool``), so their pair is about 1 at full clock and the cap's clock ratio
  (about 1.15) at the cap, the same on every model; the other kernels' rows were timed in short
  bursts, partly heated into the cap, so their pairs straddle 1.

The whole load sets the clock, not prefill alone: a big model's decode steps of many sequences
keep the tensor cores busy step after step and hold the GPU at its cap too (on the H200,
Qwen2.5-32B from 64-128 sequences, Llama-3.1-8B from 128; ``data/traces/h200/s27``).  Those decode
steps keep their price (memory-bound), but the compute-bound kernels of a step that runs a
prompt beside them run at the lowered clock.  Hence the *tensor-rate state*, when ``power.json``
has ``decode_cap``: an exponential average, time constant ``decode_tau_s``, of the GPU's tensor
work rate (bf16-equivalent TFLOP/s per GPU of the linear layers,
:attr:`~latsim.costmodel.calibrated.CalibratedCostModel.tflop_per_token`), and the share of the
way to the capped clock a ramp in it (:meth:`PowerCap.decode_share`): 0 at or below
``decode_onset_tflops``, 1 at or above ``decode_full_tflops``.

- The state is advanced at every step with prompt work: since the last such step the GPU ran
  this step's decoders (at their decode-only rate,
  :meth:`~latsim.costmodel.calibrated.CalibratedCostModel.decode_tflops`; none: idle), then this
  step at its own rate (all its tokens over its price) times ``prompt_rate_weight``: the GEMMs of
  a prompt's step draw less power per FLOP than the decode steps the ramp was fitted on, whose
  attention streams the KV cache (the power probe's sustained bf16 GEMMs of 256-2,048 rows sit
  on the ramp at 0.46 of their FLOP rate on the H100, 0.44 on the H200: ``scripts/fit_power.py
  --prompt-weight``; absent: 1, the whole rate).
- A light step pays its heavy seconds ``1 + s x (capped - 1)`` times (its price as the profile
  timed it: bf16 rows at full clock, so the cap's 1.15), ``capped`` the class's ``light_ratios``
  entry where measured (quantized prompt steps beside decoders at the cap: their pairs, from
  sustained 2,048-8,160-row runs, do not carry over to 512-token steps),
  ``s`` the ramp at the mean of the state before and after it; a heavy step
  runs its full-clock share at ``full + s x (capped - full)``, ``s`` the ramp before it (its own
  heat is the budget's).  Decode-only steps are not moved (their kernels keep their price at
  the cap, measured).
- The ramp is fitted on steady decode runs (where the state equals the decoders' rate), each
  quantized class's weight on it and its light-step ratio on its prompts beside decoders at the
  cap, the time constant from the budget (``scripts/fit_power.py --decode-trace``;
  ``docs/step-time-model.md``, "A tensor-rate state").

On the H200 the clock held for 30-50 ms of back-to-back GEMMs from idle, recovered fully in a
200 ms pause, half in 100 ms and little in 50 ms (duty cycles of ``data/power/``): a budget of
tens of milliseconds and a refill of about half the idle time.

Every number comes from ``power.json`` beside the GPU's profile, written by
``scripts/fit_power.py`` from the measurements in ``data/power/``; a profile without it gets no
power model (no change from the calibrated price).  A step that is host-bound is treated as if
GPU-bound (heavy steps are long GPU steps; the host's few milliseconds do not set them).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

POWER_FILE = "power.json"
FIELDS = ("full_clock_ratio", "capped_ratio", "budget_s", "refill", "heavy_tokens")
DECODE_FIELDS = ("decode_onset_tflops", "decode_full_tflops", "decode_tau_s")
"""The tensor-rate state's ramp and time constant (``power.json``'s ``decode_cap``); absent: none."""
GEMM_CLASSES = ("bf16", "fp8", "int4")
"""GEMM classes that may carry their own ratios (``power.json``'s ``gemms``)."""


@dataclass(frozen=True)
class PowerCap:
    """The fitted power-cap terms of one GPU (see the module note); ``source``: the file."""

    full_clock_ratio: float
    capped_ratio: float
    budget_s: float
    refill: float
    heavy_tokens: int
    source: str = ""
    gemm_ratios: tuple[tuple[str, float, float], ...] = ()
    """``(class, full-clock ratio, capped ratio)`` of each GEMM class measured on its own
    (:data:`GEMM_CLASSES`); prefill attention, and a bf16 GEMM without its own entry, use the two
    ratios above."""
    decode_onset_tflops: float = math.inf
    """The decoders' tensor rate (TFLOP/s) at and below which they leave the clock alone."""
    decode_full_tflops: float = math.inf
    """The rate at and above which they hold the clock at the cap (``inf``: no decode cap)."""
    decode_tau_s: float = 0.1
    """The time constant of the tensor-rate state (seconds)."""
    light_ratios: tuple[tuple[str, float], ...] = ()
    """``(GEMM class, ratio)``: a class's capped ratio in steps under the heavy threshold, where
    measured (graph-less prompt steps beside decoders at the cap); others use their pair's."""
    rate_weights: tuple[tuple[str, float], ...] = ()
    """``(GEMM class, weight)``: how much of the tensor-rate state a class's FLOP counts for,
    measured against bf16's (the ramp's own); classes without one: bf16's peak over theirs."""
    prompt_rate_weight: float = 1.0
    """How much of a step with prompt work's own tensor rate counts in the state, against the
    decode steps' rate the ramp was fitted on (1: all of it)."""

    def __post_init__(self) -> None:
        checks: dict[str, tuple[bool, Any]] = {  # the name shown -> (in range, the value shown)
            "full_clock_ratio": (0.5 <= self.full_clock_ratio <= 2.0, self.full_clock_ratio),
            "capped_ratio": (0.5 <= self.capped_ratio <= 2.0, self.capped_ratio),
            "budget_s": (0.0 <= self.budget_s < 10.0, self.budget_s),
            "refill": (0.0 < self.refill < 100.0, self.refill),
            "heavy_tokens": (self.heavy_tokens >= 1, self.heavy_tokens),
            "decode_tau_s": (0.0 < self.decode_tau_s < 100.0, self.decode_tau_s),
            "prompt_rate_weight": (0.0 < self.prompt_rate_weight <= 4.0, self.prompt_rate_weight),
            "rate_weights": (all(name in GEMM_CLASSES and 0.0 < w <= 4.0 for name, w in self.rate_weights),
                             self.rate_weights),
            "light_ratios": (all(name in GEMM_CLASSES and 0.5 <= r <= 2.0 for name, r in self.light_ratios),
                             self.light_ratios),
            "decode_onset_tflops": (0.0 <= self.decode_onset_tflops < self.decode_full_tflops
                                    or self.decode_onset_tflops == self.decode_full_tflops == math.inf,
                                    (self.decode_onset_tflops, self.decode_full_tflops))}
        for entry in self.gemm_ratios:
            name, full, capped = entry
            checks[f"gemm_ratios[{name!r}]"] = (name in GEMM_CLASSES and 0.5 <= full <= 2.0 and 0.5 <= capped <= 2.0,
                                                entry)
        bad = ", ".join(f"{n}={value!r}" for n, (ok, value) in checks.items() if not ok)
        if bad:
            raise ValueError(f"power cap {self.source or '(argument)'}: {bad} out of range (ratios "
                             "0.5-2, budget_s in [0, 10), refill in (0, 100), heavy_tokens >= 1, "
                             "0 <= decode_onset_tflops < decode_full_tflops, decode_tau_s in (0, 100), "
                             "rate weights and prompt_rate_weight in (0, 4], GEMM classes "
                             f"{', '.join(GEMM_CLASSES)})")

    def is_heavy(self, shape: Any) -> bool:
        """Whether a step of ``shape`` (a :class:`~latsim.costmodel.batch.BatchShape`) is heavy:
        prefill work and at least :attr:`heavy_tokens` tokens."""
        return shape.prefill_tokens > 0 and shape.num_tokens >= self.heavy_tokens

    @property
    def has_decode_cap(self) -> bool:
        """Whether large decode batches lower the clock (:meth:`decode_share`)."""
        return self.decode_full_tflops < math.inf

    def decode_share(self, tflops: float) -> float:
        """The share of the way to the capped clock (0-1) at which a sustained tensor rate of
        ``tflops`` (TFLOP/s) holds the GPU: a ramp from
        :attr:`decode_onset_tflops` to :attr:`decode_full_tflops`; 0 without a decode cap."""
        lo, hi = self.decode_onset_tflops, self.decode_full_tflops
        if tflops <= lo or hi == math.inf:
            return 0.0
        return 1.0 if tflops >= hi else (tflops - lo) / (hi - lo)

    def rate_weight(self, gemm_class: str) -> float | None:
        """A GEMM class's measured weight in the tensor-rate state (:attr:`rate_weights`), 1.0
        for ``bf16``, None when not measured."""
        if gemm_class == "bf16":
            return 1.0
        return next((w for name, w in self.rate_weights if name == gemm_class), None)

    def ratios(self, gemm_class: str, light: bool = False) -> tuple[float, float] | None:
        """``(full-clock ratio, capped ratio)`` of a GEMM class (one of :data:`GEMM_CLASSES`): its
        own entry, else for ``bf16`` the pair of :meth:`attention_ratios`; None when the power
        data does not cover it.  ``light``: the capped ratio of its :attr:`light_ratios` entry
        when it has one (a step under the heavy threshold)."""
        pair = next(((full, capped) for name, full, capped in self.gemm_ratios if name == gemm_class), None)
        if pair is None and gemm_class == "bf16":
            pair = self.attention_ratios()
        light_capped = next((r for name, r in self.light_ratios if name == gemm_class), None) if light else None
        return pair if pair is None or light_capped is None else (pair[0], light_capped)

    def attention_ratios(self) -> tuple[float, float]:
        """``(full-clock ratio, capped ratio)`` of prefill attention over a 16-bit KV cache."""
        return self.full_clock_ratio, self.capped_ratio


def load_power_cap(folder: Path) -> PowerCap | None:
    """``folder/power.json`` as a :class:`PowerCap`, None when the profile has none; ValueError
    naming the file when it is unreadable or lacks a field."""
    path = Path(folder) / POWER_FILE
    if not path.is_file():
        return None
    try:
        data: dict[str, Any] = json.loads(path.read_text())
        values = {name: data[name] for name in FIELDS}
        gemms = tuple((str(name), float(r["full_clock_ratio"]), float(r["capped_ratio"]))
                      for name, r in sorted(data.get("gemms", {}).items()))
        ramp = data.get("decode_cap")
        decode = {name: float(ramp[name]) for name in DECODE_FIELDS} if ramp else {}
        weights = tuple((str(k), float(v)) for k, v in sorted((ramp or {}).get("rate_weights", {}).items()))
        light = tuple((str(k), float(v)) for k, v in sorted((ramp or {}).get("light_ratios", {}).items()))
        prompt_weight = float((ramp or {}).get("prompt_rate_weight", 1.0))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"{path}: not a power-cap file ({exc!r}); rebuild it with scripts/fit_power.py") from exc
    return PowerCap(float(values["full_clock_ratio"]), float(values["capped_ratio"]), float(values["budget_s"]),
                    float(values["refill"]), int(values["heavy_tokens"]), str(path), gemms, rate_weights=weights,
                    light_ratios=light, prompt_rate_weight=prompt_weight, **decode)


class PowerClock:
    """One replica's power state: the full-clock budget left at the end of the last heavy step
    and that end (``-inf``: none yet, the budget is full), and the tensor-rate state (TFLOP/s)
    at ``rate_at``, the end of the last step with prompt work (``-inf``: none yet)."""

    __slots__ = ("budget", "last_end", "rate", "rate_at")

    def __init__(self) -> None:
        self.budget = 0.0
        self.last_end = -math.inf
        self.rate = 0.0
        self.rate_at = -math.inf

    def end(self, cost: Any, shape: Any, start: float, end: float) -> float:
        """The end of a step priced ``start`` to ``end`` once the GPU's clock is applied (``end``
        itself for a decode-only step, a light step at full clock, or a cost model without power
        data)."""
        cap: PowerCap | None = getattr(cost, "power", None)
        if cap is None or shape.prefill_tokens <= 0:
            return end
        dur = end - start
        heavy_step = cap.is_heavy(shape)
        share = self._rate_share(cap, cost, shape, start, dur, heavy_step) if cap.has_decode_cap else 0.0
        if not heavy_step and share <= 0.0:
            return end
        heavy, full_ratio, capped_ratio = cost.heavy_parts(shape, not heavy_step)
        if heavy <= 0.0 or dur <= 0.0:
            return end
        heavy = heavy if heavy < dur else dur
        if not heavy_step:
            return end + heavy * share * (capped_ratio - 1.0)
        full_ratio += share * (capped_ratio - full_ratio)
        budget = cap.budget_s
        if self.last_end > -math.inf:
            budget = self.budget + cap.refill * (start - self.last_end)
            budget = budget if budget < cap.budget_s else cap.budget_s
        spend = heavy - cap.refill * (dur - heavy)  # the step's net use if it all ran at full clock
        if spend <= budget:
            full, left = heavy, budget - spend
            left = left if left < cap.budget_s else cap.budget_s
        else:
            full, left = heavy * budget / spend, 0.0
        end = start + dur + full * (full_ratio - 1.0) + (heavy - full) * (capped_ratio - 1.0)
        self.budget, self.last_end = left, end
        return end

    def _rate_share(self, cap: PowerCap, cost: Any, shape: Any, start: float, dur: float, heavy_step: bool) -> float:
        """Advance the tensor-rate state over the time since the last step with prompt work (at
        this step's decoders' rate) and over this step (at its own), and return the ramp's share
        for it: at the mean of the state before and after a light step, before a heavy one."""
        decoders = cost.decode_tflops(shape) if shape.decode_seqs > 0 else 0.0
        tau = cap.decode_tau_s
        before = decoders + (self.rate - decoders) * math.exp(-(start - self.rate_at) / tau)
        own = cap.prompt_rate_weight * cost.tflop_per_token * shape.num_tokens / dur if dur > 0.0 else 0.0
        after = own + (before - own) * math.exp(-dur / tau) if dur > 0.0 else before
        self.rate, self.rate_at = after, start + dur
        return cap.decode_share(before if heavy_step else 0.5 * (before + after))
