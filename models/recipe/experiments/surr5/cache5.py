"""cache5.py NAME FOLDER ...: cache a recipe folder's usable rows and their static features
(this tree's latsim.predict.features) as build/exp5/NAME_frame.parquet and NAME.parquet."""
import sys
import time
from pathlib import Path

import latsim.predict.features as F
from latsim.predict.train import read_all

C = Path(__file__).resolve().parents[4] / "build" / "exp5"
name, folders = sys.argv[1], sys.argv[2:]
t = time.time()
frame = read_all(folders)
static = F.static_features(frame)
frame.to_parquet(C / f"{name}_frame.parquet")
static.to_parquet(C / f"{name}.parquet")
print(name, len(frame), f"{time.time() - t:.0f}s")
