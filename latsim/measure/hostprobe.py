"""The engine host's CPU speed while a level runs, measured beside the engine.

A host-bound engine (a small model whose steps are mostly Python) is only as fast as the CPU
it gets.  On a shared or virtualised machine that speed changes while a run goes on, and the
latencies with it; nothing in the token times says whether the engine or its host changed.
:class:`HostProbe` runs a separate process that, every ``interval_s``:

- finds the watched tree's busiest thread over the last interval (the engine's scheduling
  loop: ``hot_share`` of the interval on a CPU) and the CPU it last ran on (``cpu``), moves
  itself onto that CPU and times a fixed pure-Python workload there in thread CPU time
  (``probe_s``: the same work each time, so its CPU time is the speed that CPU gives one
  Python thread now; time spent preempted is not counted), then once more on any other CPU
  (``other_s``);
- reads ``/proc/stat`` for the whole machine's busy and steal fractions over the interval
  (steal: time the hypervisor gave this machine's CPUs to someone else);
- sums ``/proc/<pid>/task/*/schedstat`` over the watched process and its descendants (the
  engine's processes): CPU seconds run and seconds spent runnable but waiting for a CPU.

The series and its summary go into the level's ``meta.json`` (``host_probe``).  Times are
seconds since the probe started, which is just before the level's clock starts.  Off Linux
the ``/proc`` columns are empty (``None``); the workload timing works anywhere.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

COLUMNS = ("t_s", "probe_s", "other_s", "cpu", "hot_tid", "hot_share", "busy", "steal", "run_s", "wait_s")
DEFAULT_INTERVAL_S = 0.1
DEFAULT_WORK = 20_000
ALL_CPUS = frozenset(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else frozenset()
SLOW_RATIO = 1.3  # a sample this much slower than the baseline counts as slow
Thread = tuple[int, int]  # (pid, tid)


def workload(n: int) -> int:
    """A fixed amount of interpreter work (integer arithmetic in a loop)."""
    acc = 0
    for i in range(n):
        acc += i * i % 7
    return acc


def time_workload(n: int) -> float:
    """CPU seconds of this thread that one :func:`workload` of size ``n`` takes now."""
    t0 = time.thread_time()
    workload(n)
    return time.thread_time() - t0


def baseline_s(n: int = DEFAULT_WORK, repeats: int = 50) -> float:
    """The workload's median duration over ``repeats`` back-to-back runs (a reference speed,
    taken while the machine is quiet, e.g. before an engine starts)."""
    return float(np.median([time_workload(n) for _ in range(repeats)]))


def host_speed(seconds: float = 3.0, work: int = DEFAULT_WORK) -> dict[str, float]:
    """This machine's CPU speed relative to the host latsim's engine CPU terms describe: the
    workload timed back to back for ``seconds`` on this thread, and the reference time
    (:func:`~latsim.costmodel.host.reference_probe_s`) over its median.  ``speed_low`` and
    ``speed_high`` come from the 90th and 10th percentile times (a CPU whose clock changes
    while it runs shows a wide range)."""
    from latsim.engines.vllm.host_terms import reference_probe_s

    if not 0.0 < seconds <= 600.0:
        raise ValueError(f"seconds must be in (0, 600], got {seconds!r}")
    times: list[float] = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end or len(times) < 5:
        times.append(time_workload(work))
    p10, p50, p90 = (float(x) for x in np.percentile(times, [10, 50, 90]))
    ref = reference_probe_s()
    return {"samples": len(times), "p10_s": p10, "p50_s": p50, "p90_s": p90, "reference_s": ref,
            "host_speed": ref / p50, "speed_low": ref / p90, "speed_high": ref / p10}


# ------------------------------------------------------------------------------- /proc reads


def cpu_times() -> tuple[int, int, int] | None:
    """(total, idle, steal) jiffies of all CPUs from ``/proc/stat``; ``None`` where absent."""
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    except (OSError, IndexError):
        return None
    values = [int(v) for v in fields[:8]] + [0] * (8 - len(fields[:8]))
    idle = values[3] + values[4]
    return sum(values), idle, values[7]


def descendants(pid: int) -> list[int]:
    """``pid`` and every process below it, from ``/proc/<pid>/task/*/children``."""
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        found.append(p)
        for task in Path(f"/proc/{p}/task").glob("*"):
            try:
                todo.extend(int(c) for c in (task / "children").read_text().split())
            except (OSError, ValueError):
                continue
    return found


def sched_seconds(pids: list[int], exclude: int) -> dict[Thread, tuple[float, float]]:
    """(run, runnable-wait) seconds so far of every thread of ``pids`` but ``exclude``, keyed
    by ``(pid, tid)`` (threads come and go: compare two readings thread by thread)."""
    out = {}
    for p in pids:
        if p == exclude:
            continue
        for task in Path(f"/proc/{p}/task").glob("*"):
            try:
                fields = (task / "schedstat").read_text().split()
            except OSError:
                continue
            out[(p, int(task.name))] = (int(fields[0]) / 1e9, int(fields[1]) / 1e9)
    return out


def thread_deltas(before: dict[Thread, tuple[float, float]],
                  after: dict[Thread, tuple[float, float]]) -> dict[Thread, tuple[float, float]]:
    """(run, wait) seconds of each thread between two :func:`sched_seconds` readings, over the
    threads in both."""
    return {k: (after[k][0] - before[k][0], after[k][1] - before[k][1])
            for k in before.keys() & after.keys()}


def sched_totals(deltas: dict[Thread, tuple[float, float]]) -> tuple[float, float] | None:
    """Summed (run, wait) seconds of :func:`thread_deltas`; ``None`` when no thread is in both."""
    if not deltas:
        return None
    return sum(d[0] for d in deltas.values()), sum(d[1] for d in deltas.values())


def busiest(deltas: dict[Thread, tuple[float, float]]) -> tuple[Thread, float] | None:
    """The thread of :func:`thread_deltas` that ran longest, and its run seconds."""
    if not deltas:
        return None
    thread = max(deltas, key=lambda k: deltas[k][0])
    return thread, deltas[thread][0]


def last_cpu(thread: Thread) -> int | None:
    """The CPU ``(pid, tid)`` last ran on (``/proc/<pid>/task/<tid>/stat`` field 39)."""
    pid, tid = thread
    try:
        stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
        return int(stat.rsplit(")", 1)[1].split()[36])
    except (OSError, IndexError, ValueError):
        return None


def pin_to(cpu: int | None) -> int | None:
    """Move this process onto ``cpu`` (``None`` or unsupported: leave it); the CPU pinned."""
    if cpu is None or not hasattr(os, "sched_setaffinity"):
        return None
    try:
        os.sched_setaffinity(0, {cpu})
    except OSError:
        return None
    return cpu


# ------------------------------------------------------------------------------ the sampler


def machine_fractions(before: tuple[int, int, int] | None,
                      after: tuple[int, int, int] | None) -> tuple[float | None, float | None]:
    """(busy, steal) fractions of all CPUs between two :func:`cpu_times` readings."""
    if before is None or after is None or after[0] <= before[0]:
        return None, None
    total = after[0] - before[0]
    return 1 - (after[1] - before[1]) / total, (after[2] - before[2]) / total


def probe_cpus(hot: tuple[Thread, float] | None, work: int) -> tuple[float, float | None, int | None]:
    """Time the workload on the CPU ``hot``'s thread last ran on, then on any other CPU:
    (probe CPU seconds, other CPU seconds, the CPU).  Without a hot thread (or where pinning is
    not possible) one timing wherever the probe runs."""
    pinned = pin_to(last_cpu(hot[0])) if hot else None
    probe = time_workload(work)
    if pinned is None or len(ALL_CPUS) < 2:
        return probe, None, pinned
    os.sched_setaffinity(0, ALL_CPUS - {pinned})
    return probe, time_workload(work), pinned


def samples(interval_s: float, work: int, watch: int | None, stop: list[bool]) -> Iterator[list[Any]]:
    """Yield one row of :data:`COLUMNS` now and every ``interval_s`` after; once ``stop[0]`` is
    set, one last row (the end of the interval the stop fell in), then stop."""
    start = last_t = tick = time.perf_counter()
    last_times = cpu_times()
    last_sched: dict[Thread, tuple[float, float]] = {}
    me, hot = os.getpid(), None
    while True:
        stopping = stop[0]
        probe, other, pinned = probe_cpus(hot, work)
        times = cpu_times()
        busy, steal = machine_fractions(last_times, times)
        sched = sched_seconds(descendants(watch), me) if watch else {}
        deltas = thread_deltas(last_sched, sched)
        totals, hot = sched_totals(deltas), busiest(deltas)
        now = time.perf_counter()
        share = hot[1] / (now - last_t) if hot else None
        hot_tid = hot[0][1] if hot else None
        last_times, last_sched, last_t = times, sched, now
        yield [now - start, probe, other, pinned, hot_tid, share, busy, steal, *(totals or (None, None))]
        if stopping:
            return
        tick += interval_s
        time.sleep(max(0.0, tick - time.perf_counter()))


def _main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="host probe sampler (started by HostProbe)")
    ap.add_argument("--interval", type=float, default=DEFAULT_INTERVAL_S)
    ap.add_argument("--work", type=int, default=DEFAULT_WORK)
    ap.add_argument("--watch", type=int, default=None)
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    stop = [False]
    signal.signal(signal.SIGTERM, lambda *_: stop.__setitem__(0, True))
    with open(args.out, "w", buffering=1) as fh:
        for row in samples(args.interval, args.work, args.watch, stop):
            fh.write(",".join("" if v is None else str(v) if isinstance(v, int) else f"{v:.6g}"
                              for v in row) + "\n")


# --------------------------------------------------------------------------- the context


class HostProbe:
    """Context manager: ``with HostProbe(baseline) as p: ...``, then ``p.result()``.

    ``baseline`` is :func:`baseline_s` taken earlier on the same machine (``None``: the
    summary has no ratios).  ``watch`` is the pid whose process tree is followed (default:
    this process, whose children are the engine's processes).

    Entering returns once the sampler has written its first row (so the series starts before
    the block, however long the sampler took to start); leaving takes one last row, so even
    an empty block has two.  Neither depends on how fast this machine is.
    """

    START_TIMEOUT_S = 120.0
    """How long entering waits for the sampler's first row before giving up (RuntimeError)."""

    def __init__(self, baseline: float | None = None, interval_s: float = DEFAULT_INTERVAL_S,
                 work: int = DEFAULT_WORK, watch: int | None = None) -> None:
        self.baseline, self.interval_s, self.work = baseline, interval_s, work
        self.watch = os.getpid() if watch is None else watch
        self.rows: list[list[float | None]] = []
        self._proc: subprocess.Popen[bytes] | None = None
        self._path: Path | None = None

    def __enter__(self) -> HostProbe:
        fd, name = tempfile.mkstemp(prefix="latsim-probe-", suffix=".csv")
        os.close(fd)
        self._path = Path(name)
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "latsim.measure.hostprobe", "--interval", str(self.interval_s),
             "--work", str(self.work), "--watch", str(self.watch), "--out", name],
            stdin=subprocess.DEVNULL)
        try:
            self.wait_rows(1, self.START_TIMEOUT_S)
        except BaseException:
            self._proc.kill()
            self._proc.wait()
            self._path.unlink(missing_ok=True)
            raise
        return self

    def rows_so_far(self) -> list[list[float | None]]:
        """The rows the sampler has written so far (inside the ``with`` block)."""
        assert self._path is not None, "the probe is not running"
        return list(parse_rows(self._path.read_text()))

    def wait_rows(self, count: int, timeout_s: float = START_TIMEOUT_S) -> list[list[float | None]]:
        """Block until the sampler has written ``count`` rows; the rows.  RuntimeError if the
        sampler exits first or ``timeout_s`` passes (a guard, not a timing assumption)."""
        assert self._proc is not None, "the probe is not running"
        deadline = time.monotonic() + timeout_s
        while len(rows := self.rows_so_far()) < count:
            if self._proc.poll() is not None:
                raise RuntimeError(f"host probe sampler exited with status {self._proc.returncode} "
                                   f"after {len(rows)} of {count} rows")
            if time.monotonic() > deadline:
                raise RuntimeError(f"host probe sampler wrote {len(rows)} of {count} rows in {timeout_s:.0f} s")
            time.sleep(0.01)
        return rows

    def __exit__(self, *exc: object) -> None:
        assert self._proc is not None and self._path is not None
        self._proc.send_signal(signal.SIGTERM)
        try:
            self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self.rows = list(parse_rows(self._path.read_text()))
        self._path.unlink(missing_ok=True)

    def result(self) -> dict[str, Any]:
        """The ``host_probe`` entry of ``meta.json``: settings, summary and the series."""
        return {"interval_s": self.interval_s, "work": self.work, "baseline_s": self.baseline,
                "summary": summarize(self.rows, self.baseline), "columns": list(COLUMNS),
                "rows": self.rows}


def parse_rows(text: str) -> Iterator[list[float | None]]:
    """Rows of the sampler's file; a torn last line (the sampler was stopped mid-write) is
    skipped."""
    for line in text.splitlines():
        cells = line.split(",")
        if len(cells) != len(COLUMNS):
            continue
        try:
            yield [float(c) if c else None for c in cells]
        except ValueError:
            continue


def summarize(rows: list[list[float | None]], baseline: float | None) -> dict[str, Any]:
    """Median and mean probe time, the median's ratio to ``baseline`` and the fraction of slow samples
    (ratio above :data:`SLOW_RATIO`), mean busy and steal fractions, and the watched
    processes' runnable-wait share of their CPU time."""
    if not rows:
        return {"samples": 0}
    table = np.array([[np.nan if v is None else v for v in r] for r in rows], dtype=float)
    probe = table[:, 1]
    out: dict[str, Any] = {"samples": len(rows), "probe_p50_s": float(np.median(probe)),
                           "probe_mean_s": float(np.mean(probe))}
    if baseline:
        out["probe_ratio_p50"] = float(np.median(probe) / baseline)
        out["slow_fraction"] = float(np.mean(probe > SLOW_RATIO * baseline))
    for name, col in (("busy_mean", 6), ("steal_mean", 7)):
        values = table[:, col][~np.isnan(table[:, col])]
        out[name] = float(values.mean()) if len(values) else None
    run, wait = np.nansum(table[:, 8]), np.nansum(table[:, 9])
    out["wait_per_run"] = float(wait / run) if run > 0 else None
    return out


if __name__ == "__main__":
    _main()
