"""The roofline data file: defaults load, corrupt files fail naming file and field."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from latsim.costmodel.roofline_params import (
    DEFAULT_PATH,
    PROVENANCE_KEYS,
    GemmEfficiency,
    load_roofline_params,
)


def _write(tmp_path: Path, raw: object) -> Path:
    path = tmp_path / "roofline.yaml"
    path.write_text(raw if isinstance(raw, str) else yaml.safe_dump(raw))
    return path


def _default_raw() -> dict:
    return yaml.safe_load(DEFAULT_PATH.read_text())


def test_defaults_load_with_provenance_for_every_number() -> None:
    params = load_roofline_params()
    assert params.source == str(DEFAULT_PATH)
    assert set(PROVENANCE_KEYS) <= set(params.provenance)
    assert 0 < params.memory_efficiency["gemm"] <= 1


def test_gemm_efficiency_halves_at_m_half() -> None:
    gemm = GemmEfficiency(m_half=32.0, size_classes=((1e6, 0.5), (float("inf"), 0.8)))
    assert gemm.eff_max(1e5) == 0.5 and gemm.eff_max(1e9) == 0.8
    assert gemm.efficiency(32, 1e9) == pytest.approx(0.4)
    assert gemm.efficiency(1, 1e9) < gemm.efficiency(64, 1e9) < gemm.efficiency(8192, 1e9) < 0.8


def test_unparseable_yaml_names_the_file(tmp_path: Path) -> None:
    path = _write(tmp_path, "gemm: [unclosed\n")
    with pytest.raises(ValueError, match=str(path)):
        load_roofline_params(path)


def test_missing_file_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"nope\.yaml"):
        load_roofline_params(tmp_path / "nope.yaml")


@pytest.mark.parametrize(("section", "key", "value", "field"), [
    ("memory_efficiency", "gemm", 1.5, "memory_efficiency.gemm"),
    ("compute_efficiency", "attention", "fast", "compute_efficiency.attention"),
    ("overheads", "step_s", -1.0, "overheads.step_s"),
    ("allreduce", "bus_efficiency", 0.0, "allreduce.bus_efficiency"),
    ("gemm", "m_half", None, "gemm.m_half"),
])
def test_bad_values_name_file_and_field(tmp_path: Path, section: str, key: str, value: object,
                                        field: str) -> None:
    raw = _default_raw()
    raw[section][key] = value
    path = _write(tmp_path, raw)
    with pytest.raises(ValueError, match=re.escape(field)) as info:
        load_roofline_params(path)
    assert str(path) in str(info.value)


def test_missing_field_and_missing_provenance(tmp_path: Path) -> None:
    raw = _default_raw()
    del raw["overheads"]["per_seq_s"]
    with pytest.raises(ValueError, match=r"overheads\.per_seq_s"):
        load_roofline_params(_write(tmp_path, raw))
    raw = _default_raw()
    del raw["provenance"]["gemm.m_half"]
    with pytest.raises(ValueError, match=r"gemm\.m_half"):
        load_roofline_params(_write(tmp_path, raw))


def test_size_classes_must_end_unbounded(tmp_path: Path) -> None:
    raw = _default_raw()
    raw["gemm"]["size_classes"] = [{"max_weight_elems": 1.0e6, "eff_max": 0.5}]
    with pytest.raises(ValueError, match="size_classes"):
        load_roofline_params(_write(tmp_path, raw))


def test_wrong_version_and_non_mapping(tmp_path: Path) -> None:
    raw = _default_raw()
    raw["version"] = 2
    with pytest.raises(ValueError, match="version"):
        load_roofline_params(_write(tmp_path, raw))
    with pytest.raises(ValueError, match="top level"):
        load_roofline_params(_write(tmp_path, "- just\n- a list\n"))
