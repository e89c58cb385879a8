"""The rows 4-bit Machete computes for an M-row GEMM: vLLM 0.25.1's schedule choice on Hopper.

vLLM runs 4-bit weight-only layers (GPTQ, AWQ, compressed-tensors w4a16) with Machete on Hopper
when the layer's K is a multiple of 64 and its N of 128 (``latsim.calibration.gemm``).  Machete
picks one of a few schedules from M, K and N (its default heuristic, written for the H100), and a
schedule computes M in whole tiles of a fixed number of rows, so an M-row call takes as long as
the next multiple of its tile.  The rows per tile by M (``m_tile``):

- 17-32 rows: 32;
- 33-64 rows: 16 when K and N are both at most 6,144, else 64;
- 65-128 rows: 32 when K and N are both at most 4,069 (the heuristic's constant, not 4,096), 64
  when K is at most 4,069 and N at most 8,192, else 128.

The calibration grids time M at 16, 24, 32, 48, 64, 96 and 128 rows, multiples of every tile
above, so the rows are right but a regressor fitted on them puts each step midway between two
grid rows: on the 70B's layers (one tile of 64 over 33-64 rows) it priced 40 rows as 125 us where
48 and 64 rows measure 145 (``data/kernels/README.md``, the GPTQ 70B's live decode steps of 33-48
sequences 9 % slower than priced).  :func:`padded_rows` gives the rows to price instead.  Up to 16
rows (one tile of 16; the grid times 1, 2, 4, 8 and 16 rows) and past 128 (the grids time every 8
to 16 rows there) M is priced as it is.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

Arr = npt.NDArray[np.float64]

SMALL_33_64 = 6144
"""33-64 rows: a 16-row tile when K and N are both at most this."""
SMALL_65_128 = 4069
"""65-128 rows: a 32- or 64-row tile when K (and N) are at most this (vLLM's constant)."""


def takes_shape(k: int, n: int) -> bool:
    """Whether vLLM runs a 4-bit layer of ``k`` x ``n`` with Machete (else Marlin)."""
    return k % 64 == 0 and n % 128 == 0


def m_tile(m: Arr, k: int, n: int) -> Arr:
    """Rows per tile of the schedule Machete picks for ``m`` rows of a ``k`` x ``n`` layer, 0 where
    M is priced as it is (at most 16 or above 128 rows)."""
    tile_33_64 = 16 if (k <= SMALL_33_64 and n <= SMALL_33_64) else 64
    if k <= SMALL_65_128 and n <= SMALL_65_128:
        tile_65_128 = 32
    elif k <= SMALL_65_128 and n <= 8192:
        tile_65_128 = 64
    else:
        tile_65_128 = 128
    return np.select([m <= 16, m <= 32, m <= 64, m <= 128], [0.0, 32.0, float(tile_33_64), float(tile_65_128)], 0.0)


def padded_rows(m: Arr, k: int, n: int) -> Arr:
    """The rows Machete computes for ``m`` rows (whole tiles, :func:`m_tile`); ``m`` itself for a
    shape Machete does not take, and at most 16 or above 128 rows."""
    m = np.asarray(m, dtype=np.float64)
    if not takes_shape(k, n):
        return m
    tile = m_tile(m, k, n)
    return np.where(tile > 0, np.ceil(m / np.where(tile > 0, tile, 1.0)) * tile, m)
