"""Fit the front end's input path (``input_s``, ``input_window_s``) on the bursts' engine-core arrival stamps.

    python scripts/fit_input_path.py data/validation [--train h200] [--write]

A burst's requests leave the client within tens of milliseconds, yet vLLM's core queues all but
the first few only once the sending is over, or in two to four batches for the longest bursts
(``engine_queued_s``, the core's stamp, kept by the live driver since the thirty-seventh
session): the front end's event loop hands requests to the core in a later turn than it takes
them in, so a stream of arrivals holds the hand-overs back (:mod:`latsim.sim.frontend`).  Per
burst level with those stamps this compares, request by request, the measured hold-back (queued
less sent, less the level's least, which is the first request's: it reaches the core alone, and
its path, every request's, stays in ``frontend_s``) with the model's
(:func:`~latsim.sim.frontend.engine_arrivals` of the sent times at ``input_s / host speed``, the
speed from the level's host probe: the work is the front end's CPU time; the window is not
scaled), and scans both terms (:data:`GRID_S` x :data:`WINDOWS_S`): the pair whose median over
the training levels (``--train``: the GPU whose bursts train; the others are held out) of each
level's mean |model - measured| is least.  Prints the scan and, per level, the send span and the
measured and modelled median hold-back at the fitted pair; ``--write`` puts both into the
``calibrated`` entry of the host-terms file (``--yaml``) with their provenance.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np

from latsim.engines.vllm import host_write
from latsim.measure.records import load_run
from latsim.provenance import display_path, round_decimals, run_inputs, significant
from latsim.sim.frontend import engine_arrivals, window_of
from latsim.validate.compare import find_runs, recorded_device, run_host_speed

GRID_S = np.round(np.arange(2e-4, 1.0e-3 + 1e-9, 2e-5), 8)
"""The values of ``input_s`` scanned (0.2-1.0 ms in 20 us steps; 0, no hold-back, is reported beside)."""
WINDOWS_S = (0.0, 0.04, 0.06, 0.08, 0.1, 0.12, 0.15, 0.2, 0.3)
"""The values of ``input_window_s`` scanned (0: a busy period holds its hand-overs to its end)."""
DECIMALS = 8
"""Decimal places of the written terms (0.01 us)."""


def burst_level(run: Path) -> dict[str, object] | None:
    """A burst level's sent times and measured hold-back (seconds, ascending by sent), host
    speed and GPU; ``None`` for another load or a run without the core's queue stamps."""
    m = load_run(run)
    if (m.meta.get("load") or {}).get("mode") != "burst":
        return None
    req = m.requests
    ok = req[req["sent_s"].notna() & req["engine_queued_s"].notna()].sort_values("sent_s")
    if len(ok) < 20:
        return None
    sent = ok["sent_s"].to_numpy(dtype=float)
    delay = ok["engine_queued_s"].to_numpy(dtype=float) - sent
    return {"run": run, "sent": sent, "held": delay - delay.min(), "speed": run_host_speed(m.meta, "probe"),
            "gpu": recorded_device(m.meta) or "unknown"}


def level_error(level: dict, input_s: float, window_s: float) -> float:
    """Mean |modelled - measured| hold-back (seconds) of one level at ``input_s`` (reference host)
    and ``window_s``."""
    held = modelled_hold_back(level["sent"], input_s / level["speed"], window_s)
    return float(np.mean(np.abs(held - level["held"])))


def modelled_hold_back(sent: np.ndarray, work_s: float, window_s: float) -> np.ndarray:
    """The model's hold-back of requests sent at ``sent`` with ``work_s`` seconds of front-end work
    each, hand-overs held at most ``window_s`` (0: no limit): ready less sent, a request alone is
    not held back."""
    return engine_arrivals(sent, work_s, window_s=window_of(window_s)) - sent


def scan(levels: list[dict]) -> np.ndarray:
    """The median over ``levels`` of :func:`level_error` at every (``input_s``, window) of
    :data:`GRID_S` x :data:`WINDOWS_S`."""
    return np.array([[np.median([level_error(lv, w, win) for lv in levels]) for win in WINDOWS_S] for w in GRID_S])


def lone_error(levels: list[dict]) -> float:
    """The median over ``levels`` of the mean |measured hold-back|: the error of no hold-back."""
    return float(np.median([np.mean(np.abs(lv["held"])) for lv in levels]))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root", type=Path, help="a folder of measured levels (data/validation)")
    ap.add_argument("--train", default="h200", help="the GPU whose bursts train (the others are held out)")
    ap.add_argument("--yaml", type=Path, default=host_write.shipped_path(), help="the host-terms file")
    ap.add_argument("--write", action="store_true", help="write input_s and input_window_s into --yaml")
    args = ap.parse_args(argv)
    try:
        runs = find_runs(args.root)
    except ValueError as exc:
        ap.error(str(exc))
    levels = [lv for lv in (burst_level(r) for r in runs) if lv is not None]
    train = [lv for lv in levels if lv["gpu"] == args.train]
    held = [lv for lv in levels if lv["gpu"] != args.train]
    if not train:
        gpus = ", ".join(sorted({str(lv["gpu"]) for lv in levels})) or "none"
        ap.error(f"--train {args.train!r}: no burst level with the core's queue stamps measured on it under "
                 f"{display_path(args.root)} (GPUs there: {gpus})")
    train_err = scan(train)
    held_err = scan(held) if held else np.full(train_err.shape, np.nan)
    i, j = np.unravel_index(int(np.argmin(train_err)), train_err.shape)
    best, window = float(GRID_S[i]), float(WINDOWS_S[j])
    zero = (lone_error(train), lone_error(held) if held else math.nan)
    print("median |error| of the hold-back (ms), training / held out, per input_s (rows) "
          "and window (columns, 0: none):")
    print("input_s  " + "".join(f"{w * 1e3:>12.0f}" for w in WINDOWS_S))
    for k in range(0, len(GRID_S), 5):
        print(f"{GRID_S[k] * 1e3:5.2f} ms " + "".join(
            f"{train_err[k, m] * 1e3:6.1f}/{held_err[k, m] * 1e3:5.1f}" for m in range(len(WINDOWS_S))))
    print(f"fitted input_s {best * 1e3:.2f} ms, window {window * 1e3:.0f} ms ({len(train)} training levels on "
          f"{args.train}, {len(held)} held out): training {train_err[i, j] * 1e3:.1f} ms, held out "
          f"{held_err[i, j] * 1e3:.1f} ms; without a hold-back {zero[0] * 1e3:.1f} / {zero[1] * 1e3:.1f} ms")
    for lv in levels:
        sent = lv["sent"]
        modelled = modelled_hold_back(sent, best / lv["speed"], window)
        print(f"  {display_path(lv['run']):64s} speed {lv['speed']:4.2f}  "
              f"sent over {(sent[-1] - sent[0]) * 1e3:6.1f} ms  "
              f"held back median {np.median(lv['held']) * 1e3:6.1f} ms, modelled {np.median(modelled) * 1e3:6.1f}")
    if args.write:
        errors = {"training": float(train_err[i, j]), "training_without": zero[0]}
        if held:
            errors |= {"held_out": float(held_err[i, j]), "held_out_without": zero[1]}
        results = significant({"input_s": best, "input_window_s": window, "training_levels": len(train),
                               "held_out_levels": len(held), "median_abs_error_s": errors}, 6)
        inputs = {"train_gpu": args.train, "training_runs": run_inputs(Path(str(lv["run"])) for lv in train),
                  "held_out_runs": run_inputs(Path(str(lv["run"])) for lv in held),
                  "input_s_grid": [float(GRID_S[0]), float(GRID_S[-1]), round(float(GRID_S[1] - GRID_S[0]), 8)],
                  "windows_s": list(WINDOWS_S), "decimals": DECIMALS}
        terms = {"input_s": round_decimals(best, DECIMALS), "input_window_s": round_decimals(window, DECIMALS)}
        host_write.write_or_exit(args.yaml, terms, inputs, results, script="fit_input_path")


if __name__ == "__main__":
    main()
