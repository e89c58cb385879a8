"""Simulate the surrogate's design points: the training data, resumable, as parquet parts.

``python -m latsim.predict.recipe models/recipe/points.csv --out build/surrogate/train
--num-requests 300 --workers 2`` simulates every point of the points file
(:mod:`latsim.predict.design`) not already in ``--out``: points go to ``--workers`` spawned
processes in chunks, and each finished chunk is written atomically as one
``part-<first id>.parquet``, so an interrupted run resumes where it stopped.  A row holds the
point's columns, the targets (:data:`TARGETS`), ``stable`` and the simulator's wall time.

Stability (stand-in until a shared verdict exists): a run is unstable when a request is left
unfinished, or when its completions come slower than its arrivals: the rate between the 10th
and 90th percentile completion times is below 0.95 x the rate between the same percentiles of
the arrival times.  Central quantiles keep the drain at the end of a short run from reading as
overload.
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from latsim.atomic import atomic_write

if TYPE_CHECKING:
    from latsim.deployment import Deployment

LATENCY_TARGETS = tuple(f"{m}_{q}" for m in ("ttft_ms", "tpot_ms", "e2e_ms") for q in ("p50", "p90", "p99"))
TARGETS = (*LATENCY_TARGETS, "throughput_rps")
STABLE_RATIO = 0.95


def trace_for(point: dict, num_requests: int):
    """The synthetic trace of a design point: Poisson arrivals at ``qps``, lognormal lengths
    clipped to the feature module's bounds, a ``prefix_share`` of each prompt shared within one
    of four groups."""
    from latsim.predict.features import INPUT_CLIP, OUTPUT_CLIP
    from latsim.workload.trace import RequestTrace

    rng = np.random.default_rng(int(point["seed"]))
    gaps = rng.exponential(1.0 / float(point["qps"]), num_requests)
    arrival = np.concatenate([[0.0], np.cumsum(gaps[1:])])
    inputs = _lengths(rng, point["input_median"], point["input_sigma"], INPUT_CLIP, num_requests)
    outputs = _lengths(rng, point["output_median"], point["output_sigma"], OUTPUT_CLIP, num_requests)
    share = float(point["prefix_share"])
    groups = rng.integers(0, 4, num_requests) if share > 0 else np.full(num_requests, -1)
    prefix = np.floor(share * inputs).astype(np.int64) if share > 0 else np.zeros(num_requests, np.int64)
    return RequestTrace.from_arrays(arrival, inputs, outputs, groups, prefix)


def _lengths(rng: np.random.Generator, median: float, sigma: float, clip: tuple[int, int], n: int) -> np.ndarray:
    raw = float(median) * np.exp(float(sigma) * rng.standard_normal(n))
    return np.clip(np.rint(raw), *clip).astype(np.int64)


def point_deployment(point: dict) -> Deployment:
    """The deployment of one design point (a dict of its columns); DoesNotFitError when its
    model does not fit its GPUs at its TP."""
    from latsim.predict.features import _deployment

    deployment: Deployment
    deployment, _, _ = _deployment(point["model"], point["device"], int(point["tp"]), int(point["replicas"]),
                                   point["weight_dtype"], point["kv_dtype"], point["max_num_seqs"],
                                   point["max_num_batched_tokens"])
    return deployment


def simulate_point(point: dict, num_requests: int) -> dict:
    """The targets of one design point (a dict of its columns)."""
    from latsim import simulate

    d = point_deployment(point)
    trace = trace_for(point, num_requests)
    start = time.perf_counter()
    result = simulate(d, trace, seed=int(point["seed"]))
    row = {**point, "num_requests": num_requests, "sim_seconds": time.perf_counter() - start}
    s = result.summary
    for target in LATENCY_TARGETS:
        metric, q = target.rsplit("_", 1)
        row[target] = s[metric][q] if s[metric]["count"] else np.nan
    row["throughput_rps"] = completion_rate(result.records)
    row["sim_throughput_rps"] = s["throughput_rps"]
    row["num_unfinished"] = s["num_unfinished"]
    row["num_rejected"] = s["num_rejected"]
    row["stable"] = is_stable(result.records)
    return row


def _central_rate(times: np.ndarray) -> float:
    """Events per second between the 10th and 90th percentile of ``times`` (inf: all at once)."""
    lo, hi = np.quantile(times, [0.1, 0.9])
    return float(0.8 * len(times) / (hi - lo)) if hi > lo else float("inf")


def completion_rate(records: pd.DataFrame) -> float:
    """Completions per second between the 10th and 90th percentile completion times: the
    served rate, without the drain at the end of a short run that the whole-run rate counts."""
    done = records.loc[records["status"] == "ok", "finish_s"].to_numpy()
    return _central_rate(done) if len(done) >= 10 else float("nan")


def is_stable(records: pd.DataFrame) -> bool:
    """Stand-in stability verdict (see the module docstring) over a run's per-request records."""
    if (records["status"] == "unfinished").any():
        return False
    arrival_rate = _central_rate(records["arrival_s"].to_numpy())
    done_rate = completion_rate(records)
    if np.isnan(done_rate) or np.isinf(arrival_rate):
        return True
    return bool(done_rate >= STABLE_RATIO * arrival_rate)


def read_points(path: str | Path) -> pd.DataFrame:
    """The points file (CSV with ``#`` comment lines)."""
    frame = pd.read_csv(path, comment="#")
    for col in ("max_num_seqs", "max_num_batched_tokens"):
        frame[col] = frame[col].astype(object).where(frame[col].notna(), None)
    return frame


def done_ids(out: Path) -> set[int]:
    """Ids already simulated in the parts under ``out``."""
    ids: set[int] = set()
    for part in sorted(out.glob("part-*.parquet")):
        ids.update(int(i) for i in pd.read_parquet(part, columns=["id"])["id"])
    return ids


def read_results(out: str | Path) -> pd.DataFrame:
    """Every simulated row under ``out``, sorted by id."""
    parts = sorted(Path(out).glob("part-*.parquet"))
    if not parts:
        raise ValueError(f"{out} holds no part-*.parquet; run `python -m latsim.predict.recipe` first")
    return pd.concat([pd.read_parquet(p) for p in parts]).sort_values("id").reset_index(drop=True)


def _chunk_job(args: tuple[list[dict], int]) -> list[dict]:
    points, num_requests = args
    return [simulate_point(p, num_requests) for p in points]


def _chunks(todo: pd.DataFrame, size: int) -> Iterator[list[dict]]:
    records = todo.to_dict("records")
    for i in range(0, len(records), size):
        yield records[i:i + size]


def fitting(points: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """``(the points whose deployment fits its GPUs, one line per point that no longer does)``.
    A design drops the points no TP can host when it is drawn; a later change to the memory plan
    can leave a committed point at a TP that no longer holds it (one full-length request's KV
    cache), which the simulator refuses: such a point is left out here, said, not simulated
    (step 1 drawn again places it at the next TP)."""
    from latsim.engines.vllm.memory import DoesNotFitError

    keep, gone = [], []
    for point in points.to_dict("records"):
        try:
            point_deployment(point)
        except DoesNotFitError as err:
            gone.append(f"id {point['id']}: {err}")
            continue
        keep.append(point["id"])
    return points[points["id"].isin(keep)], gone


def run(points: pd.DataFrame, out: str | Path, num_requests: int = 300, workers: int = 2, chunk: int = 4) -> int:
    """Simulate the points not yet under ``out`` that still fit their GPUs (:func:`fitting`; the
    others are named on stderr); returns how many were simulated now."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    todo, gone = fitting(points[~points["id"].isin(done_ids(out))])
    if gone:
        print(f"{len(gone)} points no longer fit their GPUs at their TP and are left out "
              f"(draw step 1 again to place them): " + "; ".join(gone[:3]), file=sys.stderr)
    jobs = [(c, num_requests) for c in _chunks(todo, chunk)]
    if workers <= 1:
        results: Iterator[list[dict]] = map(_chunk_job, jobs)
        for rows in results:
            _write_part(out, rows)
        return len(todo)
    with multiprocessing.get_context("spawn").Pool(workers) as pool:
        for rows in pool.imap_unordered(_chunk_job, jobs):
            _write_part(out, rows)
    return len(todo)


def _write_part(out: Path, rows: list[dict]) -> None:
    """Write one chunk as ``part-<first id>.parquet``; a name already taken (a folder whose parts
    were edited by hand) gets the next free ``-<n>`` suffix, so no finished row is overwritten."""
    frame = pd.DataFrame(rows)
    stem = f"part-{int(frame['id'].min()):06d}"
    path, n = out / f"{stem}.parquet", 1
    while path.exists():
        path, n = out / f"{stem}-{n}.parquet", n + 1
    atomic_write(path, lambda f: frame.to_parquet(f, index=False))
    print(f"{out}: ids {frame['id'].min()}..{frame['id'].max()} "
          f"({frame['sim_seconds'].sum():.1f} s simulated)", flush=True)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("points")
    parser.add_argument("--out", required=True)
    parser.add_argument("--num-requests", type=int, default=300)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--limit", type=int, default=None, help="Only the first N points (a smoke run)")
    parser.add_argument("--seed-offset", type=int, default=0,
                        help="Add this to every point's seed: a repeat run of the same points, for the noise floor")
    args = parser.parse_args(argv)
    points = read_points(args.points)
    points["seed"] = points["seed"] + args.seed_offset
    if args.limit is not None:
        points = points.head(args.limit)
    n = run(points, args.out, args.num_requests, args.workers)
    print(f"simulated {n} points into {args.out}")


if __name__ == "__main__":
    main()
