"""Structured provenance for values a script computes from measurements and writes to a data file.

A record (:func:`record`) says what produced a value: the command line, the git commit the code
was at, the date, the inputs (each run folder with a digest of its files, :func:`run_digest`)
and the computation's results (its loss, residuals, the unrounded values).  The command, commit
and date change on every run (:data:`VOLATILE`); two records that agree on everything else
describe the same computation, so a writer can leave a file alone when nothing else changed
(:func:`same_computation`).
"""

from __future__ import annotations

import hashlib
import math
import shlex
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

VOLATILE = ("command", "commit", "date")
"""Record keys that differ between runs of the same computation."""
DIGEST_CHARS = 16
"""Hex digits of sha256 kept in a digest: enough to tell file contents apart."""


def file_digest(path: Path) -> str:
    """sha256 of the file's bytes (hex)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def run_digest(run: str | Path) -> str:
    """Digest of every file at or below the folder ``run`` (names relative to it and contents,
    in name order; dot-files left out); ValueError when ``run`` holds no file."""
    base = Path(run)
    files = sorted(p for p in base.rglob("*") if p.is_file() and not p.name.startswith("."))
    if not files:
        raise ValueError(f"{run}: no files to take a digest of (is it a run folder?)")
    h = hashlib.sha256()
    for path in files:
        h.update(f"{path.relative_to(base).as_posix()}\0{file_digest(path)}\n".encode())
    return h.hexdigest()[:DIGEST_CHARS]


def display_path(path: str | Path) -> str:
    """``path`` relative to the working directory when it lies below it, else absolute (posix)."""
    resolved = Path(path).resolve()
    try:
        return resolved.relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return resolved.as_posix()


def run_inputs(runs: Iterable[str | Path]) -> dict[str, str]:
    """``{run folder: digest}`` for each run, in the order given."""
    return {display_path(run): run_digest(run) for run in runs}


def combined_digest(runs: Iterable[str | Path]) -> str:
    """One digest over many run folders (their paths and digests, in path order)."""
    h = hashlib.sha256()
    for name, digest in sorted(run_inputs(runs).items()):
        h.update(f"{name}\0{digest}\n".encode())
    return h.hexdigest()[:DIGEST_CHARS]


def git_commit(exclude: str | Path | None = None) -> str | None:
    """The commit checked out in the working directory's repository, ``+dirty`` when tracked
    files other than ``exclude`` (the file being written) differ from it; None outside git."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True)
        spec = ["--", "."]
        if exclude is not None and not Path(display_path(exclude)).is_absolute():
            spec.append(f":(exclude){display_path(exclude)}")
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", *spec],
                                capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return head.stdout.strip() + ("+dirty" if status.stdout.strip() else "")


def command_line(argv: Sequence[str] | None = None) -> str:
    """The command that ran, as a shell would take it: ``python <script> <args>``."""
    args = list(sys.argv if argv is None else argv)
    if args:
        args[0] = display_path(args[0])
    return shlex.join(["python", *args])


def utc_now() -> str:
    """The current UTC time, ISO-8601 to the second."""
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def record(inputs: Mapping[str, Any], results: Mapping[str, Any], *, argv: Sequence[str] | None = None,
           exclude: str | Path | None = None, date: str | None = None) -> dict[str, Any]:
    """A provenance record: ``command``, ``commit`` (:func:`git_commit`), ``date`` (UTC),
    ``inputs`` and ``results`` (mappings of plain values: str, int, float, lists, mappings)."""
    return {"command": command_line(argv), "commit": git_commit(exclude), "date": date or utc_now(),
            "inputs": plain(inputs), "results": plain(results)}


def same_computation(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> bool:
    """Whether two records agree on everything but :data:`VOLATILE`."""
    if a is None or b is None:
        return a is b
    return ({k: v for k, v in a.items() if k not in VOLATILE}
            == {k: v for k, v in b.items() if k not in VOLATILE})


def plain(value: Any) -> Any:
    """``value`` as plain data (dicts, lists, str, int, float, bool, None): tuples and numpy
    scalars converted; ValueError on a non-finite float or anything else."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"provenance value {value!r} is not finite")
        return float(value)
    if hasattr(value, "item") and hasattr(value, "dtype") and getattr(value, "ndim", 1) == 0:
        return plain(value.item())  # a numpy scalar
    raise ValueError(f"provenance value {value!r} ({type(value).__name__}) is not plain data")


def significant(value: Any, digits: int = 4) -> Any:
    """``value`` (plain data, :func:`plain`) with every float rounded to ``digits`` significant
    digits: results kept for the record, not for computing with."""
    value = plain(value)
    if isinstance(value, dict):
        return {k: significant(v, digits) for k, v in value.items()}
    if isinstance(value, list):
        return [significant(v, digits) for v in value]
    return round_significant(value, digits) if isinstance(value, float) else value


def round_decimals(value: float, decimals: int) -> float:
    """``value`` rounded to ``decimals`` places after the point (the nearest float to it)."""
    return float(round(float(value), decimals))


def round_significant(value: float, digits: int) -> float:
    """``value`` rounded to ``digits`` significant digits (the nearest float to it)."""
    return float(f"{float(value):.{digits}g}")
