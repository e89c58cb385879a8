"""Taking out of imported attention rows the KV-cache write that latsim prices as its own op.

The source times vLLM's attention layer call replayed in a CUDA graph: the KV-cache write
(``do_kv_cache_update``, vLLM's ``reshape_and_cache``) and then the attention kernel.  latsim
prices that write separately (``kv_write`` in :mod:`latsim.costmodel.ops`: one streaming kernel
per layer on the memory-op curve, plus one CUDA-graph kernel gap), so an imported row would
count it twice.  :func:`less_kv_write` subtracts latsim's own price of the write from each row,
never below half the row (as the native fit treats its timer floor), and keeps the source's
time in ``source_median_s`` and the amount taken in ``kv_write_s``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from latsim.catalog.devices import DeviceSpec
from latsim.costmodel.profile import features

KV_BYTES_PER_ELEM = 2.0 + 2.0
"""bf16 K and V read from the projection output and written into the cache."""


def kv_write_bytes(att: pd.DataFrame) -> np.ndarray:
    """Bytes the KV-cache write moves for each row: new tokens x (K and V) x kv heads x head dim."""
    tokens = np.where(att["phase"] == "prefill", att["q"].fillna(0.0), att["batch"].fillna(0.0)).astype(np.float64)
    return tokens * 2.0 * att["hkv"].to_numpy(np.float64) * att["d"].to_numpy(np.float64) * KV_BYTES_PER_ELEM


def less_kv_write(att: pd.DataFrame, memory_model: Any, device: DeviceSpec, per_kernel_s: float) -> pd.DataFrame:
    """Attention rows less latsim's price of their KV-cache write (``memory_model``: the fitted
    memory-op regressor, read on its ``copy`` curve at this device's roofline)."""
    nbytes = kv_write_bytes(att)
    roof = nbytes / device.hbm_bandwidth
    cols = {"op": np.full(len(att), "copy"), "bytes": nbytes}
    ratio = np.exp(np.asarray(memory_model.predict(features.matrix("memory", cols, roof)), dtype=np.float64))
    kv = roof * ratio + per_kernel_s
    med = att["median_s"].to_numpy(np.float64)
    return att.assign(source_median_s=med, kv_write_s=kv, median_s=np.maximum(med - kv, 0.5 * med))


def faster_than_roofline(family: str, df: pd.DataFrame, device: DeviceSpec) -> np.ndarray:
    """Rows timed below the datasheet roofline: their bytes cannot have come from HBM (the
    source's loop kept them in the L2 cache, which serving does not), so they are left out."""
    from latsim.calibration.fit import family_roofline

    if family == "gemm":
        roof = family_roofline("gemm", df.assign(fp8=(df["dtype"] == "fp8").astype(np.float64)), device)
    else:
        roof = family_roofline("attn_prefill", df, device)  # attention: bf16 peak, same for both phases
    return np.asarray(df["median_s"].to_numpy(np.float64) < roof)
