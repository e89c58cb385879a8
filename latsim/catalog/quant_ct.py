"""``compressed-tensors`` quantization configs (llm-compressor checkpoints) to a :class:`QuantSpec`.

Every entry of ``config_groups`` names ``targets`` (``"Linear"`` or module names / ``re:``
regexes) and a ``weights`` and optional ``input_activations`` scheme.  latsim models one scheme
per checkpoint (see :mod:`latsim.catalog.quant` for the table); groups with different schemes,
sparse (2:4) checkpoints, 4-bit floats (NVFP4/MXFP4) and W4A8 are rejected as not modelled.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from latsim.catalog.quant import QuantSpec, _int4_bytes, _names, unsupported


def parse_compressed_tensors(q: Mapping[str, Any]) -> QuantSpec:
    """The spec of a compressed-tensors ``quantization_config``; ValueError when not modelled."""
    groups = q.get("config_groups")
    if not isinstance(groups, Mapping) or not groups:
        raise ValueError(
            f"compressed-tensors quantization_config needs a non-empty 'config_groups' mapping, got {groups!r}"
        )
    _check_dense(q.get("sparsity_config"))
    specs: set[tuple[str, str, float, int]] = set()
    targets: list[str] = []
    for name, group in groups.items():
        if not isinstance(group, Mapping):
            raise ValueError(f"compressed-tensors config group {name!r} must be a mapping, got {group!r}")
        specs.add(_scheme(group))
        targets.extend(_names(group, "targets"))
    if len(specs) > 1:
        raise unsupported("compressed-tensors", f"mixed schemes across config_groups: {sorted(specs)}")
    weight, act, per_weight, group_size = specs.pop()
    return QuantSpec(
        "compressed-tensors", weight, per_weight, act, ignore=_names(q, "ignore"),
        targets=() if "Linear" in targets else tuple(targets), match="compressed-tensors", group_size=group_size,
        kv_scheme_note=("kv_cache_scheme present: vLLM uses its scales only with --kv-cache-dtype fp8"
                        if q.get("kv_cache_scheme") else ""),
    )


def _check_dense(sparsity: Any) -> None:
    if not sparsity:
        return
    structure = sparsity.get("sparsity_structure") if isinstance(sparsity, Mapping) else sparsity
    if str(structure).lower() not in ("dense", "unstructured", "none"):
        raise unsupported("compressed-tensors", f"sparsity {structure!r}")


def _scheme(group: Mapping[str, Any]) -> tuple[str, str, float, int]:
    """``(weight dtype, activation quantization, bytes per weight, group size)`` of one group."""
    w, a = group.get("weights"), group.get("input_activations")
    if not isinstance(w, Mapping):
        raise ValueError(f"compressed-tensors config group needs a 'weights' mapping, got {w!r}")
    bits, kind = w.get("num_bits"), w.get("type", "int")
    label = f"W{bits}A{a.get('num_bits') if isinstance(a, Mapping) else 16} {kind} weights"
    if a is None:
        if bits == 4 and kind == "int":
            size = _group_size(w)
            return "int4", "none", _int4_bytes(4, size, not w.get("symmetric", True)), size
        if bits == 8:
            return "w8a16", "none", 1.0 + _scale_bytes(w), _group_size(w)
        raise unsupported("compressed-tensors", label)
    if not isinstance(a, Mapping):
        raise ValueError(f"compressed-tensors 'input_activations' must be a mapping or null, got {a!r}")
    if bits == 8 and a.get("num_bits") == 8 and kind == a.get("type", "int") and kind in ("float", "int"):
        return "fp8" if kind == "float" else "int8", _act(a), 1.0, _group_size(w)
    raise unsupported("compressed-tensors", label)


def _act(a: Mapping[str, Any]) -> str:
    """vLLM's W8A8 schemes: a static input scale, or dynamic per token (per group of a row when
    the activations are grouped, as with block-wise weights)."""
    if not a.get("dynamic", False):
        return "static"
    return "dynamic-per-token-group" if a.get("strategy") == "group" else "dynamic-per-token"


def _group_size(w: Mapping[str, Any]) -> int:
    size = w.get("group_size")
    return int(size) if w.get("strategy") == "group" and isinstance(size, int) and size > 0 else 0


def _scale_bytes(w: Mapping[str, Any]) -> float:
    size = _group_size(w)
    return 2.0 / size if size else 0.0
