"""harness6.py TAG PARAMS_JSON [TARGET ...]: the card's 5-fold configuration split over the cached
card rows (cache6.py), seed-3 rows training only, one regressor per target with the tree parameters
PARAMS_JSON merged over the shipped TREES (extra key "variant": a feature variant of variants6.py).
Prints the pooled median |pred/sim - 1| per target, the per-fold medians; writes
build/exp6/pred_TAG.parquet (held-out predictions) and res_TAG.json."""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

import latsim.predict.surrogate as S
from latsim.predict.estimators import MonotoneBoostedRegressor
from latsim.predict.features import features_at
from latsim.predict.heldout import groups

C = Path(__file__).resolve().parents[4] / "build" / "exp6"


def load(name: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    return pd.read_parquet(C / f"{name}_frame.parquet"), pd.read_parquet(C / f"{name}.parquet")


def fit_one(frame, feats, target, params, run_requests, columns):
    X = feats[columns].to_numpy(dtype=np.float64)
    y = frame[target].to_numpy(dtype=float)
    keep = np.isfinite(y) & (y > 0)
    label = np.log(y[keep] / S.baseline_ms(feats, target, run_requests)[keep])
    reg = MonotoneBoostedRegressor(**params)  # as fit_surrogate: no constraint, made monotone on the load grid
    return reg.fit(X[keep], label)


def predict_one(reg, static, qps, target, run_requests, columns, extend):
    codes, first = S._distinct(static)
    distinct = static.iloc[first]
    capacity = distinct["capacity_rps"].to_numpy()
    loads = np.tile(S.LOAD_GRID, len(distinct))
    grid = extend(features_at(distinct.iloc[np.repeat(np.arange(len(distinct)), len(S.LOAD_GRID))],
                              loads * np.repeat(capacity, len(S.LOAD_GRID))))
    X = grid[columns].to_numpy(dtype=np.float64)
    raw = (S.baseline_ms(grid, target, run_requests) * np.exp(reg.predict(X))).reshape(len(distinct), len(S.LOAD_GRID))
    return S._interp_rows(S.non_decreasing(raw, two_sided=target.startswith("tpot_ms"))[codes], qps / capacity[codes])


def main(tag: str, params_json: str, targets: list[str]) -> None:
    import variants6
    spec = json.loads(params_json)
    variant = spec.pop("variant", "none")
    extend, columns = variants6.get(variant)
    params = {**S.TREES, **spec}
    frame, static = load("card")
    ex_frame, ex_static = load("s3")
    run_requests = S.run_length(frame)
    qps = frame["qps"].to_numpy(float)
    g = groups(frame, "configuration")
    feats = extend(features_at(static, qps))
    ex_feats = extend(features_at(ex_static, ex_frame["qps"].to_numpy(float)))
    pred = pd.DataFrame(index=frame.index, columns=targets, dtype=float)
    t0 = time.time()
    for k in range(5):
        test = g == k
        tr_frame = pd.concat([frame[~test], ex_frame], ignore_index=True)
        tr_feats = pd.concat([feats[~test], ex_feats], ignore_index=True)
        for target in targets:
            reg = fit_one(tr_frame, tr_feats, target, params, run_requests, columns)
            pred.loc[test, target] = predict_one(reg, static[test], qps[test], target, run_requests, columns, extend)
        print(f"fold {k} {time.time() - t0:.0f}s", flush=True)
    out = {"tag": tag, "params": params, "variant": variant, "seconds": time.time() - t0, "targets": {}}
    for target in targets:
        truth = frame[target].to_numpy(float)
        ok = np.isfinite(truth) & (truth > 0)
        rel = np.abs(pred[target].to_numpy(float) / truth - 1.0)
        out["targets"][target] = {"median": float(np.median(rel[ok])),
                                  "folds": [float(np.median(rel[ok & (g == k)])) for k in range(5)]}
    pred.to_parquet(C / f"pred_{tag}.parquet")
    (C / f"res_{tag}.json").write_text(json.dumps(out, indent=1))
    print(tag, variant, spec, " ".join(f"{t} {v['median'] * 100:.2f} [{' '.join(f'{f * 100:.2f}' for f in v['folds'])}]"
                                       for t, v in out["targets"].items()), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3:] or ["ttft_ms_p99"])
