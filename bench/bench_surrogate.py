"""Milliseconds per configuration of the shipped surrogate on 10,000 configurations.

``python bench/bench_surrogate.py [--n 10000] [--deployments 200]``: a grid of ``--deployments``
distinct deployments (catalog models x devices x TP x replicas) times rates and lengths,
predicted in one ``.predict`` call; loading the surrogate is counted once.  Not a test: wall
time depends on the machine.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd


def grid(n: int, deployments: int, seed: int = 0) -> pd.DataFrame:
    """``n`` configurations over ``deployments`` distinct deployments that fit their GPU."""
    from latsim.predict.design import sample

    points, _ = sample(deployments, seed)
    rng = np.random.default_rng(seed)
    picks = points.iloc[rng.integers(0, len(points), n)].reset_index(drop=True)
    picks["qps"] = picks["qps"] * rng.uniform(0.2, 1.0, n) / picks["load"].clip(lower=0.2)
    return picks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--deployments", type=int, default=256)
    args = parser.parse_args()
    frame = grid(args.n, args.deployments)
    from latsim.predict.features import _priced, _static

    _static.cache_clear()
    _priced.cache_clear()
    start = time.perf_counter()
    from latsim.predict import load_surrogate

    surrogate = load_surrogate()
    loaded = time.perf_counter()
    pred = surrogate.predict(frame)
    done = time.perf_counter()
    print(f"{len(frame)} configurations over {frame[['model', 'device', 'tp', 'replicas']].drop_duplicates().shape[0]}"
          f" deployments: load {1e3 * (loaded - start):.0f} ms, predict {1e3 * (done - loaded):.0f} ms, "
          f"{1e3 * (done - start) / len(frame):.3f} ms per configuration (loading included); "
          f"{int(pred['in_domain'].sum())} in domain")


if __name__ == "__main__":
    main()
