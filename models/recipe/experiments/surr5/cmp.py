import json, sys
from pathlib import Path
import numpy as np
H = Path(__file__).resolve().parents[4] / "build" / "exp5"
T = ("ttft_ms_p50", "ttft_ms_p99", "e2e_ms_p50", "tpot_ms_p50", "tpot_ms_p99", "e2e_ms_p99", "ttft_ms_p90", "throughput_rps")
base = json.load(open(H / f"res_{sys.argv[1]}.json"))
for tag in sys.argv[1:]:
    r = json.load(open(H / f"res_{tag}.json"))
    cells = []
    for t in T:
        f = np.array([r["folds"][str(k)][t] for k in range(5)]) * 100
        d = f - np.array([base["folds"][str(k)][t] for k in range(5)]) * 100
        cells.append(f"{t} {r['pooled'][t]['median']*100:.2f} [{f.min():.1f}-{f.max():.1f}] {d.mean():+.2f}±{d.std(ddof=1):.2f}")
    print(f"{tag:22s}", " | ".join(cells), f"| st {r['pooled']['stable']['accuracy_away_from_boundary']*100:.1f} | {r['size_mib']:.1f}MiB {r['seconds']:.0f}s")
