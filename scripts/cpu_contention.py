"""Which CPUs slow each other down: the host probe's fixed workload timed on each CPU alone,
then on every pair of CPUs at once, then on all of them at once.

A guest VM's CPUs may be hyperthreads of shared host cores that the guest's topology does not
show; two busy threads on such a pair run slower (about 1.5-2x).  Timed in thread CPU time,
each worker pinned to its CPU, so time sharing does not count, only speed.  (On the lent H200
VM it found no such pairs that held from one run to the next: its CPUs slow down from outside;
data/host/h200/cpu-contention/, docs/validation.md "Repeatability".)

    python scripts/cpu_contention.py --out cpu_contention.json [--reps 20] [--timeline-s 5]

Writes one JSON file (atomically): the guest's topology from /sys, the per-CPU solo medians,
the pair matrix (median time of each side / its solo median), the all-busy ratios, a solo
timeline of the first CPU (to see speed changes nothing in the guest causes), and
:func:`sibling_pairs` read from the matrix.
"""

from __future__ import annotations

import argparse
import itertools
import json
import multiprocessing as mp
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from latsim.atomic import atomic_write_text
from latsim.measure.hostprobe import DEFAULT_WORK, time_workload

SIBLING_RATIO = 1.3  # both sides at least this much slower together than alone: shared core


def _worker(cpu: int, reps: int, work: int, barrier: Any, out: Any) -> None:
    os.sched_setaffinity(0, {cpu})
    time_workload(work)  # warm the interpreter on this CPU
    barrier.wait()
    out.put((cpu, [time_workload(work) for _ in range(reps)]))


def run_together(cpus: Sequence[int], reps: int, work: int) -> dict[int, float]:
    """Median workload time on each CPU of ``cpus`` while all of them run it at once."""
    ctx = mp.get_context("fork")
    barrier, out = ctx.Barrier(len(cpus)), ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(c, reps, work, barrier, out)) for c in cpus]
    for p in procs:
        p.start()
    results = dict(out.get() for _ in procs)
    for p in procs:
        p.join()
    return {cpu: float(np.median(times)) for cpu, times in results.items()}


def timeline(cpu: int, seconds: float, work: int) -> list[list[float]]:
    """``[t_s, workload_s]`` back to back on ``cpu`` for ``seconds`` (this process, re-pinned)."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpu})
    rows, t0 = [], time.perf_counter()
    try:
        while (t := time.perf_counter() - t0) < seconds:
            rows.append([round(t, 4), time_workload(work)])
    finally:
        os.sched_setaffinity(0, before)
    return rows


def topology() -> dict[str, str]:
    """What the guest says about each CPU's core and siblings (empty where /sys lacks it)."""
    info = {}
    for path in sorted(Path("/sys/devices/system/cpu").glob("cpu[0-9]*/topology/thread_siblings_list")):
        info[path.parent.parent.name] = path.read_text().strip()
    return info


def sibling_pairs(pairs: dict[tuple[int, int], tuple[float, float]],
                  threshold: float = SIBLING_RATIO) -> list[tuple[int, int]]:
    """The pairs whose both sides ran at least ``threshold`` times slower together than alone."""
    return sorted(p for p, (a, b) in pairs.items() if min(a, b) >= threshold)


def measure(cpus: Sequence[int], reps: int, work: int, timeline_s: float) -> dict[str, Any]:
    solo = {c: run_together([c], reps, work)[c] for c in cpus}
    pairs: dict[tuple[int, int], tuple[float, float]] = {}
    for a, b in itertools.combinations(cpus, 2):
        t = run_together([a, b], reps, work)
        pairs[(a, b)] = (t[a] / solo[a], t[b] / solo[b])
    busy = run_together(cpus, reps, work)
    return {
        "work": work, "reps": reps, "cpus": list(cpus), "topology": topology(),
        "solo_s": {str(c): v for c, v in solo.items()},
        "pairs": [[a, b, round(ra, 4), round(rb, 4)] for (a, b), (ra, rb) in pairs.items()],
        "all_busy_ratio": {str(c): round(busy[c] / solo[c], 4) for c in cpus},
        "timeline": timeline(cpus[0], timeline_s, work),
        "sibling_pairs": sibling_pairs(pairs),
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--work", type=int, default=DEFAULT_WORK)
    ap.add_argument("--timeline-s", type=float, default=5.0)
    args = ap.parse_args(argv)
    cpus = sorted(os.sched_getaffinity(0))
    result = measure(cpus, args.reps, args.work, args.timeline_s)
    atomic_write_text(Path(args.out), json.dumps(result, indent=1))
    print(f"{len(cpus)} CPUs; sibling pairs (both sides >= {SIBLING_RATIO}x): {result['sibling_pairs']}")
    worst = sorted(result["pairs"], key=lambda r: -min(r[2], r[3]))[:8]
    print("slowest pairs [a, b, ratio a, ratio b]:", worst)
    print("all busy:", result["all_busy_ratio"])


if __name__ == "__main__":
    main()
