"""bitsandbytes 4-bit layers priced by bitsandbytes 0.50's dispatch (own kernel, else dequantize + bf16 GEMM)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from latsim.catalog import load_device, load_model
from latsim.catalog.hf_config import parse_hf_config
from latsim.costmodel.batch import BatchShape
from latsim.costmodel.bnb import own_kernel_rows
from latsim.costmodel.factory import gpu_cost_model
from latsim.costmodel.profile.tabulate import step_gemms
from latsim.costmodel.shard import shard_model
from latsim.paths import CATALOG

NF4 = {"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4",
       "bnb_4bit_use_double_quant": True, "bnb_4bit_compute_dtype": "bfloat16"}


def _nf4(name: str = "llama-3.1-8b"):
    cfg = json.loads((CATALOG / "models" / f"{name}.json").read_text())
    return parse_hf_config({**cfg, "quantization_config": NF4}, f"{name}-nf4")


@pytest.mark.parametrize(("k", "n", "rows"), [
    (4096, 4096, 7),      # o: 64 blocks, under half a wave of 132 SMs
    (4096, 1024, 7),      # k/v shard: exactly 4 Mi weights, the large-layer rules
    (4096, 14336, 32),    # gate or up: 224 blocks, one wave and more
    (14336, 4096, 5),     # down: reduction longer than the width under 3/4 of a wave, from 6 rows
    (8192, 57344, 64),    # a 70B's gate under TP=1: 896 blocks, three waves and more
    (8192, 8192, 16),     # square at 128 blocks (0.97 of a wave): 16 rows
    (512, 2048, 512),     # a small weight with a short reduction, 32 blocks: under a third of a wave
    (1024, 3072, 320),    # the same at 48 blocks, over a third of a wave
    (2048, 1024, 32),     # small, 16 blocks: under a quarter wave
])
def test_hopper_dispatch_as_bitsandbytes_reads(k: int, n: int, rows: int) -> None:
    assert own_kernel_rows(k, n, load_device("h200")) == rows


def test_no_rule_where_the_architecture_is_not_modelled() -> None:
    assert own_kernel_rows(4096, 4096, load_device("a100")) is None
    assert own_kernel_rows(4096, 4096, replace(load_device("h200"), sm_count=None)) is None


def test_fused_layers_are_one_call_per_shard_only_under_bitsandbytes() -> None:
    plain = [g.op for g in step_gemms(shard_model(load_model("llama-3.1-8b"), 1, "int4"))]
    nf4 = [g.op for g in step_gemms(shard_model(_nf4(), 1, "int4"))]
    assert plain == ["qkv", "o", "gate_up", "down"]
    assert nf4 == ["q", "k", "v", "o", "gate", "up", "down"]


def test_past_a_few_sequences_an_nf4_checkpoint_is_slower_than_bf16_on_hopper_only() -> None:
    def decode(model, device: str, dtype: str, seqs: int) -> float:
        return gpu_cost_model(model, load_device(device), weight_dtype=dtype).step_time(
            BatchShape(decode_seqs=seqs, decode_kv_tokens=seqs * 600))

    bf16, nf4 = load_model("llama-3.1-8b"), _nf4()
    assert decode(nf4, "h200", "int4", 2) < 0.7 * decode(bf16, "h200", "bf16", 2)  # 4-bit reads: faster
    assert decode(nf4, "h200", "int4", 64) > 1.3 * decode(bf16, "h200", "bf16", 64)  # dequantize + bf16 GEMM
    assert decode(nf4, "a100", "int4", 64) < decode(bf16, "a100", "bf16", 64)  # rule not modelled: own kernel
