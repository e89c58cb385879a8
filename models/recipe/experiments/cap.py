import numpy as np, pandas as pd, xgboost as xgb
import latsim.predict.features as F
from latsim.predict.heldout import groups
frame = pd.read_parquet("cache/base_frame.parquet"); static = pd.read_parquet("cache/base.parquet")
ef = pd.read_parquet("cache/aug_train_1600_s3_frame.parquet"); es = pd.read_parquet("cache/aug_train_1600_s3.parquet")
def prep(fr, st):
    feats = F.features_at(st, fr["qps"].to_numpy(float))
    un = ~fr["stable"].to_numpy(bool) & (fr["num_unfinished"].to_numpy() >= 0)
    y = np.log(fr["throughput_rps"].to_numpy() / st["capacity_rps"].to_numpy())
    return feats, un, y
feats, un, y = prep(frame, static)
efe, eun, ey = prep(ef, es)
X = feats[list(F.STATIC_FEATURES)].to_numpy(float); EX = efe[list(F.STATIC_FEATURES)].to_numpy(float)
g = groups(frame, "configuration")
print("unstable rows base", un.sum(), "s3", eun.sum())
print("raw |log ratio| median on unstable", np.median(np.abs(y[un])), "IQR", np.quantile(np.exp(y[un]), [0.1,0.25,0.5,0.75,0.9]))
for aug in (False, True):
  for params in ({"max_depth": 3, "eta": 0.05, "n": 300}, {"max_depth": 4, "eta": 0.05, "n": 400}):
    pred = np.full(len(frame), np.nan)
    for k in range(5):
        tr = (g != k) & un
        Xt, yt = X[tr], y[tr]
        if aug:
            Xt = np.vstack([Xt, EX[eun]]); yt = np.concatenate([yt, ey[eun]])
        b = xgb.train({"max_depth": params["max_depth"], "eta": params["eta"], "min_child_weight": 5, "nthread": 1, "tree_method": "hist", "verbosity": 0},
                      xgb.DMatrix(Xt, label=yt), params["n"])
        te = g == k
        pred[te] = b.inplace_predict(X[te])
    err = np.abs(pred[un] - y[un])
    print("aug", aug, params, "CV median |log err| on unstable", round(np.median(err), 4), "p90", round(np.quantile(err, .9), 4))
