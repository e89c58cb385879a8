"""LLM architectures: the shapes that decide FLOPs, bytes moved and memory.

A :class:`ModelSpec` is built from a Hugging Face ``config.json`` (a file, a folder holding one,
or a parsed dict) or looked up by name in the built-in catalog (``catalog/data/models/*.json``,
each an HF-style config).  Everything downstream (memory plan, cost model, calibration grids)
reads only this dataclass.
"""

from __future__ import annotations

from dataclasses import dataclass

DTYPE_BYTES: dict[str, float] = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5}
WEIGHT_DTYPES = ("bf16", "fp16", "fp8", "int8", "int4")
KV_DTYPES = ("bf16", "fp16", "fp8")


@dataclass(frozen=True)
class ModelSpec:
    """One decoder-only transformer architecture.

    Invariants: ``num_heads % num_kv_heads == 0``; ``num_experts == 0`` means dense MLP,
    otherwise every MoE layer routes each token to ``experts_per_token`` of ``num_experts``
    experts of width ``moe_intermediate_size`` (plus an optional always-on shared expert of
    width ``shared_expert_intermediate_size``).  ``num_moe_layers`` of the ``num_layers`` layers
    are MoE; the rest use the dense MLP of width ``intermediate_size``.
    """

    name: str
    family: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    max_position_embeddings: int
    tie_word_embeddings: bool = False
    num_experts: int = 0
    experts_per_token: int = 0
    moe_intermediate_size: int = 0
    shared_expert_intermediate_size: int = 0
    num_moe_layers: int = 0
    sliding_window: int | None = None
    gated_mlp: bool = True
    hf_config: tuple[tuple[str, object], ...] = ()

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def q_size(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_kv_heads * self.head_dim
