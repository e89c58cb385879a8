"""Fixtures for the cost-model tests."""

from __future__ import annotations

import pytest
from costmodel_specs import h100, llama_8b, mixtral_8x7b

from latsim.catalog.devices import DeviceSpec
from latsim.catalog.models import ModelSpec


@pytest.fixture
def llama() -> ModelSpec:
    return llama_8b()


@pytest.fixture
def mixtral() -> ModelSpec:
    return mixtral_8x7b()


@pytest.fixture
def gpu() -> DeviceSpec:
    return h100()
