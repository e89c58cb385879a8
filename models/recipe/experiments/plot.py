import numpy as np, pandas as pd, matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import latsim.predict.features as F
frame = pd.read_parquet("cache/base_frame.parquet"); static = pd.read_parquet("cache/base.parquet")
ls = F.features_at(static, frame["qps"].to_numpy(float))["load_saturated"].to_numpy()
edges = np.array([0, .25, .5, .65, .75, .85, .9, .95, 1.0, 1.05, 1.1, 1.2, 1.3, 1.5, 2, 4])
mid = np.arange(len(edges) - 1)
fig, axes = plt.subplots(1, 3, figsize=(15, 4))
for ax, t in zip(axes, ("ttft_ms_p50", "ttft_ms_p99", "e2e_ms_p50")):
    for tag, label in (("base", "shipped (squared loss, no overload wait)"), ("lib", "absolute loss + overload wait"),
                       ("lib_s3", "... + seed-3 rows (train only)")):
        p = pd.read_parquet(f"cache/pred_{tag}.parquet")
        rel = np.abs(p[t].to_numpy() / frame[t].to_numpy() - 1)
        med = [np.median(rel[(ls >= a) & (ls < b)]) * 100 for a, b in zip(edges[:-1], edges[1:])]
        ax.plot(mid, med, marker="o", label=label)
    ax.set_xticks(mid, [f"{a:g}-{b:g}" for a, b in zip(edges[:-1], edges[1:])], rotation=60, fontsize=7)
    ax.set_title(f"{t}: held-out median |pred/sim-1| (%)"); ax.set_xlabel("load over the saturated capacity")
    ax.grid(alpha=.3)
axes[0].legend(fontsize=7)
fig.tight_layout(); fig.savefig("err_by_load.png", dpi=90)
