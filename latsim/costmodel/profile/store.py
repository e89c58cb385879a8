"""Calibration profile folders: where they live, and loading them with validation.

A profile folder holds ``profile.json`` (GPU, software, grid; see
:mod:`latsim.calibration.runner`), one parquet table per benchmark family and, once fitted,
``model_<family>.json`` (xgboost), ``overheads.json``, ``allreduce.json`` and
``fit_report.json``.  Shipped profiles live in ``latsim/data/calibration/<device>/`` where
``<device>`` is the catalog name.  Every loader raises ValueError naming the file and what
was expected and found.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from latsim.catalog.lookup import name_matches
from latsim.costmodel.profile.tables import read_shard, shard_path
from latsim.paths import CALIBRATION

SHIPPED_DIR = CALIBRATION
PROFILE = "profile.json"
REQUIRED_KEYS = ("gpu_name", "device", "grid", "grid_hash", "date_utc", "backend")


def shipped_profile_dir(device_name: str) -> Path:
    return SHIPPED_DIR / device_name


def has_profile(device_name: str, aliases: tuple[str, ...] = ()) -> Path | None:
    """The shipped folder of ``device_name`` (or an alias) holding fitted models, or None."""
    for name in (device_name, *aliases):
        folder = shipped_profile_dir(name)
        if (folder / PROFILE).is_file() and (folder / "fit_report.json").is_file():
            return folder
    return None


def read_json(path: Path, what: str) -> dict[str, Any]:
    """A JSON object from ``path``; ValueError naming the file when missing or corrupt."""
    if not path.is_file():
        raise ValueError(f"{path}: {what} missing")
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: corrupt {what} ({exc})") from exc
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: {what} must be a JSON object, found {type(doc).__name__}")
    return doc


def read_profile(folder: Path) -> dict[str, Any]:
    """``profile.json`` of ``folder``, checked for the keys every profile has."""
    path = folder / PROFILE
    doc = read_json(path, "calibration profile")
    missing = [k for k in REQUIRED_KEYS if k not in doc]
    if missing:
        raise ValueError(f"{path}: missing key(s) {missing}; expected {', '.join(REQUIRED_KEYS)}")
    return doc


def check_device(profile: dict[str, Any], folder: Path, device_name: str, aliases: tuple[str, ...] = ()) -> None:
    """ValueError unless the profile was measured on ``device_name`` (by GPU name)."""
    found = str(profile["gpu_name"])
    if not name_matches(found, device_name, aliases):
        names = ", ".join((device_name, *aliases))
        raise ValueError(f"{folder / PROFILE}: measured on GPU {found!r}, which is not device {device_name!r} "
                         f"(expected a GPU name containing one of: {names})")


def load_table(folder: Path, family: str, ok_only: bool = True) -> pd.DataFrame:
    """One family's table (rows with status ``ok`` unless ``ok_only`` is false)."""
    df = read_shard(shard_path(folder, family))
    for col in ("point_id", "status"):
        if col not in df.columns:
            raise ValueError(f"{shard_path(folder, family)}: column {col!r} missing; not a latsim table")
    return df[df["status"] == "ok"].reset_index(drop=True) if ok_only else df


def available_families(folder: Path) -> list[str]:
    return sorted(p.stem for p in folder.glob("*.parquet"))


def shipped_profiles() -> list[Path]:
    """Shipped profile folders that hold fitted models, ``h200`` first when present."""
    found = [d for d in sorted(SHIPPED_DIR.glob("*")) if (d / PROFILE).is_file() and (d / "fit_report.json").is_file()]
    return sorted(found, key=lambda d: (d.name != "h200", d.name))


