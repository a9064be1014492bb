"""The Boltzmann term of the nonlinear equation, its derivative and its energy, overflow-safe.

For a z:z salt the salt term of the equation is κ̄² (kT/z) sinh(x), x = zφ/kT, φ the total
potential (φ_c + φ_rf, kJ mol⁻¹ e⁻¹; kT in kJ/mol, so x is dimensionless). With the scaled
potential x the three functions of this module are

    g(x)  = sinh(x)           the term:        κ̄² (kT/z) g(x)
    g'(x) = cosh(x)           its φ-derivative: κ̄² g'(x)       (the Newton diagonal)
    G(x)  = cosh(x)           its potential:    κ̄² (kT/z)² G(x) (the energy density)

continued beyond |x| = :data:`CAP` by their second-order Taylor expansion at the cap:
g(x) = sinh(CAP) + cosh(CAP)(x − CAP) for x > CAP (odd), g'(x) = cosh(CAP), and G its
antiderivative. The continuation keeps g odd, increasing and C¹ and G convex, so the
energy functional stays smooth and convex and the Newton iteration globally convergent, while
nothing overflows: not the float64 arithmetic, nor the Jacobian diagonal stored in float32.
The equation is the Poisson–Boltzmann equation wherever |x| ≤ CAP at the solution; a solution
beyond the cap (an ion concentration e^50 times the bulk's: never physical) is reported by
the solver. APBS caps its exponentials in the same spirit (at 85, with a warning).

Every function is array code on NumPy or CuPy arrays (``xp``).
"""

from __future__ import annotations

import math

#: |x| beyond which sinh is continued linearly (cosh(CAP) ≈ 2.6e21: κ̄² cosh(CAP) and its
#: coarse multigrid sums stay far inside float32's range).
CAP = 50.0
_SINH_CAP = math.sinh(CAP)
_COSH_CAP = math.cosh(CAP)


def term(x, xp):
    """g(x): sinh(x) for |x| ≤ CAP, its linear continuation beyond (a new array)."""
    c = xp.clip(x, -CAP, CAP)
    g = x - c  # in place from here on: two grid arrays at most (memory of large grids)
    g *= _COSH_CAP
    g += xp.sinh(c, out=c)
    return g


def derivative(x, xp):
    """g'(x): cosh(min(|x|, CAP)) (a new array)."""
    c = xp.clip(x, -CAP, CAP)
    return xp.cosh(c, out=c)


def _beyond(x, xp):
    """The continuation's part of G(x): sinh(CAP) t + ½ cosh(CAP) t², t = (|x| − CAP)₊."""
    t = xp.abs(x)
    t -= CAP
    xp.maximum(t, 0.0, out=t)
    v = t * (0.5 * _COSH_CAP)
    v += _SINH_CAP
    v *= t
    return v


def energy_increment(x, y, xp):
    """G(y) − G(x), accurate for close x and y: 2 sinh((a+b)/2) sinh((b−a)/2) inside the cap."""
    a = xp.clip(x, -CAP, CAP)
    b = xp.clip(y, -CAP, CAP)
    mid = a + b
    mid *= 0.5
    xp.sinh(mid, out=mid)
    b -= a
    b *= 0.5
    xp.sinh(b, out=b)
    del a
    mid *= b
    mid *= 2.0
    del b
    mid += _beyond(y, xp)
    mid -= _beyond(x, xp)
    return mid


def excess_energy(x, xp):
    """G(x) − 1 = cosh(x) − 1 (= 2 sinh²(x/2), accurate at small x), continued beyond the cap."""
    s = xp.clip(x, -CAP, CAP)
    s *= 0.5
    xp.sinh(s, out=s)
    s *= s
    s *= 2.0
    s += _beyond(x, xp)
    return s


__all__ = ["CAP", "derivative", "energy_increment", "excess_energy", "term"]
