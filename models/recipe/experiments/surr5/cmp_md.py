"""cmp_md.py REF TAG ...: markdown rows (pooled median [fold range] (paired per-fold difference mean +- sd))."""
import json
import sys
from pathlib import Path

import numpy as np

H = Path(__file__).resolve().parents[4] / "build" / "exp5"
T = ("ttft_ms_p50", "ttft_ms_p90", "ttft_ms_p99", "e2e_ms_p50", "tpot_ms_p50", "tpot_ms_p99")
base = json.load(open(H / f"res_{sys.argv[1]}.json"))
print("| variant | " + " | ".join(T) + " |")
for tag in sys.argv[1:]:
    r = json.load(open(H / f"res_{tag}.json"))
    cells = []
    for t in T:
        f = np.array([r["folds"][str(k)][t] for k in range(5)]) * 100
        d = f - np.array([base["folds"][str(k)][t] for k in range(5)]) * 100
        cell = f"{r['pooled'][t]['median'] * 100:.2f} % [{f.min():.1f}-{f.max():.1f}]"
        if tag != sys.argv[1]:
            cell += f" ({d.mean():+.2f} +- {d.std(ddof=1):.2f})"
        cells.append(cell)
    print(f"| {tag} | " + " | ".join(cells) + " |")
