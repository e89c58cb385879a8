import numpy as np, pandas as pd
import latsim.predict.features as F
from latsim.predict.recipe import read_results
from latsim.predict.train import usable
frame = pd.read_parquet("cache/base_frame.parquet"); static = pd.read_parquet("cache/base.parquet")
feats = F.features_at(static, frame["qps"].to_numpy(float))
frame["ls"] = feats["load_saturated"].to_numpy()
b = usable(read_results("/work/main/build/surrogate/train_1600b")).set_index("id")
a = frame.set_index("id").loc[b.index.intersection(frame["id"])]
b = b.loc[a.index]
cut = pd.cut(a["ls"], [0, .5, .75, .9, 1.0, 1.1, 1.25, 1.5, 10])
for t in ("ttft_ms_p50", "ttft_ms_p99", "e2e_ms_p50"):
    rel = (a[t] / b[t] - 1).abs()
    print(t, (rel.groupby(cut, observed=False).median() * 100).round(1).tolist())
print(cut.value_counts(sort=False).tolist())
