"""Heat map of one metric of a sweep's results over two swept settings."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from latsim.plan.sweep import METRICS

NOT_INPUTS = {"point_id", *METRICS}


def load_results(path: str | Path) -> Any:
    """The results table of ``latsim sweep``; ValueError naming the file when it is not one."""
    import pandas as pd

    p = Path(path)
    if not p.is_file():
        raise ValueError(f"results file {p} does not exist")
    try:
        frame = pd.read_parquet(p)
    except Exception as exc:
        raise ValueError(f"{p} is not a parquet file of sweep results ({type(exc).__name__})") from None
    if "point_id" not in frame.columns:
        raise ValueError(f"{p} is not a `latsim sweep` results file (no point_id column)")
    return frame


def select(frame: Any, where: list[str] | None, path: str) -> Any:
    """Rows matching every ``key=value`` of ``where`` (values compared as text)."""
    for item in where or []:
        key, sep, value = item.partition("=")
        if not sep or key not in frame.columns or key in NOT_INPUTS:
            inputs = [c for c in frame.columns if c not in NOT_INPUTS]
            raise ValueError(f"--where {item!r}: expected SETTING=VALUE with a setting of {path}: {', '.join(inputs)}")
        frame = frame[frame[key].astype(str) == value]
        if frame.empty:
            raise ValueError(f"--where {item!r}: no row of {path} has {key} = {value}")
    return frame


def heatmap_figure(frame: Any, x: str, y: str, metric: str, path: str | Path, source: str) -> None:
    """Write a PNG heat map of ``metric`` with ``x`` across and ``y`` up; every other swept setting
    must have one value in ``frame`` (ValueError naming those that vary); unstable points are
    marked, missing ones left blank."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.colors import LogNorm

    inputs = [c for c in frame.columns if c not in NOT_INPUTS]
    for axis, name in (("x", x), ("y", y)):
        if name not in inputs:
            raise ValueError(f"--heatmap {axis}={name!r} is not a swept setting of {source}; "
                             f"accepted: {', '.join(inputs)}")
    if x == y:
        raise ValueError(f"--heatmap needs two different settings, got {x},{x}")
    numeric = [m for m in METRICS if m in frame.columns and m not in ("stable", "cost_model", "error")]
    if metric not in numeric:
        raise ValueError(f"--metric {metric!r} is not a result column; accepted: {', '.join(numeric)}")
    varying = [c for c in inputs if c not in (x, y) and frame[c].astype(str).nunique() > 1]
    if varying:
        raise ValueError(f"{', '.join(varying)} also vary in {source}; fix them with --where, e.g. --where "
                         f"{varying[0]}={frame[varying[0]].iloc[0]}")
    xs, ys = sorted(frame[x].unique()), sorted(frame[y].unique())
    values = np.full((len(ys), len(xs)), np.nan)
    unstable = np.zeros_like(values, dtype=bool)
    for _, row in frame.iterrows():
        i, j = ys.index(row[y]), xs.index(row[x])
        v = row[metric]
        values[i, j] = float(v) if v is not None and not (isinstance(v, float) and math.isnan(v)) else np.nan
        unstable[i, j] = row.get("stable") is False or row.get("stable") == False  # noqa: E712 - numpy bools
    finite = values[np.isfinite(values)]
    norm = LogNorm(finite.min(), finite.max()) if finite.size and finite.min() > 0 and \
        finite.max() > 10 * finite.min() else None
    fig, ax = plt.subplots(figsize=(1.2 * len(xs) + 3, 0.8 * len(ys) + 2.5))
    image = ax.imshow(np.ma.masked_invalid(values), origin="lower", aspect="auto", cmap="viridis", norm=norm)
    fig.colorbar(image, ax=ax, label=metric + (" (log scale)" if norm else ""))
    for i in range(len(ys)):
        for j in range(len(xs)):
            finite_cell = bool(np.isfinite(values[i, j]))
            text = f"{values[i, j]:.3g}" if finite_cell else "-"
            bright = finite_cell and float(np.asarray(image.norm(values[i, j]))) > 0.6  # yellow cells: dark text
            ax.text(j, i, text + ("\nunstable" if unstable[i, j] else ""), ha="center", va="center", fontsize=8,
                    color="black" if bright else "white", fontweight="bold" if unstable[i, j] else "normal")
    ax.set_xticks(range(len(xs)), [str(v) for v in xs])
    ax.set_yticks(range(len(ys)), [str(v) for v in ys])
    ax.set(xlabel=x, ylabel=y, title=f"{metric} over {x} x {y}\n{Path(source).name}")
    fig.tight_layout()
    from latsim.atomic import atomic_write

    atomic_write(path, lambda f: fig.savefig(f, format="png", dpi=100))
    plt.close(fig)
