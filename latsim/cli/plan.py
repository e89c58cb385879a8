"""``latsim plan``: the cheapest deployment meeting an SLO at a workload."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from latsim.cli.app import Opt, UserError, app, err, out
from latsim.cli.options import with_settings
from latsim.config import Settings, load_deployment_file

INFEASIBLE = 3
"""Exit status when no candidate meets the SLO (bad input stays 2)."""


@app.command()
@with_settings
def plan(
    settings: Settings,
    slo: Annotated[str, Opt(help="Targets, e.g. ttft_p99_ms=1000,tpot_p99_ms=80 (metric: ttft|tpot|itl|e2e|queue; "
                                 "stat: p50|p90|p95|p99|mean)")],
    devices: Annotated[str, Opt(help="GPU types to consider (comma-separated)")] = "h100,h200,a100,l40s",
    tps: Annotated[str, Opt(help="Tensor-parallel sizes to consider")] = "1,2,4,8",
    max_replicas: Annotated[int, Opt(help="Consider 1..N replicas")] = 8,
    weight_dtypes: Annotated[str, Opt(help="Weight dtypes to consider")] = "bf16,fp8",
    search_engine: Annotated[bool, Opt(help="Also search max_num_seqs x max_num_batched_tokens")] = False,
    price: Annotated[list[str] | None, Opt(help="GPU-hour price override, e.g. h100=2.49 (repeatable)")] = None,
    replications: Annotated[int, Opt(help="Independent runs per candidate (other seeds)")] = 3,
    min_p_meet: Annotated[float, Opt(help="Confidence that the long-run SLO holds (p_meet) a candidate needs")] = 0.8,
    top: Annotated[int, Opt(help="Stop after this many candidates meet the SLO")] = 5,
    rate_search: Annotated[bool, Opt(help="Find each reported candidate's highest rate under the SLO")] = True,
    surrogate: Annotated[bool, Opt("--surrogate", help="Rank every candidate with the fitted surrogate first and "
                                   "simulate only those it does not rule out")] = False,
    config: Annotated[Path | None, Opt(help="Deployment YAML file (model, workload, engine settings)")] = None,
    as_json: Annotated[bool, Opt("--json", help="Print exactly one JSON object")] = False,
    out_file: Annotated[Path | None, Opt("--out", help="Also write the JSON answer to this file")] = None,
) -> None:
    """Search GPU type x TP x replicas x weight dtype for the cheapest deployment meeting an SLO.

    A deployment setting given on its own (--device, --tp, --replicas, --weight-dtype, or in
    --config) pins that dimension of the search; the other settings apply to every candidate.
    Exit status 3 when no candidate meets the SLO.
    """
    from latsim.atomic import atomic_write_text
    from latsim.cli import parsing
    from latsim.plan.prices import parse_price_overrides
    from latsim.plan.search import ENGINE_KNOBS, Options, Space
    from latsim.plan.search import plan as search
    from latsim.plan.slo import parse_slo
    from latsim.report.output import json_default, json_safe
    from latsim.report.plan_tables import plan_table

    settings = _merged(settings, config)
    space = Space(
        devices=(settings.device,) if settings.device else parsing.names("--devices", devices),
        tps=(settings.tp,) if settings.tp else parsing.ints("--tps", tps),
        replicas=(settings.replicas,) if settings.replicas else tuple(range(1, _positive("--max-replicas",
                                                                                         max_replicas) + 1)),
        weight_dtypes=(settings.weight_dtype,) if settings.weight_dtype else parsing.names("--weight-dtypes",
                                                                                          weight_dtypes),
        engine_knobs=ENGINE_KNOBS if search_engine else ((None, None),),
    )
    answer = search(settings, space, parse_slo(slo), Options(replications, settings.seed or 0, top, min_p_meet,
                                                            rate_search, surrogate), parse_price_overrides(price))
    text = json.dumps(json_safe(answer), allow_nan=False, default=json_default)
    if out_file:
        atomic_write_text(out_file, text + "\n")
    if as_json:
        print(text)
    else:
        out.print(plan_table(answer))
    if not answer["feasible"]:
        closest = "; ".join(f"{c['device']} TP{c['tp']} x{c['replicas']} {c['weight_dtype']}: {c['binding']} "
                            f"misses by {-100 * c['headroom']:.0f}%" for c in answer["closest"])
        err.print(f"no candidate meets the SLO {slo}" + (f"; closest: {closest}" if closest else
                                                         "; every candidate was pruned (see the JSON's 'pruned')"))
        raise typer.Exit(INFEASIBLE)


def _merged(settings: Settings, config: Path | None) -> Settings:
    from dataclasses import replace

    if config is None:
        return settings
    file = load_deployment_file(config)
    from latsim.config import file_settings

    given = {k: v for k, v in file_settings(file).items() if v is not None}
    return replace(settings, **{k: v for k, v in given.items() if getattr(settings, k) is None})


def _positive(option: str, value: int) -> int:
    if value < 1:
        raise UserError(f"{option} must be >= 1, got {value}")
    return value
