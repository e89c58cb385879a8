"""Checkpoint-like dummy weights for quantized engines: a vLLM general plugin (issue 17).

vLLM's dummy loader fills floating tensors with uniform(-1e-3, 1e-3) and leaves integer tensors
as allocated.  For a quantized checkpoint that is not what a real one draws from the GPU:

* AWQ/GPTQ: the packed 4-bit weights and the zero points stay as ``torch.empty`` left them
  (zeros on a fresh GPU), so every dequantized weight is zero and the tensor cores toggle
  nothing: the engine never reaches the power cap (the twelfth session saw its SM clock stay
  above 1,800 MHz where every bf16 model runs at 1,470-1,575 MHz);
* FP8: uniform(-1e-3, 1e-3) is nearly all zero in e4m3 (its smallest subnormal is 2^-9), and a
  sustained 8,160-row CUTLASS GEMM runs 14 % faster on it than on normal weights.

This plugin replaces the loader's fill so the packed weights and zero points hold uniform random
bits and FP8 weights a normal spread over the e4m3 range (a per-channel quantized checkpoint maps
each channel's largest weight to 448); every other tensor (scales, norms, embeddings, indices) is
filled as vLLM fills it.  Only timing matters: the tokens are random either way.

``device_measure.py --checkpoint-weights`` installs it for the engine's processes with
:func:`install`, which writes an entry point under ``vllm.general_plugins`` (vLLM loads those
in every process, the engine core's included) to a folder put on ``sys.path`` and
``PYTHONPATH``.  ``register`` prints one line per process so the log shows it ran.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

PLUGIN = "latsim_checkpoint_weights"
#: integer tensors that hold packed weights or zero points, by the parameter name's last part
PACKED_NAMES = ("qweight", "qzeros", "weight_packed", "weight_zero_point")
#: standard deviation of an FP8 weight in units of the format (the channel maximum at ~4.5 sigma)
FP8_SIGMA = 100.0
SEED = 1234


def install(folder: Path) -> None:
    """Make vLLM load :func:`register` in every process started from now on."""
    dist = folder / f"{PLUGIN}-1.0.dist-info"
    dist.mkdir(parents=True, exist_ok=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {PLUGIN}\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(f"[vllm.general_plugins]\n{PLUGIN} = checkpoint_weights:register\n")
    paths = [str(folder), str(Path(__file__).resolve().parent)]
    sys.path[:0] = paths
    os.environ["PYTHONPATH"] = os.pathsep.join(paths + [p for p in [os.environ.get("PYTHONPATH")] if p])


def register() -> None:
    """Swap the dummy loader's fill for :func:`fill_like_checkpoint` (idempotent)."""
    from vllm.model_executor.model_loader import dummy_loader

    if getattr(dummy_loader.initialize_dummy_weights, "_checkpoint_like", False):
        return
    original = dummy_loader.initialize_dummy_weights

    def fill(model: Any, model_config: Any, *args: Any, **kwargs: Any) -> None:
        original(model, model_config, *args, **kwargs)
        # the loader calls this once per module (every module of the model in turn), so each
        # module's own tensors are refilled once, after the last uniform fill that reaches them
        fill_like_checkpoint(model, recurse=False)

    fill._checkpoint_like = True  # type: ignore[attr-defined]
    dummy_loader.initialize_dummy_weights = fill
    print(f"{PLUGIN}: packed weights, zero points and fp8 weights filled like a checkpoint "
          f"(pid {os.getpid()})", file=sys.stderr, flush=True)


def fill_like_checkpoint(module: Any, recurse: bool = True) -> dict[str, int]:
    """Refill ``module``'s packed integer weights with random bits and its FP8 weights with a
    normal spread over the format (its submodules' too when ``recurse``); returns how many tensors
    of each kind it filled."""
    import torch

    counts = {"packed": 0, "fp8": 0}
    tensors = [*module.named_parameters(recurse=recurse), *module.named_buffers(recurse=recurse)]
    with torch.no_grad():
        for name, tensor in tensors:
            if tensor.device.type == "meta":
                continue
            last = name.rsplit(".", 1)[-1]
            if not torch.is_floating_point(tensor) and tensor.dtype != torch.bool and last in PACKED_NAMES:
                info = torch.iinfo(tensor.dtype)
                tensor.copy_(torch.randint(info.min, info.max, tensor.shape, generator=_generator(tensor),
                                           dtype=tensor.dtype, device=tensor.device))
                counts["packed"] += 1
            elif torch.is_floating_point(tensor) and torch.finfo(tensor.dtype).bits == 8 and last == "weight":
                top = torch.finfo(tensor.dtype).max
                values = torch.randn(tensor.shape, generator=_generator(tensor), dtype=torch.float16,
                                     device=tensor.device)
                tensor.copy_((values * FP8_SIGMA).clamp_(-top, top).to(tensor.dtype))
                counts["fp8"] += 1
    return counts


def _generator(tensor: Any) -> Any:
    """A generator on ``tensor``'s device seeded by its size (the same values for a tensor each time)."""
    import torch

    gen = torch.Generator(device=tensor.device)
    gen.manual_seed(SEED + tensor.numel() % 65_521)
    return gen
