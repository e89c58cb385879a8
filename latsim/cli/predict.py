"""``latsim predict``: simulate one deployment under a workload and report its latency."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

from latsim.cli.app import Opt, UserError, app, err, out
from latsim.cli.options import with_settings
from latsim.config import Settings, load_deployment_file


@app.command()
@with_settings
def predict(
    settings: Settings,
    slo_ttft_ms: Annotated[float | None, Opt(help="TTFT P99 target (ms): goodput and p_meet")] = None,
    slo_tpot_ms: Annotated[float | None, Opt(help="TPOT P99 target (ms): goodput and p_meet")] = None,
    replications: Annotated[int, Opt(help="Independent replications of a synthetic workload (their spread "
                                          "gives the intervals; 1: batch means of one run)")] = 5,
    config: Annotated[Path | None, Opt(help="Deployment YAML file with the same settings")] = None,
    as_json: Annotated[bool, Opt("--json", help="Print exactly one JSON object")] = False,
    out_dir: Annotated[Path | None, Opt("--out", help="Write requests.parquet and summary.json here")] = None,
    surrogate: Annotated[bool, Opt("--surrogate", help="Answer from the fitted surrogate (about a millisecond); "
                                   "outside its training domain the simulator answers")] = False,
    host_report: Annotated[bool, Opt("--host-report", help="Also say how host-bound the deployment is and how "
                                     "far TTFT/TPOT move over the live runs' host speeds (3 more runs)")] = False,
) -> None:
    """Simulate a deployment under a workload and report latency percentiles with honest intervals."""
    from latsim.metrics.summary import SLO
    from latsim.scenario import merge

    settings = merge(settings, load_deployment_file(config) if config else None)
    slo = SLO(ttft_ms=slo_ttft_ms, tpot_ms=slo_tpot_ms) if (slo_ttft_ms or slo_tpot_ms) else None
    fallback: dict | None = None
    if surrogate:
        fallback = _surrogate(settings, slo, out_dir, as_json)
        if fallback is None:
            return
    _simulated(settings, slo, replications, fallback, host_report, out_dir, as_json)


def _surrogate(settings: Settings, slo, out_dir: Path | None, as_json: bool) -> dict | None:
    """Answer from the surrogate (``None``), or the ``surrogate`` block of a simulated answer."""
    from latsim.cli.surrogate_answer import check_surrogate_flags, surrogate_or_reasons
    from latsim.scenario import build_trace

    check_surrogate_flags(out_dir, slo)
    return surrogate_or_reasons(settings, build_trace(settings), as_json)


def _simulated(settings: Settings, slo, replications: int, fallback: dict | None, host_report: bool,
               out_dir: Path | None, as_json: bool) -> None:
    """The replicated prediction, its warnings, files and printout."""
    from latsim.catalog.quant_resolve import dtype_report
    from latsim.costmodel.shard import BNB_UNMEASURED, runs_bitsandbytes
    from latsim.plan.prediction import predict_settings
    from latsim.report.output import write_outputs
    from latsim.validate.error_band import for_prediction, slow_edge

    result = predict_settings(settings, slo=slo, replications=replications)
    deployment, summary = result.deployment, result.summary
    if result.trace_sorted:
        err.print(f"note: {settings.trace} is not in arrival order; its requests were sorted by arrival, and "
                  "request_id is each request's 0-based position in the file")
    _check_outcome(summary, result.records)
    if fallback is not None:
        summary["surrogate"] = fallback
    summary.update(dtype_report(deployment))
    summary["host_speed"] = deployment.engine.host_speed
    summary.update(_launch_note(deployment))
    summary["validated_error"] = for_prediction(deployment, summary)
    if runs_bitsandbytes(deployment.model, deployment.weight_dtype):
        err.print(f"warning: {BNB_UNMEASURED}")
    edge = slow_edge(summary["validated_error"], summary)
    if edge is not None:
        summary["validated_error"]["slo_at_slow_edge"] = edge
    if host_report:
        summary["host"] = _host_report(deployment, settings)
    written = write_outputs(out_dir, result.records, summary, {"memory": result.memory, "inputs": result.inputs}) \
        if out_dir else []
    _print(deployment, {**summary, "inputs": result.inputs} if as_json else summary, as_json)
    if written:
        print(f"wrote {', '.join(map(str, written))} ({len(result.records)} requests)",
              file=sys.stderr if as_json else sys.stdout)  # with --json, stdout stays exactly one object


def _print(deployment, summary: dict, as_json: bool) -> None:
    from latsim.deployment import resolve_engine
    from latsim.report.output import json_default, json_safe
    from latsim.report.tables import latency_table, system_table

    if as_json:
        print(json.dumps(json_safe(summary), allow_nan=False, default=json_default))
        return
    executor = resolve_engine(deployment).executor
    title = (f"{deployment.model.name} on {deployment.replicas} replica(s) x TP{deployment.tp} "
             f"{deployment.device.name} ({deployment.engine.engine}, executor {executor}; "
             f"weights {deployment.weight_dtype} from {deployment.weight_dtype_source}, KV {deployment.kv_dtype})")
    out.print(latency_table(summary))
    out.print(system_table(summary, title))


def _launch_note(deployment) -> dict:
    """``{"launch_ratio": r}`` where vLLM's graph-less launch of this model was measured apart
    from the fitted model's (:func:`latsim.engines.vllm.host_terms.launch_ratio`), else empty."""
    if deployment.engine.engine != "vllm":
        return {}
    from latsim.engines.vllm.host_terms import launch_ratio

    ratio = launch_ratio(deployment.model.name)
    return {} if ratio == 1.0 else {"launch_ratio": ratio}


def _host_report(deployment, settings: Settings) -> dict:
    """:func:`latsim.sim.host_report.host_report` on one run of the workload (the first trace), at
    the host speeds the live runs' hosts spanned."""
    from latsim.engines.vllm.host_terms import typical_host_speeds
    from latsim.scenario import build_trace
    from latsim.sim.host_report import host_report

    return host_report(deployment, build_trace(settings), typical_host_speeds(), seed=settings.seed or 0)


def _check_outcome(summary: dict, records) -> None:
    """User errors (every request rejected), and warnings on stderr: rejected requests, an
    unstable deployment (an answer, exit 0), intervals resting on too few tail episodes."""
    if summary["num_rejected"] == len(records):
        raise UserError(
            f"every request is longer than max_model_len={summary['max_model_len']} (prompt + output); "
            "shorten the workload or raise --max-model-len"
        )
    if summary["num_rejected"]:
        err.print(f"warning: {summary['num_rejected']} requests exceed max_model_len="
                  f"{summary['max_model_len']} and were rejected, as vLLM rejects them")
    if not summary["stable"]:
        reasons = "; ".join(summary["stability"]["reasons"])
        sat = summary.get("saturation")
        err.print("warning: UNSTABLE: the deployment does not keep up with the offered load"
                  + (f" (saturation {sat:.2f} of its estimated capacity {summary['capacity_rps']:.2f} req/s)"
                     if sat is not None else "")
                  + f": {reasons}. Its percentiles describe this run's length, not a steady state; "
                  "lower --qps or add replicas")
    elif not summary["intervals"]["reliable"]:
        err.print(f"note: {summary['intervals']['advice']}")
