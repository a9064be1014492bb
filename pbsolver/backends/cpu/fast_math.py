"""Elementary functions that numba's CPU loops can vectorise: ``exp`` in float32 and float64.

A loop that calls ``math.exp`` compiles to one call of the C library's scalar ``exp``/``expf``
per element: LLVM vectorises a call only with a vector math library (Intel's SVML, which numba
uses when it is installed; it is not a dependency here). :func:`exp32` and :func:`exp64` are
``exp`` in plain arithmetic and one table read, so a loop over nodes that calls them vectorises.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

_f32 = np.float32
#: 2**n for n = −126 … 127 (index n + 126): the scale of the reduced argument.
_POWERS_OF_TWO = np.array([2.0**n for n in range(-126, 128)], dtype=np.float32)
_LOG2_E = _f32(1.0 / math.log(2.0))
# ln 2 in two parts (Cody and Waite): n·_LN2_HIGH is exact in float32 for |n| < 2**8
_LN2_HIGH, _LN2_LOW = _f32(0.693359375), _f32(math.log(2.0) - 0.693359375)
_C2, _C3, _C4, _C5, _C6 = (_f32(1.0 / math.factorial(k)) for k in range(2, 7))
_ONE, _HALF = _f32(1.0), _f32(0.5)
#: The argument range kept: below it the result would be subnormal, above it overflow.
EXP32_LOW, EXP32_HIGH = _f32(-87.0), _f32(88.0)


@njit(cache=True, inline="always", fastmath={"reassoc", "contract", "nsz", "arcp"})
def exp32(x):
    """e**x in float32 for float32 ``x``, within 3e-7 relative for x in [−87, 88].

    x = n ln 2 + r with |r| ≤ ln 2 / 2; e**r by its Taylor polynomial of degree 6 (its
    remainder is below 1.2e-7 there); e**x = 2**n e**r. ``x`` is held to [−87, 88], so the
    result is not 0 or inf outside it (the callers' arguments lie inside). Not for NaN.
    """
    x = min(max(x, EXP32_LOW), EXP32_HIGH)
    n = math.floor(x * _LOG2_E + _HALF)
    fn = _f32(n)
    r = x - fn * _LN2_HIGH - fn * _LN2_LOW
    p = _ONE + r * (_ONE + r * (_C2 + r * (_C3 + r * (_C4 + r * (_C5 + r * _C6)))))
    return p * _POWERS_OF_TWO[n + 126]


#: 2**n for n = −1022 … 1023 (index n + 1022), float64.
_POWERS_OF_TWO_64 = np.array([2.0**n for n in range(-1022, 1024)])
_LOG2_E_64 = 1.0 / math.log(2.0)
# ln 2 in two parts (fdlibm's): n·_LN2_HIGH_64 is exact in float64 for |n| < 2**20
_LN2_HIGH_64, _LN2_LOW_64 = 6.93147180369123816490e-01, 1.90821492927058770002e-10
_D2, _D3, _D4, _D5, _D6, _D7, _D8, _D9, _D10, _D11, _D12, _D13 = (
    1.0 / math.factorial(k) for k in range(2, 14)
)
#: The argument range kept (float64): below it the result would be subnormal, above it overflow.
EXP64_LOW, EXP64_HIGH = -708.0, 709.0


@njit(cache=True, inline="always", fastmath={"reassoc", "contract", "nsz", "arcp"})
def exp64(x):
    """e**x in float64, within 3e-16 relative for x in [−708, 709].

    As :func:`exp32`: x = n ln 2 + r with |r| ≤ ln 2 / 2; e**r by its Taylor polynomial of
    degree 13 (its remainder is below 5e-18 there); e**x = 2**n e**r. ``x`` is held to
    [−708, 709]. Not for NaN.
    """
    x = min(max(x, EXP64_LOW), EXP64_HIGH)
    n = math.floor(x * _LOG2_E_64 + 0.5)
    r = (x - n * _LN2_HIGH_64) - n * _LN2_LOW_64
    p = _D11 + r * (_D12 + r * _D13)
    p = _D7 + r * (_D8 + r * (_D9 + r * (_D10 + r * p)))
    p = 1.0 + r * (1.0 + r * (_D2 + r * (_D3 + r * (_D4 + r * (_D5 + r * (_D6 + r * p))))))
    return p * _POWERS_OF_TWO_64[int(n) + 1022]
