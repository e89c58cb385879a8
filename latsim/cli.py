"""The ``latsim`` command line: parse arguments, call the library, print or write.

Every error a user can cause ends as one line on stderr and exit status 2.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from latsim.config import Settings, load_deployment_file

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Predict LLM serving latency (TTFT, TPOT, ITL, E2E) before deploying.")
out = Console(width=None if sys.stdout.isatty() else 160)  # pipes and files get full tables
err = Console(stderr=True)


class UserError(Exception):
    """A problem with the user's input: reported as one line, exit status 2."""


Opt = typer.Option


@app.command()
def predict(
    model: Annotated[str | None, Opt(help="Catalog name (see `latsim models`) or HF config.json path")] = None,
    device: Annotated[str | None, Opt(help="GPU name (see `latsim devices`)")] = None,
    tp: Annotated[int | None, Opt(help="Tensor-parallel GPUs per replica")] = None,
    replicas: Annotated[int | None, Opt(help="Engine replicas behind the router")] = None,
    router: Annotated[str | None, Opt(help="round-robin | least-outstanding")] = None,
    engine: Annotated[str | None, Opt(help="vllm | static | vllm-exact (vLLM's own scheduler, ~0.5 ms/step)")] = None,
    weight_dtype: Annotated[str | None, Opt(help="bf16 | fp16 | fp8 | int8 | int4")] = None,
    kv_cache_dtype: Annotated[str | None, Opt(help="bf16 | fp16 | fp8")] = None,
    qps: Annotated[float | None, Opt(help="Mean request rate (req/s)")] = None,
    trace: Annotated[Path | None, Opt(help="Trace file: latsim JSONL/CSV or Azure CSV")] = None,
    arrival: Annotated[str | None, Opt(help="poisson | gamma:cv=2 | constant | burst")] = None,
    input_len: Annotated[int | None, Opt(help="Fixed prompt length")] = None,
    input_dist: Annotated[str | None, Opt(help="Prompt length spec, e.g. lognormal:median=600,sigma=0.8")] = None,
    output_len: Annotated[int | None, Opt(help="Fixed output length")] = None,
    output_dist: Annotated[str | None, Opt(help="Output length spec")] = None,
    num_requests: Annotated[int | None, Opt(help="Requests to simulate (default 1000)")] = None,
    seed: Annotated[int | None, Opt(help="Random seed")] = None,
    max_num_seqs: Annotated[int | None, Opt()] = None,
    max_num_batched_tokens: Annotated[int | None, Opt()] = None,
    block_size: Annotated[int | None, Opt()] = None,
    gpu_memory_utilization: Annotated[float | None, Opt()] = None,
    max_model_len: Annotated[int | None, Opt()] = None,
    num_gpu_blocks: Annotated[int | None, Opt(help="Override the KV blocks the memory plan gives")] = None,
    no_chunked_prefill: Annotated[bool, Opt("--no-chunked-prefill")] = False,
    no_prefix_caching: Annotated[bool, Opt("--no-prefix-caching")] = False,
    no_async_scheduling: Annotated[bool, Opt("--no-async-scheduling", help="vLLM's synchronous loop")] = False,
    host_speed: Annotated[float | None, Opt(help="Serving host's CPU speed vs the one latsim's engine CPU "
                                            "terms describe (0.5: half as fast; see `latsim host-speed`)")] = None,
    slo_ttft_ms: Annotated[float | None, Opt(help="TTFT SLO for goodput")] = None,
    slo_tpot_ms: Annotated[float | None, Opt(help="TPOT SLO for goodput")] = None,
    config: Annotated[Path | None, Opt(help="Deployment YAML file with the same settings")] = None,
    as_json: Annotated[bool, Opt("--json", help="Print exactly one JSON object")] = False,
    out_dir: Annotated[Path | None, Opt("--out", help="Write requests.parquet and summary.json here")] = None,
) -> None:
    """Simulate a deployment under a workload and report latency percentiles."""
    from latsim.engine.simulate import simulate
    from latsim.metrics.summary import SLO
    from latsim.report.output import json_default, json_safe, write_outputs
    from latsim.report.tables import latency_table, system_table
    from latsim.scenario import build_deployment, build_trace, merge

    flags = Settings(
        model=model, device=device, tp=tp, replicas=replicas, router=router, weight_dtype=weight_dtype,
        kv_dtype=kv_cache_dtype, engine=engine, max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens, block_size=block_size,
        gpu_memory_utilization=gpu_memory_utilization, max_model_len=max_model_len,
        enable_chunked_prefill=False if no_chunked_prefill else None,
        enable_prefix_caching=False if no_prefix_caching else None, num_gpu_blocks=num_gpu_blocks,
        async_scheduling=False if no_async_scheduling else None, host_speed=host_speed,
        qps=qps, trace=str(trace) if trace else None, arrival=arrival, input_len=input_len,
        input_dist=input_dist, output_len=output_len, output_dist=output_dist, num_requests=num_requests,
        seed=seed,
    )
    settings = merge(flags, load_deployment_file(config) if config else None)
    deployment = build_deployment(settings)
    workload = build_trace(settings)
    slo = SLO(ttft_ms=slo_ttft_ms, tpot_ms=slo_tpot_ms) if (slo_ttft_ms or slo_tpot_ms) else None
    result = simulate(deployment, workload, seed=settings.seed or 0, slo=slo)
    _check_outcome(result.summary, len(workload))
    if out_dir:
        write_outputs(result, out_dir)
    if as_json:
        print(json.dumps(json_safe(result.summary), allow_nan=False, default=json_default))
        return
    title = (f"{deployment.model.name} on {deployment.replicas} replica(s) x TP{deployment.tp} "
             f"{deployment.device.name} ({deployment.engine.engine})")
    out.print(latency_table(result.summary))
    out.print(system_table(result.summary, title))


def _number(flag: str, text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise UserError(f"{flag} must be a number or 'probe', got {text!r}") from None


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


@app.command()
def validate(
    run: Annotated[Path, typer.Argument(help="A measured run directory, or a folder of them")],
    device: Annotated[str, Opt(help="GPU the run was measured on")] = "h200",
    out_dir: Annotated[Path | None, Opt("--out", help="Write errors.csv and validation.png here")] = None,
    as_json: Annotated[bool, Opt("--json")] = False,
    seed: Annotated[int, Opt()] = 0,
    host_speed: Annotated[str, Opt(help="Host CPU speed to replay with: a number, or 'probe' (each level's "
                                   "host-probe median against the reference; a diagnostic)")] = "1",
    profile: Annotated[Path | None, Opt(help="Price the GPU with this fitted profile folder (e.g. "
                                        "latsim/data/calibration/h200-aic) instead of the device's own")] = None,
) -> None:
    """Replay measured runs in the simulator and print signed errors (predicted vs measured)."""
    from latsim.report.tables import validation_table
    from latsim.validate.compare import CLIENT_LAG_LIMIT_S, compare_run, error_table, find_runs, headline

    if not run.exists():
        raise UserError(f"{run} does not exist")
    speed = host_speed if host_speed == "probe" else _number("--host-speed", host_speed)
    levels = [compare_run(r, device, seed=seed, host_speed=speed, profile=profile) for r in find_runs(run)]
    table = error_table(levels)
    if out_dir:
        from latsim.atomic import atomic_write_text
        from latsim.report.figures import validation_figure

        atomic_write_text(out_dir / "errors.csv", table.to_csv(index=False))
        validation_figure(levels, out_dir / "validation.png", title=str(run))
    if as_json:
        print(table.to_json(orient="records"))
        return
    out.print(validation_table(table))
    pct = lambda x: f"{100 * x:.1f}%"  # noqa: E731
    out.print("median |error| over Poisson levels:")
    out.print(headline(table).to_string(float_format=pct))
    bound = sorted({f"{lv.run_dir}" for lv in levels if lv.client_bound})
    if bound:
        out.print(f"client-bound runs (send lag p99 > {CLIENT_LAG_LIMIT_S * 1e3:.0f} ms; the client, not the "
                  f"engine, set their latencies): {', '.join(bound)}")
        out.print("median |error| over Poisson levels, client-bound runs left out:")
        out.print(headline(table, engine_bound_only=True).to_string(float_format=pct))


@app.command()
def measure(
    out_dir: Annotated[Path, Opt("--out", help="Run directory to write")],
    endpoint: Annotated[str | None, Opt(help="OpenAI-compatible base URL, e.g. http://localhost:8000/v1")] = None,
    model_name: Annotated[str | None, Opt(help="Served model name (HTTP)")] = None,
    engine: Annotated[str | None, Opt(help="'vllm' to run vLLM in-process instead of HTTP")] = None,
    model: Annotated[str | None, Opt(help="Config dir or catalog name for --engine vllm")] = None,
    load_format: Annotated[str, Opt(help="vLLM load format (dummy: random weights)")] = "dummy",
    qps: Annotated[float | None, Opt()] = None,
    concurrency: Annotated[int | None, Opt(help="Fixed number in flight instead of open-loop arrivals")] = None,
    burst: Annotated[bool, Opt(help="Send every request at t=0")] = False,
    trace: Annotated[Path | None, Opt()] = None,
    arrival: Annotated[str, Opt()] = "poisson",
    input_len: Annotated[int | None, Opt()] = None,
    input_dist: Annotated[str | None, Opt()] = None,
    output_len: Annotated[int | None, Opt()] = None,
    output_dist: Annotated[str | None, Opt()] = None,
    num_requests: Annotated[int, Opt()] = 200,
    seed: Annotated[int, Opt()] = 0,
    timeout_s: Annotated[float, Opt(help="Per-request timeout")] = 600.0,
) -> None:
    """Drive a live engine with a workload and record per-token timestamps."""
    from latsim.validate.measure_cli import run_measurement

    summary = run_measurement(
        out_dir=out_dir, endpoint=endpoint, model_name=model_name, engine=engine, model=model,
        load_format=load_format, qps=qps, concurrency=concurrency, burst=burst, trace=trace, arrival=arrival,
        input_len=input_len, input_dist=input_dist, output_len=output_len, output_dist=output_dist,
        num_requests=num_requests, seed=seed, timeout_s=timeout_s,
    )
    out.print(summary)


@app.command("host-speed")
def host_speed(
    seconds: Annotated[float, Opt(help="How long to time the workload")] = 3.0,
    as_json: Annotated[bool, Opt("--json")] = False,
) -> None:
    """Time a fixed CPU workload here: this host's --host-speed for predict (run it on the serving host)."""
    from latsim.validate.hostprobe import host_speed as measure_speed

    r = measure_speed(seconds)
    if as_json:
        print(json.dumps(r))
        return
    out.print(f"workload: median {r['p50_s'] * 1e3:.2f} ms (p10 {r['p10_s'] * 1e3:.2f}, p90 {r['p90_s'] * 1e3:.2f}) "
              f"over {r['samples']} runs; the host latsim's engine CPU terms describe: {r['reference_s'] * 1e3:.2f} ms")
    out.print(f"host speed {r['host_speed']:.2f} (p90..p10 times: {r['speed_low']:.2f}..{r['speed_high']:.2f}): "
              f"latsim predict --host-speed {r['host_speed']:.2f} ... for an engine on this host")
    if r["speed_high"] > 1.3 * r["speed_low"]:
        err.print("warning: this CPU's speed changed while it was timed (p90/p10 > 1.3); host-bound "
                  "engines on it will vary as much")


@app.command()
def models() -> None:
    """List the built-in model catalog."""
    from latsim.report.catalog import models_table

    out.print(models_table())


@app.command()
def devices() -> None:
    """List the GPU catalog (and which GPUs have measured calibration)."""
    from latsim.report.catalog import devices_table

    out.print(devices_table())


@app.command()
def calibrate(
    device: Annotated[str, Opt(help="Catalog GPU name, or auto to detect")] = "auto",
    quick: Annotated[bool, Opt("--quick", help="The quick grid (about 20 s on an H200)")] = False,
    out: Annotated[Path | None, Opt(help="Output folder (default: the shipped profile of the device)")] = None,
    resume: Annotated[bool, Opt("--resume/--restart", help="Skip points already measured in --out")] = True,
    fit_only: Annotated[bool, Opt("--fit-only", help="Re-fit the regressors from existing tables")] = False,
    profile: Annotated[Path | None, Opt(help="Profile folder for --fit-only")] = None,
    backend: Annotated[str, Opt(help="cuda | cpu (a tiny test run on the CPU)")] = "cuda",
    import_: Annotated[tuple[str, Path] | None, Opt("--import", help="FORMAT PATH: import a published database "
                                                    "(aiconfigurator) instead of measuring")] = None,
    engine_version: Annotated[str, Opt(help="--import: engine version to take (default: newest)")] = "newest",
    allow_partial: Annotated[bool, Opt("--allow-partial", help="--import: accept missing optional tables")] = False,
) -> None:
    """Microbenchmark the GPU's operators (or import published ones) and fit the calibrated cost model."""
    from latsim.calibration.cli import calibrate_command

    calibrate_command(device=device, quick=quick, out=out, resume=resume, fit_only=fit_only, backend=backend,
                      profile=profile, console=out_console(), import_=import_, engine_version=engine_version,
                      allow_partial=allow_partial)


def out_console() -> Console:
    return out


def main() -> None:
    """Console entry point: run the app, turning user errors into one line and exit status 2."""
    try:
        app(standalone_mode=False)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        err.print("aborted")
        sys.exit(130)
    except (UserError, ValueError, FileNotFoundError, IsADirectoryError, PermissionError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    except Exception as exc:  # click usage errors carry their own exit code
        code = getattr(exc, "exit_code", None)
        if code is not None and hasattr(exc, "show"):
            exc.show()
            sys.exit(code)
        raise


if __name__ == "__main__":
    main()
