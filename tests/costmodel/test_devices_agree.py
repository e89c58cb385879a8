"""`latsim devices`, the cost model predict really uses, and the README say the same thing."""

from __future__ import annotations

import re
from pathlib import Path

from latsim import load_model
from latsim.catalog.lookup import list_devices
from latsim.costmodel.factory import calibration_status, gpu_cost_model

README = Path(__file__).resolve().parents[2] / "README.md"


KIND_OF_STATUS = {"measured": "calibrated", "imported": "calibrated", "roofline": "roofline"}
"""The first word of ``latsim devices``' cost-model column -> the cost model kind it names."""


def test_the_devices_table_names_the_cost_model_predict_uses():
    model = load_model("llama-3.2-1b")
    for device in list_devices():
        said = KIND_OF_STATUS[calibration_status(device).split()[0]]
        assert said == gpu_cost_model(model, device).kind, device.name


def test_the_readme_names_the_cost_model_of_a_gpu_without_a_profile():
    model = load_model("llama-3.2-1b")
    kinds = {calibration_status(d).split()[0]: gpu_cost_model(model, d).kind for d in list_devices()}
    assert "roofline" in kinds, "every GPU has a profile: nothing left to check"
    said = re.search(r"GPUs without a profile use the `(\w+)` cost model", README.read_text())
    assert said is not None and said.group(1) == kinds["roofline"]
