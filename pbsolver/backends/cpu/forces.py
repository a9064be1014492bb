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


@njit(**_JIT, parallel=True, fastmath=_FM)
def _coulomb_sums(points, weights, centres, box, periodic, out):
    for i in prange(centres.shape[0]):
        gx = 0.0
        gy = 0.0
        gz = 0.0
        for p in range(points.shape[0]):
            dx = points[p, 0] - centres[i, 0]
            dy = points[p, 1] - centres[i, 1]
            dz = points[p, 2] - centres[i, 2]
            if periodic:
                dx = _image(dx, box[0])
                dy = _image(dy, box[1])
                dz = _image(dz, box[2])
            f = weights[p] * _inverse_cube(dx * dx + dy * dy + dz * dz)
            gx += f * dx
            gy += f * dy
            gz += f * dz
        out[i, 0] = gx
        out[i, 1] = gy
        out[i, 2] = gz


@njit(**_JIT, parallel=True, fastmath=_FM)
def _debye_huckel_sums(points, weights, centres, radii, kappa, eps_out, inv_c, out):
    for i in prange(centres.shape[0]):
        gx = 0.0
        gy = 0.0
        gz = 0.0
        for p in range(points.shape[0]):
            dx = points[p, 0] - centres[i, 0]
            dy = points[p, 1] - centres[i, 1]
            dz = points[p, 2] - centres[i, 2]
            f = weights[p] * _dh_slope(dx * dx + dy * dy + dz * dz, radii[i], kappa, eps_out,
                                       inv_c)  # fmt: skip
            gx += f * dx
            gy += f * dy
            gz += f * dz
        out[i, 0] = gx
        out[i, 1] = gy
        out[i, 2] = gz


def coulomb_sums(points, weights, centres, box=None):
    """Σ_p w_p (p − c_i)/|p − c_i|³ for every centre (nearest image with ``box``): (n, 3)."""
    out = np.zeros((len(centres), 3))
    periodic = box is not None
    _coulomb_sums(np.ascontiguousarray(points, dtype=np.float64),
                  np.ascontiguousarray(weights, dtype=np.float64),
                  np.ascontiguousarray(centres, dtype=np.float64),
                  np.asarray(box if periodic else (1.0, 1.0, 1.0), dtype=np.float64), periodic,
                  out)  # fmt: skip
    return out


def debye_huckel_sums(points, weights, centres, radii, kappa, eps_out, eps_cavity):
    """Σ_p w_p (−T_i'(r)/r)(p − c_i) of the "mdh" terms for every centre: (n, 3)."""
    out = np.zeros((len(centres), 3))
    _debye_huckel_sums(np.ascontiguousarray(points, dtype=np.float64),
                       np.ascontiguousarray(weights, dtype=np.float64),
                       np.ascontiguousarray(centres, dtype=np.float64),
                       np.ascontiguousarray(radii, dtype=np.float64), float(kappa),
                       float(eps_out), 1.0 / float(eps_cavity), out)  # fmt: skip
    return out
