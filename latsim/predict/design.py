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
LOAD_BASES = {"estimated": "load", "saturated": "load_saturated"}
"""The capacities a sample's load can be drawn relative to, and the feature that is the rate over each."""


def sample(n: int, seed: int, models: Sequence[str] | None = None,
           devices: Sequence[str] | None = None, load_basis: str = "estimated",
           load_range: tuple[float, float] | None = None) -> tuple[pd.DataFrame, int]:
    """``(points, dropped)``: up to ``n`` configurations (one per row, with ``id``, ``seed``, the
    ``load`` over the estimated (mean-value) capacity and, for ``load_basis="saturated"``,
    ``load_saturated`` over the saturated one) and how many Sobol points no TP could host.  Ids
    are ``seed x n + i`` for the ``i``-th Sobol point, so samples of other seeds (and the same
    ``n``) never share an id.

    The load is drawn uniformly over ``load_range`` (default ``DOMAIN["load"]``) as a multiple of
    the capacity ``load_basis`` names: ``"estimated"`` (the mean-value capacity, the default and
    the first three samples') or ``"saturated"`` (the saturated-cycle capacity,
    :func:`latsim.predict.features.saturated_request_s`: a sample concentrated where the
    simulator saturates)."""
    if load_basis not in LOAD_BASES:
        raise ValueError(f"load_basis must be one of {', '.join(LOAD_BASES)}, got {load_basis!r}")
    lo, hi = load_range if load_range is not None else DOMAIN["load"]
    if not 0 < lo <= hi:
        raise ValueError(f"load_range must be 0 < lo <= hi, got {lo}, {hi}")
    from latsim import list_devices, list_models

    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    models = list(models or list_models())
    devices = list(devices or [d.name for d in list_devices()])
    unit = qmc.Sobol(d=len(DIMENSIONS), scramble=True, seed=seed).random(n)
    rows, dropped = [], 0
    for i, u in enumerate(unit):
        row = _point(dict(zip(DIMENSIONS, u, strict=True)), models, devices, LOAD_BASES[load_basis], (lo, hi))
        if row is None:
            dropped += 1
            continue
        rows.append({"id": seed * n + i, **row, "seed": seed * 100003 + i})
    return pd.DataFrame(rows), dropped


def _pick(u: float, options: Sequence) -> object:
    return options[min(int(u * len(options)), len(options) - 1)]


def _point(u: dict[str, float], models: list[str], devices: list[str], basis: str = "load",
           load_range: tuple[float, float] = DOMAIN["load"]) -> dict | None:
    from latsim.predict.features import features

    row: dict[str, object] = {"model": _pick(u["model"], models), "device": _pick(u["device"], devices),
                              "replicas": _pick(u["replicas"], REPLICAS),
                              "weight_dtype": _pick(u["weight_dtype"], WEIGHT_DTYPES), "kv_dtype": "bf16"}
    for name, (lo, hi) in {**DOMAIN, "load": load_range}.items():
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
        row["qps"] = float(row["load"]) / float(feats[basis].iloc[0])  # type: ignore[arg-type]
        if basis != "load":  # the sampled load is over another capacity: keep it, and the estimated one
            row["load_saturated"] = row["load"]
            row["load"] = row["qps"] * float(feats["load"].iloc[0])  # type: ignore[operator]
        return row
    return None


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1024)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=True)
    parser.add_argument("--load-basis", choices=tuple(LOAD_BASES), default="estimated",
                        help="the capacity the load is a multiple of (default: the mean-value estimate)")
    parser.add_argument("--load-range", type=float, nargs=2, metavar=("LO", "HI"), default=None,
                        help=f"the range the load is drawn from (default {DOMAIN['load'][0]} {DOMAIN['load'][1]})")
    args = parser.parse_args(argv)
    points, dropped = sample(args.n, args.seed, load_basis=args.load_basis,
                             load_range=tuple(args.load_range) if args.load_range else None)
    lo, hi = args.load_range or DOMAIN["load"]
    header = (f"# latsim surrogate design: scrambled Sobol, n={args.n}, seed={args.seed}, "
              f"load {lo:g}-{hi:g} x the {args.load_basis} capacity, "
              f"{len(points)} points kept, {dropped} dropped (no TP fits)\n")
    atomic_write_text(args.out, header + points.to_csv(index=False))
    print(f"{args.out}: {len(points)} points ({dropped} dropped)")


if __name__ == "__main__":
    main()
