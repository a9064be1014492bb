"""Field sampling on the CPU: :func:`~pbsolver.backends.bodies.sampling.sample_body` over points."""

from __future__ import annotations

import numpy as np
from numba import njit

from pbsolver.backends.bodies.sampling import sample_body

_body = njit(cache=True, nogil=True)(sample_body)


@njit(cache=True, nogil=True)
def _sample(phi, spacing, coords, periodic, out):
    nx, ny, nz = phi.shape
    for p in range(coords.shape[0]):
        _body(phi, 0, nx, ny, nz, spacing[0], spacing[1], spacing[2],
              coords[p, 0], coords[p, 1], coords[p, 2], periodic, out[p])  # fmt: skip


def sample_points(phi, spacing, coords, periodic: bool) -> np.ndarray:
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
    """
    phi = np.ascontiguousarray(phi, dtype=np.float64)
    coords = np.ascontiguousarray(coords, dtype=np.float64).reshape(-1, 3)
    out = np.empty((coords.shape[0], 4))
    _sample(phi, np.asarray(spacing, dtype=np.float64), coords, bool(periodic), out)
    return out
