"""Where the engine runs the model (``EngineConfig.executor``): vLLM's defaults and the replay of a run."""

from __future__ import annotations

import pytest

from latsim.catalog.lookup import load_device, load_model
from latsim.deployment import Deployment, EngineConfig, resolve_engine
from latsim.engines.vllm.engine import SPEC, limits_for
from latsim.validate.compare import run_executor


def deployment(tp: int, **engine) -> Deployment:
    return Deployment(model=load_model("llama-3.1-8b"), device=load_device("h200"), tp=tp,
                      engine=EngineConfig(**engine))


@pytest.mark.parametrize(("tp", "executor"), [(1, "uni"), (2, "mp"), (8, "mp")])
def test_vllm_runs_the_model_in_its_own_process_on_one_gpu_and_in_workers_above(tp, executor) -> None:
    d = deployment(tp)
    engine = resolve_engine(d)
    assert engine.executor == executor
    scheduler = SPEC.make_scheduler(engine, SPEC.plan_memory(d, engine))
    assert scheduler.launch.in_worker == (executor == "mp")


def test_a_given_executor_wins_over_the_default() -> None:
    assert resolve_engine(deployment(1, executor="mp")).executor == "mp"
    assert resolve_engine(deployment(2, executor="uni")).executor == "uni"
    assert limits_for(resolve_engine(deployment(2)), SPEC.plan_memory(deployment(2))).executor == "mp"


def test_an_unknown_executor_is_refused_with_the_accepted_ones() -> None:
    with pytest.raises(ValueError, match=r"executor must be one of uni, mp .* got 'ray'"):
        EngineConfig(executor="ray")


@pytest.mark.parametrize(("meta", "executor"), [
    ({}, None),
    ({"engine_args": {"distributed_executor_backend": "mp"}}, "mp"),
    ({"engine_config": {"executor": "uni"}, "engine_args": {"distributed_executor_backend": "mp"}}, "uni"),
])
def test_a_replay_takes_the_runs_executor(meta, executor) -> None:
    assert run_executor(meta) == executor


def test_a_run_on_an_executor_latsim_does_not_model_is_an_error() -> None:
    with pytest.raises(ValueError, match="'ray'"):
        run_executor({"engine_config": {"executor": "ray"}})
