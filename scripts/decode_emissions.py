"""Pure decode steps of measured levels against the cost model's price of the same batch.

    python scripts/decode_emissions.py data/validation/h200-s25/llama-3.1-70b-gptq-fixed-in512-out128/f0.90 [...]

A level's streamed token times split into one emission per engine step
(``launch_gaps.split_emissions``); a gap between two emissions is that step's time when
neither of them, nor the next, carries a first token (no prompt in the step, none launched
beside it, the step not held by a graph-less launch).  The step's batch is the requests whose
tokens the emission carries, each at the context it decoded over (its prompt plus the output
tokens it had streamed before).  Per group of batch sizes (:data:`BUCKETS`) this prints the
median gap beside the median of the cost model's prices of the same batches, replayed as
``latsim validate`` does (``--host-speed``: a number, or ``probe`` for the level's own reading;
default 1), and the batches' mean context.  Where the run's requests share prefixes and the GPU
has co-read terms (:mod:`latsim.costmodel.coreads`), each batch is priced as the simulator does:
its decoders counted per prefix group, the co-read tokens taken off its KV.  ``ratio`` is the
model over the measured: below 1, the model's step is too fast.  Groups of fewer than
``--min-steps`` steps are left out.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import numpy as np
import pandas as pd
from launch_gaps import carrying_emission, split_emissions

from latsim.costmodel.batch import BatchShape
from latsim.deployment import resolve_engine
from latsim.measure.records import load_run
from latsim.sim.shape import coread_tokens, with_coreads
from latsim.sim.simulate import default_cost_model
from latsim.validate.compare import host_probe_ms, host_speed_option, replay_deployment

BUCKETS = (0, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 1024)
"""Edges of the groups of batch sizes (a step of 40 sequences is in (32, 48])."""


def token_contexts(requests: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """``(time, context)`` of every streamed token of ``requests`` (the ``ok`` records of a run),
    sorted by time: the k-th output token was decoded over the prompt and k earlier outputs."""
    times, contexts = [], []
    for prompt, chunks, sizes in zip(requests["input_tokens"], requests["chunk_times_s"], requests["chunk_tokens"],
                                     strict=True):
        counts = np.ones(len(chunks)) if sizes is None or len(sizes) != len(chunks) else np.asarray(sizes, float)
        times.append(np.asarray(chunks, dtype=float))
        contexts.append(prompt + np.cumsum(counts) - counts)
    t, c = np.concatenate(times), np.concatenate(contexts)
    order = np.argsort(t, kind="stable")
    return t[order], c[order]


def token_owners(requests: pd.DataFrame) -> np.ndarray:
    """The position in ``requests`` of every streamed token's request, in :func:`token_contexts`' order."""
    times, owners = [], []
    for i, chunks in enumerate(requests["chunk_times_s"]):
        times.append(np.asarray(chunks, dtype=float))
        owners.append(np.full(len(chunks), i))
    order = np.argsort(np.concatenate(times), kind="stable")
    return np.concatenate(owners)[order]


def coread_saved(cost: object, owners: np.ndarray, requests: pd.DataFrame, block_size: int) -> int:
    """KV tokens the simulator takes off a batch of ``owners`` (positions in ``requests``) for
    co-reads of their shared prefixes: 0 without co-read terms or prefix columns."""
    coreads = getattr(cost, "coreads", None)
    if coreads is None or "prefix_group" not in requests:
        return 0
    readers: dict[int, list[int]] = {}
    for i in owners:
        row = requests.iloc[int(i)]
        group = row["prefix_group"]
        if group is None or pd.isna(group) or group < 0:
            continue
        tokens = min(int(row["prefix_tokens"]), int(row["input_tokens"])) // block_size * block_size
        entry = readers.setdefault(int(group), [0, 0])
        entry[0] += 1
        entry[1] += tokens
    return coread_tokens(coreads, len(owners), readers)


def pure_decode_batches(times: np.ndarray, contexts: np.ndarray,
                        first_tokens: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    """``(seconds, contexts of each step's batch)`` of the pure decode steps in the sorted token
    times ``times`` (``contexts`` beside them): the gap before each emission that carries no
    first token, whose previous and next emissions carry none either (see the module note)."""
    starts, counts = split_emissions(times)
    firsts = np.bincount(carrying_emission(starts, first_tokens), minlength=len(starts))
    bounds = np.concatenate([[0], np.cumsum(counts)])  # emission i holds tokens bounds[i]:bounds[i + 1]
    gap = np.diff(starts)
    k = np.arange(1, len(starts) - 1)  # the emission ending gap k - 1; its neighbours on both sides exist
    keep = k[(firsts[k] == 0) & (firsts[k - 1] == 0) & (firsts[k + 1] == 0)]
    return gap[keep - 1], [contexts[bounds[i]:bounds[i + 1]] for i in keep]


def level_rows(run: Path, host_speed: float | str, device: str, min_steps: int) -> tuple[dict, list[dict]]:
    """The level's meta (a dict) and one row per group of batch sizes (see the module note)."""
    m = load_run(run)
    ok = m.requests[m.requests["status"] == "ok"]
    if ok.empty:
        raise ValueError(f"{run}: no completed request")
    ok = ok.reset_index(drop=True)
    times, contexts = token_contexts(ok)
    firsts = ok["first_token_s"].to_numpy(dtype=float)
    gaps, batches = pure_decode_batches(times, contexts, firsts)
    _, owners = pure_decode_batches(times, token_owners(ok).astype(float), firsts)
    dep = replay_deployment(m.meta, device, host_speed)
    cost = default_cost_model(dep, resolve_engine(dep))
    seqs = np.array([len(b) for b in batches])
    rows = []
    for lo, hi in itertools.pairwise(BUCKETS):
        picked = np.flatnonzero((seqs > lo) & (seqs <= hi))
        if len(picked) < min_steps:
            continue
        block = dep.engine.block_size
        prices = [cost.step_time(with_coreads(BatchShape.from_chunks([], [int(c) for c in batches[i]]),
                                              coread_saved(cost, owners[i], ok, block))) for i in picked]
        measured, model = float(np.median(gaps[picked])), float(np.median(prices))
        rows.append({"group": f"({lo}, {hi}]", "steps": len(picked), "seqs": int(np.median(seqs[picked])),
                     "context": float(np.mean([batches[i].mean() for i in picked])),
                     "measured_ms": 1e3 * measured, "model_ms": 1e3 * model, "ratio": model / measured})
    return m.meta, rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path, help="measured levels (run folders)")
    ap.add_argument("--host-speed", default="1", help="a number, or probe")
    ap.add_argument("--device", default="h200")
    ap.add_argument("--min-steps", type=int, default=10)
    args = ap.parse_args(argv)
    try:
        args.host_speed = host_speed_option(args.host_speed)
    except ValueError as err:
        ap.error(str(err))
    if args.min_steps < 1:
        ap.error(f"--min-steps {args.min_steps}: expected a whole number >= 1")
    for run in args.runs:
        try:
            meta, rows = level_rows(run, args.host_speed, args.device, args.min_steps)
        except (ValueError, FileNotFoundError) as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        probe = host_probe_ms(meta)
        print(f"{run}  probe {'-' if probe is None else f'{probe:.2f} ms'}")
        for r in rows:
            print(f"  {r['group']:12s} steps {r['steps']:5d}  seqs {r['seqs']:4d}  context {r['context']:7.0f}"
                  f"  measured {r['measured_ms']:7.2f} ms  model {r['model_ms']:7.2f} ms  ratio {r['ratio']:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
