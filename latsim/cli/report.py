"""``latsim report``: figures from a sweep's results (``--heatmap X,Y --metric M``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from latsim.cli.app import Opt, app, err


@app.command()
def report(
    results: Annotated[Path, typer.Argument(help="Results parquet written by `latsim sweep`")],
    heatmap: Annotated[str, Opt(help="Two swept settings, across and up, e.g. input_len,qps")],
    metric: Annotated[str, Opt(help="Result column to colour by, e.g. ttft_p99_ms")] = "ttft_p99_ms",
    where: Annotated[list[str] | None, Opt(help="Keep rows with SETTING=VALUE (repeatable)")] = None,
    out: Annotated[Path, Opt("--out", help="PNG to write")] = Path("heatmap.png"),
) -> None:
    """Draw a heat map of one metric over two swept settings."""
    from latsim.report.heatmap import heatmap_figure, load_results, select

    axes = [a.strip() for a in heatmap.split(",")]
    if len(axes) != 2 or not all(axes):
        raise ValueError(f"--heatmap {heatmap!r}: expected two settings X,Y, e.g. input_len,qps")
    frame = select(load_results(results), where, str(results))
    heatmap_figure(frame, axes[0], axes[1], metric, out, str(results))
    err.print(f"wrote {out}")
