"""One declaration of the settings: the CLI options, the deployment-file schema and the defaults
all come from :class:`latsim.config.Settings`."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

import pytest
import typer

from latsim.cli import app
from latsim.cli.options import setting_flag
from latsim.config import ENGINE_KEYS, WORKLOAD_KEYS, DeploymentFile, Settings, file_key, load_deployment_file
from latsim.deployment import Deployment, EngineConfig
from latsim.scenario import DEFAULTS, merge

NAMES = [f.name for f in fields(Settings)]


def _predict_options() -> dict[str, Any]:
    command = typer.main.get_group(app).commands["predict"]
    return {p.name: p for p in command.params if p.param_type_name == "option"}


@pytest.mark.parametrize("name", NAMES)
def test_every_setting_is_a_predict_option(name: str) -> None:
    option = _predict_options()[name]
    assert setting_flag(name) in option.opts
    assert option.help == next(f.metadata["help"] for f in fields(Settings) if f.name == name)


def test_boolean_settings_have_a_negative_flag() -> None:
    options = _predict_options()
    assert "--no-chunked-prefill" in options["enable_chunked_prefill"].secondary_opts
    assert "--no-async-scheduling" in options["async_scheduling"].secondary_opts


def test_the_file_schema_has_every_setting_in_its_section() -> None:
    schema = DeploymentFile.model_json_schema()
    top = set(schema["properties"]) - {"engine", "workload"}
    engine = set(schema["$defs"]["EngineSection"]["properties"])
    workload = set(schema["$defs"]["WorkloadSection"]["properties"])
    assert {file_key(k) for k in ENGINE_KEYS} == engine and set(WORKLOAD_KEYS) == workload
    assert top | set(ENGINE_KEYS) | set(WORKLOAD_KEYS) == set(NAMES)


def test_engine_name_key_in_a_file(tmp_path) -> None:
    path = tmp_path / "d.yaml"
    path.write_text("engine: {name: static, max_num_seqs: 8}\nworkload: {qps: 2}\n")
    settings = merge(Settings(), load_deployment_file(path))
    assert (settings.engine, settings.max_num_seqs, settings.qps) == ("static", 8, 2.0)


def test_defaults_are_the_deployment_and_engine_field_defaults() -> None:
    for cls in (Deployment, EngineConfig):
        for f in fields(cls):
            if f.name in NAMES and not callable(f.default_factory) and f.name not in ("model", "device"):
                assert getattr(DEFAULTS, f.name) == f.default, f.name


def test_flags_win_over_the_file_and_the_file_over_defaults(tmp_path) -> None:
    path = tmp_path / "d.yaml"
    path.write_text("tp: 2\nengine: {block_size: 32}\n")
    settings = merge(Settings(tp=4), load_deployment_file(path))
    assert (settings.tp, settings.block_size, settings.replicas) == (4, 32, DEFAULTS.replicas)


@pytest.mark.parametrize("body", [b"model: [llama\n  device: : h100\n", b"\xff\xfe binary"])
def test_an_unreadable_deployment_file_is_one_line_naming_it(body: bytes, tmp_path) -> None:
    path = tmp_path / "d.yaml"
    path.write_bytes(body)
    with pytest.raises(ValueError) as info:
        load_deployment_file(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)
