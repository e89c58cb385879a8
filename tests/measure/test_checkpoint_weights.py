"""``scripts/checkpoint_weights.py``: the vLLM plugin that fills quantized dummy weights like a checkpoint."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.script_module import load_script

torch = pytest.importorskip("torch")


class _Linear(torch.nn.Module):
    """A quantized linear layer's tensors as vLLM's AWQ and FP8 methods register them."""

    def __init__(self) -> None:
        super().__init__()
        self.qweight = torch.nn.Parameter(torch.zeros(64, 32, dtype=torch.int32), requires_grad=False)
        self.qzeros = torch.nn.Parameter(torch.zeros(4, 32, dtype=torch.int32), requires_grad=False)
        self.g_idx = torch.nn.Parameter(torch.zeros(512, dtype=torch.int32), requires_grad=False)
        self.scales = torch.nn.Parameter(torch.full((4, 256), 1e-3, dtype=torch.bfloat16), requires_grad=False)
        self.weight = torch.nn.Parameter(torch.zeros(256, 512, dtype=torch.float8_e4m3fn), requires_grad=False)


def test_packed_weights_and_fp8_weights_are_filled_and_nothing_else() -> None:
    mod = load_script(Path("checkpoint_weights.py"))
    layer = torch.nn.Sequential(_Linear())
    counts = mod.fill_like_checkpoint(layer)
    inner = layer[0]
    assert counts == {"packed": 2, "fp8": 1}
    for packed in (inner.qweight, inner.qzeros):
        nibbles = torch.stack([(packed >> (4 * i)) & 0xF for i in range(8)]).flatten()
        assert torch.bincount(nibbles, minlength=16).min() > 0  # every 4-bit value occurs
    assert not inner.g_idx.any()  # an index tensor is left as the loader left it
    assert torch.equal(inner.scales, torch.full((4, 256), 1e-3, dtype=torch.bfloat16))
    values = inner.weight.float()
    assert (values == 0).float().mean() < 0.01  # the dummy fill's uniform(-1e-3, 1e-3) is all zero in e4m3
    assert 60 < values.std() < 140 and values.abs().max() <= 448


def test_without_recursion_only_the_modules_own_tensors_are_filled() -> None:
    mod = load_script(Path("checkpoint_weights.py"))
    layer = torch.nn.Sequential(_Linear())
    assert mod.fill_like_checkpoint(layer, recurse=False) == {"packed": 0, "fp8": 0}
    assert not layer[0].qweight.any()
    assert mod.fill_like_checkpoint(layer[0], recurse=False) == {"packed": 2, "fp8": 1}
    assert layer[0].qweight.any()


def test_install_makes_vllm_load_the_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("vllm")
    from importlib.metadata import entry_points

    mod = load_script(Path("checkpoint_weights.py"))
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    mod.install(tmp_path / "plugin")
    assert "/elsewhere" in __import__("os").environ["PYTHONPATH"].split(":")
    found = [ep for ep in entry_points(group="vllm.general_plugins") if ep.name == mod.PLUGIN]
    assert len(found) == 1 and found[0].value == "checkpoint_weights:register"

    from vllm.model_executor.model_loader import dummy_loader

    monkeypatch.setattr(dummy_loader, "initialize_dummy_weights", lambda model, config: None)
    found[0].load()()
    found[0].load()()  # a second process-local call changes nothing
    layer = torch.nn.Sequential(_Linear())
    for module in layer.modules():  # as vLLM's DummyModelLoader.load_weights calls it
        dummy_loader.initialize_dummy_weights(module, None)
    assert layer[0].qweight.any() and layer[0].weight.float().abs().max() > 0
