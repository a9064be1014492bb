"""Float32 elementary functions that numba's CPU loops can vectorise.

A loop that calls ``math.exp`` compiles to one call of the C library's scalar ``expf`` per
element: LLVM vectorises a call only with a vector math library (Intel's SVML, which numba uses
when it is installed; it is not a dependency here). :func:`exp32` is ``exp`` in plain float32
arithmetic and one table read, so a loop over nodes that calls it vectorises.
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
