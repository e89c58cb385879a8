"""Files of a prediction: ``requests.parquet`` (one row per request) and ``summary.json``."""

from __future__ import annotations

import json
import math
from pathlib import Path

from latsim.atomic import atomic_write, atomic_write_text


def write_outputs(result, out_dir: str | Path, inputs: dict | None = None) -> list[Path]:
    """Write the per-request records and the summary (with ``inputs``, what produced them:
    :func:`latsim.report.inputs.describe_inputs`) atomically into ``out_dir``; the files written."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    records = result.records
    atomic_write(out / "requests.parquet", lambda f: records.to_parquet(f, index=False))
    body = {"summary": result.summary, "memory": result.memory.as_dict(), **result.extra,
            **({"inputs": inputs} if inputs is not None else {})}
    text = json.dumps(json_safe(body), indent=2, allow_nan=False, default=json_default)
    atomic_write_text(out / "summary.json", text + "\n")
    return [out / "requests.parquet", out / "summary.json"]


def json_safe(obj: object) -> object:
    """Replace non-finite floats (unbounded size classes, undefined percentiles) with None."""
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def json_default(x: object) -> object:
    """``json.dumps`` fallback: numpy scalars become Python numbers."""
    if hasattr(x, "item"):
        return x.item()
    raise TypeError(f"not JSON serialisable: {type(x).__name__}")
