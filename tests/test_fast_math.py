"""The CPU loops' vectorisable float32 exp (pbsolver.backends.cpu.fast_math) against NumPy's."""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from pbsolver.backends.cpu.fast_math import EXP32_HIGH, EXP32_LOW, exp32


@njit(parallel=True)
def _exp_all(x, out):
    for i in prange(x.size):
        out[i] = exp32(x[i])


def test_exp32_within_3e_7_of_exp_over_its_range(rng):
    x = np.concatenate([
        np.linspace(EXP32_LOW, EXP32_HIGH, 400_001, dtype=np.float32),
        rng.uniform(-10.0, 1.0, 100_000).astype(np.float32),  # the screening arguments
        np.array([0.0, -0.0, np.log(2.0) / 2, -np.log(2.0) / 2], dtype=np.float32),
    ])  # fmt: skip
    out = np.empty_like(x)
    _exp_all(x, out)
    assert out.dtype == np.float32
    exact = np.exp(x.astype(np.float64))
    err = np.abs(out.astype(np.float64) - exact) / exact
    assert err.max() < 3e-7, (x[err.argmax()], err.max())
    assert out[-4] == 1.0 and out[-3] == 1.0


def test_exp32_holds_its_argument_to_the_range():
    x = np.array([-200.0, EXP32_LOW, EXP32_HIGH, 200.0], dtype=np.float32)
    out = np.empty_like(x)
    _exp_all(x, out)
    assert out[0] == out[1] > 0 and np.isfinite(out[3]) and out[3] == out[2]
