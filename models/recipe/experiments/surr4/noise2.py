import numpy as np, pandas as pd
import latsim.predict.features as F
from latsim.predict.recipe import read_results
from latsim.predict.train import usable
from pathlib import Path
C = Path("cache")
frame = pd.read_parquet(C / "base_frame.parquet"); static = pd.read_parquet(C / "base.parquet")
feats = F.features_at(static, frame["qps"].to_numpy(float))
pred = pd.read_parquet(C / "pred_ref.parquet")
frame["ls"] = feats["load_saturated"].to_numpy(); frame["u"] = feats["prefill_utilization"].to_numpy()
for t in ("ttft_ms_p50", "ttft_ms_p99", "e2e_ms_p50"):
    frame["err_" + t] = np.abs(pred[t] / frame[t] - 1)
b = usable(read_results("/work/main/build/surrogate/train_1600b")).set_index("id")
a = frame.set_index("id").loc[b.index.intersection(frame["id"])]
b = b.loc[a.index]
band = (a["ls"] >= .5) & (a["ls"] < .9)
cut = pd.cut(a["u"], [-.01, .2, .4, .6, .8, 1])
for t in ("ttft_ms_p50", "ttft_ms_p99", "e2e_ms_p50"):
    rel = (a[t] / b[t] - 1).abs()
    print(t, "noise by u (band)", (rel[band].groupby(cut[band], observed=False).median() * 100).round(1).tolist(),
          "err", (a["err_" + t][band].groupby(cut[band], observed=False).median() * 100).round(1).tolist())
print(cut[band].value_counts(sort=False).tolist())
fb = (frame["ls"] >= .5) & (frame["ls"] < .9)
cutf = pd.cut(frame["u"], [-.01, .2, .4, .6, .8, .9, 1])
print("all rows band err by u", (frame["err_ttft_ms_p50"][fb].groupby(cutf[fb], observed=False).median()*100).round(1).tolist(), cutf[fb].value_counts(sort=False).tolist())
print("u>0.6 share by ls bin", frame.groupby(pd.cut(frame["ls"], [0,.3,.5,.7,.9,1.1]), observed=False)["u"].apply(lambda s: (s > .6).mean()).round(2).tolist())
