"""Reading a published AIConfigurator kernel database (ai-dynamo/aiconfigurator, Apache-2.0).

The database is a folder tree ``<root>/<system>/<op>/<engine>/<version>/<table>.parquet``
(``root`` is ``.../systems/data`` of the repository; ``PATH`` may also be the repository
itself).  Each version folder has ``collection_meta.yaml`` and, where a table is borrowed from
another version, ``reuse.yaml`` (``reuse: [{table, from_version, ...}]``).  Latencies are
milliseconds.  This module finds the tables of one GPU and engine version and checks their
columns; :mod:`latsim.calibration.aic_convert` turns them into latsim tables.  Every problem
raises ValueError with one line naming the bad value and what is accepted.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

SOURCE_REPO = "ai-dynamo/aiconfigurator"
LICENSE = "Apache-2.0"
ENGINE = "vllm"
SUBDIRS = ("aic-core/src/aiconfigurator_core/systems/data", "src/aiconfigurator/systems/data", "systems/data", "data")
SYSTEMS = {
    "a100": "a100_sxm",
    "h100": "h100_sxm",
    "h200": "h200_sxm",
    "b200": "b200_sxm",
    "h100-pcie": "h100_pcie",
    "l40s": "l40s",
    "l4": "l4",
}
"""Catalog device -> the database's system folder."""


@dataclass(frozen=True)
class TableSpec:
    """One database table: its op folder, file stem, the columns latsim reads, and whether required."""

    op: str
    stem: str
    columns: tuple[str, ...]
    required: bool
    fallback: str


TABLES: dict[str, TableSpec] = {
    "gemm": TableSpec("gemm", "gemm_perf", ("gemm_dtype", "m", "n", "k", "latency"), True, ""),
    "context_attention": TableSpec(
        "attention",
        "context_attention_perf",
        ("batch_size", "isl", "num_heads", "num_key_value_heads", "head_dim", "kv_cache_dtype", "latency"),
        True,
        "",
    ),
    "generation_attention": TableSpec(
        "attention",
        "generation_attention_perf",
        ("batch_size", "step", "num_heads", "num_key_value_heads", "head_dim", "kv_cache_dtype", "latency"),
        True,
        "",
    ),
    "moe": TableSpec(
        "moe",
        "moe_perf",
        (
            "moe_dtype",
            "num_tokens",
            "hidden_size",
            "inter_size",
            "topk",
            "num_experts",
            "moe_tp_size",
            "moe_ep_size",
            "latency",
        ),
        False,
        "MoE experts priced by the roofline (weights streamed at the roofline's GEMM efficiency)",
    ),
    "allreduce": TableSpec(
        "comm",
        "custom_allreduce_perf",
        ("num_gpus", "message_size", "allreduce_dtype", "latency"),
        False,
        "all-reduce priced by the roofline's interconnect model",
    ),
}


@dataclass
class SourceDB:
    """The tables found for one GPU and engine version, with where each came from."""

    root: Path
    system: str
    version: str
    frames: dict[str, pd.DataFrame] = field(default_factory=dict)
    paths: dict[str, str] = field(default_factory=dict)
    reused: dict[str, str] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    commit: str | None = None
    commit_date: str | None = None
    prefix: str | None = None


def find_root(path: Path) -> Path:
    """The database root under ``path`` (the folder holding ``<system>/<op>/...``)."""
    path = Path(path)
    if not path.is_dir():
        raise ValueError(f"{path}: not a folder; expected an aiconfigurator checkout or its systems/data folder")
    for sub in SUBDIRS:
        if (path / sub).is_dir():
            return path / sub
    if any((d / "gemm").is_dir() or (d / "attention").is_dir() for d in path.iterdir() if d.is_dir()):
        return path
    raise ValueError(
        f"{path}: unknown database layout; expected <system>/<op>/{ENGINE}/<version>/<table>.parquet "
        f"(e.g. h100_sxm/gemm/{ENGINE}/0.24.0/gemm_perf.parquet) under it or under one of {', '.join(SUBDIRS)}"
    )


def system_for(device: str, root: Path) -> str:
    """The system folder of catalog ``device``; ValueError when unmapped or absent from ``root``."""
    present = sorted(d.name for d in root.iterdir() if d.is_dir() and any(d.iterdir()))
    system = SYSTEMS.get(device)
    if system is None:
        raise ValueError(f"--device {device}: no aiconfigurator system is known for it; accepted: {', '.join(SYSTEMS)}")
    if system not in present:
        raise ValueError(
            f"GPU {device} ({system}) is absent from {root}; systems there: {', '.join(present) or 'none'}"
        )
    return system


def _version_key(v: str) -> tuple[int, ...]:
    return tuple(int(p) if p.isdigit() else -1 for p in v.replace("dev", ".").split("."))


def versions(root: Path, system: str) -> list[str]:
    """Engine versions with a GEMM table measured directly (not borrowed), oldest first."""
    base = root / system / TABLES["gemm"].op / ENGINE
    found = (
        [d.name for d in base.iterdir() if (d / f"{TABLES['gemm'].stem}.parquet").is_file()] if base.is_dir() else []
    )
    return sorted(found, key=_version_key)


def pick_version(root: Path, system: str, wanted: str) -> str:
    """``wanted`` (or the newest with ``newest``); ValueError naming the versions present."""
    have = versions(root, system)
    if not have:
        raise ValueError(
            f"{root / system}: no {ENGINE} GEMM table (expected gemm/{ENGINE}/<version>/gemm_perf.parquet)"
        )
    if wanted == "newest":
        return have[-1]
    if wanted not in have:
        raise ValueError(f"{ENGINE} version {wanted!r} is absent for {system}; measured versions: {', '.join(have)}")
    return wanted


def _reuse_donor(folder: Path, stem: str) -> str | None:
    path = folder / "reuse.yaml"
    if not path.is_file():
        return None
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise ValueError(f"{path}: corrupt reuse file ({exc})") from exc
    for entry in doc.get("reuse", []) if isinstance(doc, dict) else []:
        if isinstance(entry, dict) and entry.get("table") == stem and entry.get("from_version"):
            return str(entry["from_version"])
    return None


def _read(path: Path, spec: TableSpec) -> pd.DataFrame:
    try:
        df = pd.read_parquet(path)
    except Exception as exc:
        raise ValueError(f"{path}: not a readable parquet table ({type(exc).__name__})") from exc
    lacking = [c for c in spec.columns if c not in df.columns]
    if lacking:
        raise ValueError(f"{path}: unknown columns, lacks {lacking}; expected {', '.join(spec.columns)}")
    return df


def _git(root: Path, *args: str) -> str | None:
    try:
        res = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return res.stdout.strip() or None if res.returncode == 0 else None


def load_source(path: Path, device: str, version: str = "newest", allow_partial: bool = False) -> SourceDB:
    """The tables of ``device`` at engine ``version`` (following ``reuse.yaml`` donors).

    ValueError for an unknown layout or columns, a GPU or version absent, a required table
    missing, or an optional table missing unless ``allow_partial`` (then its fallback is recorded).
    """
    root = find_root(path)
    system = system_for(device, root)
    ver = pick_version(root, system, version)
    db = SourceDB(
        root=root,
        system=system,
        version=ver,
        commit=_git(root, "rev-parse", "HEAD"),
        commit_date=_git(root, "log", "-1", "--format=%cI"),
        prefix=_git(root, "rev-parse", "--show-prefix"),
    )
    for name, spec in TABLES.items():
        folder = root / system / spec.op / ENGINE / ver
        donor = _reuse_donor(folder, spec.stem)
        file = folder / f"{spec.stem}.parquet"
        if not file.is_file() and donor:
            file = root / system / spec.op / ENGINE / donor / f"{spec.stem}.parquet"
            db.reused[name] = donor
        if not file.is_file():
            db.missing.append(name)
            continue
        db.frames[name] = _read(file, spec)
        db.paths[name] = str(file.relative_to(root))
    _check_missing(db, allow_partial)
    return db


def _check_missing(db: SourceDB, allow_partial: bool) -> None:
    need = [n for n in db.missing if TABLES[n].required]
    where = f"{db.system}/{ENGINE} {db.version}"
    if need:
        raise ValueError(
            f"partial database: {where} lacks required table(s) {', '.join(TABLES[n].stem for n in need)}; "
            f"expected {', '.join(TABLES[n].stem for n in TABLES if TABLES[n].required)}"
        )
    if db.missing and not allow_partial:
        said = "; ".join(f"{TABLES[n].stem} missing -> {TABLES[n].fallback}" for n in db.missing)
        raise ValueError(f"partial database {where}: {said}; pass --allow-partial to import with these fallbacks")


def provenance(db: SourceDB) -> dict[str, Any]:
    """The ``source`` block of an imported profile's ``profile.json``."""
    return {
        "kind": "imported",
        "tool": "aiconfigurator",
        "repository": SOURCE_REPO,
        "license": LICENSE,
        "commit": db.commit or "unknown (not a git checkout)",
        "commit_date": db.commit_date,
        "path": (db.prefix or db.root.name).rstrip("/"),
        "system": db.system,
        "engine": ENGINE,
        "engine_version": db.version,
        "tables": dict(db.paths),
        "reused_from_version": dict(db.reused),
        "missing": {n: TABLES[n].fallback for n in db.missing},
    }
