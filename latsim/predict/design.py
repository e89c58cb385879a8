"""The surrogate's training design: a scrambled Sobol sample over the configuration space.

Each Sobol dimension maps to one grid column (:data:`latsim.predict.features.GRID_COLUMNS`):
categorical ones (model, device, weight dtype, replicas) by equal-width bins of the unit
interval, numeric ones log-uniformly or uniformly over :data:`DOMAIN`.  The rate is drawn as a
*load*, a multiple of the deployment's estimated capacity
(:func:`latsim.predict.features.features`), so every deployment is sampled from idle to past
saturation.  TP starts at the sampled value and is raised to the next one that divides the
heads and fits in memory; a point no TP fits is dropped (and counted).

``python -m latsim.predict.design --n 1024 --seed 0 --out models/recipe/points.csv`` writes the
points file the recipe simulates (:mod:`latsim.predict.recipe`).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import numpy as np
import pandas as pd
from scipy.stats import qmc

from latsim.atomic import atomic_write_text

TPS = (1, 2, 4, 8)
REPLICAS = (1, 2, 4)
WEIGHT_DTYPES = ("bf16", "fp8")
DOMAIN: dict[str, tuple[float, float]] = {
    "load": (0.1, 1.4),
    "input_median": (64.0, 2048.0),
    "input_sigma": (0.0, 1.0),
    "output_median": (16.0, 512.0),
    "output_sigma": (0.0, 1.0),
    "prefix_share": (0.0, 0.8),
    "max_num_seqs": (32.0, 1024.0),
    "max_num_batched_tokens": (2048.0, 16384.0),
}
"""Numeric ranges of the sample (lengths and engine limits drawn log-uniformly)."""
LOG_UNIFORM = ("input_median", "output_median", "max_num_seqs", "max_num_batched_tokens")
DIMENSIONS = ("model", "device", "tp", "replicas", "weight_dtype", *DOMAIN)


def sample(n: int, seed: int, models: Sequence[str] | None = None,
           devices: Sequence[str] | None = None) -> tuple[pd.DataFrame, int]:
    """``(points, dropped)``: up to ``n`` configurations (one per row, with ``id``, ``seed`` and the
    sampled ``load``) and how many Sobol points no TP could host.  Ids are ``seed x n + i`` for the
    ``i``-th Sobol point, so samples of other seeds (and the same ``n``) never share an id."""
    from latsim import list_devices, list_models

    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    models = list(models or list_models())
    devices = list(devices or [d.name for d in list_devices()])
    unit = qmc.Sobol(d=len(DIMENSIONS), scramble=True, seed=seed).random(n)
    rows, dropped = [], 0
    for i, u in enumerate(unit):
        row = _point(dict(zip(DIMENSIONS, u, strict=True)), models, devices)
        if row is None:
            dropped += 1
            continue
        rows.append({"id": seed * n + i, **row, "seed": seed * 100003 + i})
    return pd.DataFrame(rows), dropped


def _pick(u: float, options: Sequence) -> object:
    return options[min(int(u * len(options)), len(options) - 1)]


def _point(u: dict[str, float], models: list[str], devices: list[str]) -> dict | None:
    from latsim.predict.features import features

    row: dict[str, object] = {"model": _pick(u["model"], models), "device": _pick(u["device"], devices),
                              "replicas": _pick(u["replicas"], REPLICAS),
                              "weight_dtype": _pick(u["weight_dtype"], WEIGHT_DTYPES), "kv_dtype": "bf16"}
    for name, (lo, hi) in DOMAIN.items():
        t = u[name]
        row[name] = float(np.exp(np.log(lo) + t * np.log(hi / lo))) if name in LOG_UNIFORM else lo + t * (hi - lo)
    row["max_num_seqs"] = round(float(row["max_num_seqs"]))  # type: ignore[arg-type]
    row["max_num_batched_tokens"] = round(float(row["max_num_batched_tokens"]))  # type: ignore[arg-type]
    start = TPS.index(_pick(u["tp"], TPS))
    for tp in TPS[start:]:
        row.update(tp=tp, qps=1.0)
        try:
            feats = features(pd.DataFrame([row]))
        except ValueError:
            continue
        row["qps"] = float(row["load"]) / float(feats["load"].iloc[0])  # type: ignore[arg-type]
        return row
    return None


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1024)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    points, dropped = sample(args.n, args.seed)
    header = (f"# latsim surrogate design: scrambled Sobol, n={args.n}, seed={args.seed}, "
              f"{len(points)} points kept, {dropped} dropped (no TP fits)\n")
    atomic_write_text(args.out, header + points.to_csv(index=False))
    print(f"{args.out}: {len(points)} points ({dropped} dropped)")


if __name__ == "__main__":
    main()
