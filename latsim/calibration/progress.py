"""Progress display and the per-family timing table, shared by the CLI and the device script.

A rich progress bar when the output is a terminal; otherwise one line per finished family
(captured logs stay short).  Nothing here changes what is measured.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from latsim.calibration.grid import Point


class RunDisplay:
    """Callbacks for :func:`~latsim.calibration.runner.run_calibration` (``on_start``/``on_point``)."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console()
        self.live = sys.stdout.isatty()
        self.progress: Progress | None = None
        self.task: Any = None
        self.family = ""
        self.t_family = time.perf_counter()
        self.count = 0

    def on_start(self, pts: list[Point]) -> None:
        if self.live:
            self.progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                     TimeElapsedColumn(), console=self.console)
            self.progress.start()
            self.task = self.progress.add_task("calibrating", total=len(pts))
        self.console.print(f"{len(pts)} points to measure")

    def on_point(self, p: Point, row: dict[str, Any]) -> None:
        if p.family != self.family:
            self._family_done()
            self.family, self.t_family, self.count = p.family, time.perf_counter(), 0
        self.count += 1
        if self.progress is not None:
            self.progress.update(self.task, advance=1, description=p.family)

    def _family_done(self) -> None:
        if self.family and not self.live:
            self.console.print(f"  {self.family}: {self.count} points in {time.perf_counter() - self.t_family:.1f} s")

    def close(self) -> None:
        self._family_done()
        self.family = ""
        if self.progress is not None:
            self.progress.stop()


@contextmanager
def spread_display(console: Console, total: int) -> Iterator[Callable[[Any], None]]:
    """A bar over ``total`` spread-probe pairs when the output is a terminal (else nothing until
    the end); yields the callback to call once per timed pair."""
    if not sys.stdout.isatty():
        yield lambda _case: None
        return
    with Progress(TextColumn("spread probe"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console) as progress:
        task = progress.add_task("spread", total=total)
        yield lambda _case: progress.update(task, advance=1)


def timing_table(profile: dict[str, Any], title: str) -> Table:
    """Per family: points by status and seconds spent (this session)."""
    table = Table(title=title)
    for col in ("family", "ok", "skipped", "oom", "error", "seconds"):
        table.add_column(col, justify="left" if col == "family" else "right")
    secs = profile.get("family_seconds", {})
    for fam, counts in profile.get("counts", {}).items():
        table.add_row(fam, *(str(counts.get(s, 0)) for s in ("ok", "skipped", "oom", "error")),
                      f"{secs.get(fam, 0.0):.1f}")
    table.add_row("total", "", "", "", "", f"{profile.get('duration_s', 0.0):.1f}")
    return table
