"""How host-bound a deployment is, and how far its latency moves with the host's CPU speed.

Two questions a planner asks before trusting a prediction on a VM whose CPU speed is not the
reference host's:

* :func:`host_share`: of the engine's step time, how much does the CPU set?  The deployment is
  simulated once more on the reference engine (one ``step_time`` per step, the same results as
  the prediction), every priced step split into its GPU and host seconds
  (:meth:`~latsim.costmodel.host.HostOverlapCostModel.parts`), and the splits summed by
  :func:`share_from_parts`.
* :func:`decode_host_ratio`: at the prediction's operating point, how the host seconds of a
  decode step compare with its GPU seconds (at once, from the prediction's summary: above 1 the
  CPU paces decoding, as for a 1B model on an H200); :func:`prompt_launch_ratio` the same for the
  step carrying a prompt (above 1 for a mixture of experts, whose graph-less prompt steps wait on
  the CPU's launch).
* :func:`host_speed_sensitivity`: TTFT and TPOT P50 re-simulated at other host speeds
  (:attr:`~latsim.deployment.EngineConfig.host_speed`; ``latsim predict --host-report`` asks
  for the range the live runs' hosts spanned), as absolute values and relative to the
  prediction's own speed.

What the share counts: the per-step host terms (scheduling, input preparation and output
processing, ``step_s + seq_s x sequences``) and the Python-paced run of a graph-less step's
kernels (``eager_layer_s`` per layer: CPU time inside the step's GPU time,
:meth:`~latsim.costmodel.host.HostOverlapCostModel.eager_s`).  The front-end latency
(``frontend_s``, outside the step loop: TTFT only) is reported beside it, and graph-less
launches by their count and CPU seconds; the re-simulations at other speeds include every CPU
term.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from latsim.costmodel.batch import BatchShape, squares_after
from latsim.costmodel.host import HostOverlapCostModel, check_host_speed
from latsim.deployment import resolve_engine
from latsim.sim.simulate import default_cost_model, simulate


@dataclass(frozen=True)
class HostShare:
    """The CPU's part of a run's step time (fractions in [0, 1]).

    ``cpu_set_share``: step time the CPU sets (asynchronous: the whole of each step whose host
    seconds exceed its GPU seconds, and the eager seconds of the others; synchronous: the host
    and eager seconds of every step, which add to the kernels') over all step time.
    ``cpu_excess_share``: the step time an infinitely fast CPU would remove (each step's time
    less its kernels' time, ``gpu - eager``).  ``host_bound_steps``: fraction of steps with host
    seconds > GPU seconds.  ``eager_s``: the eager seconds summed.
    """

    steps: int
    step_s: float
    gpu_s: float
    host_s: float
    cpu_set_share: float
    cpu_excess_share: float
    host_bound_steps: float
    asynchronous: bool
    frontend_s: float = 0.0
    launches: int = 0
    launch_s: float = 0.0
    eager_s: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def share_from_parts(gpu_s: npt.ArrayLike, host_s: npt.ArrayLike, asynchronous: bool,
                     eager_s: npt.ArrayLike | None = None) -> HostShare:
    """:class:`HostShare` of steps with these GPU and host seconds (equal-length, >= 0), of which
    ``eager_s`` (default none) are CPU-paced seconds inside the GPU seconds (at most them)."""
    gpu, host = np.asarray(gpu_s, dtype=np.float64), np.asarray(host_s, dtype=np.float64)
    eager = np.zeros_like(gpu) if eager_s is None else np.asarray(eager_s, dtype=np.float64)
    if gpu.shape != host.shape or gpu.shape != eager.shape or gpu.ndim != 1:
        raise ValueError(f"gpu_s, host_s and eager_s must be 1-D and of equal length, got {gpu.shape}, "
                         f"{host.shape} and {eager.shape}")
    parts = (gpu, host, eager)
    if any(np.any(x < 0) for x in parts) or not all(np.all(np.isfinite(x)) for x in parts):
        raise ValueError("gpu_s, host_s and eager_s must be finite and >= 0")
    if np.any(eager > gpu):
        raise ValueError("eager_s must not exceed gpu_s (it is part of the GPU seconds)")
    bound = host > gpu
    step = np.maximum(gpu, host) if asynchronous else gpu + host
    total = float(step.sum())
    excess = float((step - (gpu - eager)).sum())
    cpu_set = float(step[bound].sum() + eager[~bound].sum()) if asynchronous else float((host + eager).sum())
    frac = (lambda x: x / total) if total > 0 else (lambda x: 0.0)
    return HostShare(steps=int(gpu.size), step_s=total, gpu_s=float(gpu.sum()), host_s=float(host.sum()),
                     cpu_set_share=frac(cpu_set), cpu_excess_share=frac(excess),
                     host_bound_steps=float(bound.mean()) if gpu.size else 0.0, asynchronous=asynchronous,
                     eager_s=float(eager.sum()))


class _Tally:
    """A cost model that prices like ``inner`` and keeps each step's GPU and host seconds."""

    def __init__(self, inner: HostOverlapCostModel) -> None:
        self.inner = inner
        self.kind, self.frontend_s, self.output_seq_s = inner.kind, inner.frontend_s, inner.output_seq_s
        self.input_s, self.input_window_s = inner.input_s, inner.input_window_s
        self.launch_from, self.launch_tail_s, self.launch_sigma = (inner.launch_from, inner.launch_tail_s,
                                                                   inner.launch_sigma)
        # the power model's terms, so that the GPU's clock moves the same steps as in the prediction
        self.power, self.tflop_per_token = inner.power, inner.tflop_per_token
        self.coreads = inner.coreads  # the same discounted shapes as the prediction
        self.heavy_parts, self.decode_tflops = inner.heavy_parts, inner.decode_tflops
        self.gpu: list[float] = []
        self.host: list[float] = []
        self.eager: list[float] = []
        self.launches: list[float] = []

    def step_time(self, batch: BatchShape) -> float:
        gpu, host = self.inner.parts(batch)
        if gpu > 0.0:
            self.gpu.append(gpu)
            self.host.append(host)
            self.eager.append(self.inner.eager_s(batch))
        return self.inner.step_time(batch)

    def decode_run(self, seqs: int, kv_tokens: int, steps: int, kv_sq: int = 0) -> npt.NDArray[np.float64]:
        shapes = (BatchShape(decode_seqs=seqs, decode_kv_tokens=kv_tokens + i * seqs,
                             decode_kv_sq=squares_after(seqs, kv_tokens, kv_sq, i)) for i in range(steps))
        return np.array([self.step_time(b) for b in shapes], dtype=np.float64)

    def launch_s(self, batch: BatchShape) -> float:
        seconds = self.inner.launch_s(batch)
        if seconds > 0.0:
            self.launches.append(seconds)
        return seconds

    def describe(self) -> dict[str, object]:
        return self.inner.describe()


def _cost_model(deployment: Any) -> HostOverlapCostModel:
    """The deployment's default cost model (the one ``simulate`` builds when given none)."""
    return host_overlap(default_cost_model(deployment, resolve_engine(deployment)))


def host_overlap(cm: Any) -> HostOverlapCostModel:
    """``cm`` itself, checked to be the host-overlap cost model (whose host and GPU parts these
    reports read); TypeError otherwise."""
    if not isinstance(cm, HostOverlapCostModel):
        raise TypeError(f"expected the host-overlap cost model, got {type(cm).__name__}")
    return cm


@dataclass(frozen=True)
class _OperatingPoint:
    """A prediction's typical step (:func:`decode_host_ratio`, :func:`prompt_launch_ratio`): the
    requests in flight per replica, their mean prompt and mean context (prompt plus half the output)."""

    seqs: int
    prompt: float
    context: float
    cost_model: HostOverlapCostModel
    token_budget: int | None


def _operating_point(deployment: Any, summary: dict[str, Any]) -> _OperatingPoint | None:
    rate = summary.get("throughput_rps") or 0.0
    e2e_ms = (summary.get("e2e_ms") or {}).get("mean")
    if rate <= 0.0 or e2e_ms is None or not math.isfinite(e2e_ms):
        return None
    engine = resolve_engine(deployment)
    cost_model = default_cost_model(deployment, engine)
    if not isinstance(cost_model, HostOverlapCostModel):
        return None  # no host terms to weigh
    in_flight = rate * e2e_ms / 1e3 / max(1, deployment.replicas)
    prompt = summary["input_tokens_per_s"] / rate
    return _OperatingPoint(seqs=max(1, min(round(in_flight), engine.max_num_seqs or 1)), prompt=prompt,
                           context=prompt + summary["output_tokens_per_s"] / rate / 2, cost_model=cost_model,
                           token_budget=engine.max_num_batched_tokens)


def decode_host_ratio(deployment: Any, summary: dict[str, Any]) -> float | None:
    """Host seconds over GPU seconds of the typical decode step of a prediction (``summary``:
    :func:`latsim.metrics.summary.summarize`'s, with ``throughput_rps``, the mean E2E and the
    token rates): the batch is the requests in flight per replica (Little's law: throughput x mean
    E2E, at most ``max_num_seqs``), each at its prompt plus half its output of context.  ``None``
    when the run completed nothing, or the deployment's cost model has no host terms."""
    point = _operating_point(deployment, summary)
    return None if point is None else _decode_ratio(point)


def prompt_launch_ratio(deployment: Any, summary: dict[str, Any]) -> float | None:
    """CPU seconds over GPU seconds of the step that carries a typical prompt: one mean-length
    prompt chunk (at most the token budget) beside the other requests in flight decoding, as in
    :func:`decode_host_ratio`.  The CPU's part is the step's launch when it runs without CUDA graphs
    (:meth:`~latsim.costmodel.host.HostOverlapCostModel.launch_s`: its host work, then its
    kernels layer by layer), else its host work; above 1 the CPU paces the prompts' steps, as for a
    mixture of experts, whose few active weights make a prompt's kernels short beside the launch of
    its many layers.  ``None`` as for :func:`decode_host_ratio`."""
    point = _operating_point(deployment, summary)
    return None if point is None else _prompt_ratio(point)


def pace_ratios(deployment: Any, summary: dict[str, Any]) -> tuple[float | None, float | None]:
    """``(decode_host_ratio, prompt_launch_ratio)`` of a prediction, from one operating point."""
    point = _operating_point(deployment, summary)
    if point is None:
        return None, None
    return _decode_ratio(point), _prompt_ratio(point)


def _decode_ratio(point: _OperatingPoint) -> float | None:
    seqs = point.seqs
    gpu, host = point.cost_model.parts(BatchShape(decode_seqs=seqs, decode_kv_tokens=round(seqs * point.context)))
    return host / gpu if gpu > 0.0 else None


def _prompt_ratio(point: _OperatingPoint) -> float | None:
    chunk = max(1, round(min(point.prompt, point.token_budget or point.prompt)))
    decodes = point.seqs - 1
    batch = BatchShape(prefill_tokens=chunk, prefill_seqs=1, prefill_attn_pairs=chunk * (chunk + 1) / 2,
                       prefill_kv_tokens=chunk, max_prefill_chunk=chunk, decode_seqs=decodes,
                       decode_kv_tokens=round(decodes * point.context))
    gpu, host = point.cost_model.parts(batch)
    cpu = max(host, point.cost_model.launch_s(batch))
    return cpu / gpu if gpu > 0.0 else None


def host_share(deployment: Any, trace: Any, *, seed: int = 0) -> HostShare:
    """The CPU's part of ``deployment``'s step time under ``trace`` (see the module docstring).

    Simulates once on the reference engine (several times slower than a prediction for long
    traces, the same results).
    """
    tally = _Tally(_cost_model(deployment))
    simulate(deployment, trace, seed=seed, cost_model=tally, fast_forward=False)
    share = share_from_parts(tally.gpu, tally.host, tally.inner.asynchronous, tally.eager)
    return replace(share, frontend_s=tally.frontend_s, launches=len(tally.launches),
                   launch_s=float(sum(tally.launches)))


def host_speed_sensitivity(deployment: Any, trace: Any, speeds: tuple[float, ...], *,
                           seed: int = 0, base: dict[str, Any] | None = None) -> dict[str, Any]:
    """TTFT and TPOT P50 (ms) at each host speed in ``speeds`` (``latsim predict --host-report``
    passes the range the live runs' hosts spanned), and their change from ``base``.

    ``base`` is the prediction's summary at the deployment's own ``host_speed`` (simulated here
    when None).  Each entry: ``host_speed``, ``ttft_p50_ms``, ``tpot_p50_ms``, the relative
    changes ``ttft_p50_change`` / ``tpot_p50_change`` (0.10: 10 % slower; None when a P50 is
    missing), and ``stable``
    (False when requests were still unfinished at the horizon: the deployment cannot keep up
    at that speed, and its percentiles describe only what finished).
    """
    for speed in speeds:
        check_host_speed(speed)
    if base is None:
        base = simulate(deployment, trace, seed=seed).summary
    out: dict[str, Any] = {"reference_host_speed": deployment.engine.host_speed,
                           "ttft_p50_ms": _p50(base, "ttft_ms"), "tpot_p50_ms": _p50(base, "tpot_ms"), "at": []}
    for speed in speeds:
        moved = replace(deployment, engine=replace(deployment.engine, host_speed=speed))
        summary = simulate(moved, trace, seed=seed).summary
        ttft, tpot = _p50(summary, "ttft_ms"), _p50(summary, "tpot_ms")
        out["at"].append({"host_speed": speed, "ttft_p50_ms": ttft, "tpot_p50_ms": tpot,
                          "ttft_p50_change": _change(ttft, out["ttft_p50_ms"]),
                          "tpot_p50_change": _change(tpot, out["tpot_p50_ms"]),
                          "stable": bool(summary.get("stable", True))})
    return out


def host_report(deployment: Any, trace: Any, speeds: tuple[float, ...], *, seed: int = 0,
                base: dict[str, Any] | None = None) -> dict[str, Any]:
    """Both answers in one JSON-ready dict: ``share`` (:class:`HostShare`) and ``speeds``."""
    return {"share": host_share(deployment, trace, seed=seed).as_dict(),
            "speeds": host_speed_sensitivity(deployment, trace, speeds, seed=seed, base=base)}


def _p50(summary: dict[str, Any], key: str) -> float | None:
    value = (summary.get(key) or {}).get("p50")
    return float(value) if value is not None and math.isfinite(value) else None


def _change(value: float | None, ref: float | None) -> float | None:
    """``value / ref - 1``; None when either is missing (no request finished) or ``ref`` is 0."""
    return value / ref - 1.0 if value is not None and ref else None
