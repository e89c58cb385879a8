"""``latsim measure`` and ``latsim host-speed``: measurements of live engines and of this host."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

from latsim.cli.app import Opt, UserError, app, err, out


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
    from latsim.measure.measure_cli import run_measurement
    from latsim.measure.vllm_driver import EngineStartError

    try:
        summary = run_measurement(
            out_dir=out_dir, endpoint=endpoint, model_name=model_name, engine=engine, model=model,
            load_format=load_format, qps=qps, concurrency=concurrency, burst=burst, trace=trace, arrival=arrival,
            input_len=input_len, input_dist=input_dist, output_len=output_len, output_dist=output_dist,
            num_requests=num_requests, seed=seed, timeout_s=timeout_s,
        )
    except EngineStartError as exc:
        raise UserError(str(exc)) from None
    out.print(summary)


@app.command("host-speed")
def host_speed(
    seconds: Annotated[float, Opt(help="How long to time the workload")] = 3.0,
    as_json: Annotated[bool, Opt("--json")] = False,
) -> None:
    """Time a fixed CPU workload here: this host's --host-speed for predict (run it on the serving host)."""
    from latsim.measure.hostprobe import host_speed as measure_speed

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
