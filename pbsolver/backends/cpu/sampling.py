"""Field sampling on the CPU: the bodies of :mod:`pbsolver.backends.bodies.sampling` over points."""

from __future__ import annotations

import numpy as np
from numba import njit

from pbsolver.backends.bodies.sampling import make_sample

_body = make_sample(njit(cache=True, nogil=True))


@njit(cache=True, nogil=True)
def _sample(phi, spacing, coords, periodic, cubic, out):
    nx, ny, nz = phi.shape
    for p in range(coords.shape[0]):
        _body(phi, 0, nx, ny, nz, spacing[0], spacing[1], spacing[2],
              coords[p, 0], coords[p, 1], coords[p, 2], periodic, cubic, out[p])  # fmt: skip


def sample_points(phi, spacing, coords, periodic: bool, cubic: bool = False) -> np.ndarray:
    """φ and ∇φ of a host node field at points given in node units: an (n, 4) float64 array.

    Parameters
    ----------
    phi : ndarray (nx, ny, nz), float64
    spacing : 3 floats
        Node spacing, Å.
    coords : ndarray (n, 3)
        The points as ``(p − origin) / h``.
    periodic : bool
        Wrap around (else clamp to the grid).
    cubic : bool
        Keys' cubic convolution (C¹) instead of trilinear weights
        (:mod:`pbsolver.backends.bodies.sampling`).
    """
    phi = np.ascontiguousarray(phi, dtype=np.float64)
    coords = np.ascontiguousarray(coords, dtype=np.float64).reshape(-1, 3)
    out = np.empty((coords.shape[0], 4))
    _sample(phi, np.asarray(spacing, dtype=np.float64), coords, bool(periodic), bool(cubic), out)
    return out
