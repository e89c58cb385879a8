"""``latsim validate --out``: a summary figure over every run and an HTML report, one page per run.

A *run* is a measured experiment folder (a model and workload on one deployment) holding one
sub-folder per load level; the report groups levels by run.  The summary figure plots predicted
against measured P50 and P99 of TTFT, TPOT and E2E for every level (one colour per run) and the
median absolute P99 error per run; each run's page has its own CDF and latency-vs-load panels,
titled by run and model, and its error table.  Everything is embedded in one HTML file.
"""

from __future__ import annotations

import base64
import html
import json
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

COLORS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:pink", "tab:gray",
          "tab:olive", "tab:cyan")
PANELS = (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT"), ("e2e_ms", "E2E"))


def group_runs(levels: list[Any]) -> dict[str, list[Any]]:
    """Levels by run folder (the parent of each level's folder), in first-seen order."""
    runs: dict[str, list[Any]] = {}
    for lv in levels:
        runs.setdefault(str(Path(lv.run_dir).parent), []).append(lv)
    return runs


def model_name(levels: list[Any]) -> str:
    """The model a run measured (its first level's meta.json), or ``?``."""
    try:
        meta = json.loads((Path(levels[0].run_dir) / "meta.json").read_text())
        return str((meta.get("model") or {}).get("name", "?"))
    except (OSError, ValueError):
        return "?"


def summary_figure(levels: list[Any], path: Path) -> None:
    """PNG: predicted vs measured P50 (circles) and P99 (squares) of TTFT, TPOT and E2E per
    level, one colour per run, with the y = x line and +-25 % band (the left column); and median
    |P99 error| per run (the right column, as tall as the figure, which grows with the runs so
    that each run's label has :data:`BAR_ROW_IN` inches)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter

    runs = group_runs(levels)
    fig = plt.figure(figsize=(16, max(MIN_HEIGHT_IN, BAR_ROW_IN * len(runs) + 1.5)))
    grid = fig.add_gridspec(len(PANELS), 2)
    scatter = [fig.add_subplot(grid[i, 0]) for i in range(len(PANELS))]
    for ax, (metric, label) in zip(scatter, PANELS, strict=True):
        lo, hi = np.inf, 0.0
        for (run, lvs), color in zip(runs.items(), _colors(len(runs)), strict=True):
            for stat, marker in (("p50", "o"), ("p99", "s")):
                pairs = [(lv.measured[metric][stat], lv.predicted[metric][stat]) for lv in lvs
                         if lv.measured[metric][stat] and lv.predicted[metric][stat]]
                if pairs:
                    m, p = np.array(pairs).T
                    ax.scatter(m, p, marker=marker, color=color, s=18, alpha=0.8,
                               label=_run_label(run) if stat == "p99" else None)
                    lo, hi = min(lo, m.min(), p.min()), max(hi, m.max(), p.max())
        if hi > 0:
            line = np.array([lo / 1.5, hi * 1.5])
            ax.plot(line, line, color="black", linewidth=1)
            ax.fill_between(line, line / 1.25, line * 1.25, color="gray", alpha=0.15, label="+-25 %")
        ax.set(xscale="log", yscale="log", xlabel=f"measured {label} (ms)", ylabel=f"latsim {label} (ms)",
               title=f"{label}: P50 (circles), P99 (squares), every level")
        for axis in (ax.xaxis, ax.yaxis):  # a narrow range labels minor ticks too, and they collide
            axis.set_minor_formatter(NullFormatter())
        ax.grid(alpha=0.3)
    handles, labels = scatter[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="center left", bbox_to_anchor=(LEGEND_SPLIT, 0.5),
               fontsize=6 if len(runs) > 12 else 8, frameon=False)
    _error_bars(fig.add_subplot(grid[:, 1]), runs)
    fig.suptitle(f"latsim vs measured: {len(runs)} runs, {len(levels)} load levels")
    fig.tight_layout(rect=(0.0, 0.0, LEGEND_SPLIT, 1.0))
    from latsim.atomic import atomic_write

    atomic_write(path, lambda f: fig.savefig(f, format="png", dpi=90))
    plt.close(fig)


LEGEND_SPLIT = 0.78
"""Share of the figure's width the panels take; the runs' legend sits in the rest, outside them."""
MIN_HEIGHT_IN = 13.0
BAR_ROW_IN = 0.2
"""The figure's least height, and the height each run's bar takes (inches)."""


def _run_label(run: str) -> str:
    """``<folder>/<run>``: the same configuration is measured in several folders (engine starts)."""
    return f"{Path(run).parent.name}/{Path(run).name}"


def _colors(n: int) -> list[str]:
    return [COLORS[i % len(COLORS)] for i in range(n)]


BAR_SHADES = ("0.3", "0.65")
"""Greys for the error bars (TTFT, TPOT): the runs' colours mean runs in the other panels."""


def _error_bars(ax: Any, runs: dict[str, list[Any]]) -> None:
    names = [_run_label(r) for r in runs]
    y = np.arange(len(names))
    for offset, shade, (metric, label) in zip((-0.2, 0.2), BAR_SHADES, PANELS[:2], strict=True):
        errors = [_median_abs_error(lvs, metric) for lvs in runs.values()]
        ax.barh(y + offset, [100 * e for e in errors], height=0.4, color=shade, label=f"P99 {label}")
    ax.set_yticks(y, names, fontsize=7)
    ax.set_ylim(len(names) - 0.5, -0.5)  # first run on top, no empty rows around the bars
    ax.set(xlabel="median |error| of P99 over Poisson levels (%)", title="P99 error per run")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3, axis="x")


def _median_abs_error(levels: list[Any], metric: str) -> float:
    errors = [abs(lv.predicted[metric]["p99"] / lv.measured[metric]["p99"] - 1.0) for lv in levels
              if lv.level != "burst" and lv.measured[metric]["p99"] and lv.predicted[metric]["p99"] is not None]
    return float(np.median(errors)) if errors else float("nan")


def write_report(levels: list[Any], table: Any, out_dir: Path, title: str) -> None:
    """``validation.png`` (the summary figure) and ``validation.html`` (it, then one page per run)."""
    from latsim.atomic import atomic_write_text
    from latsim.report.figures import validation_figure

    out_dir.mkdir(parents=True, exist_ok=True)
    summary_png = out_dir / "validation.png"
    summary_figure(levels, summary_png)
    pages = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, (run, lvs) in enumerate(group_runs(levels).items()):
            name = f"{_run_label(run)} ({model_name(lvs)})"
            png = Path(tmp) / f"run{i}.png"
            validation_figure(lvs, png, title=name, panel_prefix=f"{_run_label(run)}, ")
            keep = table["run"].isin([lv.run_dir for lv in lvs]) & table["stat"].isin(["p50", "p99"]) \
                & table["metric"].isin([m for m, _ in PANELS])
            rows = table.loc[keep, ["level", "offered_qps", "metric", "stat", "measured", "predicted", "error"]]
            pages.append(f'<section id="run{i}"><h2>{html.escape(name)}</h2><p>{html.escape(run)}</p>'
                         f"{_img(png)}{rows.to_html(index=False, float_format=lambda x: f'{x:.4g}')}</section>")
    toc = "".join(f'<li><a href="#run{i}">{html.escape(_run_label(r))}</a></li>'
                  for i, r in enumerate(group_runs(levels)))
    doc = (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
           "<style>body{font-family:sans-serif;margin:2em;max-width:1300px}img{max-width:100%}"
           "table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ccc;padding:2px 6px}"
           "section{page-break-before:always;margin-top:3em}</style></head><body>"
           f"<h1>latsim validation: {html.escape(title)}</h1>{_img(summary_png)}<h2>Runs</h2><ul>{toc}</ul>"
           + "".join(pages) + "</body></html>\n")
    atomic_write_text(out_dir / "validation.html", doc)


def _img(path: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode()
    return f'<img alt="{html.escape(path.stem)}" src="data:image/png;base64,{data}">'
