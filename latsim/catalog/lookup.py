"""Find models and devices by name (built-in catalog) or by path (a user's ``config.json``).

Model names are the file stems of ``data/catalog/models/*.json`` and match case-insensitively.
A path wins over a catalog name when it is an existing file, or an existing folder holding a
``config.json``.  Device names and aliases come from ``data/catalog/devices.yaml``.  Unknown
names raise :class:`UnknownNameError`, whose message suggests close names.
"""

from __future__ import annotations

import difflib
import json
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

from latsim.catalog.devices import DeviceSpec, parse_devices
from latsim.catalog.hf_config import parse_hf_config
from latsim.catalog.models import ModelSpec
from latsim.paths import CATALOG

DATA_DIR = CATALOG
MODELS_DIR = DATA_DIR / "models"
DEVICES_FILE = DATA_DIR / "devices.yaml"


class UnknownNameError(ValueError):
    """A model or device name that is neither in the catalog nor (for models) an existing path.

    ``suggestions`` holds the closest known names, best first.
    """

    def __init__(self, kind: str, name: str, suggestions: list[str], list_command: str):
        self.kind, self.name, self.suggestions = kind, name, suggestions
        hint = f"; did you mean {', '.join(suggestions)}?" if suggestions else ""
        super().__init__(f"unknown {kind} {name!r}{hint} Run `{list_command}` to see all.")


def list_models() -> list[str]:
    """Names of the built-in models, sorted."""
    return sorted(path.stem for path in MODELS_DIR.glob("*.json"))


def load_model(name_or_path: str | Path) -> ModelSpec:
    """The :class:`ModelSpec` of a catalog name (case-insensitive) or of a config file/folder."""
    name, cfg = _resolve_model(name_or_path)
    return parse_hf_config(cfg, name)


def model_config_dict(name_or_path: str | Path) -> dict[str, Any]:
    """The HF ``config.json`` dict of a catalog name or path (a fresh copy, safe to modify)."""
    return _resolve_model(name_or_path)[1]


def list_devices() -> list[DeviceSpec]:
    """Every built-in device, in file order (parsed once; the specs are shared, do not mutate them)."""
    return list(_builtin_devices())


def load_device(name: str) -> DeviceSpec:
    """The :class:`DeviceSpec` whose name or alias equals ``name`` (case-insensitive)."""
    key = name.strip().lower()
    for spec in _builtin_devices():
        if key == spec.name or key in spec.aliases:
            return spec
    known = [n for spec in _builtin_devices() for n in (spec.name, *spec.aliases)]
    raise UnknownNameError("device", name, _suggest(key, known), "latsim devices")


def _tokens(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", text.lower()))


def name_matches(gpu_name: str, device_name: str, aliases: tuple[str, ...] = ()) -> bool:
    """True when every word of the catalog ``device_name`` (or of one alias) is in ``gpu_name``.

    ``NVIDIA H200`` matches ``h200``; ``NVIDIA H100 80GB HBM3`` matches ``h100`` and ``h100-sxm``
    only through an alias the GPU name contains.  The CPU backend's name is ``cpu``.
    """
    words = _tokens(gpu_name)
    return any(_tokens(n) and _tokens(n) <= words for n in (device_name, *aliases))


def detect_device(gpu_name: str) -> DeviceSpec:
    """The catalog device whose name (or alias) matches ``gpu_name`` (as the driver reports it,
    e.g. ``NVIDIA H100 80GB HBM3``) with the most words; ValueError when none matches."""
    scored = []
    for d in _builtin_devices():
        for n in (d.name, *d.aliases):
            if name_matches(gpu_name, n):
                scored.append((len(n.replace("-", " ").split()), d))
    if not scored:
        raise ValueError(f"GPU {gpu_name!r} matches no catalog device; pass --device NAME (see `latsim devices`)")
    return max(scored, key=lambda s: s[0])[1]


def read_config_file(path: Path) -> dict[str, Any]:
    """Read one JSON config; ``ValueError`` names the file and the position of a JSON error."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"{path}: invalid JSON at line {exc.lineno} column {exc.colno} (char {exc.pos}): {exc.msg}"
        ) from exc
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: expected a JSON object at the top level, got {type(doc).__name__}")
    return doc


def _resolve_model(name_or_path: str | Path) -> tuple[str, dict[str, Any]]:
    path = _config_path(Path(name_or_path))
    if path is not None:
        return _name_from_path(path), read_config_file(path)
    key = str(name_or_path).strip().lower()
    if key in list_models():
        return key, read_config_file(MODELS_DIR / f"{key}.json")
    if Path(name_or_path).is_dir():
        raise ValueError(f"folder {name_or_path} has no config.json and is not a catalog model name")
    if _looks_like_path(str(name_or_path)):
        raise ValueError(f"model config {name_or_path}: file not found (expected a config.json file, a folder "
                         "holding one, or a catalog name; see `latsim models`)")
    raise UnknownNameError("model", str(name_or_path), _suggest(key, list_models()), "latsim models")


def _looks_like_path(name: str) -> bool:
    """A name no catalog model has: one with a folder separator or a ``.json`` ending."""
    return "/" in name or "\\" in name or name.lower().endswith(".json")


def _config_path(path: Path) -> Path | None:
    if path.is_file():
        return path
    if path.is_dir() and (path / "config.json").is_file():
        return path / "config.json"
    return None


def _name_from_path(path: Path) -> str:
    """``/models/Llama-3.1-8B/config.json`` -> ``Llama-3.1-8B``; ``/x/my-model.json`` -> ``my-model``."""
    parent = path.resolve().parent.name
    return parent if path.name == "config.json" and parent else path.stem


def _suggest(key: str, known: list[str]) -> list[str]:
    close = difflib.get_close_matches(key, known, n=3, cutoff=0.5)
    containing = [k for k in known if key and key in k and k not in close]
    return (close + containing)[:5]


@lru_cache(maxsize=1)
def _builtin_devices() -> tuple[DeviceSpec, ...]:
    return tuple(parse_devices(DEVICES_FILE.read_text(encoding="utf-8"), str(DEVICES_FILE)))
