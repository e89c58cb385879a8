"""Scalar and vector interpolation agree bitwise."""

from __future__ import annotations

import numpy as np

from latsim.costmodel.profile.interp import bilinear, bilinear_vec, interp1, interp1_vec, knots


def test_interp1_scalar_equals_vector() -> None:
    rng = np.random.default_rng(1)
    k = knots(1, 20, 5000, 1.07)
    v = rng.random(len(k)).tolist()
    x = rng.uniform(0, 7000, 500)
    vec = interp1_vec(np.asarray(k), np.asarray(v), x)
    assert vec.tolist() == [interp1(k, v, float(xi)) for xi in x]


def test_bilinear_scalar_equals_vector() -> None:
    rng = np.random.default_rng(2)
    xk, yk = knots(1, 8, 300, 1.2), knots(1, 8, 9000, 1.1)
    rows = rng.random((len(xk), len(yk)))
    for x in (1, 3, 7.5, 120, 400):
        y = rng.uniform(1, 12000, 100)
        vec = bilinear_vec(xk, np.asarray(yk), rows, x, y)
        assert vec.tolist() == [bilinear(xk, yk, rows.tolist(), x, float(yi)) for yi in y]


def test_knots_exact_at_integers() -> None:
    k = knots(1, 16, 100, 1.5)
    assert k[:16] == [float(i) for i in range(1, 17)] and k[-1] == 100.0 and k == sorted(set(k))
    assert interp1(k, [2 * x for x in k], 7.0) == 14.0
