"""``latsim measure``: build the workload, pick the driver, write the run, return a summary line."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

from latsim.measure.loadgen import LoadSpec
from latsim.workload.generate import synthesize
from latsim.workload.io import read_trace


class NoRequestSucceeded(ValueError):
    """Every request of a measurement failed: the run was written but measured nothing."""


def _load(qps: float | None, concurrency: int | None, burst: bool, timeout_s: float,
          traced: bool = False) -> LoadSpec:
    """The load mode; with a trace, open loop (its arrivals) unless --concurrency or --burst."""
    if traced and qps is not None:
        raise ValueError(f"--trace gives the arrival times, so --qps {qps} would be ignored; drop --qps "
                         "(or give --concurrency or --burst to replay the trace's requests that way)")
    given = sum(x is not None and x is not False for x in (qps, concurrency, burst or None))
    if given > 1 or (given == 0 and not traced):
        raise ValueError("give exactly one of --qps, --concurrency or --burst")
    if burst:
        return LoadSpec("burst", request_timeout_s=timeout_s)
    if concurrency is not None:
        return LoadSpec("concurrency", concurrency=concurrency, request_timeout_s=timeout_s)
    return LoadSpec("open", request_timeout_s=timeout_s)


def run_measurement(*, out_dir: Path, endpoint, model_name, engine, model, load_format, qps, concurrency, burst,
                    trace, arrival, input_len, input_dist, output_len, output_dist, num_requests, seed,
                    timeout_s) -> str:
    if num_requests < 1:
        raise ValueError(f"--num-requests must be >= 1, got {num_requests}")
    if seed < 0:
        raise ValueError(f"--seed must be an integer >= 0, got {seed}")
    load = _load(qps, concurrency, burst, timeout_s, traced=trace is not None)
    if trace is not None:
        _trace_alone(arrival, input_len, input_dist, output_len, output_dist)
        workload = read_trace(trace, max_requests=num_requests)
    else:
        default_input = "lognormal:median=600,sigma=0.8,min=16,max=4096"
        inputs = input_len if input_len is not None else (input_dist or default_input)
        outputs = output_len if output_len is not None else (output_dist or 200)
        workload = synthesize(qps or 1.0, num_requests, "burst" if burst else arrival, inputs, outputs,
                              np.random.default_rng(seed))
    if engine == "vllm":
        m = _run_vllm(model, load_format, workload, load, out_dir)
    elif engine is None:
        if not endpoint or not model_name:
            raise ValueError("HTTP measurement needs --endpoint and --model-name (or use --engine vllm --model DIR)")
        from latsim.measure.http_driver import run_http

        m = run_http(endpoint, model_name, workload, load, out_dir)
    else:
        raise ValueError(f"--engine must be 'vllm' (in-process) or omitted (HTTP), got {engine!r}")
    counts = m.meta.get("status_counts", {})
    if not counts.get("ok"):
        where = endpoint if engine is None else "the vLLM engine"
        raise NoRequestSucceeded(f"no request to {where} succeeded (status {counts}); the failed run, "
                                 f"with each request's error, is in {out_dir}")
    return f"wrote {out_dir}: {len(m)} requests, status {counts}"


def _trace_alone(arrival: str, input_len, input_dist, output_len, output_dist) -> None:
    """Refuse synthetic-workload options next to --trace (they would be silently ignored)."""
    given = [flag for flag, value in (("--arrival", None if arrival == "poisson" else arrival),
                                      ("--input-len", input_len), ("--input-dist", input_dist),
                                      ("--output-len", output_len), ("--output-dist", output_dist))
             if value is not None]
    if given:
        raise ValueError(f"--trace gives the lengths and arrivals, so {', '.join(given)} would be ignored")


def _vllm_importable() -> None:
    from latsim.measure.vllm_driver import MISSING_VLLM, _import_vllm

    try:
        _import_vllm()
    except ImportError as exc:
        raise ValueError(f"--engine vllm: {MISSING_VLLM}; or measure a running server with --endpoint "
                         f"({exc.__cause__ or exc})") from None


def _run_vllm(model: str | None, load_format: str, workload, load: LoadSpec, out_dir: Path):
    from latsim.measure.vllm_driver import EngineSettings, Level, RunOptions, run_vllm

    if not model:
        raise ValueError("--engine vllm needs --model (a config directory or a catalog name)")
    _vllm_importable()
    path = Path(model)
    with tempfile.TemporaryDirectory() as tmp:
        if not (path / "config.json").is_file():
            import json

            from latsim.catalog.lookup import model_config_dict

            path = Path(tmp)
            (path / "config.json").write_text(json.dumps(model_config_dict(model)))
        settings = EngineSettings(model_dir=str(path), extra={"load_format": load_format})
        options = RunOptions(seed=0, host_probe=True)  # the engine's host speed goes into meta.json
        return run_vllm(settings, [Level(out_dir.name, workload, load)], out_dir.parent, options)[0]
