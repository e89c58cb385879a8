"""The token budget as vLLM 0.25.1 takes it (``EngineArgs`` defaults, ``SchedulerConfig`` checks)."""

from __future__ import annotations

import pytest

from latsim import Deployment, EngineConfig, load_device, load_model
from latsim.deployment import resolve_engine
from latsim.engines.vllm.engine import SPEC, limits_for
from tests.test_cli import run


def deployment(**engine) -> Deployment:
    return Deployment(load_model("llama-3.1-8b"), load_device("h100"), engine=EngineConfig(**engine))


def test_a_given_budget_below_max_model_len_without_chunking_is_refused_as_vllm_does():
    with pytest.raises(ValueError, match=r"max_num_batched_tokens 16 is below max_model_len 4096 .*vLLM 0.25.1"):
        SPEC.plan_memory(deployment(max_num_batched_tokens=16, enable_chunked_prefill=False, max_model_len=4096))


def test_a_defaulted_budget_without_chunking_is_raised_to_max_model_len():
    d = deployment(enable_chunked_prefill=False, max_model_len=20_000)
    limits = limits_for(resolve_engine(d), SPEC.plan_memory(d))
    assert limits.max_num_batched_tokens == 20_000


def test_a_budget_below_a_given_max_num_seqs_is_refused():
    with pytest.raises(ValueError, match=r"below max_num_seqs 32.*--max-num-seqs <= 16"):
        SPEC.plan_memory(deployment(max_num_batched_tokens=16, max_num_seqs=32))


def test_a_defaulted_max_num_seqs_is_capped_at_the_budget():
    engine = resolve_engine(deployment(max_num_batched_tokens=16))
    assert engine.max_num_seqs == 16 and SPEC.plan_memory(deployment(max_num_batched_tokens=16))


def test_the_cli_says_why(monkeypatch, capsys):
    code, _, err = run(["predict", "--num-requests", "5", "--max-num-batched-tokens", "16", "--no-chunked-prefill"],
                       monkeypatch, capsys)
    assert code == 2 and "vLLM 0.25.1" in err and "--chunked-prefill" in err
