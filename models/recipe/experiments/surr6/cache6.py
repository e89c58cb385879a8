"""cache6.py: cache the card's rows (seeds 0-2, 4-11) and the training-only seed-3 rows with their
static features (this tree's latsim.predict.features) in build/exp6/{card,s3}{_frame,}.parquet."""
import time
from pathlib import Path

import latsim.predict.features as F
from latsim.predict.train import read_all

R = Path(__file__).resolve().parents[4]
C = R / "build" / "exp6"
S = R / "build" / "surrogate"
SETS = {"card": [S / "train_1600"] + [S / f"train_1600_s{k}" for k in (1, 2, 4, 5, 6, 7, 8, 9, 10, 11)],
        "s3": [S / "train_1600_s3"]}
for name, folders in SETS.items():
    t = time.time()
    frame = read_all([str(f) for f in folders])
    static = F.static_features(frame)
    frame.to_parquet(C / f"{name}_frame.parquet")
    static.to_parquet(C / f"{name}.parquet")
    print(name, len(frame), f"{time.time() - t:.0f}s", flush=True)
