"""The key tile of paged decode attention, read from the calibration rows, and the context it prices.

FA3 walks each sequence's keys in tiles of a fixed number of tokens (``kBlockN``, set by the head
dim and the cache's dtype) and pays the last tile whole, so a decode call's time steps at every
multiple of the tile.  The calibration grids measure contexts at powers of two, which are
multiples of every tile, so a regressor fitted on them prices the tile-exact cost and a live
batch, whose contexts rarely fill their last tile, runs slower than it: on the H200 the 8B's
256 sequences of about 612 tokens take five tiles of 128, like 640 tokens, not 4.8 (the probe in
``data/kernels/h200-decode-probe``).

:func:`decode_tiles` finds the tile from the ``decode-tiles`` grid's sweeps (equal contexts every
16 tokens): per sweep, the log of the time is fitted by least squares on the context and the
number of tiles ``ceil(ctx / N)`` for every candidate ``N``; the tile of a head dim and cache dtype
is the candidate with the least residual summed over its sweeps (relative to the fit on the
context alone), kept when the staircase explains at least :data:`MIN_EXPLAINED` of the residual.
A multiple of the true tile misses half its steps and a divisor adds steps where there are none,
so both fit worse.

The fit (:mod:`latsim.calibration.fit`) then prices each paged row at its :func:`tiled_ctx` and
the cost model a batch of mean context ``c`` at :func:`expected_ctx`: contexts spread over more
than a tile leave on average ``(N - 1) / 2`` tokens of their last tile unused.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

CANDIDATES = tuple(range(32, 257, 16))
"""Tile sizes tried (tokens): multiples of the 16-token page."""
MIN_POINTS = 8
MAX_STEP = 32
"""A sweep is a head shape's equal-context rows at one batch with at least ``MIN_POINTS``
contexts no more than ``MAX_STEP`` tokens apart (the powers of two of the other grids are not)."""
MIN_EXPLAINED = 0.2
"""The staircase must remove at least this share of the residual of the fit on the context alone."""


def _sweeps(rows: pd.DataFrame) -> list[pd.DataFrame]:
    """Equal-context paged decode rows grouped per (head shape, cache dtype, batch), each a sweep."""
    paged = rows[(rows["phase"] == "decode") & rows["impl"].astype(str).str.contains("paged")
                 & (rows.get("mix", "uniform") == "uniform")]
    out = []
    for _, g in paged.groupby(["hq", "hkv", "d", "kv", "batch"], dropna=False):
        g = g.sort_values("ctx").drop_duplicates("ctx")
        ctx = g["ctx"].to_numpy(np.float64)
        if len(g) >= MIN_POINTS:
            close = np.diff(ctx) <= MAX_STEP
            if close.sum() >= MIN_POINTS - 1:
                out.append(g[np.concatenate([[False], close]) | np.concatenate([close, [False]])])
    return out


def _residual(ctx: np.ndarray, y: np.ndarray, tile: int | None) -> float:
    cols = [np.ones_like(ctx), ctx] + ([np.ceil(ctx / tile)] if tile else [])
    x = np.column_stack(cols)
    r = y - x @ np.linalg.lstsq(x, y, rcond=None)[0]
    return float(r @ r)


def decode_tiles(rows: pd.DataFrame) -> list[dict[str, Any]]:
    """``[{"d", "kv", "tile", "sweeps", "explained"}]`` per head dim and cache dtype the sweeps
    cover (see the module note); empty without sweeps.  ``rows``: an attention table (``kv`` NaN
    or ``bf16`` for a bf16 cache)."""
    rows = rows.assign(kv=rows["kv"].astype(object).fillna("bf16") if "kv" in rows else "bf16")
    by_dim: dict[tuple[int, str], np.ndarray] = {}
    counts: dict[tuple[int, str], int] = {}
    for g in _sweeps(rows):
        ctx, y = g["ctx"].to_numpy(np.float64), np.log(g["median_s"].to_numpy(np.float64))
        plain = _residual(ctx, y, None)
        if plain <= 0.0:
            continue
        key = (int(g["d"].iloc[0]), str(g["kv"].iloc[0]))
        rel = np.array([_residual(ctx, y, n) / plain for n in CANDIDATES])
        by_dim[key] = by_dim.get(key, np.zeros(len(CANDIDATES))) + rel
        counts[key] = counts.get(key, 0) + 1
    out = []
    for (d, kv), total in sorted(by_dim.items()):
        best = int(np.argmin(total))
        explained = 1.0 - float(total[best]) / counts[(d, kv)]
        if explained >= MIN_EXPLAINED:
            out.append({"d": d, "kv": kv, "tile": CANDIDATES[best], "sweeps": counts[(d, kv)],
                        "explained": round(explained, 3)})
    return out


def tile_for(tiles: list[dict[str, Any]], d: int, kv: str) -> int:
    """The tile of head dim ``d`` over a ``kv`` cache: its own, else that of the smallest measured
    head dim above it (FA3's tiles shrink as the head grows), else 1 (no tile: contexts priced as
    they are)."""
    mine = sorted((int(t["d"]), int(t["tile"])) for t in tiles if t["kv"] == kv and int(t["d"]) >= d)
    return mine[0][1] if mine else 1


def tiled_ctx(ctx: Any, tile: Any) -> Any:
    """The context of equal-context rows rounded up to whole tiles (``tile`` per row or one)."""
    t = np.maximum(np.asarray(tile, dtype=np.float64), 1.0)
    return np.ceil(np.asarray(ctx, dtype=np.float64) / t) * t


def expected_ctx(mean_ctx: Any, tile: int) -> Any:
    """The tile-exact context a batch of mean context ``mean_ctx`` costs: half a tile more (the
    unused part of each sequence's last tile, on average), and at least one tile."""
    if tile <= 1:
        return mean_ctx
    return np.maximum(np.asarray(mean_ctx, dtype=np.float64) + (tile - 1) / 2.0, float(tile))
