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
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from latsim.engines.vllm.host_terms import default_host_overhead
from latsim.measure.records import load_run

HELD_S = 8e-3
SPLIT_S = 5e-4
OUTPUT_CHUNK = 128  # vLLM's AsyncLLM processes a step's outputs 128 at a time
CHUNK_GAP_S = 3e-3
LAUNCH_BOUND_TAIL_S = 5e-3
Z90 = 2.563  # z(0.9) - z(0.1)


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


def gaps(run: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """(launch gaps, tails, sequences of the launched step) of the held first tokens of ``run``,
    gaps in seconds, and its layer count."""
    m = load_run(run)
    ok = m.requests[m.requests["status"] == "ok"]
    times = np.sort(np.concatenate([np.asarray(c, dtype=float) for c in ok["chunk_times_s"]]))
    emissions, counts = split_emissions(times)
    j = np.searchsorted(emissions, ok["first_token_s"].to_numpy() - 2e-4)
    j = j[j >= 2]
    launch, tail = emissions[j - 1] - emissions[j - 2], emissions[j] - emissions[j - 1]
    held = launch > HELD_S
    layers = int((m.meta.get("model") or {}).get("config", {}).get("num_hidden_layers", 0))
    return launch[held], tail[held], counts[j][held], layers


def summary(label: str, launch: np.ndarray, tail: np.ndarray, seqs: np.ndarray, layers: int,
            step_s: float, seq_s: float) -> None:
    p10, p50, p90 = np.percentile(launch, [10, 50, 90])
    per_layer = np.median(launch - (step_s + seq_s * seqs)) / layers
    bound = tail[tail <= LAUNCH_BOUND_TAIL_S]
    print(f"{label:58s} held {len(launch):5d}  launch p50 {p50 * 1e3:5.1f} ms, less host "
          f"{per_layer * 1e3:.3f} ms/layer, sigma {np.log(p90 / p10) / Z90:.3f}, "
          f"tail p50 {np.median(bound) * 1e3:.2f} ms")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path)
    calibrated = default_host_overhead("calibrated")
    ap.add_argument("--step-s", type=float, default=calibrated.step_s, help="host seconds per step")
    ap.add_argument("--seq-s", type=float, default=calibrated.seq_s, help="host seconds per sequence")
    args = ap.parse_args()
    host = (args.step_s, args.seq_s)
    pooled: list[tuple[np.ndarray, ...]] = []
    layer_counts = set()
    for run in args.runs:
        launch, tail, seqs, layers = gaps(run)
        layer_counts.add(layers)
        summary(str(run), launch, tail, seqs, layers, *host)
        pooled.append((launch, tail, seqs))
    if len(layer_counts) == 1 and len(pooled) > 1:
        summary("pooled", *(np.concatenate([p[i] for p in pooled]) for i in range(3)), layer_counts.pop(), *host)


if __name__ == "__main__":
    main()
