"""Hand-built model and device specs for the cost-model tests (no catalog data files)."""

from __future__ import annotations

from latsim.catalog.devices import DeviceSpec
from latsim.catalog.models import ModelSpec


def llama_8b() -> ModelSpec:
    """Llama-3.1-8B shapes."""
    return ModelSpec(name="llama-3.1-8b", family="llama", num_layers=32, hidden_size=4096, num_heads=32,
                     num_kv_heads=8, head_dim=128, intermediate_size=14336, vocab_size=128256,
                     max_position_embeddings=131072)


def mixtral_8x7b() -> ModelSpec:
    """Mixtral-8x7B shapes: 8 experts, top-2, every layer MoE."""
    return ModelSpec(name="mixtral-8x7b", family="mixtral", num_layers=32, hidden_size=4096, num_heads=32,
                     num_kv_heads=8, head_dim=128, intermediate_size=14336, vocab_size=32000,
                     max_position_embeddings=32768, num_experts=8, experts_per_token=2,
                     moe_intermediate_size=14336, num_moe_layers=32)


def qwen_moe_shared() -> ModelSpec:
    """A Qwen2-MoE-like model: 60 experts, top-4, a shared expert, fine-grained widths."""
    return ModelSpec(name="qwen-moe", family="qwen2_moe", num_layers=24, hidden_size=2048, num_heads=16,
                     num_kv_heads=16, head_dim=128, intermediate_size=5632, vocab_size=151936,
                     max_position_embeddings=8192, num_experts=60, experts_per_token=4,
                     moe_intermediate_size=1408, shared_expert_intermediate_size=5632, num_moe_layers=24)


def mistral_sliding() -> ModelSpec:
    """Mistral-7B-v0.1 shapes: every layer attends to a 4096-token window."""
    return ModelSpec(name="mistral-7b-v0.1", family="mistral", num_layers=32, hidden_size=4096, num_heads=32,
                     num_kv_heads=8, head_dim=128, intermediate_size=14336, vocab_size=32000,
                     max_position_embeddings=32768, sliding_window=4096, num_sliding_window_layers=32)


def h100() -> DeviceSpec:
    """H100 SXM datasheet figures."""
    peaks = {"bf16": 989.4e12, "fp16": 989.4e12, "fp8": 1979e12, "int8": 1979e12, "fp32": 66.9e12}
    return DeviceSpec(name="h100-sxm", display_name="NVIDIA H100 SXM 80GB", vendor="nvidia",
                      memory_bytes=80e9, hbm_bandwidth=3.35e12, peak_flops=peaks,
                      interconnect="nvlink4", interconnect_bw=450e9, max_gpus_per_node=8, price_per_hour=0.0)
