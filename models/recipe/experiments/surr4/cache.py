"""Cache frame + static features + extras per row set. Usage: cache.py NAME FOLDER ..."""
import sys, time
from pathlib import Path
import pandas as pd
import latsim.predict.features as F
from latsim.predict.train import read_all
from extras import extras, extras_row

C = Path(__file__).parent / "cache"
name, folders = sys.argv[1], sys.argv[2:]
t = time.time()
frame = read_all(folders)
rows_s, rows_e = [], []
for i, key in enumerate(F._keys(frame)):
    rows_s.append(F._static(*key))
    rows_e.append(extras_row(key))
    if i % 500 == 0:
        print(name, i, f"{time.time() - t:.0f}s", flush=True)
static = pd.DataFrame(rows_s, columns=[*F.STATIC_FEATURES, *F._HIDDEN], index=frame.index)
from extras import EXTRA
ex = pd.DataFrame(rows_e, columns=EXTRA, index=frame.index)
frame.to_parquet(C / f"{name}_frame.parquet")
pd.concat([static, ex], axis=1).to_parquet(C / f"{name}.parquet")
print(name, len(frame), f"{time.time() - t:.0f}s")
