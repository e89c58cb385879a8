"""Validation figures: predicted vs measured CDFs per load level, and latency vs load."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from latsim.metrics.per_request import add_latencies


def _cdf(ax, values: np.ndarray, **style) -> None:
    v = np.sort(values[np.isfinite(values)])
    if len(v):
        ax.plot(v, np.arange(1, len(v) + 1) / len(v), **style)


def validation_figure(levels, path: str | Path, title: str = "", panel_prefix: str = "") -> None:
    """Write a PNG: one row per level (TTFT and TPOT CDFs), plus p50/p99 vs offered load; every
    CDF panel's title starts with ``panel_prefix`` (e.g. the run's name) on a line of its own."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    poisson = [lv for lv in levels if lv.offered_qps is not None and lv.level != "burst"]
    fig, axes = plt.subplots(len(poisson) + 1, 2, figsize=(10, 3 * (len(poisson) + 1)), squeeze=False)
    for row, lv in zip(axes[:-1], poisson, strict=True):
        meas = add_latencies(lv.measured_records[lv.measured_records["status"] == "ok"])
        pred = add_latencies(lv.predicted_records[lv.predicted_records["status"] == "ok"])
        for ax, col, label in ((row[0], "ttft_s", "TTFT"), (row[1], "tpot_s", "TPOT")):
            _cdf(ax, meas[col].to_numpy() * 1e3, label="measured", color="black")
            _cdf(ax, pred[col].to_numpy() * 1e3, label="latsim", color="tab:orange", linestyle="--")
            what = f"{lv.level} ({lv.offered_qps:.1f} req/s): {label}"
            # the run's name on a line of its own: beside the level it overflowed into the next panel
            ax.set_title(f"{panel_prefix.rstrip(', ')}\n{what}" if panel_prefix else what, fontsize=9)
            ax.set_xlabel("ms")
            ax.legend(loc="lower right")
    qps = [lv.offered_qps for lv in poisson]
    for ax, metric, label in ((axes[-1][0], "ttft_ms", "TTFT"), (axes[-1][1], "tpot_ms", "TPOT")):
        for stat, marker in (("p50", "o"), ("p99", "s")):
            ax.plot(qps, [lv.measured[metric][stat] for lv in poisson], marker=marker, color="black",
                    label=f"measured {stat}")
            ax.plot(qps, [lv.predicted[metric][stat] for lv in poisson], marker=marker, color="tab:orange",
                    linestyle="--", label=f"latsim {stat}")
        ax.set_xlabel("offered load (req/s)")
        ax.set_ylabel(f"{label} (ms)")
        ax.legend()
    fig.suptitle(title)
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=90)
    plt.close(fig)
    tmp.replace(out)
