"""Measure graph-less step launches from the streamed token times of measured runs.

    python scripts/launch_gaps.py data/validation/h200/llama-3.1-8b-*/f0.*

Every token of one engine step arrives within about 0.1 ms of the others, so the union of a
run's chunk times splits into emissions at gaps above 0.5 ms.  For each request, ``launch`` is
the gap between the two emissions before the one carrying its first token (the step before its
prompt's step, held until that step was launched) and ``tail`` the gap from there to its first
token.  Gaps of at most 8 ms are steps that were not held (a graph step before it) and are
left out.  Prints, per run and pooled, the launch median per layer (the model's config
``num_hidden_layers``), its log-normal spread ``(ln p90 - ln p10) / 2.563``, and the tail
median over the requests whose tail is at most 5 ms (the launch, not the GPU, ended last).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from latsim.validate.records import load_run

HELD_S = 8e-3
LAUNCH_BOUND_TAIL_S = 5e-3
Z90 = 2.563  # z(0.9) - z(0.1)


def gaps(run: Path) -> tuple[np.ndarray, np.ndarray, int]:
    """(launch gaps, tails) of the held first tokens of ``run`` in seconds, and its layer count."""
    m = load_run(run)
    ok = m.requests[m.requests["status"] == "ok"]
    times = np.sort(np.concatenate([np.asarray(c, dtype=float) for c in ok["chunk_times_s"]]))
    emissions = times[np.r_[0, np.where(np.diff(times) > 5e-4)[0] + 1]]
    j = np.searchsorted(emissions, ok["first_token_s"].to_numpy() - 2e-4)
    j = j[j >= 2]
    launch, tail = emissions[j - 1] - emissions[j - 2], emissions[j] - emissions[j - 1]
    held = launch > HELD_S
    layers = int((m.meta.get("model") or {}).get("config", {}).get("num_hidden_layers", 0))
    return launch[held], tail[held], layers


def summary(label: str, launch: np.ndarray, tail: np.ndarray, layers: int) -> None:
    p10, p50, p90 = np.percentile(launch, [10, 50, 90])
    bound = tail[tail <= LAUNCH_BOUND_TAIL_S]
    print(f"{label:58s} held {len(launch):5d}  launch p50 {p50 * 1e3:5.1f} ms ({p50 / layers * 1e3:.3f} ms/layer), "
          f"sigma {np.log(p90 / p10) / Z90:.3f}, tail p50 {np.median(bound) * 1e3:.2f} ms")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path)
    args = ap.parse_args()
    pooled: list[tuple[np.ndarray, np.ndarray]] = []
    layer_counts = set()
    for run in args.runs:
        launch, tail, layers = gaps(run)
        layer_counts.add(layers)
        summary(str(run), launch, tail, layers)
        pooled.append((launch, tail))
    if len(layer_counts) == 1 and len(pooled) > 1:
        summary("pooled", np.concatenate([p[0] for p in pooled]), np.concatenate([p[1] for p in pooled]),
                layer_counts.pop())


if __name__ == "__main__":
    main()
