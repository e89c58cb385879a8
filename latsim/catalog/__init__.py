"""The catalog of LLM architectures (HF ``config.json``) and accelerators (``devices.yaml``)."""

from latsim.catalog.devices import DeviceSpec, parse_devices
from latsim.catalog.hf_config import SUPPORTED_MODEL_TYPES, parse_hf_config
from latsim.catalog.lookup import (
    UnknownNameError,
    detect_device,
    list_devices,
    list_models,
    load_device,
    load_model,
    model_config_dict,
)
from latsim.catalog.models import DTYPE_BYTES, KV_DTYPES, WEIGHT_DTYPES, ModelSpec
from latsim.catalog.sizing import kv_bytes_for_context, kv_bytes_per_token, param_counts, weight_bytes

__all__ = [
    "DTYPE_BYTES",
    "KV_DTYPES",
    "SUPPORTED_MODEL_TYPES",
    "WEIGHT_DTYPES",
    "DeviceSpec",
    "ModelSpec",
    "UnknownNameError",
    "detect_device",
    "kv_bytes_for_context",
    "kv_bytes_per_token",
    "list_devices",
    "list_models",
    "load_device",
    "load_model",
    "model_config_dict",
    "param_counts",
    "parse_devices",
    "parse_hf_config",
    "weight_bytes",
]
