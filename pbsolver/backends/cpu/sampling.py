"""Field sampling on the CPU: the bodies of :mod:`pbsolver.backends.bodies.sampling` over points."""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from pbsolver.backends.bodies.sampling import make_sample, tensor_lerp_node

_body = make_sample(njit(cache=True, nogil=True))
_lerp = njit(cache=True, nogil=True)(tensor_lerp_node)


@njit(cache=True, nogil=True, parallel=True)
def _sample(phi, spacing, coords, periodic, cubic, out):
    nx, ny, nz = phi.shape
    for p in prange(coords.shape[0]):  # each point its own row of out
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


@njit(cache=True, nogil=True, parallel=True)
def _tensor_lerp(f, ix, wx, iy, wy, iz, wz, out):
    for a in prange(out.shape[0]):
        for b in range(out.shape[1]):
            for c in range(out.shape[2]):
                out[a, b, c] = _lerp(f, ix[a], wx[a], iy[b], wy[b], iz[c], wz[c])


def tensor_lerp(f, cells, weights) -> np.ndarray:
    """A host field trilinearly interpolated at the nodes of a tensor grid (one parallel pass).

    Parameters
    ----------
    f : ndarray (nx, ny, nz), float64
        The field on its nodes.
    cells : 3 int arrays
        Per axis, the lower node index of each output coordinate's cell (``0 ≤ i ≤ n − 1``;
        the upper node is ``min(i + 1, n − 1)``).
    weights : 3 float arrays
        Per axis, the weight of the upper node (the fractional position in the cell).

    Returns
    -------
    ndarray (len(cells[0]), len(cells[1]), len(cells[2])), float64
        Equal bit for bit to three separable passes ``lo·(1 − w) + hi·w`` along x, y, z.
    """
    f = np.ascontiguousarray(f, dtype=np.float64)
    ix, iy, iz = (np.ascontiguousarray(c, dtype=np.int64) for c in cells)
    wx, wy, wz = (np.ascontiguousarray(w, dtype=np.float64) for w in weights)
    out = np.empty((ix.size, iy.size, iz.size))
    _tensor_lerp(f, ix, wx, iy, wy, iz, wz, out)
    return out
