"""Predictions of fixed scenarios equal the recorded ones (see ``scenarios.py``)."""

from __future__ import annotations

import json

import pytest

from tests.golden.scenarios import HERE, SCENARIOS, run


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_prediction_is_unchanged(name: str) -> None:
    recorded = json.loads((HERE / f"{name}.json").read_text())
    assert json.loads(json.dumps(run(name))) == recorded
