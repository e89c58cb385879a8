"""Measure graph-less step launches from the streamed token times of measured runs.

    python scripts/launch_gaps.py data/validation/h200/llama-3.1-8b-*/f0.*

Every token of one engine step arrives within about 0.1 ms of the others, so the union of a
run's chunk times splits into emissions at gaps above 0.5 ms; the client gets a step's outputs
128 at a time, so a part of exactly 128 (or 256, ...) tokens followed within 3 ms by another
part is rejoined with it (:func:`split_emissions`).  For each request, ``launch`` is
the gap between the two emissions before the one carrying its first token (the step before its
prompt's step, held until that step was launched) and ``tail`` the gap from there to its first
token.  Gaps of at most 8 ms are steps that were not held (a graph step before it) and are
left out.  A launch starts with the step's host work (``step_s + seq_s x sequences``, the
sequences counted as the tokens of the emission carrying the first token; default: the
calibrated entry of ``host.yaml``, measured by ``scripts/host_steps.py``), which is taken
off before dividing by the layers.  Prints, per run and pooled, the launch median (whole gap)
and its per-layer part (the model's config ``num_hidden_layers``), the log-normal spread
``(ln p90 - ln p10) / 2.563`` of the whole gaps, and the tail median over the requests whose
tail is at most 5 ms (the launch, not the GPU, ended last).

``--moe RUNS`` measures the same on a mixture-of-experts model whose every layer is MoE (as
Qwen3-30B-A3B): its pooled per-layer launch less the dense runs' is ``launch_moe_layer_s``.
``--shared RUNS`` (with ``--moe`` runs of the same machine, engines started back to back) measures
an all-MoE model whose layers also carry a shared expert (as Qwen1.5-MoE-A2.7B): vLLM runs the
shared expert's MLP and gate eagerly inside the MoE op, on the CPU of every graph-less layer.
Its per-layer launch over the ``--moe`` model's, less one, times the host-terms file's MoE layer
(``launch_layer_s + launch_moe_layer_s``) is ``launch_shared_layer_s``: a ratio of two launches
on one host carried onto the file's terms, which are fitted launches, not measured held gaps (a
start's held gaps read 0.9-1.3 x them at its own probe), so the offset of one machine or of the
fit is not added to the term in milliseconds.
``--terms NAME ...`` writes only the named terms of those measured (the script's record of the
others is kept under ``earlier`` in the file).
``--sigma RUNS`` gives the levels whose spread is ``launch_sigma`` (their mean): those where a
held gap is one launch alone.  ``--write`` puts the pooled dense per-layer launch
(``launch_layer_s``), tail (``launch_tail_s``) and, when asked for, ``launch_moe_layer_s`` and
``launch_sigma`` into the ``calibrated`` entry of the host-terms file (``--yaml``), to the
precision printed (:data:`DECIMALS`), with their provenance; the file is left alone when
nothing but the command, commit or date would change.

``--host-speed S``: the runs' host ran at ``S`` times the file's reference host
(``host_reference_probe_s``; ``latsim.validate.compare.run_host_speed``).  The step's host work
is taken off at that speed and the per-layer launch terms (CPU time) are written in the
reference host's units (multiplied by ``S``); the tail and spread are the GPU's and are not.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from latsim.costmodel.host import HostOverhead, check_host_speed
from latsim.engines.vllm import host_write
from latsim.engines.vllm.defaults import SERVER_DEFAULTS_LARGE, cudagraph_limit
from latsim.engines.vllm.engine import default_executor
from latsim.engines.vllm.host_terms import read_host_terms
from latsim.measure.records import load_run
from latsim.provenance import round_decimals, run_inputs, significant
from latsim.validate.compare import run_executor

HELD_S = 8e-3
SPLIT_S = 5e-4
OUTPUT_CHUNK = 128  # vLLM's AsyncLLM processes a step's outputs 128 at a time
CHUNK_GAP_S = 3e-3
LAUNCH_BOUND_TAIL_S = 5e-3
Z90 = 2.563  # z(0.9) - z(0.1)
DECIMALS = {"launch_layer_s": 6, "launch_moe_layer_s": 6, "launch_shared_layer_s": 6, "launch_tail_s": 5,
            "launch_sigma": 2}
"""Decimal places each written term keeps: the precision printed (the spread's third digit
differs between the levels it averages)."""
CPU_TERMS = ("launch_layer_s", "launch_moe_layer_s")
"""The measured terms that are CPU time (scaled by ``--host-speed``)."""


def split_emissions(times: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(start time, tokens) of each step's emission in the sorted token times ``times``: split
    at gaps above :data:`SPLIT_S`, then a part of a multiple of :data:`OUTPUT_CHUNK` tokens
    rejoined with the part after it when that follows within :data:`CHUNK_GAP_S` (vLLM hands a
    step's outputs to the client in chunks of 128, with a pause between chunks).  A step of its
    own starting that soon after such a part would be rejoined too: the models measured here
    (8B and larger) never step that fast; a 1B near capacity can."""
    starts = np.r_[0, np.where(np.diff(times) > SPLIT_S)[0] + 1]
    counts = np.diff(np.r_[starts, len(times)])
    keep = [0]
    for k in range(1, len(starts)):
        prev = keep[-1]
        size = int(counts[prev:k].sum())
        if size % OUTPUT_CHUNK == 0 and times[starts[k]] - times[starts[k] - 1] <= CHUNK_GAP_S:
            continue  # the next chunk of the same step
        keep.append(k)
    merged = np.add.reduceat(counts, keep)
    return times[starts[keep]], merged


def carrying_emission(emissions: np.ndarray, first_tokens: np.ndarray) -> np.ndarray:
    """Index of the emission that carries each first token: the last emission starting at or
    before it.  A first token is one of the chunk times the emissions were split from, and
    comes last in its step's outputs; near capacity a step's outputs take up to a millisecond or
    more to reach the client, so a first token can trail its emission's start by that much."""
    return np.searchsorted(emissions, first_tokens, side="right") - 1


def check_engine_core(meta: dict, run: Path) -> None:
    """SystemExit unless the run's engine launched in its engine-core process: in worker processes
    (vLLM's multiprocess executor, its default above one GPU) no output is held, so a held gap is
    no launch (``docs/step-time-model.md``, "In a worker process")."""
    executor = run_executor(meta) or default_executor(int((meta.get("engine_config") or {}).get("tp") or 1))
    if executor != "uni":
        raise SystemExit(f"{run}: its engine ran the model in worker processes (executor {executor}); its outputs "
                         "are not held by a launch, so its gaps measure none")


def step_tokens(carrier: np.ndarray, new_tokens: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Tokens of the step behind each emission in ``carrier`` (the emission carrying a request's
    first token, one entry a request): the new prompt tokens of every request whose first token
    that emission carries, plus its other tokens (one a decoder)."""
    emissions = len(counts)
    prompts = np.bincount(carrier, weights=new_tokens, minlength=emissions)
    firsts = np.bincount(carrier, minlength=emissions)
    return np.asarray(prompts[carrier] + (counts[carrier] - firsts[carrier]), dtype=float)


def graph_limit(meta: dict) -> int:
    """The run's CUDA-graph limit (tokens; :func:`~latsim.engines.vllm.defaults.cudagraph_limit`
    of its engine's ``max_num_seqs`` and ``max_num_batched_tokens``, vLLM's server defaults on a
    large GPU for a run that did not record them)."""
    engine = meta.get("engine_config") or {}
    tokens, seqs = SERVER_DEFAULTS_LARGE
    return cudagraph_limit(int(engine.get("max_num_seqs") or seqs), int(engine.get("max_num_batched_tokens") or tokens))


def gaps(run: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """(launch gaps, tails, sequences of the launched step) of the held first tokens of ``run``,
    gaps in seconds, and its layer count (:func:`check_engine_core` first).  A gap counts only
    where the step it waited for ran without CUDA graphs (:func:`step_tokens` above the run's
    :func:`graph_limit`): a long gap before a graph step (a prompt of a few hundred tokens whose
    step replays a graph) is that step's GPU time, not a launch.  A request's new tokens are its
    prompt less its shared prefix (``prefix_tokens``, cached when it ran)."""
    m = load_run(run)
    check_engine_core(m.meta, run)
    ok = m.requests[m.requests["status"] == "ok"]
    times = np.sort(np.concatenate([np.asarray(c, dtype=float) for c in ok["chunk_times_s"]]))
    emissions, counts = split_emissions(times)
    j = carrying_emission(emissions, ok["first_token_s"].to_numpy())
    prefix = ok["prefix_tokens"].fillna(0).to_numpy(dtype=float) if "prefix_tokens" in ok else 0.0
    keep = j >= 2
    j = j[keep]
    tokens = step_tokens(j, (ok["input_tokens"].to_numpy(dtype=float) - prefix)[keep], counts)
    launch, tail = emissions[j - 1] - emissions[j - 2], emissions[j] - emissions[j - 1]
    held = (launch > HELD_S) & (tokens > graph_limit(m.meta))
    layers = int((m.meta.get("model") or {}).get("config", {}).get("num_hidden_layers", 0))
    if layers <= 0:
        raise SystemExit(f"{run}: meta.json has no model.config.num_hidden_layers")
    return launch[held], tail[held], counts[j][held], layers


def per_layer_launch(launch: np.ndarray, seqs: np.ndarray, layers: int, step_s: float, seq_s: float) -> np.ndarray:
    """Each held launch less its step's host work (``step_s + seq_s x sequences``, seconds on the
    run's host), per layer."""
    return np.asarray((launch - (step_s + seq_s * seqs)) / layers, dtype=float)


def stats(launch: np.ndarray, tail: np.ndarray, seqs: np.ndarray, layers: int,
          step_s: float, seq_s: float) -> dict[str, float]:
    """Held launches, their median, the median launch less the step's host time per layer, the
    log-normal spread of the launches, and the median tail of the launch-bound ones."""
    if len(launch) == 0:
        raise SystemExit(f"no held launch (a gap above {HELD_S * 1e3:g} ms before a first token) to measure")
    p10, p50, p90 = np.percentile(launch, [10, 50, 90])
    bound = tail[tail <= LAUNCH_BOUND_TAIL_S]
    return {"held": len(launch), "launch_p50_s": float(p50),
            "per_layer_s": float(np.median(per_layer_launch(launch, seqs, layers, step_s, seq_s))),
            "sigma": float(np.log(p90 / p10) / Z90),
            "tail_p50_s": float(np.median(bound)) if len(bound) else float("nan")}


def measure(label: str, runs: list[Path], step_s: float, seq_s: float) -> tuple[dict, dict[Path, dict]]:
    """Print each run's and the pooled statistics (:func:`stats`); return (pooled, per run)."""
    pooled: list[tuple[np.ndarray, ...]] = []
    per_run, layer_counts = {}, set()
    for run in runs:
        launch, tail, seqs, layers = gaps(run)
        layer_counts.add(layers)
        per_run[run] = stats(launch, tail, seqs, layers, step_s, seq_s)
        show(str(run), per_run[run])
        pooled.append((launch, tail, seqs))
    if len(layer_counts) != 1:
        raise SystemExit(f"{label} runs of different layer counts {sorted(layer_counts)} cannot be pooled")
    launch, tail, seqs = (np.concatenate([p[i] for p in pooled]) for i in range(3))
    both = stats(launch, tail, seqs, layer_counts.pop(), step_s, seq_s)
    show(f"pooled {label}", both)
    return both, per_run


def shared_layer_s(ratio: float, calibrated: HostOverhead) -> float:
    """``launch_shared_layer_s`` from a shared-expert model's per-layer launch over an MoE model's
    on one machine (``ratio``): the excess of that ratio times the file's MoE layer
    (``launch_layer_s + launch_moe_layer_s``, the reference host's seconds)."""
    moe_layer = calibrated.launch_layer_s + calibrated.launch_moe_layer_s
    term = (ratio - 1.0) * moe_layer
    print(f"shared / moe per-layer launch {ratio:.3f}; launch_shared_layer_s {term * 1e3:.3f} ms "
          f"(of the file's MoE layer {moe_layer * 1e3:.3f} ms)")
    return term


def show(label: str, s: dict[str, float]) -> None:
    print(f"{label:58s} held {s['held']:5d}  launch p50 {s['launch_p50_s'] * 1e3:5.1f} ms, less host "
          f"{s['per_layer_s'] * 1e3:.3f} ms/layer, sigma {s['sigma']:.3f}, tail p50 {s['tail_p50_s'] * 1e3:.2f} ms")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path, help="dense runs of one layer count")
    ap.add_argument("--moe", nargs="+", type=Path, default=[], help="runs of an all-MoE model")
    ap.add_argument("--shared", nargs="+", type=Path, default=[],
                    help="runs of an all-MoE model with a shared expert (needs --moe runs of the same machine)")
    ap.add_argument("--terms", nargs="+", choices=sorted(DECIMALS),
                    help="write only these of the measured terms (default: all of them)")
    ap.add_argument("--sigma", nargs="+", type=Path, default=[], help="levels whose mean spread is launch_sigma")
    ap.add_argument("--yaml", type=Path, default=host_write.shipped_path(), help="the host-terms file")
    ap.add_argument("--step-s", type=float, help="host seconds per step (default: --yaml's calibrated entry)")
    ap.add_argument("--seq-s", type=float, help="host seconds per sequence (default: --yaml's calibrated entry)")
    ap.add_argument("--host-speed", type=float, default=1.0,
                    help="the runs' host speed against the file's reference host (see the module doc)")
    ap.add_argument("--write", action="store_true", help="write the launch terms into --yaml")
    args = ap.parse_args()
    try:
        check_host_speed(args.host_speed)
    except ValueError as exc:
        ap.error(str(exc))
    if args.shared and not args.moe:
        ap.error("--shared needs --moe runs of the same machine (the shared expert is measured against them)")
    step_s, seq_s = args.step_s, args.seq_s
    calibrated = read_host_terms(args.yaml, "calibrated")
    if step_s is None or seq_s is None:
        step_s = calibrated.step_s if step_s is None else step_s
        seq_s = calibrated.seq_s if seq_s is None else seq_s
    step_s, seq_s = step_s / args.host_speed, seq_s / args.host_speed  # the host work on the runs' host
    dense, _ = measure("dense", args.runs, step_s, seq_s)
    terms = {"launch_layer_s": dense["per_layer_s"], "launch_tail_s": dense["tail_p50_s"]}
    results: dict = {"dense": dense}
    if args.moe:
        results["moe"], _ = measure("moe", args.moe, step_s, seq_s)
        terms["launch_moe_layer_s"] = results["moe"]["per_layer_s"] - dense["per_layer_s"]
        print(f"launch_moe_layer_s {terms['launch_moe_layer_s'] * 1e3:.3f} ms")
    if args.shared:
        results["shared"], _ = measure("shared", args.shared, step_s, seq_s)
        ratio = results["shared"]["per_layer_s"] / results["moe"]["per_layer_s"]
        terms["launch_shared_layer_s"] = shared_layer_s(ratio, calibrated)
        results["shared_over_moe"] = ratio
    if args.sigma:
        sigmas = [stats(*gaps(run)[:3], 1, step_s, seq_s)["sigma"] for run in args.sigma]
        terms["launch_sigma"] = float(np.mean(sigmas))
        results["sigma_per_level"] = sigmas
        print(f"launch_sigma {terms['launch_sigma']:.3f} (mean of {len(sigmas)} levels)")
    for name in CPU_TERMS:
        if name in terms:
            terms[name] *= args.host_speed  # CPU seconds on the reference host
    if args.terms:
        terms = {k: v for k, v in terms.items() if k in args.terms}
        missing = sorted(set(args.terms) - set(terms))
        if missing:
            ap.error(f"--terms {' '.join(missing)}: not measured by these arguments")
    if args.write:
        write(args, terms, results, step_s, seq_s)


def write(args: argparse.Namespace, terms: dict[str, float], results: dict, step_s: float, seq_s: float) -> None:
    """Write ``terms`` (rounded to :data:`DECIMALS`) and their provenance into ``args.yaml``."""
    inputs = {"runs": run_inputs(args.runs), "moe_runs": run_inputs(args.moe), "sigma_runs": run_inputs(args.sigma),
              **({"shared_runs": run_inputs(args.shared)} if args.shared else {}),
              "host": {"step_s": step_s, "seq_s": seq_s}, "host_speed": args.host_speed,
              "decimals": {k: DECIMALS[k] for k in terms}}
    results = significant({**results, **{f"{k}_unrounded": v for k, v in terms.items()}}, 6)
    rounded = {k: round_decimals(v, DECIMALS[k]) for k, v in terms.items()}
    host_write.write_or_exit(args.yaml, rounded, inputs, results, script="launch_gaps")


if __name__ == "__main__":
    main()
