"""Prediction vs measurement on the same traffic: replay a measured run in the simulator.

The simulator gets the run's exact arrivals (when each request left the client) and lengths,
the model's own config.json and the engine's resolved configuration (max_num_seqs, token
budget, block size, KV blocks, max_model_len, chunked prefill, prefix caching), so that the
only thing left to disagree on is the model of time.  Errors are signed:
``(predicted - measured) / measured``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from latsim.catalog.hf_config import parse_hf_config
from latsim.catalog.lookup import detect_device, load_device
from latsim.catalog.quant_resolve import AUTO
from latsim.costmodel.host import HOST_SPEED_RANGE, check_host_speed
from latsim.deployment import EXECUTORS, Deployment, EngineConfig
from latsim.engines.vllm.host_terms import reference_probe_s
from latsim.measure.records import load_run, read_meta

METRICS = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")
CLIENT_LAG_LIMIT_S = 0.05
"""A Poisson level whose client sent its requests with a p99 lag above this was client-bound."""
STATS = ("mean", "p50", "p90", "p99")


@dataclass(frozen=True)
class LevelComparison:
    """One measured load level and its replay."""

    run_dir: str
    level: str
    offered_qps: float | None
    measured: dict
    predicted: dict
    measured_records: pd.DataFrame
    predicted_records: pd.DataFrame
    deployment: Deployment
    """The deployment the replay simulated (:func:`replay_deployment`)."""
    client_bound: bool = False
    host_probe_ms: float | None = None
    host_probe_mean_ms: float | None = None
    """The probe's median and mean over the level (:func:`host_probe_ms`); far apart on a host of two speeds."""


PROBE_SPEEDS = {"probe": "median", "probe-mean": "mean"}
"""The ``--host-speed`` values that read a level's host probe, and the probe statistic each takes:
the median (the one the CPU terms were fitted with) or the mean (the time-average of the CPU's
speed, which a host of two speeds needs: ``docs/validation.md``, "a host of two speeds")."""


def host_probe_ms(meta: dict, statistic: str = "median") -> float | None:
    """The median (``statistic="mean"``: the mean) time of the host probe's fixed workload during
    the run, in ms (``None``: the run was measured without
    :class:`~latsim.measure.hostprobe.HostProbe`).  The same work each time: a larger value means a
    slower CPU under the engine while this level ran.  The mean is the summary's ``probe_mean_s``,
    or for a level recorded before it was kept, the mean over the probe's recorded samples."""
    probe = meta.get("host_probe") or {}
    summary = probe.get("summary") or {}
    if statistic == "mean":
        value = summary.get("probe_mean_s")
        if not isinstance(value, (int, float)):
            value = _mean_of_samples(probe)
    elif statistic == "median":
        value = summary.get("probe_p50_s")
    else:
        raise ValueError(f"host probe statistic {statistic!r}: expected 'median' or 'mean'")
    return float(value) * 1e3 if isinstance(value, (int, float)) else None


def _mean_of_samples(probe: dict) -> float | None:
    """The mean of the probe-time column of a host probe's recorded rows (None when it kept none)."""
    columns, rows = probe.get("columns") or [], probe.get("rows") or []
    if "probe_s" not in columns:
        return None
    at = columns.index("probe_s")
    values = [row[at] for row in rows if len(row) > at and isinstance(row[at], (int, float))]
    return float(np.mean(values)) if values else None


def host_speed_option(text: str) -> float | str:
    """A ``--host-speed`` value as given on a command line: ``"probe"``, ``"probe-mean"``
    (:data:`PROBE_SPEEDS`), or a number in :data:`~latsim.costmodel.host.HOST_SPEED_RANGE`;
    ValueError naming the text and what is accepted otherwise."""
    if text in PROBE_SPEEDS:
        return text
    try:
        speed = float(text)
        check_host_speed(speed)
    except ValueError:
        lo, hi = HOST_SPEED_RANGE
        raise ValueError(f"--host-speed {text!r}: expected 'probe', 'probe-mean' or a number in "
                         f"[{lo:g}, {hi:g}]") from None
    return speed


def run_host_speed(meta: dict, host_speed: float | str) -> float:
    """The ``host_speed`` to replay a run with: a number as given; ``"probe"``: the host the
    engine CPU terms describe over this run's probe median (:func:`host_probe_ms`; the CPU's
    speed while the level ran), ``"probe-mean"`` the same over the probe's mean; 1.0 for a run
    measured without the probe."""
    if isinstance(host_speed, str) and host_speed not in PROBE_SPEEDS:
        raise ValueError(f"host speed must be a number, 'probe' or 'probe-mean', got {host_speed!r}")
    if not isinstance(host_speed, str):
        return float(host_speed)
    probe = host_probe_ms(meta, PROBE_SPEEDS[host_speed])
    return 1.0 if probe is None else reference_probe_s() / (probe / 1e3)


def client_bound(meta: dict) -> bool:
    """Whether the measuring client, not the engine, limited an open-loop run.

    An open-loop client sends each request at its scheduled time; a p99 send lag above
    :data:`CLIENT_LAG_LIMIT_S` means its event loop was saturated, which also delays the token
    times it records.  Bursts send everything at once and are never flagged.
    """
    if (meta.get("load") or {}).get("mode") != "open":
        return False
    lag = (meta.get("send_lag_s") or {}).get("p99")
    return isinstance(lag, (int, float)) and lag > CLIENT_LAG_LIMIT_S


def find_runs(root: str | Path, device: str | None = None) -> list[Path]:
    """Every run directory (holding ``meta.json``) at or below ``root``, sorted; with ``device``
    only those measured on that GPU (:func:`recorded_device`; a run that recorded none counts as
    measured on it)."""
    base = Path(root)
    runs = [base] if (base / "meta.json").is_file() else sorted(p.parent for p in base.rglob("meta.json"))
    if not runs:
        raise ValueError(f"{root} holds no measurement (no meta.json at or below it)")
    if device is None:
        return runs
    return [r for r in runs if measured_on(recorded_device(read_meta(r)), device)]


def measured_on(recorded: str | None, device: str) -> bool:
    """Whether a run that recorded the GPU ``recorded`` (:func:`recorded_device`) counts as measured
    on ``device``: the same catalog name, or none recorded (the runs from before the GPU was kept)."""
    return recorded is None or recorded == device


def recorded_device(meta: dict) -> str | None:
    """The catalog name of the GPU a run recorded (``engine_config.versions.gpu``, e.g. ``NVIDIA
    H100 80GB HBM3`` -> ``h100``); ``None`` when it recorded none or one the catalog lacks."""
    gpu = ((meta.get("engine_config") or {}).get("versions") or {}).get("gpu")
    if not gpu:
        return None
    try:
        return detect_device(str(gpu)).name
    except ValueError:
        return None


def deployment_for(meta: dict, device: str) -> Deployment:
    """The deployment a run measured, from its recorded model config and engine snapshot."""
    model_meta = meta.get("model") or {}
    config = model_meta.get("config")
    if not isinstance(config, dict):
        raise ValueError("the run's meta.json has no model config (model.config); cannot replay it")
    model = parse_hf_config(config, str(model_meta.get("name", "measured-model")))
    ec = meta.get("engine_config") or {}
    engine = EngineConfig(
        max_num_seqs=ec.get("max_num_seqs"), max_num_batched_tokens=ec.get("max_num_batched_tokens"),
        block_size=ec.get("block_size") or 16, gpu_memory_utilization=ec.get("gpu_memory_utilization") or 0.92,
        max_model_len=ec.get("max_model_len"), enable_chunked_prefill=ec.get("chunked_prefill", True),
        enable_prefix_caching=ec.get("prefix_caching", True), async_scheduling=ec.get("async_scheduling", True),
        num_gpu_blocks=ec.get("num_gpu_blocks"), executor=run_executor(meta),
        language_model_only=bool((meta.get("engine_args") or {}).get("language_model_only", False)),
    )
    return Deployment(model=model, device=load_device(device), tp=ec.get("tp") or 1, engine=engine,
                      kv_dtype=engine_kv_dtype(ec.get("kv_cache_dtype")))


def run_executor(meta: dict) -> str | None:
    """Where the run's engine ran the model (:data:`~latsim.deployment.EXECUTORS`): the engine's
    recorded executor, else the one the measuring command asked for (``engine_args``), else
    ``None`` (vLLM's default for its GPUs); an executor latsim does not model is an error."""
    return chosen_executor((meta.get("engine_config") or {}).get("executor"),
                           (meta.get("engine_args") or {}).get("distributed_executor_backend"))


def chosen_executor(recorded: str | None, asked: str | None) -> str | None:
    """The executor an engine ran: ``recorded`` (the engine's own configuration), else ``asked``
    (the command's), else ``None`` (the engine's default); ValueError for one latsim does not
    model (:data:`~latsim.deployment.EXECUTORS`)."""
    executor = recorded if recorded is not None else asked
    if executor is None or executor in EXECUTORS:
        return executor
    raise ValueError(f"the run's engine ran the model with executor {executor!r}; latsim models "
                     f"{', '.join(EXECUTORS)}")


SIXTEEN_BIT_CACHE = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16"}
"""vLLM's 16-bit ``cache_dtype`` names and latsim's KV dtypes for them."""


def engine_kv_dtype(cache_dtype: str | None) -> str:
    """latsim's KV dtype for vLLM's ``cache_dtype``: ``auto`` (or unrecorded) follows the model,
    every fp8 variant (``fp8``, ``fp8_e4m3``, ``fp8_e5m2``) is ``fp8``."""
    if cache_dtype in (None, "", "auto"):
        return AUTO
    if str(cache_dtype).startswith("fp8"):
        return "fp8"
    if cache_dtype in SIXTEEN_BIT_CACHE:
        return SIXTEEN_BIT_CACHE[cache_dtype]
    raise ValueError(f"the run's kv_cache_dtype={cache_dtype!r} is not one latsim models; "
                     "accepted: auto, bfloat16, float16, fp8, fp8_e4m3, fp8_e5m2")


def profile_cost_model(deployment: Deployment, profile: Path):
    """The default cost model of ``deployment`` with its GPU side priced by the fitted profile folder
    ``profile`` (e.g. an imported one) instead of the device's shipped profile."""
    from latsim.costmodel.calibrated import load_calibrated
    from latsim.deployment import resolve_engine
    from latsim.sim.simulate import default_cost_model

    gpu = load_calibrated(deployment.model, deployment.device, deployment.tp, deployment.weight_dtype,
                          deployment.kv_dtype, profile=Path(profile), step_s=0.0, per_seq_s=0.0)
    return default_cost_model(deployment, resolve_engine(deployment), gpu=gpu)


def replay_deployment(meta: dict, device: str, host_speed: float | str = 1.0) -> Deployment:
    """The deployment a run measured (:func:`deployment_for`) on a host of ``host_speed``
    (:func:`run_host_speed`): what :func:`compare_run` replays it with."""
    deployment = deployment_for(meta, device)
    speed = run_host_speed(meta, host_speed)
    if speed != 1.0:
        deployment = replace(deployment, engine=replace(deployment.engine, host_speed=speed))
    return deployment


def compare_run(run_dir: str | Path, device: str, *, seed: int = 0, cost_model=None,
                host_speed: float | str = 1.0, profile: Path | None = None) -> LevelComparison:
    """Replay one measured run and summarise both sides with the same metric code, on a host
    of ``host_speed`` (:func:`run_host_speed`; ignored with an explicit ``cost_model``), the GPU
    priced by ``profile`` when given (:func:`profile_cost_model`)."""
    from latsim.metrics.summary import summarize
    from latsim.sim.simulate import simulate

    m = load_run(run_dir)
    deployment = replay_deployment(m.meta, device, host_speed)
    if cost_model is None and profile is not None:
        cost_model = profile_cost_model(deployment, profile)
    result = simulate(deployment, m.to_trace(), seed=seed, cost_model=cost_model)
    measured_records = m.records_frame()
    itl_v, itl_w = m.itl_samples()
    measured = summarize(measured_records, itl_v, itl_w, rng=np.random.default_rng(seed))
    predicted = matched_summary(result.summary, result.records, measured_records, result.itl_values_s,
                                result.itl_weights, seed)
    trace_meta = m.meta.get("trace") or {}
    return LevelComparison(str(run_dir), str(m.meta.get("level", Path(run_dir).name)),
                           trace_meta.get("offered_qps"), measured, predicted,
                           measured_records, result.records, deployment, client_bound(m.meta),
                           host_probe_ms(m.meta), host_probe_ms(m.meta, "mean"))


def finished_live(records: pd.DataFrame, measured_records: pd.DataFrame) -> pd.DataFrame:
    """The replay's ``records`` of the requests the live run completed (``ok``); a replayed
    request's ``request_id`` is its position in the trace, the measured records' row."""
    done = np.flatnonzero(measured_records["status"].to_numpy() == "ok")
    return records[np.isin(records["request_id"].to_numpy(), done)]


def matched_summary(summary: dict, records: pd.DataFrame, measured_records: pd.DataFrame,
                    itl_values: np.ndarray, itl_weights: np.ndarray, seed: int) -> dict:
    """The replay's ``summary`` with its TTFT, TPOT and E2E taken over the requests the live run
    completed, when the run's deadline cut some off (a burst past the engine's capacity).

    The deadline took the requests served last; the ones that finished were served first in both
    engines, so the two sides are compared on the same requests (the replay's slower or faster
    service then shows in their latencies, not in which requests are counted).  Without cut-off
    requests ``summary`` is returned as it is.  The replay's ITL samples carry no request, so ITL
    stays over all of its requests (``itl_over`` says so)."""
    from latsim.metrics.summary import summarize

    if (measured_records["status"] == "ok").all():
        return summary
    matched = finished_live(records, measured_records)
    latencies = summarize(matched, itl_values, itl_weights, rng=np.random.default_rng(seed))
    out = dict(summary)
    out.update({k: latencies[k] for k in ("ttft_ms", "tpot_ms", "e2e_ms")})
    out.update({"matched_requests": len(matched), "itl_over": "all replayed requests"})
    return out


def error_table(levels: list[LevelComparison]) -> pd.DataFrame:
    """Long table: one row per (run, metric, statistic) with measured, predicted, signed error."""
    rows = []
    for lv in levels:
        for metric in METRICS:
            for stat in STATS:
                meas = (lv.measured.get(metric) or {}).get(stat)
                pred = (lv.predicted.get(metric) or {}).get(stat)
                err = (pred - meas) / meas if meas and pred is not None else np.nan
                rows.append({"run": lv.run_dir, "level": lv.level, "offered_qps": lv.offered_qps,
                             "client_bound": lv.client_bound, "host_probe_ms": lv.host_probe_ms,
                             "host_probe_mean_ms": lv.host_probe_mean_ms,
                             "metric": metric, "stat": stat,
                             "measured": meas, "predicted": pred, "error": err})
    return pd.DataFrame(rows)


def headline(table: pd.DataFrame, poisson_only: bool = True, engine_bound_only: bool = False) -> pd.DataFrame:
    """Median |error| per (metric, statistic) over the Poisson levels (bursts excluded), and
    with ``engine_bound_only`` without the client-bound runs (:func:`client_bound`)."""
    t = table[table["level"] != "burst"] if poisson_only else table
    if engine_bound_only and "client_bound" in t:
        t = t[~t["client_bound"].astype(bool)]
    return (t.assign(abs_error=t["error"].abs())
            .groupby(["metric", "stat"])["abs_error"].median().unstack("stat")
            .reindex(index=list(METRICS), columns=list(STATS)))
