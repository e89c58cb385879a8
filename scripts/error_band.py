"""Summarise the model's signed errors on the held-out live levels into the band ``latsim predict`` shows.

    python scripts/error_band.py [ROOT] [--device h200] [--fit REGEX] [--write]
    python scripts/error_band.py --device h100 --write     # the H100's band (its own live runs)

Replays every Poisson level under ROOT (default ``data/validation``) measured at TP=1, less the
levels the fits saw (``--fit``, a regular expression searched in the level's path) and the
client-bound ones, at the default host speed (``latsim validate``'s replay,
:func:`latsim.validate.compare.compare_run`), and prints, per load band, pace (the replay's
:func:`latsim.validate.error_band.pace_of`: its decode step's host/GPU ratio, or the launch pace
of a prompt step whose launch outlasts its kernels) and metric, the count, the median
signed error and the band meant to hold 80 % of a new configuration's errors, with the quantile
it was cut at and the share of a left-out configuration's levels inside it
(:mod:`latsim.validate.error_band`), as a markdown table; then the same for the levels that
kept the host probe, replayed at their measured host speed (``--host-speed probe``: the band of
a prediction given the host's speed).  ``--write`` puts both into
``latsim/data/engines/vllm/error_band.json`` with their provenance (the levels' digests, the
command, the commit) and the predictions of one level per cell (``sentinels``), by which a test
tells when the model has changed since (then run this again); ``--table CSV`` keeps the
per-level errors with each level's host ratio; ``--holdout REGEX`` also builds the bands without
the levels it matches and counts those inside them (a check on levels the band never saw, e.g.
``'h200-s2[3-9]/'``, the latest engine starts).  About eight minutes on two cores.

``--device`` picks the GPU: the levels that recorded it (for the H200, also those that recorded
none, taken before the GPU was kept), replayed on it, written to its band file
(:func:`latsim.validate.error_band.band_path`: ``error_band.json`` for the H200,
``error_band-<device>.json`` for another).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import pandas as pd

from latsim.atomic import atomic_write_text
from latsim.measure.records import read_meta
from latsim.provenance import combined_digest, display_path, record, significant
from latsim.validate.compare import (
    client_bound,
    compare_run,
    error_table,
    find_runs,
    host_probe_ms,
    recorded_device,
    replay_deployment,
)
from latsim.validate.error_band import (
    ErrorBand,
    band_measured_on,
    band_path,
    banded,
    describe_inside,
    inside_band,
    load_fraction,
    summarise,
    with_host_ratios,
)

FIT = r"h200-probed-b/llama-3\.1-8b-|h100-s48/qwen3-30b-a3b-|h100-s51/(qwen3-30b-a3b|qwen1\.5-moe-a2\.7b)-"
"""The levels the shipped fits saw (``scripts/fit_engine_host.py``'s training runs, and the
shared-expert launch's, ``scripts/launch_gaps.py --shared``)."""
ENGINE = "vllm-0.25.1"


def held_out_levels(root: Path, device: str, fit: str) -> list[Path]:
    """The Poisson levels under ``root`` measured on ``device`` (:func:`band_measured_on`) at TP=1,
    not client-bound, whose path ``fit`` does not match."""
    pattern = re.compile(fit)
    keep = []
    for level in find_runs(root):
        if load_fraction(level.name) is None or pattern.search(level.as_posix()):
            continue
        meta = read_meta(level)
        if not band_measured_on(recorded_device(meta), device):
            continue
        if client_bound(meta) or replay_deployment(meta, device).tp != 1:
            continue
        keep.append(level)
    return keep


def sentinels(levels: list, table) -> dict[str, dict[str, float]]:
    """``{level path: {"ttft_ms p50": predicted, ...}}`` for the first level of each load band and
    pace (:func:`latsim.validate.error_band.banded` of ``table``), so that a change to the
    model in any of them shows."""
    cells = banded(table).drop_duplicates(["band", "pace"])
    by_run = {lv.run_dir: lv for lv in levels}
    return {display_path(run): {f"{m} {s}": float(by_run[run].predicted[m][s])
                                for m in ("ttft_ms", "tpot_ms") for s in ("p50", "p99")}
            for run in cells["run"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root", nargs="?", type=Path, default=Path("data/validation"))
    ap.add_argument("--device", default="h200")
    ap.add_argument("--fit", default=FIT, help="regular expression of the levels the fits saw (left out)")
    ap.add_argument("--write", action="store_true", help="write the device's band file (error_band.json for h200, "
                    "error_band-DEVICE.json for another)")
    ap.add_argument("--table", type=Path, help="also write the per-level errors (with host_ratio) as CSV here")
    ap.add_argument("--holdout", help="also build the bands without the levels this regular expression matches "
                                      "and count those levels inside them (e.g. the latest engine starts)")
    args = ap.parse_args()
    if not args.root.is_dir():
        ap.error(f"{args.root} is not a folder of measured runs")
    paths = held_out_levels(args.root, args.device, args.fit)
    if not paths:
        ap.error(f"no held-out Poisson level at TP=1 under {args.root}")
    levels, table = replay(paths, args.device, 1.0)
    kinds = {str(lv.predicted.get("cost_model")) for lv in levels}
    if len(kinds) != 1:
        raise SystemExit(f"the levels were priced by more than one cost model ({sorted(kinds)}); one band needs one")
    probed = [p for p in paths if host_probe_ms(read_meta(p)) is not None]
    _, probed_table = replay(probed, args.device, "probe")
    if args.table:
        both = pd.concat([table.assign(host_speed="1"), probed_table.assign(host_speed="probe")], ignore_index=True)
        atomic_write_text(args.table, both.to_csv(index=False))
    bands, known_host = summarise(table), summarise(probed_table)
    print(f"at the default host speed, {len(paths)} levels:")
    show(bands)
    print(f"\nat each level's measured host speed, {len(probed)} probed levels:")
    show(known_host)
    if args.holdout:
        for label, errors in (("the default host speed", table), ("the measured host speed", probed_table)):
            print(f"\nheld out {args.holdout!r} at {label}: " + holdout_check(errors, args.holdout, args.device))
    if args.write:
        write(args, paths, probed, bands, known_host, sentinels(levels, table), kinds.pop())


def holdout_check(errors: pd.DataFrame, pattern: str, device: str) -> str:
    """The bands of the levels ``pattern`` does not match, and how many of those it matches fall
    inside their cell's band, per metric (``ttft p50 29/37, ...``)."""
    later = errors["run"].str.contains(pattern, regex=True)
    if not later.any() or later.all():
        raise SystemExit(f"--holdout {pattern!r} must match some levels and leave others")
    band = ErrorBand(engine=ENGINE, device=device, cost_model="-", tp=1, bands=summarise(errors[~later]),
                     levels=int(errors[~later]["run"].nunique()))
    return describe_inside(inside_band(errors[later], band))


def replay(paths: list[Path], device: str, host_speed: float | str) -> tuple[list, pd.DataFrame]:
    """Each level replayed at ``host_speed`` (a number, or ``"probe"``), and their error table with
    each level's pace ratios (``host_ratio``, ``prompt_ratio``) on its replay's host."""
    levels = []
    for k, path in enumerate(paths, 1):
        levels.append(compare_run(path, device, host_speed=host_speed))
        print(f"\r{k}/{len(paths)} levels replayed at host speed {host_speed}", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    return levels, with_host_ratios(error_table(levels), levels, building(device, levels))


def building(device: str, levels: list) -> ErrorBand:
    """The kind of the band being built (``device``, the levels' cost model, TP=1), which decides
    the levels it describes (:func:`latsim.validate.error_band.with_host_ratios`)."""
    kinds = sorted({str(lv.predicted.get("cost_model")) for lv in levels})
    return ErrorBand(engine=ENGINE, device=device, cost_model=kinds[0] if len(kinds) == 1 else "-", tp=1, bands={},
                     levels=0)


def show(bands: dict) -> None:
    """Print the bands as a markdown table: one row per load band, pace and metric."""
    print("| load | pace | metric | levels | configurations | median | band | tail | left-out coverage |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for band, paces in bands.items():
        for pace, metrics in paces.items():
            for key, v in metrics.items():
                cover = "-" if v["coverage"] is None else f"{100 * v['coverage']:.0f} %"
                print(f"| {band} | {pace} | {key.replace('_ms', '')} | {v['levels']} | {v['configurations']} | "
                      f"{100 * v['median']:+.1f} % | {100 * v['low']:+.1f} .. {100 * v['high']:+.1f} % | "
                      f"{v['tail']:.2f} | {cover} |")


def write(args: argparse.Namespace, paths: list[Path], probed: list[Path], bands: dict, known_host: dict,
          kept: dict, cost_model: str) -> None:
    """Write the device's shipped band file (:func:`band_path`) atomically, with its provenance."""
    target = band_path(args.device)
    inputs = {"root": display_path(args.root), "device": args.device, "fit": args.fit,
              "levels": {"count": len(paths), "digest": combined_digest(paths)},
              "probed_levels": {"count": len(probed), "digest": combined_digest(probed)}}
    doc = {"engine": ENGINE, "device": args.device, "cost_model": cost_model, "tp": 1,
           "levels": len(paths), "bands": significant(bands, 4),
           "known_host_levels": len(probed), "known_host": significant(known_host, 4),
           "sentinels": significant(kept, 6),
           "provenance": record(inputs, {"bands": len(bands), "known_host": len(known_host)}, exclude=target)}
    atomic_write_text(target, json.dumps(doc, indent=1) + "\n")
    print(f"wrote {display_path(target)}")


if __name__ == "__main__":
    main()
