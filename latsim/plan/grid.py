"""Sweep grids: a YAML mapping of predict's settings, lists expanded as a product.

::

    model: [llama-3.1-8b, qwen2.5-14b]
    device: [h100, h200]
    qps: [2, 8]
    input_len: 512
    output_len: 128
    num_requests: 300

Keys are :class:`latsim.config.Settings` names (underscores: ``input_len``, ``kv_dtype``); a
scalar is one value, a list several.  Points are ordered as the product of the lists in the
file's key order, and each has a stable id (a hash of its settings) by which an interrupted
sweep resumes.  Errors name the file and the key.
"""

from __future__ import annotations

import difflib
import hashlib
import itertools
import json
from dataclasses import fields
from pathlib import Path
from typing import Any, get_type_hints

from pydantic import TypeAdapter, ValidationError

from latsim.config import Settings, read_yaml_file

SETTING_NAMES = tuple(f.name for f in fields(Settings))
MAX_POINTS = 100_000


def load_grid(path: str | Path) -> list[dict[str, Any]]:
    """The points of grid file ``path`` (each a dict of settings); ValueError naming file and key."""
    return expand(read_yaml_file(path, "grid"), str(path))


def expand(raw: Any, where: str = "grid") -> list[dict[str, Any]]:
    """The product of a grid mapping (see the module docstring); ``where`` names it in errors."""
    if raw is None or raw == {}:
        raise ValueError(f"{where} is empty; give settings such as model: [llama-3.1-8b], qps: [2, 8]")
    if not isinstance(raw, dict):
        raise ValueError(f"{where} must be a mapping of settings to values or lists, got {type(raw).__name__}")
    hints = get_type_hints(Settings)
    axes: list[tuple[str, list[Any]]] = []
    for key, value in raw.items():
        name = str(key)
        if name not in SETTING_NAMES:
            close = difflib.get_close_matches(name.replace("-", "_"), SETTING_NAMES, n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else f"; accepted: {', '.join(SETTING_NAMES)}"
            raise ValueError(f"{where}: unknown key {name!r}{hint}")
        values = value if isinstance(value, list) else [value]
        if not values:
            raise ValueError(f"{where}: key {name!r} has an empty list")
        adapter: TypeAdapter[Any] = TypeAdapter(hints[name])
        checked = []
        for v in values:
            if v is None:
                raise ValueError(f"{where}: key {name!r} has an empty value")
            try:
                checked.append(adapter.validate_python(v))
            except ValidationError as exc:
                raise ValueError(f"{where}: key {name!r}: {v!r} is not valid ({exc.errors()[0]['msg']})") from None
        axes.append((name, checked))
    count = 1
    for _, values in axes:
        count *= len(values)
    if count > MAX_POINTS:
        raise ValueError(f"{where} expands to {count} points; the limit is {MAX_POINTS}")
    names = [n for n, _ in axes]
    return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*(v for _, v in axes))]


def point_id(point: dict[str, Any]) -> str:
    """A stable 16-hex-digit id of a point's settings (key order does not matter)."""
    text = json.dumps(point, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
