"""``compare``: several GPUs (or configurations) side by side over a range of request rates.

For each GPU (or configuration: a GPU with its own TP, replicas, dtypes or engine knobs), one
deployment (the given ``tp``, else the smallest TP in :data:`TPS` whose weights and longest
request fit) is evaluated at every rate with :func:`latsim.plan.evaluate.evaluate`.  Per GPU
or configuration the answer gives:

- ``curve``: per rate, P50/P99 TTFT and TPOT (with the P99 interval), ``stable``, ``p_meet``
  (rates past two unstable ones in a row get one replication: they only show the queue growing);
- ``knee_rps``: the highest rate before the P99 TTFT *departs*, i.e. before the first rate that
  is unstable or whose P99 TTFT exceeds :data:`KNEE_FACTOR` times the lightest rate's;
- ``max_rps_at_slo`` (with an SLO): the highest rate of the curve that is stable and meets the
  SLO in at least ``min_p_meet`` of the replications, every lower rate meeting it too;
- ``max_rps_at_slo_live_edge`` (with an SLO, where the live error band describes the deployment:
  the calibrated H200 or the H100 at TP=1, :mod:`latsim.validate.error_band`): the same with every point's
  SLO also met were the live engine at the band's slow edge (``meets_slo_at_live_edge`` per
  point), never past a rate whose load the band does not reach (above 0.95 of capacity); ``None``
  where no band applies (or the lightest rate fails);
- ``usd_per_million_output_tokens``: the deployment's price per hour over the output tokens it
  serves in an hour at ``max_rps_at_slo`` when an SLO is given, else at the knee.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from latsim.config import Settings
from latsim.deployment import Deployment
from latsim.plan.evaluate import at_live_edge, evaluate, meets
from latsim.plan.prices import price_of
from latsim.plan.slo import PlanSLO

TPS = (1, 2, 4, 8)
KNEE_FACTOR = 2.0
SATURATED = 2


def pick_deployment(settings: Settings, longest: int) -> Deployment:
    """``settings``' deployment; without ``tp``, the smallest TP of :data:`TPS` that fits.
    ValueError (the memory plan's message) when none fits."""
    from latsim.plan.bounds import capacity_bounds
    from latsim.scenario import build_deployment

    if settings.tp:
        return build_deployment(settings)
    reasons = []
    for tp in TPS:
        try:
            deployment = build_deployment(replace(settings, tp=tp))
        except ValueError as exc:
            reasons.append(str(exc))
            continue
        if capacity_bounds(deployment, 1.0, 1.0, longest).fits:
            return deployment
        reasons.append(f"tp={tp} does not fit")
    raise ValueError(f"{settings.model} fits on no {settings.device} deployment with TP in {TPS}: {reasons[-1]}")


def compare(base: Settings, configs: tuple[tuple[str, dict[str, Any]], ...], rates: tuple[float, ...],
            slo: PlanSLO | None,
            replications: int = 2, min_p_meet: float = 0.8, prices: dict[str, float] | None = None
            ) -> dict[str, Any]:
    """The JSON-ready comparison (module docstring) at ``rates`` of ``configs``, ``(label,
    settings)`` pairs (``{"device": "h100", "tp": 2}``: a GPU and optionally deployment settings),
    under ``base``'s model, engine and workload settings; ``devices`` in the answer is keyed by label."""
    from latsim.plan.search import Workload
    from latsim.scenario import merge

    if not rates:
        raise ValueError("--qps gives no rates")
    base = merge(base, None)
    workload = Workload.of(replace(base, qps=rates[0]))
    out: dict[str, Any] = {"model": base.model, "rates": list(rates), "slo": slo.as_dict() if slo else None,
                           "workload": workload.as_dict(base), "replications": replications, "devices": {}}
    for label, config in configs:
        settings = replace(base, **config)
        deployment = pick_deployment(settings, workload.longest)
        curve = _curve(deployment, settings, rates, slo, replications, min_p_meet)
        price = price_of(deployment.device.name, prices)
        gpus = deployment.tp * deployment.replicas
        knee, at_slo = knee_rate(curve), slo_rate(curve) if slo else None
        at_live_edge = slo_rate(curve, "meets_slo_at_live_edge") if slo else None
        rate = at_slo if slo else knee
        out["devices"][label] = {
            "device": deployment.device.name, "tp": deployment.tp, "replicas": deployment.replicas, "gpus": gpus,
            "weight_dtype": deployment.weight_dtype,
            "curve": curve, "knee_rps": knee, "max_rps_at_slo": at_slo, "max_rps_at_slo_live_edge": at_live_edge,
            "usd_per_hour": price.usd_per_gpu_hour * gpus, "price": price.as_dict(), "price_label": price.label(),
            "usd_per_million_output_tokens": (price.usd_per_gpu_hour * gpus / (rate * workload.mean_output * 3600.0)
                                              * 1e6) if rate else None,
            "cost_at": "max_rps_at_slo" if slo else "knee_rps",
            **cost_source(deployment),
        }
    return out


def cost_source(deployment: Deployment) -> dict[str, Any]:
    """Where the device's kernel costs come from (``measured here``, ``imported``, ``roofline``) and,
    for a GPU priced without kernel measurements, the measured uncertainty of that pricing: the
    leave-one-GPU-out error per op family of predicting a GPU's kernels from the others and its
    specs (:func:`latsim.costmodel.profile.transfer.transfer_uncertainty`)."""
    from latsim.costmodel.factory import calibration_status
    from latsim.costmodel.profile.transfer import transfer_uncertainty

    status = calibration_status(deployment.device)
    out: dict[str, Any] = {"cost_source": status}
    if status.startswith("roofline"):
        out["kernel_uncertainty_pct"] = transfer_uncertainty()
        out["kernel_uncertainty_note"] = (
            "no kernel measurements for this GPU: per op family, the median and worst error of predicting a "
            "GPU's kernel times from the other GPUs' measurements and its datasheet (leave one GPU out); its "
            "datasheet roofline alone was off by 47-92 % in that study (docs/imported-profiles.md)")
    return out


def _curve(deployment: Deployment, settings: Settings, rates: tuple[float, ...], slo: PlanSLO | None,
           replications: int, min_p_meet: float) -> list[dict[str, Any]]:
    """The points of one device; past :data:`SATURATED` unstable rates in a row, one replication
    per point (the queue only grows from there; the point says how many runs it has)."""
    curve: list[dict[str, Any]] = []
    for rate in rates:
        saturated = len(curve) >= SATURATED and not any(p["stable"] for p in curve[-SATURATED:])
        curve.append(_point(deployment, replace(settings, qps=rate), slo, 1 if saturated else replications,
                            min_p_meet))
    return curve


def _point(deployment: Deployment, settings: Settings, slo: PlanSLO | None, replications: int,
           min_p_meet: float) -> dict[str, Any]:
    s = evaluate(deployment, settings, slo, replications, settings.seed or 0)
    keep = ("p50", "p99", "p99_ci95")
    met = meets(s, min_p_meet) if slo else None
    live = at_live_edge(deployment, s, slo)["meets"] if slo else None
    return {"qps": settings.qps, "ttft_ms": {k: s["ttft_ms"][k] for k in keep},
            "tpot_ms": {k: s["tpot_ms"][k] for k in keep}, "stable": s["stable"], "p_meet": s["p_meet"],
            "meets_slo": met, "meets_slo_at_live_edge": None if live is None else bool(met and live),
            "throughput_rps": s["throughput_rps"], "output_tokens_per_s": s["output_tokens_per_s"],
            "replications": s["replications"]}


def knee_rate(curve: list[dict[str, Any]]) -> float | None:
    """The highest rate before the P99 TTFT departs (module docstring); None when even the lightest
    rate is unstable."""
    base = curve[0]["ttft_ms"]["p99"]
    knee = None
    for point in curve:
        p99 = point["ttft_ms"]["p99"]
        if not point["stable"] or p99 is None or base is None or p99 > KNEE_FACTOR * base:
            break
        knee = point["qps"]
    return knee


def slo_rate(curve: list[dict[str, Any]], key: str = "meets_slo") -> float | None:
    """The highest rate meeting the SLO (``point[key]``) with every lower rate meeting it; None when
    the lightest rate does not.  A point whose ``key`` is None (not known there: no SLO, or a load
    the live error band does not reach) ends the walk as a miss does: nothing is claimed past it."""
    best = None
    for point in curve:
        if not point.get(key):
            break
        best = point["qps"]
    return best
