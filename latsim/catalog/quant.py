"""A checkpoint's ``quantization_config``, read the way vLLM 0.25.1 reads it.

:func:`parse_quantization` turns the dict into a :class:`QuantSpec`: the dtype of the quantized
linear layers, how activations are quantized before each GEMM, the bytes one stored weight
takes (scales included), the KV-cache dtype the checkpoint asks for, and the module lists left
unquantized.  Methods and what latsim makes of them (vLLM's kernels on Hopper-class GPUs):

=====================  ===================================  ===========  =====================
``quant_method``       scheme                               weight       activations
=====================  ===================================  ===========  =====================
fp8                    per-tensor or 128x128-block fp8      ``fp8``      fp8, dynamic per
                       (``weight_block_size``)                           token / per token
                                                                         group, or static
modelopt               ``quant_algo`` FP8                   ``fp8``      fp8 static per tensor
compressed-tensors     8-bit float weights and activations  ``fp8``      fp8 (per ``strategy``)
compressed-tensors     8-bit int weights and activations    ``int8``     int8 (per ``strategy``)
compressed-tensors     4-bit int weights, no activations    ``int4``     bf16 (Marlin W4A16)
compressed-tensors     8-bit weights, no activations        ``w8a16``    bf16 (Marlin W8A16)
awq                    4-bit, groups of ``group_size``      ``int4``     bf16 (AWQ-Marlin)
gptq                   4- or 8-bit, ``group_size``          ``int4`` /   bf16 (GPTQ-Marlin)
                                                            ``w8a16``
bitsandbytes           ``load_in_4bit`` (fp4/nf4)           ``int4``     bf16 (dequant + GEMM)
=====================  ===================================  ===========  =====================

Anything else (bitsandbytes 8-bit, NVFP4/MXFP4, 2- or 3-bit GPTQ, mixed schemes, sparsity) is a
``ValueError`` naming the method and listing the known ones; ``--weight-dtype`` overrides.

Stored bytes per quantized weight: ``bits / 8`` plus one 16-bit scale per group of
``group_size`` (and a 4-bit zero point per group for asymmetric AWQ/GPTQ); bitsandbytes 4-bit
keeps one fp32 absmax per 64 weights (8-bit absmax plus an fp32 per 256 blocks with double
quantization).  Per-tensor, per-channel and 128x128-block fp8 scales are under 0.1 % and left out.

KV cache: vLLM's ``--kv-cache-dtype auto`` takes fp8 from a ModelOpt checkpoint
(``kv_cache_quant_algo`` FP8, or a ``kv_cache_scheme`` of static 8-bit floats); a
compressed-tensors ``kv_cache_scheme`` only carries scales, used when fp8 is asked for
explicitly, so it leaves the cache at the model dtype (recorded in ``kv_scheme_note``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

KNOWN_METHODS = ("fp8", "modelopt", "compressed-tensors", "awq", "gptq", "bitsandbytes")
ACT_QUANT = ("none", "dynamic-per-token", "dynamic-per-token-group", "static")
"""How a W8A8 scheme quantizes a GEMM input: per token (one scale per row, vLLM's choice for
dynamic schemes wherever CUTLASS runs fp8 or int8), per group of 128 along a row (block-wise
fp8), or with a static per-tensor scale from the checkpoint; ``none``: weight-only."""
MATCH_RULES = ("exact-or-prefix", "substring", "component", "compressed-tensors")
FP16_SCALE_BYTES = 2.0
ZERO_POINT_BYTES = 0.5  # one packed 4-bit zero point per group
BNB_BLOCK = 64
BNB_DOUBLE_QUANT_BLOCK = 256


@dataclass(frozen=True)
class QuantSpec:
    """How a checkpoint stores and runs its linear layers (see the module docstring).

    ``weight_dtype`` is one of :data:`latsim.catalog.models.WEIGHT_DTYPES`; ``bytes_per_weight``
    is what one quantized weight occupies with its scales; ``act_quant`` one of
    :data:`ACT_QUANT` (``none`` for weight-only schemes).  ``ignore`` lists the modules the
    checkpoint leaves unquantized and ``targets`` (compressed-tensors only; empty means every
    linear layer) the ones it quantizes, both matched by ``match`` (one of :data:`MATCH_RULES`,
    vLLM's rule for that method).  ``unquantized_linear`` is filled in once the architecture is
    known: the decoder linear parameters those lists keep 16-bit.
    """

    method: str
    weight_dtype: str
    bytes_per_weight: float
    act_quant: str = "none"
    kv_dtype: str | None = None
    ignore: tuple[str, ...] = ()
    targets: tuple[str, ...] = ()
    match: str = "exact-or-prefix"
    group_size: int = 0
    unquantized_linear: int = 0
    kv_scheme_note: str = ""

    @property
    def label(self) -> str:
        """One line for reports, e.g. ``compressed-tensors: fp8 weights, dynamic-per-token activations``."""
        act = "16-bit activations" if self.act_quant == "none" else f"{self.act_quant} activations"
        return f"{self.method}: {self.weight_dtype} weights, {act}"


def unsupported(method: object, why: str = "") -> ValueError:
    """The one-line error for a method latsim does not model."""
    detail = f" ({why})" if why else ""
    return ValueError(
        f"quantization_config method {method!r}{detail} is not modelled; known methods: "
        f"{', '.join(KNOWN_METHODS)}; pass --weight-dtype to price it as one of latsim's weight dtypes"
    )


def parse_quantization(cfg: Mapping[str, Any]) -> QuantSpec | None:
    """The :class:`QuantSpec` of an HF config dict, or None when it has no ``quantization_config``.

    Raises ``ValueError`` (see :func:`unsupported`) for a method or scheme latsim does not model,
    and for a ``quantization_config`` that is not a mapping with a string ``quant_method``.
    """
    q = cfg.get("quantization_config")
    if q is None:
        return None
    if not isinstance(q, Mapping) or not isinstance(q.get("quant_method"), str):
        raise ValueError(f"config key 'quantization_config' must be a mapping with a string 'quant_method', got {q!r}")
    method = q["quant_method"].lower()
    parser = _PARSERS.get(method)
    if parser is None:
        raise unsupported(q["quant_method"])
    return parser(q)


def _names(q: Mapping[str, Any], *keys: str) -> tuple[str, ...]:
    """The first non-empty list of module names among ``keys`` (vLLM's fallback order)."""
    for key in keys:
        value = q.get(key)
        if value:
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ValueError(f"quantization_config key {key!r} must be a list of module names, got {value!r}")
            return tuple(value)
    return ()


def _fp8(q: Mapping[str, Any]) -> QuantSpec:
    scheme = q.get("activation_scheme", "dynamic")
    if scheme not in ("dynamic", "static"):
        raise ValueError(f"fp8 activation_scheme must be 'dynamic' or 'static', got {scheme!r}")
    block = q.get("weight_block_size")
    if block is not None and not (isinstance(block, list) and len(block) == 2
                                  and all(isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in block)):
        raise ValueError(f"fp8 weight_block_size must be two positive integers, got {block!r}")
    act = "static" if scheme == "static" else ("dynamic-per-token-group" if block else "dynamic-per-token")
    return QuantSpec("fp8", "fp8", 1.0, act, ignore=_names(q, "ignored_layers", "modules_to_not_convert"),
                     group_size=int(block[1]) if block else 0)


def _modelopt(q: Mapping[str, Any]) -> QuantSpec:
    inner = q.get("quantization", q)
    algo = str(inner.get("quant_algo", "")).upper()
    if algo != "FP8":
        raise unsupported("modelopt", f"quant_algo {inner.get('quant_algo')!r}; only FP8 is modelled")
    return QuantSpec("modelopt", "fp8", 1.0, "static", kv_dtype=_modelopt_kv(q, inner),
                     ignore=_names(inner, "exclude_modules", "ignore") or _names(q, "exclude_modules", "ignore"))


def _modelopt_kv(q: Mapping[str, Any], inner: Mapping[str, Any]) -> str | None:
    """vLLM's ``auto`` KV dtype for ModelOpt: fp8 for FP8 KV algorithms, else the model dtype."""
    kv = (inner.get("kv_cache_scheme") or q.get("kv_cache_scheme") or inner.get("kv_cache_quant_algo")
          or q.get("kv_cache_quant_algo"))
    if isinstance(kv, Mapping):
        is_fp8 = kv.get("dynamic") is False and kv.get("num_bits") == 8 and kv.get("type") == "float"
        return "fp8" if is_fp8 else None
    return "fp8" if isinstance(kv, str) and kv.lower() == "fp8" else None


def _int4_bytes(bits: int, group: int, zero_point: bool) -> float:
    if group <= 0:
        return bits / 8.0
    return bits / 8.0 + (FP16_SCALE_BYTES + (ZERO_POINT_BYTES if zero_point else 0.0)) / group


def _awq(q: Mapping[str, Any]) -> QuantSpec:
    bits, group = _int(q, "bits", "w_bit", default=4), _int(q, "group_size", "q_group_size", default=128)
    if bits != 4:
        raise unsupported("awq", f"{bits}-bit; only 4-bit AWQ is modelled")
    zero = bool(q.get("zero_point", True))
    return QuantSpec("awq", "int4", _int4_bytes(bits, group, zero), ignore=_names(q, "modules_to_not_convert"),
                     match="substring", group_size=group)


def _gptq(q: Mapping[str, Any]) -> QuantSpec:
    bits, group = _int(q, "bits", default=4), _int(q, "group_size", default=128)
    if bits not in (4, 8):
        raise unsupported("gptq", f"{bits}-bit; 4- and 8-bit GPTQ are modelled")
    if q.get("dynamic"):
        raise unsupported("gptq", "per-module 'dynamic' overrides")
    zero = not bool(q.get("sym", True))
    return QuantSpec("gptq", "int4" if bits == 4 else "w8a16", _int4_bytes(bits, group, zero),
                     ignore=_names(q, "modules_to_not_convert"),
                     match="substring", group_size=group)


def _bitsandbytes(q: Mapping[str, Any]) -> QuantSpec:
    if q.get("load_in_8bit"):
        raise unsupported("bitsandbytes", "load_in_8bit: LLM.int8 kernels; --weight-dtype int8 prices it as W8A8")
    absmax = (1.0 / BNB_BLOCK + 4.0 / (BNB_BLOCK * BNB_DOUBLE_QUANT_BLOCK)) if q.get("bnb_4bit_use_double_quant") \
        else 4.0 / BNB_BLOCK
    return QuantSpec("bitsandbytes", "int4", 0.5 + absmax, ignore=_names(q, "llm_int8_skip_modules"),
                     match="component", group_size=BNB_BLOCK)


def _int(q: Mapping[str, Any], *keys: str, default: int) -> int:
    for key in keys:
        value = q.get(key)
        if value is not None:
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"quantization_config key {key!r} must be an integer, got {value!r}")
            return value
    return default


def _compressed_tensors(q: Mapping[str, Any]) -> QuantSpec:
    from latsim.catalog.quant_ct import parse_compressed_tensors

    return parse_compressed_tensors(q)


_PARSERS = {
    "fp8": _fp8, "modelopt": _modelopt, "compressed-tensors": _compressed_tensors, "awq": _awq, "gptq": _gptq,
    "bitsandbytes": _bitsandbytes,
}
