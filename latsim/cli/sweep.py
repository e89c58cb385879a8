"""``latsim sweep``: a grid of predictions, in parallel, into one parquet file (resumable)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from latsim.cli.app import Opt, app, err


@app.command()
def sweep(
    grid: Annotated[Path, typer.Argument(help="Grid YAML: predict's settings, lists expand as a product")],
    out: Annotated[Path, Opt("--out", help="Results parquet, one row per point")] = Path("results.parquet"),
    workers: Annotated[int, Opt(help="Local worker processes")] = 1,
    address: Annotated[str | None, Opt(help="Dask scheduler to run on instead, e.g. tcp://host:8786")] = None,
    replications: Annotated[int, Opt(help="Independent runs per point (intervals across them)")] = 1,
    restart: Annotated[bool, Opt(help="Ignore (overwrite) the results already in --out")] = False,
) -> None:
    """Run every point of a grid; an interrupted sweep resumes where it stopped."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from latsim.plan.grid import load_grid
    from latsim.plan.sweep import sweep as run_sweep

    points = load_grid(grid)
    bar = Progress(TextColumn("sweep"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(), console=err)
    task = bar.add_task("sweep", total=len(points), start=False)

    def progress(done: int, total: int) -> None:
        if not bar.live.is_started:  # shown once points run: a failing --address prints only its error
            bar.start()
            bar.start_task(task)
        bar.update(task, completed=done, total=total)

    try:
        ran = run_sweep(points, out, workers=workers, address=address, replications=replications, restart=restart,
                        progress=progress)
    finally:
        bar.stop()
    err.print(f"{ran} point(s) run now, {len(points) - ran} already in {out}; results: {out}")
