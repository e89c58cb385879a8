"""Advice for a deployment that does not fit: single changes that were re-planned and work.

Every suggestion is checked by planning the changed deployment again (memory plan and vLLM's
start-up checks), so advice never contradicts itself: a suggested ``--tp`` itself fits, and a
suggested ``--max-num-seqs`` is one the engine would start with.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

from latsim.deployment import Deployment, resolve_engine

Works = Callable[[Deployment], bool]
"""Whether a deployment plans (memory and start-up checks) without error."""


def fit_advice(deployment: Deployment, works: Works) -> str:
    """``"; it fits with --tp 2, or with --max-num-seqs 1024"`` style text: the changes (of one
    setting, or of both engine knobs together) that make ``deployment`` work, or a sentence
    saying none does."""
    found: dict[str, str] = {}
    for group, flag, changed in _candidates(deployment):
        if group not in found and works(changed):
            found[group] = flag
    if found:
        return "; it fits with " + ", or with ".join(found.values())
    tried = "--tp, --max-num-seqs, --max-num-batched-tokens" + (", --language-model-only"
                                                                if deployment.model.encoder_params else "")
    return f"; no change of {tried} or --weight-dtype alone makes it fit: use a GPU with more memory"


def _candidates(d: Deployment) -> Iterator[tuple[str, str, Deployment]]:
    """``(setting, flag text, changed deployment)``, smallest change first within a setting:
    larger tensor-parallel sizes, the engine's defaults for given knobs, a multimodal checkpoint
    without its encoder, fp8 weights."""
    for tp in range(d.tp + 1, d.device.max_gpus_per_node + 1):
        changed = _with_tp(d, tp)
        if changed is not None:
            yield "tp", f"--tp {tp}", changed
    knobs = [k for k in ("max_num_seqs", "max_num_batched_tokens") if getattr(d.engine, k) is not None]
    for group in [[k] for k in knobs] + ([knobs] if len(knobs) > 1 else []):
        defaults: dict[str, Any] = dict.fromkeys(group)
        changed = replace(d, engine=replace(d.engine, **defaults))
        resolved = resolve_engine(changed)
        yield "+".join(group), " ".join(f"--{k.replace('_', '-')} {getattr(resolved, k)}" for k in group), changed
    if d.model.encoder_params and not d.engine.language_model_only:
        yield "language_model_only", "--language-model-only", replace(d, engine=replace(d.engine,
                                                                                     language_model_only=True))
    if d.weight_dtype in ("bf16", "fp16"):
        yield "weight_dtype", "--weight-dtype fp8", replace(d, weight_dtype="fp8")


def _with_tp(d: Deployment, tp: int) -> Deployment | None:
    """``d`` at tensor-parallel size ``tp``, or None when that is not a valid deployment."""
    try:
        return replace(d, tp=tp)
    except ValueError:
        return None
