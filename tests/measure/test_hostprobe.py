"""HostProbe: a separate process times a fixed workload and reads /proc beside a level."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from latsim.measure.hostprobe import COLUMNS, SLOW_RATIO, HostProbe, baseline_s, host_speed, parse_rows, summarize

LINUX = Path("/proc/stat").is_file()


HOG = """import sys, time
print("ready", flush=True)
sys.stdin.readline()
start = time.process_time()
while time.process_time() - start < 0.6:
    pass
print("done", flush=True)
sys.stdin.readline()
"""
"""A child that burns 0.6 s of CPU time (however long that takes on a busy machine) between two
lines on stdin, and stays alive after it until told to exit."""


def test_probe_records_a_series_and_follows_the_watched_tree() -> None:
    base = baseline_s(repeats=5)
    with HostProbe(base, interval_s=0.02) as probe:
        hog = subprocess.Popen([sys.executable, "-c", HOG], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert hog.stdin is not None and hog.stdout is not None
        assert hog.stdout.readline() == "ready\n"
        probe.wait_rows(len(probe.rows_so_far()) + 2)  # a reading has seen the idle hog
        hog.stdin.write("go\n")
        hog.stdin.flush()
        assert hog.stdout.readline() == "done\n"
        probe.wait_rows(len(probe.rows_so_far()) + 2)  # a reading after the burn, while it lives
        hog.stdin.close()
        hog.wait()
    result = probe.result()
    rows = np.array([[np.nan if v is None else v for v in r] for r in result["rows"]])
    assert result["columns"] == list(COLUMNS) and len(rows) >= 5
    assert np.all(np.diff(rows[:, 0]) > 0) and np.all(rows[:, 1] > 0)
    assert result["summary"]["samples"] == len(rows) and result["baseline_s"] == base
    if LINUX:
        assert np.nanmin(rows[:, 6]) >= 0.0 and np.nanmax(rows[:, 6]) <= 1.0
        # the busy child was a descendant of this process, seen before and after its burn: all
        # of its CPU time is counted, it was the busiest thread (its tid is its pid) while it
        # ran, and the probe moved onto the CPU it last ran on in a next sample
        assert np.nansum(rows[:, 8]) >= 0.6
        hot = np.flatnonzero((rows[:-1, 4] == hog.pid) & (rows[:-1, 5] > 0))
        assert len(hot) and np.isfinite(rows[hot + 1, 3]).any()


def test_the_series_covers_the_block_however_short() -> None:
    with HostProbe(None, interval_s=0.05) as probe:
        pass  # the sampler has started (its first row is written) before the block
    rows = probe.result()["rows"]
    assert len(rows) >= 2 and probe.result()["summary"]["samples"] == len(rows)


def test_summary_counts_slow_samples_against_the_baseline() -> None:
    fast, slow = 0.001, 0.001 * (SLOW_RATIO + 0.5)
    rows = [[i * 0.1, fast if i % 4 else slow, fast, 3, 101, 0.9, 0.5, 0.02, 0.1, 0.01] for i in range(40)]
    s = summarize(rows, baseline=0.001)
    assert s["slow_fraction"] == pytest.approx(0.25)
    assert s["probe_ratio_p50"] == pytest.approx(1.0)
    assert s["probe_p50_s"] == pytest.approx(fast) and s["probe_mean_s"] == pytest.approx(0.75 * fast + 0.25 * slow)
    assert s["steal_mean"] == pytest.approx(0.02) and s["wait_per_run"] == pytest.approx(0.1)
    assert "slow_fraction" not in summarize(rows, baseline=None)
    assert summarize([], 0.001) == {"samples": 0}


def test_missing_proc_columns_and_torn_lines() -> None:
    text = "0.1,0.001,,,,,,,,\n0.2,0.002,0.001,1,7,0.9,0.5,0.0,0.1,0.0\n0.3,0.0"
    rows = list(parse_rows(text))
    assert rows == [[0.1, 0.001] + [None] * 8, [0.2, 0.002, 0.001, 1, 7, 0.9, 0.5, 0.0, 0.1, 0.0]]
    s = summarize(rows, 0.001)
    assert s["busy_mean"] == pytest.approx(0.5) and s["slow_fraction"] == pytest.approx(0.5)


def test_probe_stops_promptly() -> None:
    with HostProbe(None, interval_s=0.5):
        t0 = time.perf_counter()  # leaving takes one last sample, within an interval
    assert time.perf_counter() - t0 < 5


def test_threads_that_exit_between_readings_are_left_out() -> None:
    from latsim.measure.hostprobe import busiest, sched_totals, thread_deltas
    before = {(1, 1): (1.0, 0.1), (1, 2): (5.0, 0.5), (1, 4): (2.0, 0.0)}
    after = {(1, 1): (1.2, 0.15), (1, 3): (0.1, 0.0), (1, 4): (2.1, 0.0)}
    assert sched_totals(thread_deltas(before, after)) == pytest.approx((0.3, 0.05))
    assert sched_totals(thread_deltas({}, after)) is None
    thread, run_s = busiest(thread_deltas(before, after))
    assert thread == (1, 1) and run_s == pytest.approx(0.2)
    assert busiest({}) is None


def test_machine_fractions_from_two_readings() -> None:
    from latsim.measure.hostprobe import machine_fractions
    assert machine_fractions((1000, 400, 10), (2000, 900, 60)) == pytest.approx((0.5, 0.05))
    assert machine_fractions(None, (2000, 900, 60)) == (None, None)
    assert machine_fractions((1000, 400, 10), (1000, 400, 10)) == (None, None)


def test_host_speed_times_this_machine_against_the_reference() -> None:
    r = host_speed(0.05, work=2000)
    assert r["samples"] >= 5 and r["p10_s"] <= r["p50_s"] <= r["p90_s"]
    assert r["speed_low"] <= r["host_speed"] <= r["speed_high"]
    assert r["host_speed"] == pytest.approx(r["reference_s"] / r["p50_s"])
