"""harness5.py VARIANT TAG [TRAIN_ONLY_SET ...]: 5 folds of the card's configuration split over the
cached 'base' rows (seeds 0-2), training-only sets from cache (s3, s4, s5). Writes res_TAG.json, cache/pred_TAG.parquet."""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

import latsim.predict.features as F
import latsim.predict.surrogate as S
from latsim.predict.heldout import groups, score
from latsim.predict.recipe import TARGETS

H = Path(__file__).parent
C = H.resolve().parents[3] / "build" / "exp5"


def load(name):
    return pd.read_parquet(C / f"{name}_frame.parquet"), pd.read_parquet(C / f"{name}.parquet")


def run(variant, tag, extra_sets, scored="base"):
    import variants5 as variants2
    variants2.apply(variant)
    names = scored.split(",")
    fs = [load(n) for n in names]
    frame = pd.concat([f for f, _ in fs], ignore_index=True)
    static = pd.concat([s for _, s in fs], ignore_index=True)
    ex = [load(n) for n in extra_sets]
    qps = frame["qps"].to_numpy(float)
    feats = S.features_at(static, qps)
    g = groups(frame, "configuration")
    parts = []
    t0 = time.time()
    for k in range(5):
        test = g == k
        tr_frame = pd.concat([frame[~test]] + [f for f, _ in ex], ignore_index=True)
        tr_static = pd.concat([static[~test]] + [s for _, s in ex], ignore_index=True)
        tr_feats = S.features_at(tr_static, tr_frame["qps"].to_numpy(float))
        model = S.fit_surrogate(tr_frame, tr_feats, **S.TREES)
        parts.append(model.predict_static(static[test], qps[test]))
        print(f"fold {k} {time.time() - t0:.0f}s", flush=True)
        if k == 0:
            import tempfile, os
            with tempfile.TemporaryDirectory() as d:
                S.save(model, d)
                size = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
    pred = pd.concat(parts).loc[frame.index]
    pooled = score(frame, feats, pred)
    folds = {}
    for k in range(5):
        m = g == k
        s = score(frame[m].reset_index(drop=True), feats[m].reset_index(drop=True), pred[m].reset_index(drop=True))
        folds[k] = {t: s[t]["median"] for t in TARGETS} | {"stable_away": s["stable"]["accuracy_away_from_boundary"]}
    out = {"variant": variant, "extra": extra_sets, "scored": scored, "pooled": pooled, "folds": folds,
           "size_mib": size / 2**20, "seconds": time.time() - t0}
    pred.to_parquet(C / f"pred_{tag}.parquet")
    (C / f"res_{tag}.json").write_text(json.dumps(out, indent=1))
    print(tag, " ".join(f"{t} {pooled[t]['median']*100:.2f}" for t in TARGETS),
          f"stable_away {pooled['stable']['accuracy_away_from_boundary']*100:.1f} size {size/2**20:.1f}MiB", flush=True)


if __name__ == "__main__":
    a = sys.argv[1:]
    scored = "base"
    if a and a[0].startswith("--scored="):
        scored = a.pop(0).split("=", 1)[1]
    run(a[0], a[1], a[2:], scored)
