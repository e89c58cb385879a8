"""Run a calibration grid: measure each point, write tables incrementally, resume, profile.

Design note.  Points run in grid order; each result becomes a row in its family's list.  Rows
are flushed to the parquet shards (then ``progress.json``) at most every
:data:`FLUSH_EVERY_S` seconds, at the end of each family and on any exception, so an
interrupted run loses at most a few seconds of work and a rerun with ``resume=True`` skips
every point already listed.  A point that runs out of device memory is recorded as ``oom``
(the cache is freed and the run continues); one the machine cannot measure as ``skipped``
with the reason; any other exception as ``error`` with its message.  At the end
``profile.json`` records the GPU, software, clocks seen, grid, counts and durations.

Imports nothing from the catalog, xgboost or simpy: it runs on the bare GPU image.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from latsim.atomic import atomic_write_text
from latsim.calibration import attention, comm, gemm, memory_ops, moe, overhead
from latsim.calibration.context import BenchContext, Skip, is_oom, make_context
from latsim.calibration.device_info import ClockSampler, gpu_identity
from latsim.calibration.grid import FAMILIES, Point, get_grid, grid_hash, points
from latsim.catalog.lookup import name_matches
from latsim.costmodel.profile import tables

FLUSH_EVERY_S = 3.0
PROFILE = "profile.json"
BENCHES: dict[str, Callable[[BenchContext, dict[str, Any]], dict[str, Any]]] = {
    "gemm": gemm.run, "attention": attention.run, "memory": memory_ops.run, "moe": moe.run,
    "overhead": overhead.run,
}
OnPoint = Callable[[Point, dict[str, Any]], None]


@dataclass(frozen=True)
class RunRequest:
    """What to run: ``device`` is the catalog name the GPU must match (``cpu`` for that backend)."""

    out: Path
    device: str
    grid: str = "full"
    backend: str = "cuda"
    aliases: tuple[str, ...] = ()
    resume: bool = True
    families: tuple[str, ...] = FAMILIES
    max_seconds: float | None = None
    op_timing: str = "graph"
    """How GEMMs, memory-bound ops and MoE layers are timed on a GPU (``timing.OP_TIMINGS``)."""
    heavy_timing: str = "burst"
    """How they are timed above the CUDA-graph size (``timing.HEAVY_TIMINGS``)."""


@dataclass
class _State:
    rows: dict[str, list[dict[str, Any]]]
    done: set[str]
    grid_hash: str
    prior_s: float
    t0: float = field(default_factory=time.perf_counter)
    dirty: set[str] = field(default_factory=set)
    last_flush: float = 0.0
    family_s: dict[str, float] = field(default_factory=dict)


def check_device(identity: dict[str, Any], req: RunRequest) -> None:
    """ValueError unless the detected GPU is the requested catalog device."""
    found = str(identity["gpu_name"])
    if req.backend == "cpu":
        if req.device not in ("cpu", "auto"):
            raise ValueError(f"--backend cpu measures the CPU; device must be 'cpu' or 'auto', got {req.device!r}")
        return
    if not name_matches(found, req.device, req.aliases):
        raise ValueError(f"--device {req.device} was asked for but this machine's GPU is {found!r}")


def run_calibration(req: RunRequest, on_point: OnPoint | None = None,
                    on_start: Callable[[list[Point]], None] | None = None) -> dict[str, Any]:
    """Measure the grid into ``req.out``; returns the profile dict (also ``profile.json``)."""
    ctx = make_context(req.backend, req.op_timing, req.heavy_timing)
    identity = gpu_identity(ctx.torch, req.backend)
    check_device(identity, req)
    pts = [p for p in points(get_grid(req.grid)) if p.family in req.families]
    ghash = grid_hash(pts)
    req.out.mkdir(parents=True, exist_ok=True)
    state = _initial_state(req, ghash)
    if on_start is not None:
        on_start([p for p in pts if p.id not in state.done])
    clocks = ClockSampler().start()
    state.t0 = time.perf_counter()
    try:
        complete = _run_points(ctx, req, pts, state, on_point)
    finally:
        _flush(req, state, force=True)
        clock_stats = clocks.stop()
    profile = _profile(req, ctx, identity, clock_stats, pts, state, complete)
    atomic_write_text(req.out / PROFILE, json.dumps(profile, indent=1) + "\n")
    return profile


def _initial_state(req: RunRequest, ghash: str) -> _State:
    fams = list(req.families)
    progress = tables.read_progress(req.out) if req.resume else None
    if progress is None:
        for fam in fams:
            tables.shard_path(req.out, fam).unlink(missing_ok=True)
        return _State({f: [] for f in fams}, set(), ghash, 0.0)
    if progress.get("grid_hash") != ghash:
        raise ValueError(f"{req.out / tables.PROGRESS}: written for grid {progress.get('grid')!r} "
                         f"(hash {progress.get('grid_hash')}), not {req.grid!r} (hash {ghash}); use another --out")
    rows = tables.load_rows(req.out, fams)
    have = {r["point_id"] for fam_rows in rows.values() for r in fam_rows}
    done = set(progress["completed"]) & have
    rows = {f: [r for r in rs if r["point_id"] in done] for f, rs in rows.items()}
    return _State(rows, done, ghash, float(progress.get("elapsed_s", 0.0)))


def _run_points(ctx: BenchContext, req: RunRequest, pts: list[Point], state: _State,
                on_point: OnPoint | None) -> bool:
    todo = [p for p in pts if p.id not in state.done]
    comm_pts = [p for p in todo if p.family == "comm"]
    for p in todo:
        if req.max_seconds is not None and time.perf_counter() - state.t0 > req.max_seconds:
            return False
        if p.family == "comm":
            continue
        start = time.perf_counter()
        row = _measure(ctx, p)
        _record(state, p, row, time.perf_counter() - start, on_point)
        _flush(req, state)
    if comm_pts:
        _run_comm(ctx, comm_pts, state, on_point)
    return all(p.id in state.done for p in pts)


def _measure(ctx: BenchContext, p: Point) -> dict[str, Any]:
    base = {"point_id": p.id, "family": p.family, **p.kwargs}
    try:
        return {**base, "status": "ok", "reason": None, **BENCHES[p.family](ctx, p.kwargs)}
    except Skip as exc:
        return {**base, "status": "skipped", "reason": str(exc)}
    except Exception as exc:
        status = "oom" if is_oom(exc) else "error"
        ctx.clear()
        return {**base, "status": status, "reason": f"{type(exc).__name__}: {exc}"[:400]}


def _record(state: _State, p: Point, row: dict[str, Any], seconds: float, on_point: OnPoint | None) -> None:
    state.rows.setdefault(p.family, []).append(row)
    state.done.add(p.id)
    state.dirty.add(p.family)
    state.family_s[p.family] = state.family_s.get(p.family, 0.0) + seconds
    if on_point is not None:
        on_point(p, row)


def _run_comm(ctx: BenchContext, pts: list[Point], state: _State, on_point: OnPoint | None) -> None:
    """One spawn per world size; every point gets a row per all-reduce mode (``comm.MODES``)."""
    for world in sorted({p.kwargs["world"] for p in pts}):
        group = {p.id: p for p in pts if p.kwargs["world"] == world}
        start = time.perf_counter()
        rows = comm.point_rows(ctx, world, [{"point_id": p.id, "family": "comm", **p.kwargs} for p in group.values()])
        each = (time.perf_counter() - start) / max(1, len(rows))
        for row in rows:
            _record(state, group[row["point_id"]], row, each, on_point)


def _flush(req: RunRequest, state: _State, force: bool = False) -> None:
    now = time.perf_counter()
    if not force and now - state.last_flush < FLUSH_EVERY_S:
        return
    for fam in sorted(state.dirty):
        tables.write_shard(req.out, fam, state.rows[fam])
    state.dirty.clear()
    state.last_flush = now
    tables.write_progress(req.out, req.grid, state.grid_hash, sorted(state.done), state.prior_s + now - state.t0)


def _profile(req: RunRequest, ctx: BenchContext, identity: dict[str, Any], clocks: dict[str, Any],
             pts: list[Point], state: _State, complete: bool) -> dict[str, Any]:
    counts: dict[str, dict[str, int]] = {}
    impls: dict[str, list[str]] = {}
    for fam, rows in state.rows.items():
        for r in rows:
            counts.setdefault(fam, {}).setdefault(r["status"], 0)
            counts[fam][r["status"]] += 1
        impls[fam] = sorted({str(r["impl"]) for r in rows if isinstance(r.get("impl"), str)})
    return {
        "format": 1, "device": "cpu" if req.backend == "cpu" else req.device, **identity, "clocks": clocks,
        "date_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"), "grid": req.grid,
        "grid_hash": state.grid_hash, "grid_points": len(pts), "complete": complete, "counts": counts,
        "impl": impls, "duration_s": round(state.prior_s + time.perf_counter() - state.t0, 2),
        "family_seconds": {k: round(v, 2) for k, v in state.family_s.items()},
        "timer": ctx.timer.name, "op_timer": ctx.op_timer.name, "heavy_timer": ctx.heavy_timer.name,
    }
