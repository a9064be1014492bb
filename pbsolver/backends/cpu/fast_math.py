"""Elementary functions that numba's CPU loops can vectorise: ``exp`` in float32 and float64.

A loop that calls ``math.exp`` compiles to one call of the C library's scalar ``exp``/``expf``
per element: LLVM vectorises a call only with a vector math library (Intel's SVML, which numba
uses when it is installed; it is not a dependency here). :func:`exp32` and :func:`exp64` are
``exp`` in plain arithmetic and one reinterpretation of an integer's bits as a float (2**n
built from its exponent field, not read from a table: a table read in a vector loop is a
gather), so a loop over nodes that calls them vectorises.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, types
from numba.extending import intrinsic

_FASTMATH = {"reassoc", "contract", "nsz", "arcp"}


@intrinsic
def _float_from_bits(typingctx, bits):
    """The float whose bit pattern is ``bits``: float32 from int32, float64 from int64."""
    result = {types.int32: types.float32, types.int64: types.float64}.get(bits)
    if result is None:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(signature.return_type))

    return result(bits), codegen


def _make_exp(ftype, low, high, ln2_high, ln2_low, degree):
    """e**x in ``ftype`` arithmetic for x in [``low``, ``high``].

    x = n ln 2 + r with |r| ≤ ln 2 / 2 (ln 2 = ``ln2_high`` + ``ln2_low``, Cody and Waite:
    ``ln2_high`` has trailing zero bits, so n·``ln2_high`` is exact for the n of the range, and
    ``ln2_low`` carries the rest to ``ftype``'s precision); e**r by its Taylor
    polynomial of ``degree`` (Horner, highest term first); e**x = 2**n e**r, 2**n the float
    whose exponent field is n + bias (every n of the range gives a normal number). ``x`` is
    held to the range, so the result is not 0 or inf outside it. Not for NaN.
    """
    f = ftype
    if f == np.float32:
        itype, bias, shift = np.int32, 127, 23
    else:
        itype, bias, shift = np.int64, 1023, 52
    coeffs = tuple(f(1.0 / math.factorial(k)) for k in range(degree, -1, -1))
    log2_e, half, x_low, x_high = f(1.0 / math.log(2.0)), f(0.5), f(low), f(high)
    # the n of the range's ends give normal numbers (n is monotone in x; the ends' x·log2 e + ½
    # lie far from an integer, so no rounding of the reduction moves them to the next n)
    lo_n = math.floor(x_low * log2_e + half)
    hi_n = math.floor(x_high * log2_e + half)
    if lo_n + bias < 1 or hi_n + bias > 2 * bias:
        raise ValueError(f"2**n is not a normal {np.dtype(f).name} for every n of the range")
    ln2_hi, ln2_lo = f(ln2_high), f(ln2_low)

    @njit(cache=True, inline="always", fastmath=_FASTMATH)
    def exp(x):
        x = min(max(x, x_low), x_high)
        n = math.floor(x * log2_e + half)
        fn = f(n)
        r = (x - fn * ln2_hi) - fn * ln2_lo
        p = coeffs[0]
        for k in range(1, len(coeffs)):
            p = coeffs[k] + r * p
        return p * _float_from_bits(itype((n + bias) << shift))

    return exp


#: The argument range kept (float32): below it the result would be subnormal, above it overflow.
EXP32_LOW, EXP32_HIGH = np.float32(-87.0), np.float32(88.0)
#: e**x in float32 for float32 ``x``, within 3e-7 relative on [−87, 88]: degree 6, whose
#: remainder is below 1.2e-7 for |r| ≤ ln 2 / 2.
exp32 = _make_exp(
    np.float32, float(EXP32_LOW), float(EXP32_HIGH), 0.693359375, math.log(2.0) - 0.693359375, 6
)
#: The argument range kept (float64).
EXP64_LOW, EXP64_HIGH = -708.0, 709.0
#: e**x in float64, within 3e-16 relative on [−708, 709]: degree 13, whose remainder is below
#: 6e-18 for |r| ≤ ln 2 / 2 (fdlibm's split of ln 2).
exp64 = _make_exp(
    np.float64, EXP64_LOW, EXP64_HIGH, 6.93147180369123816490e-01, 1.90821492927058770002e-10, 13
)
