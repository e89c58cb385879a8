"""The built-in accelerator list and the devices.yaml parser."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from latsim.catalog import DeviceSpec, UnknownNameError, detect_device, list_devices, load_device, parse_devices
from latsim.catalog.devices import FLOPS_DTYPES, MEMORY_BASES, REQUIRED_SOURCES
from latsim.catalog.lookup import name_matches

REQUIRED_DEVICES = {
    "a10", "l4", "l40s", "a100-40gb", "a100", "h100", "h100-pcie", "h200", "b200", "mi300x", "mi325x",
    "rtx-4090", "gaudi2", "gaudi3", "a6000",
}


def entry(**overrides: Any) -> dict[str, Any]:
    """One valid devices.yaml entry; keyword arguments replace fields (None deletes)."""
    base: dict[str, Any] = {
        "display_name": "Test GPU", "vendor": "acme", "aliases": ["tg"], "memory_gib": 80,
        "memory_basis": "nominal", "hbm_bandwidth_gb_s": 3000, "peak_tflops_dense": {"bf16": 1000},
        "interconnect": "nvlink4", "interconnect_gb_s": 450, "max_gpus_per_node": 8,
        "price_usd_per_hour": 2.0, "sources": {key: "datasheet" for key in REQUIRED_SOURCES},
    }
    base.update(overrides)
    return {k: v for k, v in base.items() if v is not None}


def dump(devices: dict[str, Any]) -> str:
    return yaml.safe_dump({"devices": devices})


def test_builtin_list_covers_the_required_devices() -> None:
    names = [d.name for d in list_devices()]
    assert len(names) >= 14
    assert set(names) >= REQUIRED_DEVICES
    assert len(names) == len(set(names))


@pytest.mark.parametrize("device", list_devices(), ids=lambda d: d.name)
def test_every_device_has_a_source_for_every_figure(device: DeviceSpec) -> None:
    for key in REQUIRED_SOURCES:
        assert device.sources.get(key, "").strip(), f"{device.name}: no source for {key}"


@pytest.mark.parametrize("device", list_devices(), ids=lambda d: d.name)
def test_every_device_is_plausible(device: DeviceSpec) -> None:
    assert 16 <= device.memory_gib <= 300
    assert device.memory_basis in MEMORY_BASES
    assert 2e11 <= device.hbm_bandwidth <= 1e13
    assert set(device.peak_flops) <= set(FLOPS_DTYPES)
    assert 1e14 <= device.flops_for("bf16") <= 5e15
    assert device.flops_for("fp8") >= device.flops_for("bf16")
    assert device.peak_flops.get("fp32", 0) < device.flops_for("bf16")
    assert 1e10 <= device.interconnect_bw <= 1e12
    assert 0.1 <= device.price_per_hour <= 20


def test_known_figures_in_si_units() -> None:
    h100 = load_device("h100")
    assert h100.interconnect_bw == 450e9
    assert h100.hbm_bandwidth == 3.35e12
    assert h100.flops_for("fp8") == pytest.approx(1978.9e12)
    assert h100.memory_gib == pytest.approx(79.22)
    assert load_device("h200").memory_bytes == pytest.approx(150109880320, rel=1e-4)  # torch total on H200
    assert load_device("a100").flops_for("fp8") == load_device("a100").flops_for("bf16")  # no FP8 unit


@pytest.mark.parametrize(
    ("query", "name"),
    [("H100-SXM", "h100"), ("a100-80gb", "a100"), (" H200 ", "h200"), ("4090", "rtx-4090"),
     ("MI300X", "mi300x")],
)
def test_load_device_by_name_or_alias_any_case(query: str, name: str) -> None:
    assert load_device(query).name == name


def test_unknown_device_suggests_close_names() -> None:
    with pytest.raises(UnknownNameError) as info:
        load_device("h10")
    assert "h100" in info.value.suggestions
    assert "latsim devices" in str(info.value)
    assert isinstance(info.value, ValueError)


def test_device_specs_are_hashable() -> None:
    assert len(set(list_devices())) == len(list_devices())


def test_parse_converts_units() -> None:
    (spec,) = parse_devices(dump({"tg1": entry(peak_tflops_dense={"bf16": 100, "fp8": 200})}))
    assert spec.memory_bytes == 80 * 2**30 and spec.hbm_bandwidth == 3e12
    assert spec.peak_flops == {"bf16": 100e12, "fp8": 200e12} and spec.aliases == ("tg",)


@pytest.mark.parametrize(
    ("bad", "pattern"),
    [
        (entry(sources={"memory": "x"}), r"device 'tg1', field 'sources'.*missing source"),
        (entry(peak_tflops_dense={"bf16": 1, "fp4": 2}), r"field 'peak_tflops_dense'.*fp4"),
        (entry(peak_tflops_dense={"fp8": 2}), r"field 'peak_tflops_dense'.*bf16"),
        (entry(hbm_bandwidth_gb_s=-1), r"field 'hbm_bandwidth_gb_s'.*greater than 0"),
        (entry(memory_basis="guess"), r"field 'memory_basis'.*runtime"),
        (entry(max_gpus_per_node=None), r"field 'max_gpus_per_node'.*required"),
        (entry(colour="green"), r"field 'colour'"),
    ],
)
def test_parse_rejects_bad_entries_naming_device_and_field(bad: dict[str, Any], pattern: str) -> None:
    with pytest.raises(ValueError, match=pattern):
        parse_devices(dump({"tg1": bad}), "test.yaml")


def test_parse_rejects_duplicate_aliases_and_bad_documents() -> None:
    with pytest.raises(ValueError, match="alias 'tg' used by both"):
        parse_devices(dump({"tg1": entry(), "tg2": entry()}))
    with pytest.raises(ValueError, match="must be a non-empty lower-case"):
        parse_devices(dump({"TG": entry()}))
    with pytest.raises(ValueError, match="top-level 'devices:'"):
        parse_devices("- just a list")
    with pytest.raises(ValueError, match=r"x\.yaml: invalid YAML at line 1"):
        parse_devices("devices: {a: [", "x.yaml")


@pytest.mark.parametrize(("gpu_name", "device"), [
    ("NVIDIA H200", "h200"),
    ("NVIDIA H100 80GB HBM3", "h100"),
    ("NVIDIA H100 PCIe", "h100-pcie"),
    ("NVIDIA A100-SXM4-80GB", "a100"),
])
def test_detect_device_picks_the_catalog_entry_the_driver_name_names(gpu_name: str, device: str) -> None:
    assert detect_device(gpu_name).name == device


def test_detect_device_names_an_unknown_gpu() -> None:
    with pytest.raises(ValueError, match="'Mystery Accelerator 9000' matches no catalog device"):
        detect_device("Mystery Accelerator 9000")


def test_name_matches_needs_every_word_of_the_catalog_name() -> None:
    assert name_matches("NVIDIA H200", "h200")
    assert not name_matches("NVIDIA H100 80GB HBM3", "h100-pcie")
    assert name_matches("cpu", "cpu")
