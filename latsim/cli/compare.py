"""``latsim compare``: GPUs side by side over a load range, as JSON, a figure and an HTML report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

from latsim.cli.app import Opt, app, err, out


@app.command()
def compare(
    devices: Annotated[str, Opt(help="GPUs to compare (comma-separated); a configuration adds :key=value, "
                                     "e.g. h100:tp=2:weight_dtype=fp8")] = "h100,h200,l40s",
    qps: Annotated[str, Opt(help="Rates: LOW:HIGH (geometric), LOW:HIGH:POINTS, or a list 2,4,8")] = "1:20",
    model: Annotated[str, Opt(help="Catalog name or config.json path")] = "llama-3.1-8b",
    tp: Annotated[int | None, Opt(help="TP per replica (default: the smallest that fits each GPU)")] = None,
    replicas: Annotated[int | None, Opt(help="Replicas")] = None,
    weight_dtype: Annotated[str | None, Opt(help="bf16 | fp16 | fp8 | int8 | int4")] = None,
    input_len: Annotated[int | None, Opt(help="Fixed prompt length")] = None,
    output_len: Annotated[int | None, Opt(help="Fixed output length")] = None,
    input_dist: Annotated[str | None, Opt(help="Prompt length spec")] = None,
    output_dist: Annotated[str | None, Opt(help="Output length spec")] = None,
    arrival: Annotated[str | None, Opt(help="poisson | gamma:cv=2 | constant")] = None,
    num_requests: Annotated[int | None, Opt(help="Requests per run (default 1000)")] = None,
    seed: Annotated[int, Opt(help="Seed of the first replication")] = 0,
    slo: Annotated[str | None, Opt(help="Targets, e.g. ttft_p99_ms=1000,tpot_p99_ms=80")] = None,
    price: Annotated[list[str] | None, Opt(help="GPU-hour price override, e.g. h100=2.49 (repeatable)")] = None,
    replications: Annotated[int, Opt(help="Independent runs per point")] = 3,
    plot: Annotated[Path | None, Opt(help="Write the figure (PNG) here")] = None,
    html: Annotated[Path | None, Opt(help="Write a self-contained HTML report here")] = None,
    as_json: Annotated[bool, Opt("--json", help="Print exactly one JSON object")] = False,
) -> None:
    """Compare GPUs over a load range: latency curves, knees, Pareto view and cost per token."""
    from latsim.atomic import atomic_write_bytes
    from latsim.cli import parsing
    from latsim.config import Settings
    from latsim.plan.compare import compare as run_compare
    from latsim.plan.prices import parse_price_overrides
    from latsim.plan.slo import parse_slo
    from latsim.report.compare_figures import compare_figure, write_html
    from latsim.report.output import json_default, json_safe

    rates = parsing.rates("--qps", qps)
    configs = parsing.configs("--devices", devices)
    targets = parse_slo(slo) if slo else None
    overrides = parse_price_overrides(price)
    if replications < 1:
        raise ValueError(f"--replications must be >= 1, got {replications}")
    base = Settings(model=model, tp=tp, replicas=replicas, weight_dtype=weight_dtype, input_len=input_len,
                    output_len=output_len, input_dist=input_dist, output_dist=output_dist, arrival=arrival,
                    num_requests=num_requests, seed=seed)
    answer = run_compare(base, configs, rates, targets, replications, prices=overrides)
    if plot or html:
        png = compare_figure(answer)
        if plot:
            atomic_write_bytes(plot, png)
        if html:
            write_html(answer, png, html)
    if as_json:
        print(json.dumps(json_safe(answer), allow_nan=False, default=json_default))
        return
    for name, d in answer["devices"].items():
        live = (f" ({_f(d['max_rps_at_slo_live_edge'])} at the live error band's slow edge)"
                if d.get("max_rps_at_slo_live_edge") is not None else "")
        out.print(f"{name} TP{d['tp']} x{d['replicas']}: knee {_f(d['knee_rps'])} req/s, max at SLO "
                  f"{_f(d['max_rps_at_slo'])} req/s{live}, ${_f(d['usd_per_million_output_tokens'], 3)} per M "
                  f"output tokens at the {d['cost_at']} ({d['price_label']})")
    for path in (plot, html):
        if path:
            err.print(f"wrote {path}")


def _f(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{x:,.{digits}f}"
