"""bins5.py SCORED TAG ...: held-out median |pred/sim - 1| by load over the saturated capacity and, in the
0.5-0.9 band, by prefill utilization (SCORED: the comma-joined cached sets the tags were scored on)."""
import sys
from pathlib import Path

import numpy as np
import pandas as pd

import latsim.predict.features as F

C = Path(__file__).resolve().parents[4] / "build" / "exp5"
names = sys.argv[1].split(",")
frame = pd.concat([pd.read_parquet(C / f"{n}_frame.parquet") for n in names], ignore_index=True)
static = pd.concat([pd.read_parquet(C / f"{n}.parquet") for n in names], ignore_index=True)
feats = F.features_at(static, frame["qps"].to_numpy(float))
ls = feats["load_saturated"].to_numpy()
u = feats["prefill_utilization"].to_numpy()
cut = pd.cut(ls, [0, 0.5, 0.75, 0.9, 1.0, 1.1, 1.25, 1.5, 10])
band = (ls >= .5) & (ls < .9)
ucut = pd.cut(u, [-.01, .2, .4, .6, .8, .9, 1])
for t in ("ttft_ms_p50", "ttft_ms_p99", "e2e_ms_p50", "tpot_ms_p99"):
    for tag in sys.argv[2:]:
        p = pd.read_parquet(C / f"pred_{tag}.parquet")
        rel = pd.Series(np.abs(p[t].to_numpy() / frame[t].to_numpy() - 1))
        a = (rel.groupby(cut, observed=False).median() * 100).round(1).tolist()
        b = (rel[band].groupby(ucut[band], observed=False).median() * 100).round(1).tolist()
        print(f"{t:12s} {tag:12s} by load {a} | band 0.5-0.9 by prefill util {b}")
print(pd.Series(cut).value_counts(sort=False).tolist(), pd.Series(ucut[band]).value_counts(sort=False).tolist())
