"""Figures and the self-contained HTML report of ``latsim compare``."""

from __future__ import annotations

import base64
import html
import io
from pathlib import Path
from typing import Any

COLORS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:pink", "tab:gray")


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def compare_figure(answer: dict[str, Any]) -> bytes:
    """PNG bytes: P50/P99 TTFT and TPOT against load (knees marked, SLO lines), the TTFT-vs-throughput
    view with its Pareto front, and $ per million output tokens per device."""
    plt = _pyplot()
    fig, axes = plt.subplots(2, 2, figsize=(13, 9))
    slo = answer.get("slo") or {}
    for (name, dev), color in zip(answer["devices"].items(), COLORS, strict=False):
        label = name if ":" in name else f"{name} TP{dev['tp']}"
        qps = [p["qps"] for p in dev["curve"]]
        for ax, metric in ((axes[0][0], "ttft_ms"), (axes[0][1], "tpot_ms")):
            for stat, style in (("p50", ":"), ("p99", "-")):
                ax.plot(qps, [p[metric][stat] for p in dev["curve"]], style, color=color, marker="o",
                        markersize=3, label=f"{label} {stat.upper()}")
            unstable = [p for p in dev["curve"] if not p["stable"]]
            ax.plot([p["qps"] for p in unstable], [p[metric]["p99"] for p in unstable], "x", color=color,
                    markersize=9)
            if dev["knee_rps"]:
                ax.axvline(dev["knee_rps"], color=color, linestyle="--", linewidth=1)
        axes[1][0].plot([p["output_tokens_per_s"] for p in dev["curve"]], [p["ttft_ms"]["p99"] for p in dev["curve"]],
                        "-o", color=color, markersize=3, label=label)
    for ax, metric, title in ((axes[0][0], "ttft", "TTFT"), (axes[0][1], "tpot", "TPOT")):
        for key, limit in slo.items():
            if key.startswith(metric):
                ax.axhline(limit, color="black", linewidth=1, label=f"SLO {key} = {limit:g}")
        ax.set(xlabel="offered load (req/s)", ylabel=f"{title} (ms)", yscale="log", title=f"{title} vs load")
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    _pareto(axes[1][0], answer)
    _cost_bars(axes[1][1], answer)
    fig.suptitle(f"{answer['model']}: {', '.join(answer['devices'])} ({answer['replications']} replications per "
                 "point)\nP50 dotted, P99 solid; dashed vertical: knee (P99 TTFT departs); x: unstable run")
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    plt.close(fig)
    return buffer.getvalue()


def _pareto(ax: Any, answer: dict[str, Any]) -> None:
    points = sorted((p["output_tokens_per_s"], p["ttft_ms"]["p99"]) for d in answer["devices"].values()
                    for p in d["curve"] if p["stable"] and p["output_tokens_per_s"] and p["ttft_ms"]["p99"])
    front: list[tuple[float, float]] = []
    for x, y in reversed(points):  # highest throughput first: keep each point faster than all beyond it
        if not front or y < front[-1][1]:
            front.append((x, y))
    if front:
        xs, ys = zip(*reversed(front), strict=True)
        ax.step(xs, ys, where="post", color="black", linewidth=2, alpha=0.4, label="Pareto front (stable points)")
    ax.set(xlabel="served output tokens/s", ylabel="TTFT P99 (ms)", yscale="log",
           title="TTFT P99 vs throughput (lower right is better)")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)


def _cost_bars(ax: Any, answer: dict[str, Any]) -> None:
    names = list(answer["devices"])
    costs = [answer["devices"][n]["usd_per_million_output_tokens"] or 0.0 for n in names]
    at = "highest rate under the SLO" if answer.get("slo") else "the knee"
    bars = ax.bar(names, costs, color=COLORS[:len(names)])
    for bar, name in zip(bars, names, strict=True):
        d = answer["devices"][name]
        rate = d["max_rps_at_slo"] if answer.get("slo") else d["knee_rps"]
        text = f"\\${bar.get_height():.2f}\n@ {rate:.1f} req/s" if rate else "no rate qualifies"
        ax.annotate(text, (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center", va="bottom", fontsize=8)
    ax.set(ylabel="\\$ per million output tokens", title=f"cost at {at}")
    ax.margins(y=0.25)
    prices = "prices: " + "; ".join(answer["devices"][n]["price_label"] for n in names)
    ax.set_xlabel(prices.replace("$", "\\$"), fontsize=7, wrap=True)


def write_html(answer: dict[str, Any], png: bytes, path: str | Path) -> None:
    """A self-contained HTML report: the figure embedded (base64), a summary table, the curves and
    the prices with their sources."""
    from latsim.atomic import atomic_write_text

    image = base64.b64encode(png).decode()
    rows = "".join(
        f"<tr><td>{html.escape(n)}</td><td>{d['tp']}</td><td>{d['gpus']}</td><td>{_f(d['knee_rps'])}</td>"
        f"<td>{_f(d['max_rps_at_slo'])}</td><td>{_f(d.get('max_rps_at_slo_live_edge'))}</td>"
        f"<td>{_f(d['usd_per_hour'], 2)}</td>"
        f"<td>{_f(d['usd_per_million_output_tokens'], 3)}</td><td>{html.escape(d['price_label'])}<br>"
        f"<small>{html.escape(d['price']['source'])}</small></td></tr>"
        for n, d in answer["devices"].items())
    curves = "".join(_curve_table(n, d) for n, d in answer["devices"].items())
    slo = ", ".join(f"{k} &le; {v:g}" for k, v in (answer.get("slo") or {}).items()) or "none"
    w = answer["workload"]
    cost_at = html.escape(next(iter(answer["devices"].values()))["cost_at"])
    doc = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>latsim compare: {html.escape(str(answer['model']))}</title>
<style>body{{font-family:sans-serif;margin:2em;max-width:1400px}}table{{border-collapse:collapse;margin:1em 0}}
td,th{{border:1px solid #ccc;padding:4px 8px;text-align:right}}td:first-child{{text-align:left}}
img{{max-width:100%}}</style></head><body>
<h1>latsim compare: {html.escape(str(answer['model']))}</h1>
<p>Workload: mean prompt {w['mean_input_tokens']:.0f} tokens, mean output {w['mean_output_tokens']:.0f} tokens,
{w['num_requests']} requests per run, {answer['replications']} replications per point. SLO: {slo}.</p>
<img alt="comparison figure" src="data:image/png;base64,{image}">
<h2>Summary</h2>
<table><tr><th>device</th><th>TP</th><th>GPUs</th><th>knee (req/s)</th><th>max req/s at SLO</th>
<th>the same at the live error band's slow edge<sup>*</sup></th><th>$/hour</th>
<th>$ per M output tokens ({cost_at})</th><th>price used</th></tr>
{rows}</table>
<p><small><sup>*</sup> The SLO also met were the live engine as far off as the slow edge of the band of
the model's measured errors (<code>latsim predict</code>'s "live engine vs this answer"); measured on
the calibrated H200 and the H100 at TP=1 only, "-" elsewhere.</small></p>
<h2>Curves</h2>{curves}
</body></html>
"""
    atomic_write_text(path, doc)


def _curve_table(name: str, d: dict[str, Any]) -> str:
    rows = "".join(
        f"<tr><td>{_f(p['qps'], 2)}</td><td>{_f(p['ttft_ms']['p50'])}</td><td>{_f(p['ttft_ms']['p99'])}</td>"
        f"<td>{_ci(p['ttft_ms'])}</td><td>{_f(p['tpot_ms']['p50'])}</td><td>{_f(p['tpot_ms']['p99'])}</td>"
        f"<td>{_ci(p['tpot_ms'])}</td><td>{'yes' if p['stable'] else 'NO'}</td><td>{_f(p['p_meet'], 2)}</td></tr>"
        for p in d["curve"])
    return (f"<h3>{html.escape(name)} TP{d['tp']}</h3><table><tr><th>req/s</th><th>TTFT P50</th><th>TTFT P99</th>"
            f"<th>95% CI</th><th>TPOT P50</th><th>TPOT P99</th><th>95% CI</th><th>stable</th><th>p_meet</th></tr>"
            f"{rows}</table>")


def _f(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{x:,.{digits}f}"


def _ci(block: dict[str, Any]) -> str:
    lo, hi = block.get("p99_ci95") or (None, None)
    return "-" if lo is None else f"{_f(lo)} &ndash; {_f(hi)}"
