"""Numba CPU loops of the force sums (bodies in :mod:`pbsolver.backends.bodies.forces`).

Each atom (centre) is one parallel work item summing over every weighted grid node in order, so
the result does not depend on the thread count.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from pbsolver.backends.bodies import forces as B

_JIT = {"cache": True, "nogil": True, "boundscheck": False, "error_model": "numpy"}
#: Reassociation lets the inner sums vectorise (the φ_c map's kernel does the same).
_FM = {"reassoc", "contract", "nsz", "arcp"}
_inverse_cube = njit(**_JIT, fastmath=_FM, inline="always")(B.inverse_cube_body)
_dh_slope = njit(**_JIT, fastmath=_FM, inline="always")(B.debye_huckel_slope_body)
_image = njit(**_JIT, fastmath=_FM, inline="always")(B.minimum_image_body)
_term = njit(**_JIT, fastmath=_FM, inline="always")(B.make_radial_term(_inverse_cube, _dh_slope,
                                                                        _image))  # fmt: skip


@njit(**_JIT, parallel=True, fastmath=_FM)
def _radial_sums(points, weights, centres, box, periodic, mdh, radii, kappa, eps_out, inv_c, out):
    """Σ_p w_p g(|p − c_i|)(p − c_i) per centre; g the Coulomb or (``mdh``) the Debye–Hückel slope.

    One loop for both sums: ``periodic`` and ``mdh`` are loop-invariant, so the branches cost
    nothing in the inner loop.
    """
    for i in prange(centres.shape[0]):
        gx = 0.0
        gy = 0.0
        gz = 0.0
        cx, cy, cz, radius = centres[i, 0], centres[i, 1], centres[i, 2], radii[i]
        for p in range(points.shape[1]):
            fx, fy, fz = _term(points, weights, p, cx, cy, cz, box, periodic, mdh, radius, kappa,
                               eps_out, inv_c)  # fmt: skip
            gx += fx
            gy += fy
            gz += fz
        out[i, 0] = gx
        out[i, 1] = gy
        out[i, 2] = gz


def _sums(points, weights, centres, box=None, radii=None, kappa=0.0, eps_out=1.0, inv_c=1.0):
    out = np.zeros((len(centres), 3))
    periodic = box is not None
    mdh = radii is not None
    _radial_sums(np.ascontiguousarray(np.asarray(points, dtype=np.float64).T),
                 np.ascontiguousarray(weights, dtype=np.float64),
                 np.ascontiguousarray(centres, dtype=np.float64),
                 np.asarray(box if periodic else (1.0, 1.0, 1.0), dtype=np.float64), periodic, mdh,
                 np.ascontiguousarray(radii if mdh else np.zeros(len(centres)), dtype=np.float64),
                 float(kappa), float(eps_out), float(inv_c), out)  # fmt: skip
    return out


def coulomb_sums(points, weights, centres, box=None):
    """Σ_p w_p (p − c_i)/|p − c_i|³ for every centre (nearest image with ``box``): (n, 3)."""
    return _sums(points, weights, centres, box)


def debye_huckel_sums(points, weights, centres, radii, kappa, eps_out, eps_cavity):
    """Σ_p w_p (−T_i'(r)/r)(p − c_i) of the "mdh" terms for every centre: (n, 3)."""
    return _sums(points, weights, centres, None, radii, kappa, eps_out, 1.0 / float(eps_cavity))
