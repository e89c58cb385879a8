"""scripts/device_int4_probe.py: what it writes (no GPU: the context is a stand-in)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

from tests.script_module import load_script

probe = load_script(Path("device_int4_probe.py"))


def test_a_probe_file_names_the_gpu_first_and_leaves_no_temporary(tmp_path: Path) -> None:
    ctx = SimpleNamespace(torch=SimpleNamespace(cuda=SimpleNamespace(get_device_name=lambda i: "NVIDIA H200")))
    probe._write(ctx, str(tmp_path), "warming_probe.json", rows=[{"M": 3072}], group_size=128)
    text = (tmp_path / "warming_probe.json").read_text()
    assert list(json.loads(text)) == ["gpu", "rows", "group_size"]
    assert json.loads(text)["gpu"] == "NVIDIA H200" and json.loads(text)["rows"] == [{"M": 3072}]
    assert [p.name for p in tmp_path.iterdir()] == ["warming_probe.json"]


def test_catalog_shapes_are_the_linear_layers_at_tp1() -> None:
    assert probe.catalog_shapes("llama-3.1-8b") == probe.SHAPES_8B
    qwen = probe.catalog_shapes("qwen2.5-7b")  # 28 query heads and 4 KV heads of 128, MLP 18,944
    assert qwen == {"qkv": (3584, 4608), "o": (3584, 3584), "gate_up": (3584, 37888), "down": (18944, 3584)}
    phi3 = probe.catalog_shapes("phi-3-mini")  # MHA: 32 KV heads of 96
    assert phi3["qkv"] == (3072, 3 * 3072)
