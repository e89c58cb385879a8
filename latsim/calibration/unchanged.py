"""Write a fitted file only when its content changed, so re-fitting a profile leaves it alone.

Re-fitting the same tables gives the same regressors and errors up to rounding (summation
order, float32 trees), which would otherwise rewrite the shipped profile's files with
last-digit differences and dirty the source tree.  Two JSON documents are *the same* when
they have the same structure, the same strings and booleans, and numbers (also numbers written
as strings, as XGBoost writes some) that agree to :data:`REL_TOL`.
"""

from __future__ import annotations

import json
import math
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from latsim.atomic import atomic_write_bytes, atomic_write_text

REL_TOL = 1e-6
"""Numbers closer than this (relative) are rounding, not a change."""


def same_json(a: Any, b: Any, rel_tol: float = REL_TOL) -> bool:
    """Whether two parsed JSON documents are the same up to rounding (see the module note)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_json(a[k], b[k], rel_tol) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_json(x, y, rel_tol) for x, y in zip(a, b, strict=True))
    x, y = _number(a), _number(b)
    if x is not None and y is not None:
        return x == y or math.isclose(x, y, rel_tol=rel_tol, abs_tol=0.0)
    return type(a) is type(b) and a == b


def _number(v: Any) -> float | None:
    """``v`` as a float when it is a JSON number or a string holding one; else None."""
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            return None
    return None


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def write_json_if_changed(path: Path, doc: Any, indent: int = 1) -> bool:
    """Write ``doc`` to ``path`` atomically unless the file already holds the same document;
    whether it was written."""
    old = _read_json(path) if path.is_file() else None
    if old is not None and same_json(old, json.loads(json.dumps(doc))):
        return False
    atomic_write_text(path, json.dumps(doc, indent=indent) + "\n")
    return True


def save_if_changed(path: Path, save: Callable[[str], None]) -> bool:
    """Have ``save(filename)`` write a JSON file (e.g. XGBoost's ``save_model``) to a scratch
    folder, then write it to ``path`` atomically unless ``path`` holds the same document;
    whether ``path`` was written."""
    with tempfile.TemporaryDirectory(prefix="latsim-fit-") as scratch:
        tmp = Path(scratch) / path.name
        save(str(tmp))
        data = tmp.read_bytes()
    old = _read_json(path) if path.is_file() else None
    if old is not None and same_json(old, json.loads(data)):
        return False
    atomic_write_bytes(path, data)
    return True
