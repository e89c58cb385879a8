"""LLM architectures: the shapes that decide FLOPs, bytes moved and memory.

A :class:`ModelSpec` is built from a Hugging Face ``config.json`` (a file, a folder holding one,
or a parsed dict) or looked up by name in the built-in catalog (``data/catalog/models/*.json``,
each an HF-style config).  Everything downstream (memory plan, cost model, calibration grids)
reads only this dataclass.

Parsing lives in :mod:`latsim.catalog.hf_config`, name/path look-up in
:mod:`latsim.catalog.lookup` and parameter/byte arithmetic in :mod:`latsim.catalog.sizing`.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from latsim.catalog.quant import QuantSpec

DTYPE_BYTES: dict[str, float] = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "w8a16": 1.0,
                                  "int4": 0.5}
WEIGHT_DTYPES = ("bf16", "fp16", "fp8", "int8", "w8a16", "int4")
"""Linear-layer weight dtypes: fp8 and int8 are W8A8 (activations quantized too), w8a16 and int4
are weight-only (8- or 4-bit weights, 16-bit GEMM inputs: Marlin-class kernels)."""
KV_DTYPES = ("bf16", "fp16", "fp8")


@dataclass(frozen=True)
class ModelSpec:
    """One decoder-only transformer architecture.

    Invariants: ``num_heads % num_kv_heads == 0``; ``num_experts == 0`` means dense MLP,
    otherwise every MoE layer routes each token to ``experts_per_token`` of ``num_experts``
    experts of width ``moe_intermediate_size`` (plus an optional always-on shared expert of
    width ``shared_expert_intermediate_size``).  ``num_moe_layers`` of the ``num_layers`` layers
    are MoE; the rest use the dense MLP of width ``intermediate_size``.

    Attention: ``num_sliding_window_layers`` of the layers attend only to the last
    ``sliding_window`` tokens (Mistral-7B-v0.1 and Phi-3: every layer; Gemma-2: every other
    layer); the rest are full attention.  ``sliding_window`` is ``None`` exactly when no layer
    slides.  ``attention_bias`` means q/k/v projections carry a bias (Qwen2); ``qk_norm`` means
    per-head RMSNorm on q and k (Qwen3); ``norms_per_layer`` counts the hidden-size norms in one
    decoder layer (2 for Llama-style, 4 for Gemma-2).

    ``hf_config`` keeps the original config as sorted ``(key, value)`` pairs so a config dir can
    be written for vLLM; it is excluded from equality, hashing and ``repr``.  Use
    :meth:`hf_config_dict` to get a private copy of the dict.

    ``quantization`` is the checkpoint's ``quantization_config`` as vLLM runs it
    (:mod:`latsim.catalog.quant`), None for a 16-bit checkpoint.

    ``encoder_params`` counts the weights vLLM loads beside the language model that a text
    request never runs (a multimodal checkpoint's vision tower and projector,
    :mod:`latsim.catalog.multimodal`): 16-bit memory, no step time.
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
    hf_config: tuple[tuple[str, object], ...] = field(default=(), compare=False, repr=False)
    num_sliding_window_layers: int = 0
    attention_bias: bool = False
    qk_norm: bool = False
    norms_per_layer: int = 2
    quantization: QuantSpec | None = None
    encoder_params: int = 0

    def __post_init__(self) -> None:
        for name in ("num_layers", "hidden_size", "num_heads", "num_kv_heads", "head_dim",
                     "vocab_size", "max_position_embeddings", "norms_per_layer"):
            _require_positive(self.name, name, getattr(self, name))
        if self.num_heads % self.num_kv_heads != 0:
            raise ValueError(
                f"model {self.name!r}: num_heads={self.num_heads} must be a multiple of "
                f"num_kv_heads={self.num_kv_heads}"
            )
        if self.encoder_params < 0:
            raise ValueError(f"model {self.name!r}: encoder_params must be >= 0, got {self.encoder_params}")
        self._check_mlp()
        self._check_sliding_window()

    def _check_mlp(self) -> None:
        dense_layers = self.num_layers - self.num_moe_layers
        if dense_layers > 0:
            _require_positive(self.name, "intermediate_size", self.intermediate_size)
        if not 0 <= self.num_moe_layers <= self.num_layers:
            raise ValueError(
                f"model {self.name!r}: num_moe_layers={self.num_moe_layers} must be in "
                f"0..num_layers={self.num_layers}"
            )
        if self.num_experts == 0:
            if self.num_moe_layers or self.experts_per_token:
                raise ValueError(
                    f"model {self.name!r}: num_experts=0 (dense) but num_moe_layers="
                    f"{self.num_moe_layers}, experts_per_token={self.experts_per_token}; both must be 0"
                )
            return
        if not 1 <= self.experts_per_token <= self.num_experts:
            raise ValueError(
                f"model {self.name!r}: experts_per_token={self.experts_per_token} must be in "
                f"1..num_experts={self.num_experts}"
            )
        _require_positive(self.name, "moe_intermediate_size", self.moe_intermediate_size)
        if self.shared_expert_intermediate_size < 0:
            raise ValueError(
                f"model {self.name!r}: shared_expert_intermediate_size must be >= 0, "
                f"got {self.shared_expert_intermediate_size}"
            )

    def _check_sliding_window(self) -> None:
        if not 0 <= self.num_sliding_window_layers <= self.num_layers:
            raise ValueError(
                f"model {self.name!r}: num_sliding_window_layers={self.num_sliding_window_layers} "
                f"must be in 0..num_layers={self.num_layers}"
            )
        if (self.sliding_window is None) != (self.num_sliding_window_layers == 0):
            raise ValueError(
                f"model {self.name!r}: sliding_window={self.sliding_window} and "
                f"num_sliding_window_layers={self.num_sliding_window_layers} disagree; a window "
                "needs at least one sliding layer and sliding layers need a window"
            )
        if self.sliding_window is not None and self.sliding_window < 1:
            raise ValueError(f"model {self.name!r}: sliding_window must be >= 1, got {self.sliding_window}")

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def q_size(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_kv_heads * self.head_dim

    @property
    def num_dense_layers(self) -> int:
        """Layers whose MLP is the dense one of width ``intermediate_size``."""
        return self.num_layers - self.num_moe_layers

    @property
    def num_full_attention_layers(self) -> int:
        """Layers that attend to the whole context (not a sliding window)."""
        return self.num_layers - self.num_sliding_window_layers

    def hf_config_dict(self) -> dict[str, Any]:
        """A deep copy of the original HF config (empty when the spec was built by hand)."""
        return copy.deepcopy(dict(self.hf_config))


def _require_positive(model: str, name: str, value: int) -> None:
    if value < 1:
        raise ValueError(f"model {model!r}: {name} must be >= 1, got {value}")
