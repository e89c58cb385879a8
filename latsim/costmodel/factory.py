"""Pick the cost model for a deployment: a name -> builder mapping.

``kind="auto"`` prefers a model calibrated on the device and falls back to the roofline;
an explicit ``kind`` must name one of :data:`BUILDERS`.  New cost models register a builder
here (one entry, no subclassing).
"""

from __future__ import annotations

from collections.abc import Callable

from latsim.catalog.devices import DeviceSpec
from latsim.catalog.models import ModelSpec
from latsim.costmodel.batch import CostModel
from latsim.costmodel.roofline import RooflineCostModel

Builder = Callable[[ModelSpec, DeviceSpec, int, str, str], CostModel]


def _build_roofline(model: ModelSpec, device: DeviceSpec, tp: int, weight_dtype: str,
                    kv_dtype: str) -> CostModel:
    return RooflineCostModel(model, device, tp=tp, weight_dtype=weight_dtype, kv_dtype=kv_dtype)


BUILDERS: dict[str, Builder] = {
    "roofline": _build_roofline,
    # HOOK: "calibrated": a builder that loads calibration/<device>/ profiles and fits the
    # per-operator regressors (latsim.calibration); register it here when it exists.
}


def _calibrated_builder(device: DeviceSpec) -> Builder | None:
    """HOOK: the builder of a calibrated model for ``device``, or None when none is shipped.

    To do when latsim.calibration lands: look up a profile for ``device.name`` (and its
    aliases) and return ``BUILDERS["calibrated"]`` when one exists.  Until then every device
    falls back to the roofline.
    """
    del device
    return None


def build_cost_model(model: ModelSpec, device: DeviceSpec, tp: int = 1, weight_dtype: str = "bf16",
                     kv_dtype: str = "bf16", kind: str = "auto") -> CostModel:
    """The cost model of ``kind`` for this deployment (``auto``: calibrated if available, else roofline).

    Raises ValueError for an unknown ``kind`` and whatever the chosen model raises for an
    invalid deployment (unknown dtype, ``tp`` that does not shard the model).
    """
    if kind == "auto":
        builder = _calibrated_builder(device) or BUILDERS["roofline"]
    elif kind in BUILDERS:
        builder = BUILDERS[kind]
    else:
        raise ValueError(f"kind={kind!r} is not a cost model; accepted: auto, {', '.join(sorted(BUILDERS))}")
    return builder(model, device, tp, weight_dtype, kv_dtype)
