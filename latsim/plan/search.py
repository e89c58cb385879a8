"""``plan``: the cheapest deployment that meets an SLO at a workload.

The search space is GPU type x TP x replicas x weight dtype (and, on request, the engine's
``max_num_seqs`` x ``max_num_batched_tokens``).  Every candidate is first checked against the
capacity bounds of :mod:`latsim.plan.bounds` (memory fit, roofline rate); the survivors are
simulated in order of price, with :func:`latsim.plan.evaluate.screened` replications (one run
first: a candidate that misses in it cannot reach ``min_p_meet``), until ``top`` of them meet
the SLO.  A candidate meets it when every replication is stable and the
share of replications meeting every target (``p_meet``) is at least ``min_p_meet``.  For the
candidates reported, :mod:`latsim.plan.rate` finds the highest rate they sustain under the SLO
(``max_rps_at_slo``) and, where the live error band describes the candidate (the calibrated H200
at TP=1), the highest at which the SLO also holds at the band's slow edge
(``max_rps_at_slo_live_edge``, at most the first; loads up to 0.95 of capacity).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from latsim.config import Settings
from latsim.deployment import Deployment
from latsim.plan.bounds import Bounds, capacity_bounds
from latsim.plan.evaluate import at_live_edge, meets, screened
from latsim.plan.prices import Price, price_of
from latsim.plan.rate import RateProbe, max_rate_at_live_edge, max_rate_at_slo
from latsim.plan.slo import PlanSLO
from latsim.validate.error_band import deployment_why

ENGINE_KNOBS = tuple(itertools.product((None, 64, 128, 512), (None, 2048, 8192)))
"""(max_num_seqs, max_num_batched_tokens) tried with ``search_engine`` (None: the engine's default)."""


@dataclass(frozen=True)
class Space:
    """The candidates: every combination of the fields (``engine_knobs``: see :data:`ENGINE_KNOBS`)."""

    devices: tuple[str, ...]
    tps: tuple[int, ...] = (1, 2, 4, 8)
    replicas: tuple[int, ...] = (1, 2, 3, 4, 6, 8)
    weight_dtypes: tuple[str, ...] = ("bf16", "fp8")
    engine_knobs: tuple[tuple[int | None, int | None], ...] = ((None, None),)

    def __post_init__(self) -> None:
        for name in ("devices", "tps", "replicas", "weight_dtypes", "engine_knobs"):
            if not getattr(self, name):
                raise ValueError(f"the search space has no {name.replace('_', ' ')}")
        bad = [v for v in (*self.tps, *self.replicas) if v < 1]
        if bad:
            raise ValueError(f"tp and replicas must be >= 1, got {bad[0]}")

    def size(self) -> int:
        return (len(self.devices) * len(self.tps) * len(self.replicas) * len(self.weight_dtypes)
                * len(self.engine_knobs))

    def settings(self, base: Settings) -> list[Settings]:
        """One :class:`Settings` per candidate: ``base`` with the searched fields replaced."""
        return [replace(base, device=d, tp=t, replicas=r, weight_dtype=w, max_num_seqs=s if s else base.max_num_seqs,
                        max_num_batched_tokens=b if b else base.max_num_batched_tokens)
                for d, t, r, w, (s, b) in itertools.product(self.devices, self.tps, self.replicas,
                                                             self.weight_dtypes, self.engine_knobs)]


@dataclass(frozen=True)
class Workload:
    """What the bounds and costs need of the workload: rate and token lengths (from one trace)."""

    qps: float
    mean_input: float
    mean_output: float
    longest: int
    num_requests: int

    @classmethod
    def of(cls, settings: Settings) -> Workload:
        from latsim.scenario import build_trace

        trace = build_trace(settings)
        span = trace.duration_s
        qps = settings.qps if settings.qps and not settings.trace else ((len(trace) - 1) / span if span else math.inf)
        return cls(float(qps), float(np.mean(trace.input_tokens)), float(np.mean(trace.output_tokens)),
                   int(np.max(trace.input_tokens + trace.output_tokens)), len(trace))

    def as_dict(self, settings: Settings) -> dict[str, Any]:
        return {"qps": self.qps, "mean_input_tokens": self.mean_input, "mean_output_tokens": self.mean_output,
                "num_requests": self.num_requests, "arrival": settings.arrival, "trace": settings.trace,
                "input": settings.input_len if settings.input_len is not None else settings.input_dist,
                "output": settings.output_len if settings.output_len is not None else settings.output_dist}


@dataclass(frozen=True)
class Options:
    """How hard to look: replications per evaluation, stop after ``top`` feasible, the ``p_meet``
    a candidate needs, whether to search each reported candidate's highest rate."""

    replications: int = 3
    seed: int = 0
    top: int = 5
    min_p_meet: float = 0.8
    rate_search: bool = True
    surrogate: bool = False
    """Drop candidates the fitted surrogate predicts far off the SLO before simulating (:mod:`latsim.plan.screen`)."""

    def __post_init__(self) -> None:
        if self.replications < 1:
            raise ValueError(f"--replications must be >= 1, got {self.replications}")
        if self.top < 1:
            raise ValueError(f"--top must be >= 1, got {self.top}")
        if not 0.0 < self.min_p_meet <= 1.0:
            raise ValueError(f"--min-p-meet must be in (0, 1], got {self.min_p_meet}")


def plan(base: Settings, space: Space, slo: PlanSLO, options: Options,
         prices: dict[str, float] | None = None) -> dict[str, Any]:
    """Search ``space`` around ``base`` (model, workload, engine settings) for the cheapest
    deployments meeting ``slo``; the JSON-ready answer (``feasible``, ``best``, ``candidates``
    ranked, ``pruned`` with reasons, ``slo``, ``workload``, ``prices``, ``search``)."""
    from latsim.scenario import merge

    base = merge(base, None)
    workload = Workload.of(base)
    survivors, pruned = _prune(space.settings(base), workload, prices)
    survivors.sort(key=lambda c: (c[2].usd_per_gpu_hour * c[1].tp * c[1].replicas, -c[3].max_rps))
    if options.surrogate and survivors:
        survivors = _screened(survivors, base, slo, pruned)
    rows: list[dict[str, Any]] = []
    for settings, deployment, price, bounds in survivors:
        if sum(r["meets_slo"] for r in rows) >= options.top:
            pruned.append(_pruned_row(settings, deployment, price,
                                      f"cost: {options.top} cheaper candidates already meet the SLO"))
            continue
        rows.append(_evaluate_row(settings, deployment, price, bounds, workload, slo, options))
    rows.sort(key=_rank)
    _rate_search(rows, survivors, workload, slo, options)
    feasible = any(r["meets_slo"] for r in rows)
    used = {r["device"] for r in rows} | {p["device"] for p in pruned}
    return {
        "feasible": feasible,
        "best": rows[0] if feasible else None,
        "closest": [] if feasible else rows[:3],
        "candidates": rows,
        "pruned": pruned,
        "slo": slo.as_dict(),
        "workload": workload.as_dict(base),
        "model": base.model,
        "prices": {name: price_of(name, prices).as_dict() for name in sorted(used)},
        "search": {"candidates": space.size(), "pruned": len(pruned), "simulated": len(rows),
                   "replications": options.replications, "min_p_meet": options.min_p_meet,
                   "surrogate_screen": options.surrogate},
    }


def _screened(survivors: list, base: Settings, slo: PlanSLO, pruned: list[dict[str, Any]]) -> list:
    """The survivors the surrogate does not drop; the dropped ones go to ``pruned`` with the reason."""
    from latsim.plan.screen import screen

    kept = []
    for candidate, reason in zip(survivors, screen([c[0] for c in survivors], base, slo), strict=True):
        if reason is None:
            kept.append(candidate)
        else:
            settings, deployment, price, _ = candidate
            pruned.append(_pruned_row(settings, deployment, price, reason))
    return kept


def _prune(candidates: list[Settings], workload: Workload, prices: dict[str, float] | None
           ) -> tuple[list[tuple[Settings, Deployment, Price, Bounds]], list[dict[str, Any]]]:
    from latsim.scenario import build_deployment

    keep, pruned = [], []
    for s in candidates:
        try:
            deployment = build_deployment(s)
        except ValueError as exc:
            pruned.append({**_identity(s, None), "reason": f"invalid: {exc}"})
            continue
        price = price_of(deployment.device.name, prices)
        bounds = _bounds(deployment, workload)
        if not bounds.fits and bounds.reason.startswith("memory: ") and deployment.engine.max_model_len is None:
            engine = replace(deployment.engine, max_model_len=_round_up(workload.longest))
            deployment = replace(deployment, engine=engine)
            bounds = _bounds(deployment, workload)
        if not bounds.fits:
            pruned.append(_pruned_row(s, deployment, price, bounds.reason))
        elif bounds.max_rps < workload.qps:
            pruned.append(_pruned_row(s, deployment, price, f"throughput: at most {bounds.max_rps:.2f} req/s "
                                                            f"(roofline bound) < {workload.qps:g} offered"))
        else:
            keep.append((s, deployment, price, bounds))
    return keep, pruned


_BOUNDS: dict[tuple[Any, ...], Bounds] = {}


def _bounds(deployment: Deployment, workload: Workload) -> Bounds:
    key = (deployment, workload)
    if len(_BOUNDS) > 4096:  # one search needs a few hundred; a long-lived process must not grow
        _BOUNDS.clear()
    if key not in _BOUNDS:
        _BOUNDS[key] = capacity_bounds(deployment, workload.mean_input, workload.mean_output, workload.longest)
    return _BOUNDS[key]


def _round_up(tokens: int, step: int = 1024) -> int:
    return int(math.ceil(tokens / step) * step)


def _identity(s: Settings, deployment: Deployment | None) -> dict[str, Any]:
    tp, replicas = s.tp or 1, s.replicas or 1
    return {"device": deployment.device.name if deployment else s.device, "tp": tp, "replicas": replicas,
            "gpus": tp * replicas, "weight_dtype": s.weight_dtype,
            "max_num_seqs": s.max_num_seqs, "max_num_batched_tokens": s.max_num_batched_tokens,
            "max_model_len": deployment.engine.max_model_len if deployment else s.max_model_len}


def _costs(price: Price, gpus: int, workload: Workload) -> dict[str, Any]:
    per_hour = price.usd_per_gpu_hour * gpus
    out_tokens_h = workload.qps * workload.mean_output * 3600.0
    all_tokens_h = workload.qps * (workload.mean_input + workload.mean_output) * 3600.0
    return {"usd_per_hour": per_hour, "usd_per_million_output_tokens": per_hour / out_tokens_h * 1e6,
            "usd_per_million_tokens": per_hour / all_tokens_h * 1e6, "price": price.label()}


def _pruned_row(s: Settings, deployment: Deployment, price: Price, reason: str) -> dict[str, Any]:
    ident = _identity(s, deployment)
    return {**ident, "usd_per_hour": price.usd_per_gpu_hour * ident["gpus"], "reason": reason}


def _evaluate_row(s: Settings, deployment: Deployment, price: Price, bounds: Bounds, workload: Workload,
                  slo: PlanSLO, options: Options) -> dict[str, Any]:
    summary = screened(deployment, s, slo, options.replications, options.seed, options.min_p_meet)
    binding, headroom = slo.binding(summary)
    values = slo.values(summary)
    live = at_live_edge(deployment, summary, slo, values)
    ident = _identity(s, deployment)
    return {
        **ident,
        **{k: summary[k] for k in ("ttft_ms", "tpot_ms", "e2e_ms", "itl_ms")},
        "stable": summary["stable"], "saturation": summary["saturation"], "p_meet": summary["p_meet"],
        "meets_slo": meets(summary, options.min_p_meet), "binding": binding, "headroom": headroom, "slo_values": values,
        "meets_slo_at_live_edge": live,
        "max_rps_at_slo": None, "max_rps_at_slo_live_edge": None, "rate_bound_rps": bounds.max_rps,
        "throughput_rps": summary["throughput_rps"],
        "replications": summary["replications"],
        "cost_model": summary["cost_model"], **_costs(price, ident["gpus"], workload),
    }


def _rank(row: dict[str, Any]) -> tuple[Any, ...]:
    """Meeting candidates by price (then headroom); the others by how close they come."""
    if row["meets_slo"]:
        return (0, row["usd_per_hour"], -row["headroom"])
    return (1, -(row["headroom"] if math.isfinite(row["headroom"]) else -math.inf), row["usd_per_hour"])


def _rate_search(rows: list[dict[str, Any]], survivors: list[tuple[Settings, Deployment, Price, Bounds]],
                 workload: Workload, slo: PlanSLO, options: Options) -> None:
    """Fill ``max_rps_at_slo`` (and the cost per million output tokens at that rate) of the
    feasible rows, or of the closest three when none is feasible, and ``max_rps_at_slo_live_edge``
    where the live error band describes the candidate's kind (:mod:`latsim.plan.rate`)."""
    if not options.rate_search or not rows:
        return
    chosen = [r for r in rows if r["meets_slo"]] or rows[:3]
    by_identity = {_key(_identity(s, d)): (s, d, p, b) for s, d, p, b in survivors}
    for row in chosen:
        s, deployment, _, bounds = by_identity[_key(row)]
        probe = RateProbe(deployment, s, slo, options.replications, options.seed, options.min_p_meet)
        rate = max_rate_at_slo(probe, workload.qps, bounds.max_rps)
        row["max_rps_at_slo"] = rate
        if not deployment_why(deployment, str(row["cost_model"])):
            row["max_rps_at_slo_live_edge"] = max_rate_at_live_edge(probe, workload.qps, rate)
        if rate:
            row["usd_per_million_output_tokens_at_max_rps"] = row["usd_per_hour"] / (rate * workload.mean_output
                                                                                       * 3600.0) * 1e6


def _key(ident: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(ident[k] for k in ("device", "tp", "replicas", "weight_dtype", "max_num_seqs",
                                    "max_num_batched_tokens"))
