"""``latsim predict --surrogate``: from prediction settings to the surrogate's answer.

The settings and the workload (a trace file or the synthetic one the settings describe) are
summarised into one grid row (:func:`config_row`); :func:`answer` returns the simulator's
summary keys filled from the surrogate, ``"cost_model": "surrogate"`` and a ``surrogate``
block (its ``latency`` says whether the percentiles are steady-state figures, or, where the
surrogate predicts an unstable run, those of a run of the training length), or ``None`` with
the reasons when the configuration is outside what the surrogate learned (then the simulator
answers).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from latsim.config import Settings
from latsim.registry import engine_spec
from latsim.workload.trace import RequestTrace

SUMMARY_KEYS = ("num_requests", "num_completed", "num_rejected", "num_unfinished", "preemptions",
                "cached_token_fraction", "ttft_ms", "tpot_ms", "e2e_ms", "queue_ms", "itl_ms", "duration_s",
                "throughput_rps", "input_tokens_per_s", "output_tokens_per_s", "kv_capacity_tokens", "kv_blocks",
                "kv_peak_utilization", "max_model_len", "cost_model", "engine_steps", "offered_rps", "stable",
                "horizon_s", "replications", "saturation", "capacity_rps", "stability", "intervals", "inputs",
                "weight_dtype", "weight_dtype_source", "kv_dtype", "kv_dtype_source", "host_speed",
                "validated_error")
"""The top-level keys of the simulator's summary (``latsim predict --json``)."""
SURROGATE_LIVE_ERROR = ("a surrogate answer: its own error is surrogate.held_out_median_error (against the "
                        "simulator); the simulator's answer carries the live band")

TRAINED_ENGINE = {"engine": "vllm", "block_size": 16, "gpu_memory_utilization": 0.92, "enable_chunked_prefill": True,
                  "enable_prefix_caching": True, "async_scheduling": True, "num_gpu_blocks": None,
                  "host_speed": 1.0, "max_model_len": None, "router": "round-robin", "executor": None,
                  "language_model_only": False}
"""Settings every training configuration had; another value is outside the domain (an executor
given as the engine's default for the row's TP is the default)."""
KV_AS_TRAINED = 0.10
"""How far the KV cache's context at the workload's typical request length may be from the one
the surrogate's simulator gave it (every layer keeping every token) for the surrogate to answer:
sliding-window layers (Gemma 3's five in six, windows of 512-1,024) hold only their window."""


def summarize_trace(trace: RequestTrace) -> dict[str, float]:
    """The workload columns of a trace: offered rate, log-length median and spread, prefix share."""
    if len(trace) < 2 or trace.duration_s <= 0:
        raise ValueError("the surrogate needs a trace of at least two requests over a positive time span")
    row: dict[str, float] = {"qps": (len(trace) - 1) / trace.duration_s}
    for kind, tokens in (("input", trace.input_tokens), ("output", trace.output_tokens)):
        logs = np.log(tokens.astype(float))
        row[f"{kind}_median"] = float(np.exp(np.median(logs)))
        row[f"{kind}_sigma"] = float(np.std(logs))
    shared = 0.0
    if trace.has_prefixes and trace.prefix_tokens is not None and trace.prefix_group is not None:
        shared = float(trace.prefix_tokens[trace.prefix_group >= 0].sum())
    row["prefix_share"] = shared / float(trace.input_tokens.sum())
    return row


def config_row(settings: Settings, trace: RequestTrace) -> tuple[pd.DataFrame, list[str]]:
    """``(one-row grid DataFrame, settings outside the trained engine)`` for merged ``settings``."""
    from latsim.scenario import DEFAULTS

    def value(name: str) -> Any:
        given = getattr(settings, name)
        return given if given is not None else getattr(DEFAULTS, name)

    from latsim.scenario import build_deployment

    deployment = build_deployment(settings)  # resolves "auto" dtypes from the checkpoint's config
    row = {"model": value("model"), "device": value("device"), "tp": value("tp"), "replicas": value("replicas"),
           "weight_dtype": deployment.weight_dtype, "kv_dtype": deployment.kv_dtype,
           "max_num_seqs": np.nan if settings.max_num_seqs is None else settings.max_num_seqs,
           "max_num_batched_tokens": np.nan if settings.max_num_batched_tokens is None
           else settings.max_num_batched_tokens, **summarize_trace(trace)}
    if not settings.trace and settings.qps:
        row["qps"] = float(settings.qps)  # the process's rate, not one sample's
    unsupported = [f"{k}={value(k)!r} (trained on {v!r})" for k, v in TRAINED_ENGINE.items()
                   if not _as_trained(k, value(k), row)]
    if not settings.trace and value("arrival") != "poisson":
        unsupported.append(f"arrival={value('arrival')!r} (trained on 'poisson')")
    unsupported.extend(_kv_unlike_training(deployment, row))
    return pd.DataFrame([row]), unsupported


def _kv_unlike_training(deployment: Any, row: dict[str, Any]) -> list[str]:
    """The reason the KV cache holds a context unlike the one the training's simulator gave it
    (:data:`KV_AS_TRAINED`), or nothing; a plan that does not fit is left to the surrogate's
    own domain."""
    from latsim.deployment import resolve_engine

    engine = resolve_engine(deployment)
    try:
        plan = engine_spec(engine.engine).plan_memory(deployment, engine)
    except ValueError:
        return []
    tokens = max(1, int(row["input_median"] + row["output_median"]))
    ratio = plan.kv_tokens_at(tokens) / max(plan.kv_tokens_unwindowed, 1)
    if abs(ratio - 1.0) <= KV_AS_TRAINED:
        return []
    return [f"sliding-window layers: at {tokens}-token requests the KV cache holds {ratio:.2f}x the context the "
            f"surrogate's simulator gave every layer (it answers within {KV_AS_TRAINED:.0%} of it)"]


def _as_trained(name: str, value: Any, row: dict[str, Any]) -> bool:
    """Whether setting ``name`` at ``value`` is what every training row had (:data:`TRAINED_ENGINE`)
    for a configuration like ``row``: the router of one replica does not matter, and vLLM's
    default executor for the row's TP, given explicitly, is the default."""
    if value == TRAINED_ENGINE[name] or (name == "router" and int(row["replicas"]) == 1):
        return True
    return name == "executor" and value == engine_spec("vllm").default_executor(int(row["tp"]))


def _block(pred: pd.Series, metric: str) -> dict[str, float | None]:
    return {"mean": None, **{q: float(pred[f"{metric}_{q}"]) for q in ("p50", "p90")}, "p95": None,
            "p99": float(pred[f"{metric}_p99"]), "p99_ci95": None, "count": None}


def answer(settings: Settings, trace: RequestTrace, surrogate: Any) -> tuple[dict | None, list[str]]:
    """``(summary, [])`` from the surrogate, or ``(None, reasons)`` when it is outside the domain."""
    row, reasons = config_row(settings, trace)
    pred = surrogate.predict(row).iloc[0]
    if not pred["in_domain"]:
        reasons = [*reasons, *str(pred["out_of_domain"]).split("; ")]
    if reasons:
        return None, reasons
    summary: dict[str, Any] = dict.fromkeys(SUMMARY_KEYS)
    summary.update({"num_requests": len(trace), "ttft_ms": _block(pred, "ttft_ms"), "tpot_ms": _block(pred, "tpot_ms"),
                    "e2e_ms": _block(pred, "e2e_ms"), "throughput_rps": float(pred["throughput_rps"]),
                    "offered_rps": float(row["qps"].iloc[0]), "stable": bool(pred["stable"]),
                    "cost_model": "surrogate", "host_speed": TRAINED_ENGINE["host_speed"],
                    "validated_error": {"available": False, "why": SURROGATE_LIVE_ERROR}})
    summary["surrogate"] = {"in_domain": True, "stable_probability": float(pred["stable_probability"]),
                            "workload": {k: float(row[k].iloc[0]) for k in ("qps", "input_median", "input_sigma",
                                                                            "output_median", "output_sigma",
                                                                            "prefix_share")},
                            "latency": latency_meaning(bool(pred["stable"]), surrogate.card),
                            "simulator_commit": surrogate.card.get("simulator_commit"),
                            "held_out_median_error": _headline(surrogate.card)}
    return summary, []


def latency_meaning(stable: bool, card: dict) -> str:
    """What the answer's latency percentiles are: steady-state figures where the surrogate predicts
    a stable run; where it predicts an unstable one, those of a run of the training length (the
    queue grows through the run, so they grow with its length, as the simulator's own do)."""
    if stable:
        return "steady state"
    n = card.get("num_requests_per_configuration")
    return (f"unstable: those of a {n}-request run, growing with the run's length" if n
            else "unstable: those of a training run, growing with the run's length")


def _headline(card: dict) -> dict[str, float] | None:
    errors = card.get("held_out", {}).get("configuration")
    if not errors:
        return None
    return {t: round(float(e["median"]), 4) for t, e in errors.items() if "median" in e}
