"""GPU and accelerator specifications, read from ``catalog/data/devices.yaml``.

Every figure in the data file carries a source note; this module only parses and validates.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class DeviceSpec:
    """One accelerator as the roofline sees it.

    ``peak_flops`` maps a dtype name (``bf16``, ``fp16``, ``fp8``, ``int8``, ``fp32``) to dense
    (non-sparse) peak FLOP/s.  ``interconnect_bw`` is the per-GPU unidirectional bandwidth in B/s
    of the link used by tensor-parallel collectives (NVLink, PCIe, Infinity Fabric, ...).
    """

    name: str
    display_name: str
    vendor: str
    memory_bytes: float
    hbm_bandwidth: float
    peak_flops: dict[str, float]
    interconnect: str
    interconnect_bw: float
    max_gpus_per_node: int
    price_per_hour: float
    aliases: tuple[str, ...] = ()
    sources: dict[str, str] = field(default_factory=dict)

    @property
    def memory_gib(self) -> float:
        return self.memory_bytes / 2**30

    def flops_for(self, dtype: str) -> float:
        """Dense peak FLOP/s for ``dtype``; falls back to bf16 where the chip has no such unit."""
        return self.peak_flops.get(dtype) or self.peak_flops["bf16"]
