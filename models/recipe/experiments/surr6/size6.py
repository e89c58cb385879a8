"""size6.py: the size of one TTFT P99 booster fitted on every cached row at depth 6 and 8, and its
prediction time on 100,000 rows (one thread)."""
import os
import tempfile
import time

import numpy as np
from harness6 import fit_one, load

import latsim.predict.surrogate as S
from latsim.predict.estimators import save_booster
from latsim.predict.features import FEATURES, features_at

frame, static = load("card")
feats = features_at(static, frame["qps"].to_numpy(float))
X = feats[list(FEATURES)].to_numpy(np.float64)
X = X[np.arange(100_000) % len(X)]
for depth in (6, 8):
    reg = fit_one(frame, feats, "ttft_ms_p99", {**S.TREES, "max_depth": depth}, S.run_length(frame), list(FEATURES))
    with tempfile.TemporaryDirectory() as d:
        save_booster(reg.booster_, os.path.join(d, "b.json"))
        size = os.path.getsize(os.path.join(d, "b.json"))
    t = time.perf_counter()
    reg.predict(X)
    print(f"depth {depth}: {size / 2**20:.1f} MiB, predict 100,000 rows {time.perf_counter() - t:.2f} s", flush=True)
