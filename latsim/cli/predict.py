"""``latsim predict``: simulate one deployment under a workload and report its latency."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

from latsim.cli.app import Opt, UserError, app, err, out
from latsim.cli.options import with_settings
from latsim.config import Settings, load_deployment_file


@app.command()
@with_settings
def predict(
    settings: Settings,
    slo_ttft_ms: Annotated[float | None, Opt(help="TTFT SLO for goodput")] = None,
    slo_tpot_ms: Annotated[float | None, Opt(help="TPOT SLO for goodput")] = None,
    config: Annotated[Path | None, Opt(help="Deployment YAML file with the same settings")] = None,
    as_json: Annotated[bool, Opt("--json", help="Print exactly one JSON object")] = False,
    out_dir: Annotated[Path | None, Opt("--out", help="Write requests.parquet and summary.json here")] = None,
    surrogate: Annotated[bool, Opt("--surrogate", help="Answer from the fitted surrogate (about a millisecond); "
                                   "outside its training domain the simulator answers")] = False,
) -> None:
    """Simulate a deployment under a workload and report latency percentiles."""
    from latsim.metrics.summary import SLO
    from latsim.report.output import json_default, json_safe, write_outputs
    from latsim.report.tables import latency_table, system_table
    from latsim.scenario import build_deployment, build_trace, merge
    from latsim.sim.simulate import simulate

    settings = merge(settings, load_deployment_file(config) if config else None)
    deployment = build_deployment(settings)
    workload = build_trace(settings)
    slo = SLO(ttft_ms=slo_ttft_ms, tpot_ms=slo_tpot_ms) if (slo_ttft_ms or slo_tpot_ms) else None
    fallback: dict | None = None
    if surrogate:
        from latsim.cli.surrogate_answer import check_surrogate_flags, surrogate_or_reasons

        check_surrogate_flags(out_dir, slo)
        fallback = surrogate_or_reasons(settings, workload, as_json)
        if fallback is None:
            return
    result = simulate(deployment, workload, seed=settings.seed or 0, slo=slo)
    _check_outcome(result.summary, len(workload))
    if fallback is not None:
        result.summary["surrogate"] = fallback
    if out_dir:
        write_outputs(result, out_dir)
    if as_json:
        print(json.dumps(json_safe(result.summary), allow_nan=False, default=json_default))
        return
    title = (f"{deployment.model.name} on {deployment.replicas} replica(s) x TP{deployment.tp} "
             f"{deployment.device.name} ({deployment.engine.engine})")
    out.print(latency_table(result.summary))
    out.print(system_table(result.summary, title))


def _check_outcome(summary: dict, num_requests: int) -> None:
    if summary["num_rejected"] == num_requests:
        raise UserError(
            f"every request is longer than max_model_len={summary['max_model_len']} (prompt + output); "
            "shorten the workload or raise --max-model-len"
        )
    if summary["num_rejected"]:
        err.print(f"warning: {summary['num_rejected']} requests exceed max_model_len="
                  f"{summary['max_model_len']} and were rejected, as vLLM rejects them")
    if summary["num_unfinished"]:
        rate = summary.get("throughput_rps") or 0.0
        offered = summary.get("offered_rps")
        raise UserError(
            f"unstable: {summary['num_unfinished']} of {num_requests} requests were still unfinished after "
            f"{summary['horizon_s']:.0f} simulated seconds; the deployment completes about {rate:.2f} req/s"
            + (f" against {offered:.2f} req/s offered" if offered else "")
            + "; lower --qps or add replicas"
        )
