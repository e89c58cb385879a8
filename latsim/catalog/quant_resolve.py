"""Which weight and KV-cache dtypes a deployment runs, and where each came from.

``auto`` (the default, as vLLM's ``--dtype auto`` / ``--kv-cache-dtype auto``) takes the
checkpoint's ``quantization_config`` (:mod:`latsim.catalog.quant`), else 16-bit bf16.  An
explicit dtype (a flag, a deployment file or an argument) always wins.  Sources:

* ``flag``: given explicitly;
* ``config``: read from the model's ``quantization_config``;
* ``default``: nothing said, nothing in the config: bf16.
"""

from __future__ import annotations

from typing import Any

from latsim.catalog.models import KV_DTYPES, WEIGHT_DTYPES, ModelSpec
from latsim.catalog.quant import parse_quantization

AUTO = "auto"
DEFAULT_DTYPE = "bf16"
SOURCES = ("flag", "config", "default")


def resolve_weight_dtype(model: ModelSpec, requested: str, source: str | None = None) -> tuple[str, str]:
    """``(weight dtype, source)`` for ``requested`` (``auto`` or one of ``WEIGHT_DTYPES``).

    ``source`` keeps a source already resolved (e.g. through ``dataclasses.replace``) when it is
    still true of ``requested``.  ValueError for an unknown dtype, and for ``auto`` on a config
    whose ``quantization_config`` latsim does not model (the message names the method and the
    known ones).
    """
    if requested != AUTO:
        _check(requested, WEIGHT_DTYPES, "weight dtype")
        return requested, _kept_source(source, requested, _config_weight(model))
    config = _config_weight(model)
    if config is not None:
        return config, "config"
    if model.hf_config_dict().get("quantization_config") is not None:
        parse_quantization(model.hf_config_dict())  # raises: the spec was left out because it is not modelled
    return DEFAULT_DTYPE, "default"


def resolve_kv_dtype(model: ModelSpec, requested: str, source: str | None = None) -> tuple[str, str]:
    """``(KV-cache dtype, source)``: ``auto`` takes the checkpoint's (vLLM's rule, see
    :mod:`latsim.catalog.quant`), else bf16."""
    config = model.quantization.kv_dtype if model.quantization is not None else None
    if requested != AUTO:
        _check(requested, KV_DTYPES, "kv-cache dtype")
        return requested, _kept_source(source, requested, config)
    return (config, "config") if config is not None else (DEFAULT_DTYPE, "default")


def _config_weight(model: ModelSpec) -> str | None:
    return model.quantization.weight_dtype if model.quantization is not None else None


def _kept_source(source: str | None, value: str, config: str | None) -> str:
    if source == "config" and value == config:
        return "config"
    if source == "default" and value == DEFAULT_DTYPE and config is None:
        return "default"
    return "flag"


def _check(value: str, accepted: tuple[str, ...], what: str) -> None:
    if value not in accepted:
        raise ValueError(f"{what} must be one of {AUTO}, {', '.join(accepted)}, got {value!r}")


def dtype_report(deployment: Any) -> dict[str, Any]:
    """What a prediction says about its dtypes: each dtype, its source and the checkpoint's scheme."""
    quant = deployment.model.quantization
    out: dict[str, Any] = {
        "weight_dtype": deployment.weight_dtype, "weight_dtype_source": deployment.weight_dtype_source,
        "kv_dtype": deployment.kv_dtype, "kv_dtype_source": deployment.kv_dtype_source,
    }
    if quant is not None:
        out["quantization"] = {
            "method": quant.method, "scheme": quant.label, "applied": deployment.weight_dtype == quant.weight_dtype,
            "unquantized_linear_params": quant.unquantized_linear,
            **({"note": quant.kv_scheme_note} if quant.kv_scheme_note else {}),
        }
    return out
