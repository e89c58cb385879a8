"""Advice for a deployment that does not fit: every suggestion, applied, must itself work."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from latsim import Deployment, EngineConfig, load_device, load_model
from latsim.engines.vllm.engine import SPEC
from latsim.engines.vllm.memory import DoesNotFitError

CASES = [
    ("llama-3.1-8b", "h100", 1, {"max_num_batched_tokens": 10**6}),
    ("llama-3.1-8b", "h100", 2, {"max_num_batched_tokens": 2 * 10**6}),
    ("llama-3.1-70b", "h100", 1, {}),
    ("llama-3.1-70b", "h100", 2, {"max_model_len": 131072}),
    ("llama-3.1-8b", "l4", 1, {}),
    ("llama-3.1-8b", "h100", 1, {"max_num_batched_tokens": 10**7, "max_num_seqs": 10**6}),
    ("gemma-3-27b", "h100", 1, {"gpu_memory_utilization": 0.70, "max_model_len": 4096}),
]


def deployment(model: str, device: str, tp: int, engine: dict) -> Deployment:
    return Deployment(load_model(model), load_device(device), tp=tp, engine=EngineConfig(**engine))


def applied(d: Deployment, flag: str, value: str | None) -> Deployment:
    name = flag.replace("-", "_")
    if value is None:  # a switch
        return replace(d, engine=replace(d.engine, **{name: True}))
    if name in ("tp", "weight_dtype"):
        return replace(d, **{name: int(value) if name == "tp" else value})
    return replace(d, engine=replace(d.engine, **{name: int(value)}))


@pytest.mark.parametrize(("model", "device", "tp", "engine"), CASES)
def test_each_suggested_change_fits_when_applied(model, device, tp, engine):
    d = deployment(model, device, tp, engine)
    with pytest.raises(DoesNotFitError) as info:
        SPEC.plan_memory(d)
    suggestions = str(info.value).split("it fits with ", 1)[1].split(", or with ")
    assert suggestions, str(info.value)
    for suggestion in suggestions:
        changed = d
        for flag, value in re.findall(r"--([a-z-]+)(?: ([a-z0-9]+))?", suggestion):
            changed = applied(changed, flag, value or None)
        assert changed != d and SPEC.plan_memory(changed).num_blocks >= 1, suggestion


def test_a_huge_max_num_seqs_is_blamed_not_the_tensor_parallel_size():
    """The profiling pass samples min(tokens, sequences) rows, so memory does not grow with
    max_num_seqs past the token budget; vLLM refuses such a budget, and the message says which knob."""
    with pytest.raises(ValueError) as info:
        SPEC.plan_memory(deployment("llama-3.1-8b", "h100", 2, {"max_num_seqs": 10**9}))
    message = str(info.value)
    assert "--tp" not in message and "max_num_seqs 1000000000" in message and "--max-num-seqs <= 8192" in message


def test_when_nothing_single_helps_it_says_so():
    with pytest.raises(DoesNotFitError, match=r"no change of .* alone"):
        SPEC.plan_memory(deployment("llama-3.1-405b", "l40s", 1, {}))


def test_the_tensor_parallel_sizes_offered_are_valid():
    with pytest.raises(ValueError, match="tp=3") as info:
        deployment("llama-3.1-8b", "h100", 3, {})
    offered = [int(x) for x in str(info.value).split("one of ", 1)[1].split(", ")]
    assert offered == [1, 2, 4, 8]
    for tp in offered:
        deployment("llama-3.1-8b", "h100", tp, {})


def test_a_multimodal_checkpoint_is_told_it_fits_without_its_encoder_and_a_text_model_is_not():
    with pytest.raises(DoesNotFitError) as info:
        SPEC.plan_memory(deployment("gemma-3-27b", "h100", 1, {"gpu_memory_utilization": 0.70, "max_model_len": 4096}))
    assert "--language-model-only" in str(info.value)
    with pytest.raises(DoesNotFitError) as text_only:
        SPEC.plan_memory(deployment("llama-3.1-405b", "l40s", 1, {}))
    assert "language-model-only" not in str(text_only.value)
