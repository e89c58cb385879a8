"""The cost-model factory: auto falls back to the roofline; unknown kinds are refused."""

from __future__ import annotations

import pytest

from latsim.catalog.devices import DeviceSpec
from latsim.catalog.models import ModelSpec
from latsim.costmodel.batch import BatchShape
from latsim.costmodel.factory import BUILDERS, build_cost_model


def test_auto_falls_back_to_roofline(llama: ModelSpec, gpu: DeviceSpec) -> None:
    model = build_cost_model(llama, gpu, tp=2, weight_dtype="fp8", kv_dtype="fp8")
    assert model.kind == "roofline"
    assert model.describe()["tp"] == 2
    assert model.step_time(BatchShape(decode_seqs=1, decode_kv_tokens=10)) > 0


def test_explicit_kinds(llama: ModelSpec, gpu: DeviceSpec) -> None:
    assert "roofline" in BUILDERS
    assert build_cost_model(llama, gpu, kind="roofline").kind == "roofline"
    with pytest.raises(ValueError, match="kind='magic'"):
        build_cost_model(llama, gpu, kind="magic")


def test_invalid_deployment_propagates(llama: ModelSpec, gpu: DeviceSpec) -> None:
    with pytest.raises(ValueError, match="tp=5"):
        build_cost_model(llama, gpu, tp=5)
