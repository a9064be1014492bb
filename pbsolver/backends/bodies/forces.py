"""Plain-Python bodies of the force sums: one (point, centre) pair of a radial direct sum.

The forces' φ_c and Debye–Hückel terms (:mod:`pbsolver.forces.coulomb`) are sums over grid
nodes p with weights w_p of f(|p − c_i|) (p − c_i) for every atom i. These bodies give f; the CPU
loops of :mod:`pbsolver.backends.cpu.forces` compile them with ``numba.njit`` (on CuPy arrays the
forces use array code instead). Importing this module imports no numba.
"""

from __future__ import annotations

import math


def inverse_cube_body(r2):
    """1/r³: the φ_c term's radial factor (∂(1/|p − c|)/∂c = (p − c)/r³)."""
    return 1.0 / (r2 * math.sqrt(r2))


def debye_huckel_slope_body(r2, radius, kappa, eps_out, inv_c):
    """−T'(r)/r of one atom's "mdh" term T(r) = e^{−κ(r−a)}/(ε_out (1 + κa) r) − 1/(ε_c r)."""
    r = math.sqrt(r2)
    screened = (
        math.exp(-kappa * (r - radius)) * (1.0 + kappa * r) / (eps_out * (1.0 + kappa * radius))
    )
    return (screened - inv_c) / (r2 * r)


def minimum_image_body(d, length):
    """``d`` wrapped to the nearest image in a periodic box of side ``length``."""
    return d - length * math.floor(d / length + 0.5)


def make_radial_term(inverse_cube, dh_slope, image):
    """One (node, centre) term of the radial sums, on the compiled bodies above."""

    def radial_term_body(points, weights, p, cx, cy, cz, box, periodic, mdh, radius, kappa,
                         eps_out, inv_c):  # fmt: skip
        """w_p g(|p − c|)(p − c): g the Coulomb or (``mdh``) the Debye–Hückel slope.

        ``points`` is (3, m): one row per axis, so that consecutive nodes are adjacent in memory
        (the CPU loop vectorises over them; CUDA threads read them coalesced).
        """
        dx = points[0, p] - cx
        dy = points[1, p] - cy
        dz = points[2, p] - cz
        if periodic:
            dx = image(dx, box[0])
            dy = image(dy, box[1])
            dz = image(dz, box[2])
        r2 = dx * dx + dy * dy + dz * dz
        if mdh:
            f = weights[p] * dh_slope(r2, radius, kappa, eps_out, inv_c)
        else:
            f = weights[p] * inverse_cube(r2)
        return f * dx, f * dy, f * dz

    return radial_term_body
