"""How far a prediction may be from the live engine: the validation's signed errors, summarised.

A prediction's intervals (replications, batch means) say how sure the simulation is of its own
answer; they say nothing of the model's error against a real engine.  That error is measured:
every held-out live level under ``data/validation`` replayed by the simulator (``latsim
validate``) gives one signed error per metric, ``(predicted - measured) / measured``.

:func:`summarise` puts those errors into load bands (:data:`BANDS`: the level's offered rate as
a fraction of the run's measured capacity) and paces (:func:`pace_of`: the replay's
:func:`~latsim.sim.host_report.decode_host_ratio`, the host seconds of a typical decode step over
its GPU seconds, cut by :data:`PACES`: a 70B model's is about 0.13, an 8B's 0.55, a 1B's 1.4-2.2
on the H200, where the CPU paces decoding and the engine's speed follows the VM's CPU from one
start to the next; and :data:`LAUNCH_PACE` where the decodes are not host-paced but the step
carrying a prompt is, :func:`~latsim.sim.host_report.prompt_launch_ratio` above 1: its graph-less
kernels launched by the CPU outlast their GPU work, as for the mixture of experts and, at some
loads, Phi-3-mini and the 7-8B models),
and gives, per cell and metric (:data:`METRICS`), the median error and a band meant to hold
:data:`TARGET` (80 %) of the errors of a configuration nobody measured.  The band is checked the
way it is used, by leaving each configuration (a model and workload shape, over all its engine
starts) out in turn: the band of the others' errors between their ``a`` and ``1 - a`` quantiles
holds some share of the left-out configuration's levels (:func:`loo_coverage`).  The plain
10-90 % band (``a`` = 0.1) held 60-80 % on the H200's levels, less than it names, because
configurations differ more than levels of one do; :func:`calibrated_band` takes the largest
``a`` (the narrowest band) whose left-out coverage reaches the target, and says when even the
whole range of the others (``a`` = 0) falls short.

:func:`applies` says whether a deployment is one the band describes (the measured engine, GPU
and cost model, one engine at TP=1, a load and a pace inside the measured ones); ``latsim
predict`` prints the band's TTFT and TPOT P50 beside its answer, or why there is none.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from latsim.costmodel.shard import BNB_UNMEASURED, runs_bitsandbytes
from latsim.paths import engine_data
from latsim.registry import engine_spec

BANDS: tuple[tuple[str, float, float], ...] = (("light", 0.0, 0.5), ("heavy", 0.5, 0.95))
"""(name, low, high]: the load bands, as offered rate over capacity.  Levels are measured at 0.1-0.9
of the measured capacity; a prediction's saturation (over its own estimated capacity) up to 0.95
is read as the heavy band."""
PACES: tuple[tuple[str, float, float], ...] = (("gpu", 0.0, 0.25), ("mixed", 0.25, 1.0), ("host", 1.0, np.inf))
"""(name, low, high]: the decode paces, as a decode step's host seconds over its GPU seconds: the GPU
sets the pace with the host under a quarter of it, the CPU from where the two are equal."""
LAUNCH_PACE = "launch"
"""The pace of a deployment whose decodes are not host-paced but whose prompt steps are: their
CPU launch outlasts their GPU work (:func:`pace_of`)."""
PACE_NAMES: tuple[str, ...] = ("gpu", "mixed", LAUNCH_PACE, "host")
"""Every pace, GPU-paced first."""
METRICS: tuple[tuple[str, str], ...] = tuple((m, s) for m in ("ttft_ms", "tpot_ms", "e2e_ms") for s in ("p50", "p99"))
TARGET = 0.8
"""The share of a left-out configuration's levels the band is widened to hold."""
MIN_CONFIGURATIONS = 2
"""A cell's least configurations: with one, no left-out coverage says how far its band carries."""
TAILS = tuple(round(0.10 - 0.01 * k, 2) for k in range(11))
"""The quantile ``a`` of the band's low edge (high: ``1 - a``) tried, narrowest first."""
SHIPPED = engine_data("vllm", "error_band.json")
"""The H200's band (the calibrated profile's live runs); another GPU's is :func:`band_path`'s."""
UNRECORDED_GPU = "h200"
"""The GPU of the live runs that recorded none: every run before the GPU was kept ran on the lent H200."""


def band_path(device: str) -> Path:
    """The shipped band file of ``device`` (a catalog GPU): :data:`SHIPPED` for the H200,
    ``error_band-<device>.json`` beside it for another (present only where live runs were taken)."""
    return SHIPPED if device == UNRECORDED_GPU else SHIPPED.with_name(f"error_band-{device}.json")


@functools.lru_cache(maxsize=1)
def band_devices() -> tuple[str, ...]:
    """The GPUs with a shipped band: the H200, then any other with an ``error_band-<device>.json``
    (listed once per process: every kind check names them)."""
    others = sorted(p.stem.removeprefix("error_band-") for p in SHIPPED.parent.glob("error_band-*.json"))
    return (UNRECORDED_GPU, *others)


def band_measured_on(recorded: str | None, device: str) -> bool:
    """Whether a level that recorded the GPU ``recorded`` belongs to ``device``'s band: the same
    catalog GPU, or none recorded and ``device`` the H200 (:data:`UNRECORDED_GPU`)."""
    return recorded == device or (recorded is None and device == UNRECORDED_GPU)


def load_fraction(level: str) -> float | None:
    """The offered load of a level named ``f0.25`` as a fraction of capacity; ``None`` for a burst or
    any other name."""
    if not level.startswith("f"):
        return None
    try:
        return float(level[1:])
    except ValueError:
        return None


def band_of(fraction: float, bands: tuple[tuple[str, float, float], ...] = BANDS) -> str | None:
    """The name of the band holding ``fraction`` (:data:`BANDS`, or :data:`PACES`), ``None``
    outside every band."""
    for name, low, high in bands:
        if low < fraction <= high:
            return name
    return None


def pace_of(host_ratio: float | None, prompt_ratio: float | None = None) -> str | None:
    """The pace (:data:`PACE_NAMES`) of a deployment whose typical decode step's host seconds are
    ``host_ratio`` of its GPU seconds (:data:`PACES`) and whose step carrying a prompt has CPU
    seconds ``prompt_ratio`` of its GPU seconds: :data:`LAUNCH_PACE` where that is above 1 and the
    decodes are not host-paced; ``None`` without a decode ratio."""
    if host_ratio is None or not np.isfinite(host_ratio):
        return None
    pace = band_of(host_ratio, PACES)
    if pace != "host" and prompt_ratio is not None and np.isfinite(prompt_ratio) and prompt_ratio > 1.0:
        return LAUNCH_PACE
    return pace


def configuration(run: str) -> str:
    """A level's configuration: the name of its run folder (``llama-3.1-8b-mix`` for
    ``data/validation/h200-s19/llama-3.1-8b-mix/f0.25``), the same over engine starts."""
    return Path(run).parent.name


def banded(errors: pd.DataFrame) -> pd.DataFrame:
    """``errors`` (columns ``run``, ``level``, ``metric``, ``stat``, ``error``, ``host_ratio``, and
    ``prompt_ratio`` where known: :func:`pace_of`) reduced to the rows of :data:`METRICS` on levels
    inside a load band and a pace, with ``band``, ``pace`` and ``config`` columns added."""
    keep = pd.Series([(m, s) in METRICS for m, s in zip(errors["metric"], errors["stat"], strict=True)],
                     index=errors.index)
    e = errors[keep & errors["error"].notna()].copy()
    fractions = e["level"].map(load_fraction)
    e["band"] = [band_of(f) if f is not None else None for f in fractions]
    prompt = e["prompt_ratio"] if "prompt_ratio" in e else pd.Series(np.nan, index=e.index)
    e["pace"] = [pace_of(r, p) for r, p in zip(e["host_ratio"], prompt, strict=True)]
    e = e[e["band"].notna() & e["pace"].notna()]
    e["config"] = e["run"].map(configuration)
    return e


def loo_inside(errors: pd.Series, groups: pd.Series, tail: float = TAILS[0]) -> pd.Series:
    """Per error: whether it lies inside the band between the ``tail`` and ``1 - tail`` quantiles
    of the errors of the other groups (its own group left out); ``errors`` and ``groups`` share an
    index."""
    inside = pd.Series(False, index=errors.index)
    for group in groups.unique():
        mine = groups == group
        low, high = np.quantile(errors[~mine], [tail, 1.0 - tail])
        inside[mine] = (errors[mine] >= low) & (errors[mine] <= high)
    return inside


def loo_coverage(errors: pd.Series, groups: pd.Series, tail: float = TAILS[0]) -> float | None:
    """Share of ``errors`` inside the band of the other groups (:func:`loo_inside`), each group
    left out in turn; ``None`` with fewer than two groups."""
    if groups.nunique() < 2:
        return None
    return float(loo_inside(errors, groups, tail).mean())


def calibrated_band(errors: pd.Series, groups: pd.Series, target: float = TARGET) -> dict[str, float | None]:
    """The band of ``errors`` for a new group: ``low`` / ``high``, the ``tail`` and ``1 - tail``
    quantiles of all the errors for the largest ``tail`` of :data:`TAILS` whose left-out coverage
    (:func:`loo_coverage`) reaches ``target``, and that ``coverage``; with no such ``tail``, the
    whole range (``tail`` 0) and its coverage, below ``target``.  With one group, the 10-90 % band
    and ``coverage`` ``None`` (nothing to leave out)."""
    chosen, coverage = TAILS[0], loo_coverage(errors, groups, TAILS[0])
    if coverage is not None:
        for tail in TAILS:
            chosen, coverage = tail, loo_coverage(errors, groups, tail)
            if coverage is not None and coverage >= target:
                break
    low, high = np.quantile(errors, [chosen, 1.0 - chosen])
    return {"tail": chosen, "low": float(low), "high": float(high), "coverage": coverage}


Cell = dict[str, dict[str, float | None]]
"""``{"ttft_ms p50": {levels, configurations, median, tail, low, high, coverage}, ...}``"""


def summarise(errors: pd.DataFrame) -> dict[str, dict[str, Cell]]:
    """``{band: {pace: cell}}`` of the signed errors (:func:`banded`); cells of fewer than
    :data:`MIN_CONFIGURATIONS` configurations are left out."""
    e = banded(errors)
    out: dict[str, dict[str, Cell]] = {}
    for band, _, _ in BANDS:
        for pace in PACE_NAMES:
            rows = e[(e["band"] == band) & (e["pace"] == pace)]
            if rows["config"].nunique() >= MIN_CONFIGURATIONS:
                out.setdefault(band, {})[pace] = cell(rows)
    return out


def cell(rows: pd.DataFrame) -> Cell:
    """The count, configurations, median and calibrated band (:func:`calibrated_band`) of each
    metric in ``rows``."""
    out: Cell = {}
    for metric, stat in METRICS:
        these = rows[(rows["metric"] == metric) & (rows["stat"] == stat)]
        if these.empty:
            continue
        band = calibrated_band(these["error"].reset_index(drop=True), these["config"].reset_index(drop=True))
        out[f"{metric} {stat}"] = {"levels": len(these), "configurations": int(these["config"].nunique()),
                                   "median": float(np.median(these["error"])), **band}
    return out


@dataclass(frozen=True)
class ErrorBand:
    """The shipped summary (:data:`SHIPPED`): what was measured (``engine``, ``device``,
    ``cost_model``, ``tp``), the bands (:func:`summarise`) of the levels replayed at the default
    host speed (``bands``, a prediction for a host of unknown speed) and of the probed levels
    replayed at their measured host speed (``known_host``, a prediction given the host's speed)."""

    engine: str
    device: str
    cost_model: str
    tp: int
    bands: dict[str, dict[str, Cell]]
    levels: int
    known_host: dict[str, dict[str, Cell]] = field(default_factory=dict)
    known_host_levels: int = 0

    @classmethod
    def read(cls, path: Path = SHIPPED) -> ErrorBand:
        d = json.loads(path.read_text())
        return cls(engine=d["engine"], device=d["device"], cost_model=d["cost_model"], tp=int(d["tp"]),
                   bands=d["bands"], levels=int(d["levels"]), known_host=d.get("known_host", {}),
                   known_host_levels=int(d.get("known_host_levels", 0)))

    def uses_known_host(self, host_known: bool) -> bool:
        """Whether a prediction whose host speed was given (``host_known``) or not gets the
        known-host bands (only when the file has them)."""
        return host_known and bool(self.known_host)

    def table(self, host_known: bool) -> dict[str, dict[str, Cell]]:
        """The bands for a prediction whose host speed was given (``host_known``) or not."""
        return self.known_host if self.uses_known_host(host_known) else self.bands


@functools.lru_cache(maxsize=8)
def shipped_band(device: str = UNRECORDED_GPU) -> ErrorBand:
    """The shipped :class:`ErrorBand` of ``device`` (:func:`band_path`), or the H200's where that
    GPU has none (whose kind check then says so); read once per process and GPU (``plan`` and
    ``compare`` ask for it per candidate and per point)."""
    path = band_path(device)
    return ErrorBand.read(path if path.is_file() else SHIPPED)


def kind_why(band: ErrorBand, *, engine: str, device: str, cost_model: str, tp: int, replicas: int,
             default_scheduling: bool, bitsandbytes: bool = False) -> str:
    """"" when ``band`` describes this kind of deployment (at some load and pace): the measured
    engine family, GPU and cost model, one engine at the measured TP, vLLM's default scheduling
    (asynchronous, chunked prefill) and executor (the model in the engine-core process on one
    GPU), weights of a kind measured live (not ``bitsandbytes`` 4-bit); else why not."""
    family, measured = band.engine.split("-")[0], ", ".join(band_devices())
    checks = (
        (engine == family, f"measured live on {family} only"),
        (device == band.device, f"built from {measured} runs only (docs/imported-profiles.md: others)"),
        (cost_model == band.cost_model, f"measured live with the {band.cost_model} cost model only"),
        (tp == band.tp and replicas == 1, f"measured live on one engine at TP={band.tp} only"),
        (default_scheduling, "measured live with the engine's default scheduling and executor only"),
        (not bitsandbytes, BNB_UNMEASURED),
    )
    return next((why for ok, why in checks if not ok), "")


def applies(band: ErrorBand, *, engine: str, device: str, cost_model: str, tp: int, replicas: int,
            saturation: float | None, default_scheduling: bool, host_ratio: float | None,
            prompt_ratio: float | None = None, host_known: bool = False,
            bitsandbytes: bool = False) -> tuple[tuple[str, str] | None, str]:
    """((load band, pace), "") when ``band`` describes this deployment, else (``None``, why not):
    its kind (:func:`kind_why`), a load inside a band and a pace with levels."""
    why = kind_why(band, engine=engine, device=device, cost_model=cost_model, tp=tp, replicas=replicas,
                   default_scheduling=default_scheduling, bitsandbytes=bitsandbytes)
    if why:
        return None, why
    if saturation is None or not np.isfinite(saturation):
        return None, "no load estimate"
    table = band.table(host_known)
    name = band_of(saturation)
    if name is None or name not in table:
        return None, (f"load {saturation:.2f} of capacity is outside the measured range (levels at 0.1-0.9 "
                      f"of capacity, read up to {BANDS[-1][2]:g})")
    pace = pace_of(host_ratio, prompt_ratio)
    if pace is None or pace not in table[name]:
        return None, "no measured level runs at this deployment's host/GPU pace"
    return (name, pace), ""


def validated_error(band: ErrorBand, **deployment: Any) -> dict[str, Any]:
    """The summary block ``latsim predict`` reports: the band's spread for this deployment's load,
    or ``{"available": False, "why": ...}`` (:func:`applies`)."""
    where, why = applies(band, **deployment)
    if where is None:
        return {"available": False, "why": why}
    name, pace = where
    host_known = band.uses_known_host(bool(deployment.get("host_known")))
    return {"available": True, "band": name, "pace": pace, "host_ratio": deployment["host_ratio"],
            "prompt_ratio": deployment.get("prompt_ratio"),
            "host_known": host_known, "engine": band.engine, "device": band.device,
            "target_coverage": TARGET, "metrics": band.table(host_known)[name][pace]}


def for_prediction(deployment: Any, summary: dict[str, Any], band: ErrorBand | None = None) -> dict[str, Any]:
    """:func:`validated_error` of a prediction: its deployment (engine, GPU, TP, replicas,
    scheduling; a host speed other than 1 is taken as measured, ``latsim host-speed``) and its
    summary (cost model, saturation, the pace of :func:`pace_of`), against its GPU's shipped band
    by default."""
    from latsim.sim.host_report import pace_ratios

    engine = deployment.engine
    decode, prompt = pace_ratios(deployment, summary)
    kind = _kind(deployment, str(summary.get("cost_model")))
    return validated_error(band or shipped_band(deployment.device.name), **kind,
                           saturation=summary.get("saturation"),
                           host_ratio=decode, prompt_ratio=prompt, host_known=engine.host_speed != 1.0)


def deployment_why(deployment: Any, cost_model: str, band: ErrorBand | None = None) -> str:
    """:func:`kind_why` of a deployment priced by ``cost_model`` (a summary's ``cost_model``),
    against its GPU's shipped band by default: "" when the band describes its kind at some load."""
    return kind_why(band or shipped_band(deployment.device.name), **_kind(deployment, cost_model))


def _kind(deployment: Any, cost_model: str) -> dict[str, Any]:
    engine = deployment.engine
    default_executor = engine.executor in (None, engine_spec(engine.engine).default_executor(deployment.tp))
    default_scheduling = (engine.async_scheduling and engine.enable_chunked_prefill and engine.static_batch_size is None
                          and default_executor)
    return {"engine": engine.engine, "device": deployment.device.name, "cost_model": cost_model,
            "tp": deployment.tp, "replicas": deployment.replicas, "default_scheduling": default_scheduling,
            "bitsandbytes": runs_bitsandbytes(deployment.model, deployment.weight_dtype)}


def at_slow_edge(predicted: float, cell: dict[str, Any]) -> float:
    """``predicted`` (ms) as the live engine would give it at the slow edge of ``cell``'s band:
    over ``1 + low``, the most negative signed error ``(predicted - measured) / measured``."""
    return predicted / (1.0 + cell["low"])


def slow_edge(validated: dict[str, Any], summary: dict[str, Any]) -> dict[str, dict[str, float | bool]] | None:
    """Each SLO target's percentile (``summary["slo"]``, at P50 or P99) as the live engine would
    give it at the band's slow edge: the predicted value over ``1 + low`` (``low``, the band's
    most negative signed error: the engine slower than predicted), and whether it still meets
    the target; ``None`` without an SLO, a band, or a band for that percentile."""
    slo = summary.get("slo")
    if not slo or not validated.get("available"):
        return None
    percentile = slo.get("percentile", "p99")
    out: dict[str, dict[str, float | bool]] = {}
    for metric, target in (slo.get("targets_ms") or {}).items():
        cell = validated["metrics"].get(f"{metric} {percentile}")
        predicted = (summary.get(metric) or {}).get(percentile)
        if cell is None or predicted is None or not np.isfinite(predicted):
            return None
        live = at_slow_edge(predicted, cell)
        out[metric] = {"percentile_ms": live, "target_ms": target, "met": bool(live <= target)}
    return out or None


def inside_band(errors: pd.DataFrame, band: ErrorBand, host_known: bool = False) -> pd.DataFrame:
    """How many of ``errors``' levels (:func:`banded`: Poisson levels with a ``host_ratio``) fall
    inside the band of their cell: one row per metric (``"ttft_ms p50"``...) with ``inside`` and
    ``levels`` (levels whose cell the band lacks are not counted).  On levels the band was not
    built from, a check of its 80 %."""
    e = banded(errors)
    table = band.table(host_known)
    counts: dict[str, list[int]] = {}
    for band_name, pace, key, error in zip(e["band"], e["pace"], e["metric"] + " " + e["stat"], e["error"],
                                           strict=True):
        cell = table.get(str(band_name), {}).get(str(pace), {}).get(str(key))
        low, high = (cell or {}).get("low"), (cell or {}).get("high")
        if low is None or high is None:
            continue
        tally = counts.setdefault(str(key), [0, 0])
        tally[0] += int(low <= float(error) <= high)
        tally[1] += 1
    return pd.DataFrame([{"metric": k, "inside": v[0], "levels": v[1]} for k, v in counts.items()],
                        columns=["metric", "inside", "levels"])


def targets_at_slow_edge(validated: dict[str, Any], values: dict[str, float | None],
                         limits: dict[str, float]) -> dict[str, Any]:
    """A plan candidate's SLO at the band's slow edge: ``values`` and ``limits`` keyed by target
    name (``ttft_p99_ms``); each target the band covers (TTFT, TPOT or E2E at P50 or P99) is
    divided by ``1 + low`` of its cell.  ``{"meets": bool | None, "values": {...}}``: ``None``
    (and no values) when the band does not apply or covers none of the targets."""
    if not validated.get("available"):
        return {"meets": None, "why": validated.get("why")}
    out: dict[str, float] = {}
    for name, value in values.items():
        metric, stat, _ = name.split("_")
        cell = validated["metrics"].get(f"{metric}_ms {stat}")
        if cell is None:
            continue
        out[name] = float("inf") if value is None else at_slow_edge(value, cell)
    if not out:
        return {"meets": None, "why": "the band covers none of the targets (TTFT, TPOT, E2E at p50 or p99)"}
    return {"meets": all(v <= limits[k] for k, v in out.items()), "values": out}


def with_host_ratios(table: pd.DataFrame, levels: list[Any], band: ErrorBand | None = None) -> pd.DataFrame:
    """``table`` (:func:`latsim.validate.compare.error_table` of ``levels``) with each Poisson
    level's ``host_ratio`` and ``prompt_ratio`` (:func:`pace_of`) of the deployment its
    replay simulated; none (so no cell of the band) for a level of a kind ``band`` (default: its
    GPU's shipped one) does not describe (:func:`deployment_why`: another TP, replicas,
    scheduling)."""
    from latsim.sim.host_report import pace_ratios

    ratios, prompts = {}, {}
    for lv in levels:
        if load_fraction(lv.level) is None:
            continue
        if not deployment_why(lv.deployment, str(lv.predicted.get("cost_model")), band):
            ratios[lv.run_dir], prompts[lv.run_dir] = pace_ratios(lv.deployment, lv.predicted)
    return table.assign(host_ratio=table["run"].map(ratios), prompt_ratio=table["run"].map(prompts))


def describe_inside(counts: pd.DataFrame) -> str:
    """``"ttft p50 7/8, ttft p99 5/8, ..."`` of :func:`inside_band`'s counts."""
    return ", ".join(f"{str(metric).replace('_ms', '')} {inside}/{n}"
                     for metric, inside, n in zip(counts["metric"], counts["inside"], counts["levels"], strict=True))
