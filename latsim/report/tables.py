"""Readable tables of a prediction (rich renderables; the CLI prints them)."""

from __future__ import annotations

from rich.table import Table

METRICS = (("TTFT", "ttft_ms"), ("TPOT", "tpot_ms"), ("ITL", "itl_ms"), ("E2E", "e2e_ms"), ("queueing", "queue_ms"))


def _ms(x: float | None) -> str:
    if x is None or x != x:
        return "-"
    return f"{x:,.1f}" if x < 10_000 else f"{x:,.0f}"


def latency_table(summary: dict) -> Table:
    """Percentiles with the P99's 95 % interval; an unstable run's title says its percentiles are
    not steady-state."""
    title = "Latency (ms)"
    if summary.get("stable") is False:
        title += " -- UNSTABLE: not steady-state, they grow with the run's length"
    n, method = (summary.get("ttft_ms") or {}).get("ci_n"), (summary.get("ttft_ms") or {}).get("ci_method")
    if n and method:
        title += f"; intervals: {method.replace('_', ' ')}, n={n}"
    table = Table(title=title, title_justify="left")
    for col in ("metric", "mean", "p50", "p90", "p95", "p99", "p99 95% CI"):
        table.add_column(col, justify="right" if col != "metric" else "left")
    for label, key in METRICS:
        d = summary.get(key) or {}
        ci = d.get("p99_ci95")
        ci_text = f"{_ms(ci[0])} - {_ms(ci[1])}" if ci else "-"
        table.add_row(label, *(_ms(d.get(k)) for k in ("mean", "p50", "p90", "p95", "p99")), ci_text)
    return table


def system_table(summary: dict, title: str) -> Table:
    table = Table(title=title, title_justify="left", show_header=False)
    table.add_column("what")
    table.add_column("value", justify="right")
    rows = [
        ("requests (completed / rejected / unfinished)",
         f"{summary['num_completed']} / {summary['num_rejected']} / {summary['num_unfinished']}"),
        ("offered load (req/s)", _num(summary.get("offered_rps"))),
        ("stable", "yes" if summary.get("stable", True) else "NO"),
        ("saturation (offered / estimated capacity)", _num(summary.get("saturation"))),
        ("throughput (req/s)", _num(summary.get("throughput_rps"))),
        ("output tokens/s", _num(summary.get("output_tokens_per_s"))),
        ("KV capacity (tokens)", f"{summary['kv_capacity_tokens']:,}"),
        ("peak KV utilisation", f"{100 * summary['kv_peak_utilization']:.1f}%"),
        ("preemptions", f"{summary['preemptions']}"),
        ("engine steps", f"{summary['engine_steps']:,}"),
        ("cost model", str(summary["cost_model"])),
    ]
    if "host_speed" in summary:  # the CPU terms' host is the lent H200 VM's typical one (host.yaml)
        rows.append(("host speed (1: a typical lent H200 VM's CPU)", f"{summary['host_speed']:g}"))
    if "launch_ratio" in summary:  # launch_by_model.json: this model's launch measured apart
        rows.append(("graph-less launch (measured for this model)",
                     f"{summary['launch_ratio']:g} x the fitted model's per layer"))
    if "goodput_rps" in summary:
        rows.append(("goodput (req/s meeting the SLO)", _num(summary["goodput_rps"])))
    host = summary.get("host")
    if host:
        share = host["share"]
        rows.append(("host-bound (share of step time the CPU sets)", f"{100 * share['cpu_set_share']:.0f}%"))
        if share.get("launches"):  # graph-less steps launched from Python: CPU time beside the GPU's
            rows.append(("graph-less launches (CPU, beside the GPU)",
                         f"{share['launches']:,} steps, {share['launch_s']:,.1f} s "
                         f"({100 * share['launch_s'] / share['step_s']:.0f}% of step time)"))
        for at in host["speeds"]["at"]:
            rows.append((f"TTFT / TPOT p50 at host speed {at['host_speed']:g}",
                         f"{_pct(at['ttft_p50_change'])} / {_pct(at['tpot_p50_change'])}"))
    if summary.get("slo"):
        rows.append(("p_meet (P99 within every target)", _num(summary["slo"].get("p_meet"))))
    rows.extend(_validated_rows(summary.get("validated_error")))
    for what, value in rows:
        table.add_row(what, value)
    return table


def _validated_rows(validated: dict | None) -> list[tuple[str, str]]:
    """The rows saying how far from the live engine such a prediction was: the band of the
    held-out levels' signed errors meant to hold 80 % of a new configuration's
    (:mod:`latsim.validate.error_band`), shown as the live engine against the prediction
    (``measured / predicted - 1``: an error band of -13..+41 % reads -29..+15 %), and the share of
    a left-out configuration's levels inside it; or why nothing says."""
    if not validated:
        return []
    if not validated["available"]:
        return [("error against the live engine", f"no band: {validated['why']}")]
    metrics = validated["metrics"]

    def band(key: str) -> str:  # the live engine against the prediction: measured / predicted - 1
        cell = metrics[key]
        return f"{100 * (1 / (1 + cell['high']) - 1):+.0f}..{100 * (1 / (1 + cell['low']) - 1):+.0f}%"

    def held(key: str) -> str:
        coverage = metrics[key]["coverage"]
        return "-" if coverage is None else f"{100 * coverage:.0f}%"

    first = metrics["ttft_ms p50"]
    host = "host given" if validated.get("host_known") else "host unknown"
    where = (f"{validated['band']} load, {_pace(validated)}, {host}; {first['levels']} levels, "
             f"{first['configurations']} configs")
    return [("live error band from", where),
            ("live engine vs this answer, p50", f"TTFT {band('ttft_ms p50')}, TPOT {band('tpot_ms p50')}"),
            ("live engine vs this answer, p99", f"TTFT {band('ttft_ms p99')}, TPOT {band('tpot_ms p99')}"),
            ("left-out configs inside (p50, aim 80%)",
             f"TTFT {held('ttft_ms p50')}, TPOT {held('tpot_ms p50')}"),
            *_slow_edge_rows(validated.get("slo_at_slow_edge"))]


def _pace(validated: dict) -> str:
    """``"gpu pace (decode CPU/GPU 0.13)"``, or for a launch-paced deployment the prompt step's
    ratio (:func:`latsim.validate.error_band.pace_of`)."""
    pace = validated["pace"]
    ratio, step = (validated.get("prompt_ratio"), "prompt step") if pace == "launch" else \
        (validated.get("host_ratio"), "decode")
    return f"{pace} pace" if ratio is None else f"{pace} pace ({step} CPU/GPU {ratio:.2f})"


def _slow_edge_rows(edge: dict | None) -> list[tuple[str, str]]:
    """One row: each SLO target's percentile were the live engine at the band's slow edge."""
    if not edge:
        return []
    names = {"ttft_ms": "TTFT", "tpot_ms": "TPOT", "e2e_ms": "E2E"}
    cells = [f"{names.get(k, k)} {_ms(v['percentile_ms'])} ms ({'meets' if v['met'] else 'misses'} "
             f"{_ms(v['target_ms'])})" for k, v in edge.items()]
    return [("the SLO's percentile at the band's slow edge", ", ".join(cells))]


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:,.2f}"


def validation_table(table) -> Table:
    """Rows (level, metric) x columns (measured, predicted, error) for p50 and p99."""
    out = Table(title="Predicted vs measured (ms; error = (pred - meas) / meas)", title_justify="left")
    for col in ("run", "qps", "metric", "p50 meas", "p50 pred", "p50 err", "p99 meas", "p99 pred", "p99 err"):
        out.add_column(col, justify="left" if col in ("run", "metric") else "right")
    for (run, metric), g in table.groupby(["run", "metric"], sort=False):
        by = g.set_index("stat")
        qps = g["offered_qps"].iloc[0]
        cells = []
        for stat in ("p50", "p99"):
            r = by.loc[stat]
            cells += [_ms(r["measured"]), _ms(r["predicted"]), _pct(r["error"])]
        out.add_row(str(run).rsplit("/", 2)[-2] + "/" + str(run).rsplit("/", 1)[-1],
                    "-" if qps != qps or qps is None else f"{qps:.1f}", metric, *cells)
    return out


def _pct(x: float) -> str:
    return "-" if x is None or x != x else f"{100 * x:+.1f}%"
