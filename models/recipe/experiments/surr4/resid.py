"""resid.py TAG [lo hi]: held-out residuals of TAG in load_saturated band [lo, hi) by variables."""
import sys
import numpy as np, pandas as pd
import latsim.predict.features as F
from pathlib import Path
C = Path(__file__).parent / "cache"
tag = sys.argv[1]; lo, hi = (float(sys.argv[2]), float(sys.argv[3])) if len(sys.argv) > 3 else (0.5, 0.9)
frame = pd.read_parquet(C / "base_frame.parquet"); static = pd.read_parquet(C / "base.parquet")
feats = F.features_at(static, frame["qps"].to_numpy(float))
pred = pd.read_parquet(C / f"pred_{tag}.parquet")
ls = feats["load_saturated"].to_numpy()
m = (ls >= lo) & (ls < hi)
print("rows in band", m.sum(), "of", len(m))
df = pd.DataFrame({"model": frame["model"], "device": frame["device"], "tp": frame["tp"], "replicas": frame["replicas"],
                   "wd": frame["weight_dtype"],
                   "in_med": pd.qcut(frame["input_median"], 4), "in_sig": pd.qcut(frame["input_sigma"], 3),
                   "out_med": pd.qcut(frame["output_median"], 4),
                   "prefix": pd.qcut(frame["prefix_share"], 4), "mbt": pd.qcut(frame["max_num_batched_tokens"], 4),
                   "mns": pd.qcut(frame["max_num_seqs"], 4), "kvlim": feats["kv_limited"],
                   "ls": pd.cut(ls, [0, .3, .5, .6, .7, .8, .9, 1.0, 1.1, 1.25, 1.5, 10]),
                   "bshare": pd.qcut(feats["batch_share_at_load"], 5),
                   "util": pd.cut(feats["prefill_utilization"], [-.01, .05, .1, .2, .4, .6, 1]),
                   "stable": frame["stable"]})
for t in sys.argv[4:] or ("ttft_ms_p50", "ttft_ms_p99", "e2e_ms_p50"):
    lr = np.log(pred[t].to_numpy() / frame[t].to_numpy())
    df["signed"] = lr; df["abs"] = np.abs(np.exp(lr) - 1)
    print(f"\n=== {t}: band median abs {np.median(df['abs'][m])*100:.2f} signed {np.median(lr[m])*100:+.2f}")
    for col in ["ls", "model", "device", "tp", "replicas", "wd", "in_med", "in_sig", "out_med", "prefix", "mbt", "mns", "kvlim", "bshare", "util", "stable"]:
        g = df[m].groupby(col, observed=True)
        tab = pd.DataFrame({"n": g.size(), "abs%": g["abs"].median() * 100, "signed%": g["signed"].median() * 100})
        if col == "ls":
            g2 = df.groupby(col, observed=True)
            tab = pd.DataFrame({"n": g2.size(), "abs%": g2["abs"].median() * 100, "signed%": g2["signed"].median() * 100})
        print(f"-- {col}\n" + tab.round(1).to_string())
