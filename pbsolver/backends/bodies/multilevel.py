"""Plain-Python pieces of the multilevel Coulomb sum, shared by every kernel set.

The fast φ_c of :mod:`pbsolver.backends.cpu.coulomb_fast` represents the potential of the
distant atoms on a hierarchy of grids, each twice as coarse as the one below, and interpolates
it to the finer grid at the midpoints (a fine node either coincides with a coarse node or lies
half-way between two along an axis). This module holds what does not depend on the device:
the midpoint Lagrange weights, the geometry of a coarser level, the finite pair kernel used
inside the hierarchy and the interpolation error bound that sets the near radius. Importing it
imports no numba.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

#: Interpolation orders (points per axis) the hierarchy accepts: even, so that the stencil is
#: centred on the midpoint.
ORDERS = (4, 6, 8, 10, 12)


def midpoint_weights(order):
    """Lagrange weights of the value half-way between nodes 0 and 1 from ``order`` nodes.

    The nodes are ``1 − order/2 … order/2`` (centred on the midpoint); the weights are exact
    rationals rounded once to float64 and sum to 1. For order 4 they are (−1, 9, 9, −1)/16.
    """
    if order not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}, got {order}")
    nodes = range(1 - order // 2, order // 2 + 1)
    t = Fraction(1, 2)
    out = []
    for i in nodes:
        w = Fraction(1)
        for j in nodes:
            if j != i:
                w *= (t - j) / Fraction(i - j)
        out.append(float(w))
    return np.array(out)


def midpoint_error_factor(order):
    """max over the midpoint of Π|t − x_i| (nodes in units of the coarse spacing).

    The Lagrange remainder at the midpoint is f⁽ᵖ⁾(ξ)/p! times this product; at t = 1/2 it is
    (Π_{i=1}^{p/2} (i − 1/2))².
    """
    half = 1.0
    for i in range(1, order // 2 + 1):
        half *= i - 0.5
    return half * half


def lebesgue_midpoint(order):
    """Σ|w_i| of the midpoint weights: the most one interpolation pass can amplify a value."""
    return float(np.abs(midpoint_weights(order)).sum())


def pair_error_estimate(order, reach):
    """Interpolation error of one unit charge's 1/r at distance ``reach``·H, in units of 1/H.

    H is the largest coarse spacing. Interpolating along x, y and z in turn, each pass errs by
    |∂ᵖ(1/r)|/p! · Π|t − x_i| · Hᵖ (the Lagrange remainder at the midpoint t), with
    |∂ᵖ_x (1/r)| ≤ p!/r^(p+1); a later pass carries an earlier error with gain at most
    Λ = Σ|w_i| (:func:`lebesgue_midpoint`). Taking r at the node (not at the stencil's nearest
    point, which makes a strict bound far too loose to use) gives

        err · H ≈ (1 + Λ + Λ²) · Π|t − x_i| · reach^−(p+1),

    which the largest error over random charge positions and directions stays below for the
    reaches used here (``tests/test_fast_coulomb.py`` checks it), and which falls off as
    d^−(p+2) beyond.
    """
    lam = lebesgue_midpoint(order)
    return (1.0 + lam + lam * lam) * midpoint_error_factor(order) * float(reach) ** (-(order + 1))


def coarse_level(origin, spacing, shape, pad):
    """Origin, spacing and shape of the grid twice as coarse, padded by ``pad`` nodes a side.

    Fine node i lies on coarse coordinate i/2 + ``pad``: on a coarse node for even i, half-way
    between two for odd i. With ``pad`` ≥ order/2 every midpoint stencil of the fine grid lies
    inside the coarse one.
    """
    h2 = tuple(2.0 * float(h) for h in spacing)
    org = tuple(float(o) - pad * h for o, h in zip(origin, h2, strict=True))
    shp = tuple((int(n) - 1) // 2 + 1 + 2 * pad for n in shape)
    return org, h2, shp


def finite_pair_body(dx, dy, dz, tol2):
    """1/|d| (Å⁻¹), or 0 when |d|² ≤ ``tol2`` (> 0): the kernel inside the hierarchy.

    A node on an atom gets a finite value inside the hierarchy (the same one wherever it is
    used, so that each correction removes exactly what the interpolation brought); the final
    map sets such nodes to ±inf by the exact rule of the direct sum. Written without a branch
    around the square root, so that loops over it vectorise.
    """
    r2 = dx * dx + dy * dy + dz * dz
    v = 1.0 / math.sqrt(max(r2, tol2))
    return v if r2 > tol2 else 0.0 * v
