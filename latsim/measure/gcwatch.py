"""The measuring client's own pauses: Python's garbage collector, timed while a level runs.

A client that records token times in a Python event loop stops every stream at once while the
collector runs; with thousands of live requests a full collection takes tenths of a second,
which then looks like an engine stall.  :class:`GcWatch` freezes what already exists before a
level (``gc.freeze``: long-lived objects are no longer scanned), times every collection during
it (``gc.callbacks``), and reports the pauses for ``meta.json``.
"""

from __future__ import annotations

import gc
import time
from typing import Any


class GcWatch:
    """Context manager: ``with GcWatch() as w: ...``, then ``w.stats()``.

    On entry: a full collection, then ``gc.freeze()``; on exit ``gc.unfreeze()``.  Pauses are
    wall seconds between the collector's ``start`` and ``stop`` callbacks.
    """

    def __init__(self) -> None:
        self.pauses: list[float] = []
        self._started: float | None = None

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        elif self._started is not None:
            self.pauses.append(time.perf_counter() - self._started)
            self._started = None

    def __enter__(self) -> GcWatch:
        gc.collect()
        gc.freeze()
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._callback in gc.callbacks:
            gc.callbacks.remove(self._callback)
        gc.unfreeze()

    def stats(self) -> dict[str, Any]:
        """``collections``, ``pause_total_s`` and ``pause_max_s`` during the watch."""
        return {"collections": len(self.pauses), "pause_total_s": round(sum(self.pauses), 6),
                "pause_max_s": round(max(self.pauses, default=0.0), 6), "frozen_before": True}
