"""Trilinear interpolation at the atoms: its exact derivative and its transpose (adjoint source).

The energy samples φ_rf at each atom with the trilinear weights of
:func:`pbsolver.backends.bodies.sampling.sample_body` (same cell choice: clamped to the grid on a
Dirichlet grid, wrapped on a periodic one). Here, in array code for NumPy or CuPy:

* :func:`interpolation_gradient`: ∂/∂r_i of I(φ)(r_i), the exact derivative of the trilinear
  interpolant inside the atom's cell (the slopes of the weights, not the central-difference
  gradient the field forces use): the charge term ½ q_i ∂I/∂r_i · φ of the force;
* :func:`interpolation_transpose`: Iᵀc, the values c_i spread onto the eight corners of each
  atom's cell with the same weights (the right-hand side ½ Iᵀq of the adjoint equation).
"""

from __future__ import annotations

import numpy as np


def _cells(grid, positions, periodic, xp):
    """Lower corner (n, 3) int, weights w in [0, 1] (n, 3) and spacing of the atoms' cells."""
    shape = xp.asarray(grid.shape)
    h = xp.asarray(grid.spacing, dtype=xp.float64)
    s = (xp.asarray(positions, dtype=xp.float64) - xp.asarray(grid.origin)) / h
    if periodic:
        s = xp.mod(s, shape)
        i0 = xp.minimum(xp.floor(s).astype(xp.int64), shape - 1)
    else:
        s = xp.clip(s, 0.0, shape - 1.0)
        i0 = xp.minimum(xp.floor(s).astype(xp.int64), shape - 2)
    return i0, s - i0, h


def _corners(grid, i0, periodic, xp):
    """The 8 corners' flat node indices, (8, n), in the order of ``np.ndindex(2, 2, 2)``."""
    shape = xp.asarray(grid.shape)
    out = []
    for corner in np.ndindex(2, 2, 2):
        idx = i0 + xp.asarray(corner)
        if periodic:
            idx = xp.mod(idx, shape)
        out.append((idx[:, 0] * grid.shape[1] + idx[:, 1]) * grid.shape[2] + idx[:, 2])
    return xp.stack(out)


def _weights(w, xp):
    """Trilinear weights (8, n) and their derivatives along each axis in node units (3, 8, n)."""
    one_minus = 1.0 - w
    vals, slopes = [], []
    for corner in np.ndindex(2, 2, 2):
        f = [w[:, a] if corner[a] else one_minus[:, a] for a in range(3)]
        df = [1.0 if corner[a] else -1.0 for a in range(3)]
        vals.append(f[0] * f[1] * f[2])
        slopes.append(xp.stack([df[0] * f[1] * f[2], f[0] * df[1] * f[2], f[0] * f[1] * df[2]]))
    return xp.stack(vals), xp.stack(slopes, axis=1)


def interpolation_gradient(grid, field, positions, *, periodic=False):
    """∂I(field)(r)/∂r at each position: the slope of the trilinear interpolant, (n, 3).

    Parameters
    ----------
    grid : Grid
    field : array (nx, ny, nz)
        Node values (NumPy or CuPy; the result is in the same library), finite at the corners
        of the positions' cells.
    positions : array (n, 3)
        Å, inside the grid (Dirichlet) or anywhere (periodic: wrapped).
    periodic : bool

    Returns
    -------
    array (n, 3)
        In field units per Å. A position exactly on a cell face takes the slope of the cell
        the sampling body picks (the interpolant has a kink there).
    """
    from pbsolver.arrays import array_module

    xp = array_module(field)
    i0, w, h = _cells(grid, positions, periodic, xp)
    _, slopes = _weights(w, xp)
    values = field.reshape(-1)[_corners(grid, i0, periodic, xp)]  # (8, n)
    return (slopes * values[None]).sum(axis=1).T / h


def interpolation_transpose(grid, values, positions, *, periodic=False, xp=np):
    """Iᵀc: each value c_i spread on its cell's corners with the trilinear weights (grid array).

    Parameters
    ----------
    grid : Grid
    values : array (n,)
        One number per position (e.g. ½ q_i).
    positions : array (n, 3)
        Å.
    periodic : bool
    xp : module
        numpy or cupy: the library of the result.

    Returns
    -------
    array (nx, ny, nz), float64
    """
    i0, w, _ = _cells(grid, positions, periodic, xp)
    weights, _ = _weights(w, xp)
    c = xp.asarray(values, dtype=xp.float64)
    flat = xp.bincount(
        _corners(grid, i0, periodic, xp).reshape(-1),
        weights=(weights * c[None]).reshape(-1),
        minlength=int(np.prod(grid.shape)),
    )
    return flat.reshape(grid.shape)
