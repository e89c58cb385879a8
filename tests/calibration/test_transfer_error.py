"""The shipped leave-one-GPU-out transfer error and its reader."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from latsim.costmodel.profile.transfer import TRANSFER_FILE, transfer_uncertainty


def test_shipped_table_covers_every_op_family_with_the_worst_gpu_at_least_the_median() -> None:
    table = transfer_uncertainty()
    assert {"gemm", "attn_prefill", "attn_decode", "moe", "allreduce"} <= set(table)
    for row in table.values():
        assert 0.0 < row["median_ape_pct"] <= row["worst_ape_pct"]
    doc = json.loads(TRANSFER_FILE.read_text())
    assert set(doc["per_gpu"]) == {"a100", "l40s", "h100", "h200", "b200"}


@pytest.mark.parametrize("content, needle", [("{}", "summary"), ('{"summary": {"gemm": {"median_ape_pct": 1}}}',
                                                                  "worst_ape_pct"), ("[1", "corrupt")])
def test_bad_table_is_one_line_value_error(tmp_path: Path, content: str, needle: str) -> None:
    path = tmp_path / "t.json"
    path.write_text(content)
    with pytest.raises(ValueError, match=needle) as exc:
        transfer_uncertainty(path)
    assert "\n" not in str(exc.value)


def test_devices_say_where_kernel_costs_come_from() -> None:
    from latsim.catalog.lookup import load_device
    from latsim.costmodel.factory import calibration_status

    assert calibration_status(load_device("h200")).startswith("measured here")
    assert calibration_status(load_device("h100")).startswith("measured here")
    assert calibration_status(load_device("b200")) == "imported (aiconfigurator, vLLM 0.24.0)"
    assert calibration_status(load_device("a100")) == "imported (aiconfigurator, vLLM 0.14.0)"
    assert calibration_status(load_device("l4")) == "roofline"
