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
    """g(x): sinh(x) for |x| ≤ CAP, its linear continuation beyond."""
    c = xp.clip(x, -CAP, CAP)
    return xp.sinh(c) + _COSH_CAP * (x - c)


def derivative(x, xp):
    """g'(x): cosh(min(|x|, CAP))."""
    return xp.cosh(xp.clip(x, -CAP, CAP))


def _beyond(x, xp):
    """The continuation's part of G(x): sinh(CAP) t + ½ cosh(CAP) t², t = (|x| − CAP)₊."""
    t = xp.maximum(xp.abs(x) - CAP, 0.0)
    return t * (_SINH_CAP + 0.5 * _COSH_CAP * t)


def energy_increment(x, y, xp):
    """G(y) − G(x), accurate for close x and y: 2 sinh((a+b)/2) sinh((b−a)/2) inside the cap."""
    a = xp.clip(x, -CAP, CAP)
    b = xp.clip(y, -CAP, CAP)
    inside = 2.0 * xp.sinh(0.5 * (a + b)) * xp.sinh(0.5 * (b - a))
    return inside + (_beyond(y, xp) - _beyond(x, xp))


def excess_energy(x, xp):
    """G(x) − 1 = cosh(x) − 1 (= 2 sinh²(x/2), accurate at small x), continued beyond the cap."""
    c = xp.clip(x, -CAP, CAP)
    s = xp.sinh(0.5 * c)
    return 2.0 * s * s + _beyond(x, xp)


__all__ = ["CAP", "derivative", "energy_increment", "excess_energy", "term"]
