"""A model's graph-less launch against the fitted model's, from the held gaps of live runs.

    python scripts/launch_by_model.py data/validation [--write]

A step past the CUDA-graph limit is launched kernel by kernel, and the engine holds the step
before it until that launch is done (``scripts/launch_gaps.py``).  The launch's CPU time per
layer is not the same for every model: measured over the same machines, Qwen2.5-7B's runs
about a quarter longer per layer than Llama-3.1-8B's, on both GPUs' hosts.  The host terms'
``launch_layer_s`` is fitted with Llama-3.1-8B (:data:`FIT_MODEL`; ``scripts/fit_engine_host.py``
holds it beside the other terms), so a model's launch is priced as that term times its
**ratio**: its per-layer launch over the fitted model's, measured on the same kind of machine.

Every probed, single-process run under the roots (``f*`` levels, long-prompt and MoE models left
out: a long prompt's step is paced by its GPU time) gives its held launches per layer, less the
step's host work, in the reference host's CPU seconds (the run's own host probe,
:func:`latsim.validate.compare.run_host_speed`).  Per engine start (a run's top folder) the
median; the fitted model's median over all of its runs on one machine kind (its folder's prefix,
``h200`` or ``h100``) divides each start of the same kind.  A model's ratio is the median of its
starts' ratios.  It is shipped (``--write``: ``latsim/data/engines/vllm/launch_by_model.json``)
only where the measurement is the launch and stands out from the fitted model's own spread:

* at least :data:`MIN_BOUND_SHARE` of its held launches ended after the GPU had caught up
  (tail at most 5 ms: the launch, not the GPU, set the gap; a large model's gaps are its GPU's);
* at least :data:`MIN_STARTS` engine starts;
* its ratio outside the range of the fitted model's own starts' ratios (the start-to-start
  spread of one model: a ratio inside it is not told apart from 1).

Each shipped entry records its starts' ratios and the ratio left out one start at a time, so a
reader sees that no single start sets it.  Models not shipped are listed under ``measured``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import numpy as np
from launch_gaps import LAUNCH_BOUND_TAIL_S, gaps, per_layer_launch

from latsim.atomic import atomic_write_text
from latsim.catalog.hf_config import parse_hf_config
from latsim.engines.vllm import host_write
from latsim.engines.vllm.host_terms import LAUNCH_BY_MODEL, read_host_terms
from latsim.measure.records import read_meta
from latsim.provenance import record, run_inputs, same_computation, significant
from latsim.validate.compare import find_runs, host_probe_ms, run_host_speed

FIT_MODEL = "llama-3.1-8b"
"""The model ``launch_layer_s`` is fitted with (``scripts/fit_engine_host.py --dense-train``)."""
MIN_BOUND_SHARE = 0.10
MIN_STARTS = 2
DIGITS = 3


def eligible(run: Path, meta: dict) -> bool:
    """A Poisson level (``meta``: its ``meta.json``) of a dense model with a host probe, not a
    long-prompt run."""
    model = meta.get("model") or {}
    if not run.name.startswith("f") or "long" in run.parent.name or host_probe_ms(meta) is None \
            or not model.get("name") or not model.get("config"):
        return False
    try:
        return parse_hf_config(model["config"], str(model["name"])).num_moe_layers == 0
    except ValueError:
        return False


def per_layer(run: Path, meta: dict, step_s: float, seq_s: float) -> tuple[np.ndarray, np.ndarray] | None:
    """The run's held launches per layer in reference-host seconds (less the step's host work,
    :func:`launch_gaps.per_layer_launch`) and their tails; None when the run's model ran in worker
    processes."""
    try:
        launch, tail, seqs, layers = gaps(run)
    except SystemExit:
        return None
    speed = run_host_speed(meta, "probe")
    return per_layer_launch(launch, seqs, layers, step_s / speed, seq_s / speed) * speed, tail


def measure(runs: list[Path], step_s: float, seq_s: float) -> dict[str, dict]:
    """Per model, over the :func:`eligible` of ``runs``: its starts' ratios, launch-bound share,
    runs and held launches (module note)."""
    values: dict[tuple[str, str, str], list[np.ndarray]] = defaultdict(list)
    tails: dict[str, list[np.ndarray]] = defaultdict(list)
    used: dict[str, list[Path]] = defaultdict(list)
    for run in runs:
        meta = read_meta(run)
        if not eligible(run, meta):
            continue
        got = per_layer(run, meta, step_s, seq_s)
        if got is None or len(got[0]) == 0:
            continue
        start = run.parent.parent.name
        model = str(meta["model"]["name"])
        values[(start.split("-")[0], model, start)].append(got[0])
        tails[model].append(got[1])
        used[model].append(run)
    fit = {kind: float(np.median(np.concatenate([v for (k, m, _), vs in values.items() for v in vs
                                                 if k == kind and m == FIT_MODEL])))
           for kind in {k for k, m, _ in values if m == FIT_MODEL}}
    out: dict[str, dict] = {}
    for model in sorted(tails):
        starts = {start: float(np.median(np.concatenate(vs))) / fit[kind]
                  for (kind, m, start), vs in sorted(values.items()) if m == model and kind in fit}
        if not starts:
            continue
        tail = np.concatenate(tails[model])
        out[model] = {"ratio": float(np.median(list(starts.values()))), "starts": starts,
                      "launch_bound_share": float(np.mean(tail <= LAUNCH_BOUND_TAIL_S)),
                      "held_launches": len(tail), "runs": used[model]}
    return out


def shipped(models: dict[str, dict]) -> dict[str, dict]:
    """The entries that pass the module note's three tests, each with its leave-one-start-out ratios."""
    fit_starts = list(models[FIT_MODEL]["starts"].values())
    lo, hi = min(fit_starts), max(fit_starts)
    keep = {}
    for name, m in models.items():
        ratios = list(m["starts"].values())
        if name == FIT_MODEL or m["launch_bound_share"] < MIN_BOUND_SHARE or len(ratios) < MIN_STARTS \
                or lo <= m["ratio"] <= hi:
            continue
        left_out = {s: float(np.median([r for t, r in m["starts"].items() if t != s])) for s in m["starts"]}
        keep[name] = {**m, "leave_one_start_out": left_out}
    return keep


def document(models: dict[str, dict], runs: list[Path], roots: list[Path], step_s: float, seq_s: float) -> dict:
    """The file's content: the shipped ratios, what else was measured, and the provenance."""
    def entry(m: dict) -> dict:
        return significant({k: v for k, v in m.items() if k != "runs"}, DIGITS)

    keep = shipped(models)
    fit_starts = list(models[FIT_MODEL]["starts"].values())
    inputs = {"roots": [str(r) for r in roots], "runs": run_inputs(runs), "fit_model": FIT_MODEL,
              "host": {"step_s": step_s, "seq_s": seq_s}, "min_bound_share": MIN_BOUND_SHARE,
              "min_starts": MIN_STARTS}
    results = {"fit_model_start_range": significant([min(fit_starts), max(fit_starts)], DIGITS),
               "measured": {name: entry(m) for name, m in models.items()}}
    return {"ratios": {name: round(m["ratio"], DIGITS) for name, m in keep.items()},
            "entries": {name: entry(m) for name, m in keep.items()},
            "provenance": record(inputs, results, exclude=LAUNCH_BY_MODEL)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("roots", nargs="+", type=Path, help="folders of measured runs (e.g. data/validation)")
    ap.add_argument("--write", action="store_true", help=f"write {LAUNCH_BY_MODEL}")
    args = ap.parse_args(argv)
    missing = [str(r) for r in args.roots if not r.is_dir()]
    if missing:
        ap.error(f"no such folder: {', '.join(missing)}")
    host = read_host_terms(host_write.shipped_path(), "calibrated")
    runs = [r for root in args.roots for r in find_runs(root)]
    models = measure(runs, host.step_s, host.seq_s)
    if FIT_MODEL not in models:
        ap.error(f"no probed run of {FIT_MODEL} (the fitted model) under {', '.join(map(str, args.roots))}")
    doc = document(models, [r for m in models.values() for r in m["runs"]], args.roots, host.step_s, host.seq_s)
    for name, m in sorted(models.items()):
        flag = "shipped" if name in doc["ratios"] else "measured"
        print(f"{name:22s} ratio {m['ratio']:.3f} ({flag}; launch-bound {m['launch_bound_share']:.2f}, "
              f"{len(m['starts'])} starts: " + ", ".join(f"{s} {r:.2f}" for s, r in m["starts"].items()) + ")")
    if args.write:
        old = json.loads(LAUNCH_BY_MODEL.read_text()) if LAUNCH_BY_MODEL.exists() else None
        if old is not None and old.get("ratios") == doc["ratios"] and \
                same_computation(old.get("provenance"), doc["provenance"]):
            print(f"{LAUNCH_BY_MODEL}: unchanged")
            return 0
        atomic_write_text(LAUNCH_BY_MODEL, json.dumps(doc, indent=1, sort_keys=True) + "\n")
        print(f"wrote {LAUNCH_BY_MODEL}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
