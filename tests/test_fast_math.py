"""The CPU loops' vectorisable exps (pbsolver.backends.cpu.fast_math) against NumPy's."""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from pbsolver.backends.cpu.fast_math import (
    EXP32_HIGH,
    EXP32_LOW,
    EXP64_HIGH,
    EXP64_LOW,
    exp32,
    exp64,
)


@njit(parallel=True)
def _exp_all(x, out):
    for i in prange(x.size):
        out[i] = exp32(x[i])


@njit(parallel=True)
def _exp64_all(x, out):
    for i in prange(x.size):
        out[i] = exp64(x[i])


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


def test_exp64_within_3e_16_of_exp_over_its_range(rng):
    x = np.concatenate([
        np.linspace(EXP64_LOW, EXP64_HIGH, 2_000_001),
        rng.uniform(-12.0, 1.0, 200_000),  # the screening arguments
        np.array([0.0, -0.0, np.log(2.0) / 2, -np.log(2.0) / 2, 1.0]),
    ])  # fmt: skip
    out = np.empty_like(x)
    _exp64_all(x, out)
    exact = np.exp(x)  # itself within an ulp; the two agree to about one
    err = np.abs(out - exact) / exact
    assert err.max() < 3e-16, (x[err.argmax()], err.max())
    assert out[-5] == 1.0 and out[-4] == 1.0
    assert abs(out[-1] - np.e) <= np.spacing(np.e)


def test_exp64_holds_its_argument_to_the_range():
    x = np.array([-1000.0, EXP64_LOW, EXP64_HIGH, 1000.0])
    out = np.empty_like(x)
    _exp64_all(x, out)
    assert out[0] == out[1] > 0 and np.isfinite(out[3]) and out[3] == out[2]
