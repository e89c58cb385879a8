import sys
import numpy as np, pandas as pd
import latsim.predict.features as F
frame = pd.read_parquet("cache/base_frame.parquet"); static = pd.read_parquet("cache/base.parquet")
feats = F.features_at(static, frame["qps"].to_numpy(float))
ls = feats["load_saturated"].to_numpy()
bins = [0, 0.5, 0.75, 0.9, 1.0, 1.1, 1.25, 1.5, 10]
cut = pd.cut(ls, bins)
rows = {}
for tag in sys.argv[1:]:
    p = pd.read_parquet(f"cache/pred_{tag}.parquet")
    for t in ("ttft_ms_p50", "ttft_ms_p99", "e2e_ms_p50", "tpot_ms_p50"):
        rel = np.abs(p[t].to_numpy() / frame[t].to_numpy() - 1)
        rows[(tag, t)] = pd.Series(rel).groupby(cut, observed=False).median()
df = pd.DataFrame(rows).T
df["n"] = 0
print((df.drop(columns="n") * 100).round(1).to_string())
print(pd.Series(cut).value_counts(sort=False).to_string())
