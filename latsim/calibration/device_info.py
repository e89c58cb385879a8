"""Who the GPU is and what its clocks did: pynvml when present, else torch and ``nvidia-smi``.

:func:`gpu_identity` returns plain JSON-able facts for ``profile.json``; :class:`ClockSampler`
samples SM and memory clocks in a background thread during a run (min/max go into the profile,
so a throttled run can be spotted).  :func:`name_matches` decides whether a detected GPU name is
a catalog device (pure string logic, no catalog import: the GPU machine lacks pydantic).
"""

from __future__ import annotations

import platform
import shutil
import subprocess
import threading
from typing import Any


def _nvml() -> Any | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml
    except Exception:
        return None


def smi_rows(query: str) -> list[str]:
    """Rows of ``nvidia-smi --query-gpu=QUERY`` (empty when it is missing or fails)."""
    if not shutil.which("nvidia-smi"):
        return []
    try:
        res = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return []
    return [r.strip() for r in res.stdout.splitlines() if r.strip()]


def gpu_identity(torch: Any, backend: str) -> dict[str, Any]:
    """GPU name, memory, SM count, L2, driver, CUDA and library versions, host."""
    info: dict[str, Any] = {"backend": backend, "host": platform.node(), "torch": torch.__version__,
                            "python": platform.python_version(), "vllm": _vllm_version()}
    if backend != "cuda":
        return {**info, "gpu_name": "cpu", "gpu_count": 0, "memory_bytes": None, "sm_count": None,
                "l2_bytes": None, "driver": None, "cuda": None, "compute_capability": None}
    props = torch.cuda.get_device_properties(0)
    return {**info, "gpu_name": props.name, "gpu_count": torch.cuda.device_count(),
            "memory_bytes": int(props.total_memory), "sm_count": int(props.multi_processor_count),
            "l2_bytes": int(getattr(props, "L2_cache_size", 0)) or None, "driver": _driver(),
            "cuda": torch.version.cuda, "compute_capability": list(torch.cuda.get_device_capability(0))}


def _vllm_version() -> str | None:
    try:
        import vllm

        return str(vllm.__version__)
    except Exception:
        return None


def _driver() -> str | None:
    nv = _nvml()
    if nv is not None:
        v = nv.nvmlSystemGetDriverVersion()
        return v.decode() if isinstance(v, bytes) else str(v)
    rows = smi_rows("driver_version")
    return rows[0] if rows else None


def read_clocks() -> tuple[float, float] | None:
    """(SM MHz, memory MHz) of GPU 0 now, or None when neither pynvml nor nvidia-smi answers."""
    nv = _nvml()
    if nv is not None:
        h = nv.nvmlDeviceGetHandleByIndex(0)
        sm_clock = nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)
        mem_clock = nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM)
        return float(sm_clock), float(mem_clock)
    rows = smi_rows("clocks.sm,clocks.mem")
    try:
        sm, mem = (float(x) for x in rows[0].split(","))
    except (IndexError, ValueError):
        return None
    return sm, mem


class ClockSampler:
    """Samples clocks every ``period_s`` in a daemon thread between ``start()`` and ``stop()``."""

    def __init__(self, period_s: float = 1.0) -> None:
        self.period_s = period_s
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> ClockSampler:
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.is_set():
            c = read_clocks()
            if c is None:
                return
            self.samples.append(c)
            self._stop.wait(self.period_s)

    def stop(self) -> dict[str, float | None]:
        """Min/max SM and memory MHz seen (None when no sample could be read)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if not self.samples:
            return {"sm_mhz_min": None, "sm_mhz_max": None, "mem_mhz_min": None, "mem_mhz_max": None}
        sm, mem = zip(*self.samples, strict=True)
        return {"sm_mhz_min": min(sm), "sm_mhz_max": max(sm), "mem_mhz_min": min(mem), "mem_mhz_max": max(mem)}
