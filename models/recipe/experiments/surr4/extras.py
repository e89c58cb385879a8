"""Extra rate-independent quantities per row (cost model), for candidate features."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd

import latsim.predict.features as F
from latsim.costmodel.batch import BatchShape

G = F.BATCH_GRID
EXTRA = ([f"_ftl_{q}_{g}" for q in ("p50", "p90", "p99") for g in G]
         + [f"_chunks_{q}" for q in ("p50", "p90", "p99")] + ["_budget", "_new_mean"])


def loaded_first(cost, budget, prompt, prefix_share, ctx, g):
    """front end + the prompt's uncached tokens in chunks of at most budget - g beside g decodes."""
    new = max(1.0, prompt * (1.0 - prefix_share))
    room = max(1, budget - g)
    chunk = max(1, min(round(new), room))
    mixed = BatchShape.from_chunks([(chunk, round(prompt - new))], [int(ctx)] * g)
    launch = float(cost.launch_s(mixed))
    tail = float(cost.launch_tail_s) if launch > 0.0 else 0.0
    steps = new / chunk
    return float(cost.frontend_s) + max(float(cost.step_time(mixed)), launch + tail) * steps


def extras_row(key):
    (model, device, tp, replicas, wd, kd, mns, mbt, in_med, in_sig, out_med, out_sig, prefix) = key
    d, engine, kv_tokens, cost = F._priced(model, device, int(tp), int(replicas), wd, kd, mns, mbt)
    mean_in = F.length_mean(in_med, in_sig, F.INPUT_CLIP)
    mean_out = F.length_mean(out_med, out_sig, F.OUTPUT_CLIP)
    ctx = mean_in + mean_out / 2
    batch = float(max(1.0, min(engine.max_num_seqs, kv_tokens / ctx)))
    seqs = round(batch)
    budget = engine.max_num_batched_tokens
    out = []
    qs = F.length_quantiles(in_med, in_sig, F.INPUT_CLIP)
    for x in qs:
        vals = [loaded_first(cost, budget, x, prefix, ctx, min(g, seqs)) * 1e3 for g in G]
        out += list(np.maximum.accumulate(vals))
    for x in qs:
        new = max(1.0, x * (1.0 - prefix))
        out.append(float(np.ceil(new / budget)))
    out += [float(budget), max(1.0, mean_in * (1.0 - prefix))]
    return out


def extras(frame: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for key in F._keys(frame):
        F._static(*key)
        rows.append(extras_row(key))
    return pd.DataFrame(rows, columns=EXTRA, index=frame.index)
