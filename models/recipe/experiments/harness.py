"""Variant comparison on the card's configuration split (5 folds, groups(frame, 'configuration')).

Usage: python harness.py VARIANT [--augment FOLDER ...]
Scores every target: pooled median |pred/sim-1| over the original rows and the per-fold medians.
"""
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
from latsim.predict.train import read_all

MAIN = "/work/main/build/surrogate/"
BASE = [MAIN + f for f in ("train_1600", "train_1600_s1", "train_1600_s2")]
CACHE = Path("/work/wt/surr3/build/exp/cache")
CACHE.mkdir(exist_ok=True)


def load(folders, name):
    p = CACHE / f"{name}.parquet"
    if p.exists():
        frame = pd.read_parquet(CACHE / f"{name}_frame.parquet")
        static = pd.read_parquet(p)
        return frame, static
    frame = read_all(folders)
    static = F.static_features(frame)
    frame.to_parquet(CACHE / f"{name}_frame.parquet")
    static.to_parquet(p)
    return frame, static


def run(variant: str, augment: list[str], tag: str, only=None):
    import variants

    variants.apply(variant)
    frame, static = load(BASE, "base")
    if augment:
        extra, extra_static = load(augment, "aug_" + "_".join(Path(a).name for a in augment))
    qps = frame["qps"].to_numpy(float)
    feats = F.features_at(static, qps)
    g = groups(frame, "configuration")
    parts = []
    t0 = time.time()
    for k in range(5):
        test = g == k
        tr_frame, tr_static = frame[~test], static[~test]
        if augment:
            tr_frame = pd.concat([tr_frame, extra], ignore_index=True)
            tr_static = pd.concat([tr_static, extra_static], ignore_index=True)
        tr_feats = F.features_at(tr_static, tr_frame["qps"].to_numpy(float))
        model = S.fit_surrogate(tr_frame, tr_feats, **S.TREES)
        parts.append(model.predict_static(static[test], qps[test]))
        print(f"fold {k} {time.time() - t0:.0f}s", flush=True)
    pred = pd.concat(parts).loc[frame.index]
    pooled = score(frame, feats, pred)
    folds = {}
    for k in range(5):
        m = g == k
        s = score(frame[m].reset_index(drop=True), feats[m].reset_index(drop=True),
                  pred[m].reset_index(drop=True))
        folds[k] = {t: s[t]["median"] for t in TARGETS} | {"stable_away": s["stable"]["accuracy_away_from_boundary"]}
    out = {"variant": variant, "augment": augment, "pooled": pooled, "folds": folds}
    pred.to_parquet(CACHE / f"pred_{tag}.parquet")
    Path(f"/work/wt/surr3/build/exp/res_{tag}.json").write_text(json.dumps(out, indent=1))
    print(tag, " ".join(f"{t} {pooled[t]['median']*100:.2f}" for t in TARGETS),
          f"stable_away {pooled['stable']['accuracy_away_from_boundary']*100:.1f}")


if __name__ == "__main__":
    args = sys.argv[1:]
    variant = args[0]
    tag = args[1]
    augment = args[2:]
    run(variant, augment, tag)
