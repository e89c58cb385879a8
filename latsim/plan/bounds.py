"""Capacity bounds that rule a deployment out before it is simulated.

- **Memory fit**: the engine's memory plan must leave KV-cache room for the longest request
  of the workload (else the engine rejects it, or the weights do not load at all).
- **Throughput upper bound** (a roofline): a replica cannot serve requests faster than
  (a) its GPUs' peak FLOP/s allow, at ``2 x active parameters`` FLOPs per prompt and output
  token, less the embedding lookup and with the LM head's only for the tokens sampled (the
  engine computes logits for a prompt's last token alone), nor (b) its memory bandwidth allows,
  each decode step reading at least the weights a token activates once
  (:func:`~latsim.catalog.sizing.decode_bytes_read`: not the input embedding, not a vision
  encoder) and producing at most one token for each of ``B`` sequences, ``B`` the engine's
  ``max_num_seqs`` capped by how many prompts fit in the KV cache.  Both ignore attention,
  communication and host time, so the true capacity is lower: a deployment whose bound is below
  the offered rate cannot serve it, and pruning it loses nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from latsim.catalog.sizing import decode_bytes_read, param_breakdown
from latsim.deployment import Deployment, resolve_engine
from latsim.registry import engine_spec


@dataclass(frozen=True)
class Bounds:
    """What the bounds say about one deployment under one workload."""

    fits: bool
    reason: str
    kv_capacity_tokens: int
    max_rps: float
    """Upper bound on the request rate all replicas together can serve (0 when it does not fit)."""


def capacity_bounds(deployment: Deployment, mean_input: float, mean_output: float, longest: int) -> Bounds:
    """The :class:`Bounds` of ``deployment`` for requests of mean prompt ``mean_input`` and output
    ``mean_output`` tokens, the longest being ``longest`` tokens (prompt + output)."""
    engine = resolve_engine(deployment)
    try:
        plan = engine_spec(engine.engine).plan_memory(deployment, engine)
    except ValueError as exc:  # DoesNotFitError and a max_model_len above the KV capacity
        return Bounds(False, f"memory: {exc}", 0, 0.0)
    capacity = plan.kv_tokens_at(max(int(mean_input), 1))
    if plan.kv_tokens_at(longest) < longest or plan.max_model_len < longest:
        return Bounds(False, f"memory: the KV cache holds {capacity} tokens, max_model_len {plan.max_model_len}; "
                             f"the longest request needs {longest}", capacity, 0.0)
    return Bounds(True, "", capacity, deployment.replicas * replica_rate_bound(deployment, mean_input, mean_output,
                                                                              capacity))


def replica_rate_bound(deployment: Deployment, mean_input: float, mean_output: float, kv_tokens: int) -> float:
    """Requests/s one replica cannot exceed (module docstring, bound b and a)."""
    d = deployment
    parts = param_breakdown(d.model)
    body = parts.active - parts.embedding - parts.lm_head
    peak = max(v for k, v in d.device.peak_flops.items() if k != "fp32") * d.tp
    compute = peak / (2.0 * body * (mean_input + mean_output) + 2.0 * parts.head * max(mean_output, 1.0))
    weights_read = decode_bytes_read(d.model, d.weight_dtype)
    seqs = min(resolve_engine(d).max_num_seqs or 1, max(1, kv_tokens // int(mean_input + 1)))
    tokens_per_s = seqs * d.device.hbm_bandwidth * d.tp / weights_read
    return min(compute, tokens_per_s / max(mean_output, 1.0))
