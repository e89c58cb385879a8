"""Atomic file writes: write a temporary file beside the target, then rename over it."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO


def atomic_write(path: str | Path, fill: Callable[[IO[bytes]], None]) -> None:
    """Create or replace ``path`` with what ``fill`` writes; readers never see a partial file."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        os.fchmod(fd, 0o644)  # mkstemp's 0600 would make shared result folders unreadable
        with os.fdopen(fd, "wb") as f:
            fill(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    def fill(f: IO[bytes]) -> None:
        f.write(data)

    atomic_write(path, fill)


def atomic_write_text(path: str | Path, text: str) -> None:
    def fill(f: IO[bytes]) -> None:
        f.write(text.encode())

    atomic_write(path, fill)
