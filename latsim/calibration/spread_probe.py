"""Decode attention over spread contexts, timed for the spread table (:mod:`latsim.costmodel.spread`).

The paged grid times decode batches whose sequences all hold the same context; a serving batch
spans contexts of many lengths, and FA3's call over them costs more than over equal contexts of
the same total (its splits of the keys no longer balance over the SMs).  This probe times that
excess: pairs of the grid's own paged call (:func:`latsim.calibration.attention.time_paged_decode`),
one over contexts drawn log-normal and, right after, one over equal contexts of the same total:

- ``grid``: sigma 0.8, means of 512-8,192 tokens, batches of 2-256 sequences, three head
  shapes (8, 4 and 32 KV heads), two draws each;
- ``sigma``: sigma 0.05-1.2 at 16 and 64 sequences of mean 1,024 and 4,096 (how much spread it
  takes to pay the whole excess).

:func:`run_spread_probe` writes them as ``skew_grid.json`` (atomically), which
:func:`latsim.calibration.spread_fit.document` fits into ``decode_spread.json``.  About 40 s
on an H200 (296 pairs).  ``latsim calibrate`` runs it after a full grid whose decode attention
ran over vLLM's paged cache, and the fit after the regressors.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from latsim.atomic import atomic_write_text

SKEW_GRID_FILE = "skew_grid.json"
SHAPES = {"llama-8b": (32, 8, 128), "qwen-7b": (28, 4, 128), "phi-3": (32, 32, 96)}
"""(query heads, KV heads, head dim) of the grid's head shapes, on one GPU."""
GRID_BATCHES = (2, 4, 8, 16, 32, 64, 128, 256)
GRID_MEANS = (512, 1024, 2048, 4096, 8192)
GRID_SIGMA = 0.8
SIGMA_SHAPE = "llama-8b"
SIGMA_BATCHES = (16, 64)
SIGMA_MEANS = (1024, 4096)
SIGMAS = (0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.2)
DRAWS = (0, 1)
MAX_TOKENS = 2**21
"""Largest summed context of a case (the paged grid's own cap)."""

TimeCall = Callable[[tuple[int, int, int], list[int]], dict[str, float]]
"""Times one decode call over the given contexts: ``us`` (median), ``p10_us``, ``p90_us``, ``reps``."""


def scaled(weights: Any, mean: int) -> list[int]:
    """Contexts in proportion to ``weights``, averaging ``mean`` (each at least one token)."""
    w = np.asarray(weights, dtype=np.float64)
    return [max(1, round(mean * x)) for x in w / w.mean()]


def lognormal(batch: int, mean: int, sigma: float, draw: int) -> list[int]:
    """``batch`` contexts log-normal with ``sigma``, scaled to average ``mean`` (seeded by all four)."""
    rng = np.random.default_rng([batch, mean, round(sigma * 100), draw])
    return scaled(np.exp(sigma * rng.standard_normal(batch)), mean)


def pair(time_call: TimeCall, shape: str, heads: tuple[int, int, int], k_lens: list[int],
         **labels: Any) -> dict[str, Any]:
    """One spread batch and the equal batch of the same total, timed back to back."""
    equal = [round(sum(k_lens) / len(k_lens))] * len(k_lens)
    spread_t, equal_t = time_call(heads, k_lens), time_call(heads, equal)
    return {"shape": shape, "batch": len(k_lens), **labels, "lens": k_lens, "mean": float(np.mean(k_lens)),
            "max": max(k_lens), "cv": float(np.std(k_lens) / np.mean(k_lens)), **spread_t,
            "equal_us": equal_t["us"], "equal_p10_us": equal_t["p10_us"], "equal_p90_us": equal_t["p90_us"]}


def plan() -> list[tuple[str, list[int], dict[str, Any]]]:
    """Every case of the probe in run order: (shape, contexts, labels)."""
    out = []
    for shape in SHAPES:
        for batch in GRID_BATCHES:
            for mean in GRID_MEANS:
                if batch * mean <= MAX_TOKENS:
                    out += [(shape, lognormal(batch, mean, GRID_SIGMA, draw),
                             {"case": "grid", "sigma": GRID_SIGMA, "draw": draw}) for draw in DRAWS]
    for batch in SIGMA_BATCHES:
        for mean in SIGMA_MEANS:
            for sigma in SIGMAS:
                out += [(SIGMA_SHAPE, lognormal(batch, mean, sigma, draw),
                         {"case": "sigma", "sigma": sigma, "draw": draw}) for draw in DRAWS]
    return out


def run_spread_probe(path: Path, time_call: TimeCall, gpu: str,
                     on_case: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Time every case of :func:`plan` with ``time_call`` and write them to ``path`` (the
    ``skew_grid.json`` layout: ``gpu``, ``shapes``, ``cases``); returns what was written."""
    cases = []
    for shape, k_lens, labels in plan():
        case = pair(time_call, shape, SHAPES[shape], k_lens, **labels)
        cases.append(case)
        if on_case is not None:
            on_case(case)
    data = {"gpu": gpu, "shapes": {k: list(v) for k, v in SHAPES.items()}, "cases": cases}
    atomic_write_text(path, json.dumps(data) + "\n")
    return data


def device_time_call(ctx: Any) -> TimeCall:
    """The probe's timer on a CUDA context with vLLM's FA3: the paged grid's own decode call."""
    from latsim.calibration.attention import time_paged_decode

    return lambda heads, k_lens: time_paged_decode(ctx, heads, k_lens)
