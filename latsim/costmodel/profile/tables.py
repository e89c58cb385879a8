"""The files of a calibration output folder: per-family parquet shards and ``progress.json``.

``<out>/<family>.parquet`` holds one row per measured point (``point_id``, ``family``,
``status`` in :data:`STATUSES`, ``reason``, the point's parameters, then the measurement).
``<out>/progress.json`` lists the completed point ids with the grid they belong to.  Every write
is atomic (temporary file, then rename), so an interrupted run leaves the previous consistent
state; shards are written before ``progress.json``, so a listed id always has its row.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import IO, Any

import pandas as pd

from latsim.atomic import atomic_write, atomic_write_text

STATUSES = ("ok", "oom", "skipped", "error")
PROGRESS = "progress.json"


def shard_path(out: Path, family: str) -> Path:
    return out / f"{family}.parquet"


def write_shard(out: Path, family: str, rows: list[dict[str, Any]]) -> None:
    """Replace ``<out>/<family>.parquet`` with ``rows``."""
    buf = io.BytesIO()
    pd.DataFrame(rows).to_parquet(buf, index=False)
    def fill(f: IO[bytes]) -> None:
        f.write(buf.getvalue())

    atomic_write(shard_path(out, family), fill)


def read_shard(path: Path) -> pd.DataFrame:
    """One family table; ValueError naming the file when it is missing or not parquet."""
    if not path.is_file():
        raise ValueError(f"{path}: calibration table missing")
    try:
        return pd.read_parquet(path)
    except Exception as exc:
        raise ValueError(f"{path}: not a readable parquet table ({type(exc).__name__}: {exc})") from exc


def write_progress(out: Path, grid: str, grid_hash: str, completed: list[str], elapsed_s: float) -> None:
    doc = {"grid": grid, "grid_hash": grid_hash, "elapsed_s": elapsed_s, "completed": completed}
    atomic_write_text(out / PROGRESS, json.dumps(doc) + "\n")


def read_progress(out: Path) -> dict[str, Any] | None:
    """The progress record, or None when the folder has none; ValueError when it is corrupt."""
    path = out / PROGRESS
    if not path.is_file():
        return None
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: corrupt progress file ({exc}); delete it to start over") from exc
    if not isinstance(doc, dict) or not isinstance(doc.get("completed"), list):
        raise ValueError(f"{path}: expected an object with a 'completed' list")
    return doc


def load_rows(out: Path, families: list[str]) -> dict[str, list[dict[str, Any]]]:
    """Existing rows per family (empty lists where no shard exists yet)."""
    rows: dict[str, list[dict[str, Any]]] = {}
    for fam in families:
        path = shard_path(out, fam)
        records: list[dict[str, Any]] = read_shard(path).to_dict("records") if path.is_file() else []  # type: ignore[assignment]
        rows[fam] = records
    return rows
