"""Milliseconds per configuration of the shipped surrogate on 10,000 configurations.

``PYTHONPATH=. python bench/bench_surrogate.py [--n 10000] [--deployments 216]``: a planner's
grid (:func:`grid`) predicted in one ``.predict`` call; loading the surrogate and building
every deployment's cost model are counted, once.  Not a test: wall time depends on the machine.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd


def grid(n: int, deployments: int, seed: int = 0) -> pd.DataFrame:
    """``n`` configurations as a planner would ask: ``deployments // 9`` (model, GPU, TP) picks of
    the design that fit, each x replicas {1, 2, 4} x max_num_seqs {128, 256, 1024}, x rates and
    lengths drawn at random."""
    from latsim.predict.design import sample

    points, _ = sample(max(1, deployments // 9), seed)
    base = points[["model", "device", "tp", "weight_dtype", "kv_dtype", "qps", "load"]].assign(
        capacity=points["qps"] / points["load"] / points["replicas"])  # per replica
    rows = [{**b, "replicas": r, "max_num_seqs": s, "max_num_batched_tokens": 8192}
            for b in base.to_dict("records") for r in (1, 2, 4) for s in (128, 256, 1024)]
    rng = np.random.default_rng(seed)
    picks = pd.DataFrame(rows).iloc[rng.integers(0, len(rows), n)].reset_index(drop=True)
    picks["qps"] = picks["capacity"] * picks["replicas"] * rng.uniform(0.05, 1.0, n)
    picks["input_median"] = rng.choice([256.0, 600.0, 1500.0], n)
    picks["input_sigma"] = 0.8
    picks["output_median"] = rng.choice([64.0, 150.0, 400.0], n)
    picks["output_sigma"] = 0.6
    picks["prefix_share"] = 0.0
    return picks.drop(columns=["load", "capacity"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--deployments", type=int, default=216)
    args = parser.parse_args()
    frame = grid(args.n, args.deployments)
    from latsim.predict.features import clear_caches

    clear_caches()
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
