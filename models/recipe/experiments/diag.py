import sys, importlib
import numpy as np, pandas as pd
import latsim.predict.features as F, latsim.predict.surrogate as S
import variants
frame = pd.read_parquet("cache/base_frame.parquet"); static = pd.read_parquet("cache/base.parquet")
for v in sys.argv[1:]:
    importlib.reload(variants); S.baseline_ms = variants.ORIG_BASELINE; F.features_at = variants.ORIG_FEATURES_AT
    variants.apply(v)
    feats = F.features_at(static, frame["qps"].to_numpy(float))
    ls = feats["load_saturated"]; u = feats["prefill_utilization"]
    for t in ("ttft_ms_p50", "ttft_ms_p99", "e2e_ms_p50"):
        lr = np.log(frame[t] / S.baseline_ms(feats, t))
        m = ls < 0.9
        g = lr[m].groupby(pd.cut(u[m], [0, .2, .4, .6, .8, .96]), observed=True).median().round(3).tolist()
        print(f"{v:16s} {t} std(ls<.9) {lr[m].std():.3f} MAD {np.median(np.abs(lr[m]-lr[m].median())):.3f} median-by-u {g}")
