"""Interpolation at the atoms: its exact derivative and its transpose (adjoint source).

The energy samples φ_rf at each atom with the weights of
:mod:`pbsolver.backends.bodies.sampling` ("linear": trilinear on the atom's cell; "cubic": Keys'
cubic convolution on the 4×4×4 nodes around it), with the same cell choice (clamped to the
grid on a Dirichlet grid, wrapped on a periodic one). Here, in array code for NumPy or CuPy:

* :func:`interpolation_gradient`: ∂/∂r_i of I(φ)(r_i), the exact derivative of the interpolant
  at the atom (the slopes of the weights, not the central-difference gradient the linear field
  forces use): the charge term ½ q_i ∂I/∂r_i · φ of the force;
* :func:`interpolation_transpose`: Iᵀc, the values c_i spread onto the nodes of each atom's
  stencil with the same weights (the right-hand side ½ Iᵀq of the adjoint equation).

Both interpolations are separable: a node's weight is the product of one weight per axis.
"""

from __future__ import annotations

import itertools

import numpy as np

from pbsolver.backends.bodies.sampling import cubic_slopes, cubic_weights
from pbsolver.options import INTERPOLATIONS, choice


def _grid_units(grid, positions, xp):
    """The positions in node units, (p − origin) / h: (n, 3) float64 in ``xp``."""
    h = xp.asarray(grid.spacing, dtype=xp.float64)
    return (xp.asarray(positions, dtype=xp.float64) - xp.asarray(grid.origin)) / h


def _axis_stencils(grid, positions, periodic, cubic, xp, lower=False):
    """Per axis: node indices (m, n), weights (m, n) and slopes per Å (m, n) of each position.

    m = 2 (linear) or 4 (cubic) nodes an axis; the cell as the sampling body picks it, or with
    ``lower`` the cell below where a position lies exactly on a node plane (the same weights,
    the other one-sided slope).
    """
    shape = np.asarray(grid.shape)
    h = np.asarray(grid.spacing, dtype=np.float64)
    s = _grid_units(grid, positions, xp)
    out = []
    for a in range(3):
        n = int(shape[a])
        sa = s[:, a]
        if periodic:
            sa = xp.mod(sa, n)
            i0 = xp.minimum(xp.floor(sa).astype(xp.int64), n - 1)
        else:
            sa = xp.clip(sa, 0.0, n - 1.0)
            i0 = xp.minimum(xp.floor(sa).astype(xp.int64), n - 2)
        if lower:
            i0 = xp.where((sa == i0) & (i0 > (-1 if periodic else 0)), i0 - 1, i0)
        t = sa - i0
        if cubic:
            offsets = range(-1, 3)
            weights, slopes = xp.stack(cubic_weights(t)), xp.stack(cubic_slopes(t))
        else:
            offsets = range(2)
            weights, slopes = xp.stack([1.0 - t, t]), xp.stack([-xp.ones_like(t), xp.ones_like(t)])
        idx = xp.stack([i0 + o for o in offsets])
        idx = xp.mod(idx, n) if periodic else xp.clip(idx, 0, n - 1)
        out.append((idx, weights, slopes / h[a]))
    return out


def _stencil(grid, positions, periodic, cubic, xp, lower=False, offsets=None):
    """Flat node indices (m³, n), weights (m³, n) and their gradients (3, m³, n) per Å.

    ``offsets`` (n,): added to each position's flat indices (its frame's block in a stack).
    """
    axes = _axis_stencils(grid, positions, periodic, cubic, xp, lower)
    m = axes[0][0].shape[0]
    flat, vals, grads = [], [], []
    for a, b, c in itertools.product(range(m), repeat=3):
        (ix, wx, dx), (iy, wy, dy), (iz, wz, dz) = axes
        flat.append((ix[a] * grid.shape[1] + iy[b]) * grid.shape[2] + iz[c])
        vals.append(wx[a] * wy[b] * wz[c])
        grads.append(
            xp.stack([dx[a] * wy[b] * wz[c], wx[a] * dy[b] * wz[c], wx[a] * wy[b] * dz[c]])
        )
    flat = xp.stack(flat)
    if offsets is not None:
        flat = flat + offsets[None]
    return flat, xp.stack(vals), xp.stack(grads, axis=1)


def stack_offsets(grid, frames, atoms, stride, xp):
    """Flat offset of each of ``frames`` × ``atoms`` positions' frame block in a stack.

    Frame f's node (i, j, k) is node (f·stride + i, j, k) of the stack
    (:mod:`pbsolver.backends.stacking`); the positions are frame-major.
    """
    block = int(stride) * grid.shape[1] * grid.shape[2]
    return xp.repeat(xp.arange(int(frames), dtype=xp.int64) * block, int(atoms))


def interpolation_gradient(grid, field, positions, *, periodic=False, interpolation="linear",
                           offsets=None):  # fmt: skip
    """∂I(field)(r)/∂r at each position: the slope of the interpolant, (n, 3).

    Parameters
    ----------
    grid : Grid
    field : array (nx, ny, nz)
        Node values (NumPy or CuPy; the result is in the same library), finite on the stencils
        of the positions.
    positions : array (n, 3)
        Å, inside the grid (Dirichlet) or anywhere (periodic: wrapped).
    periodic : bool
    interpolation : {"linear", "cubic"}
    offsets : array (n,), optional
        Dirichlet only: ``field`` is a stack of frames on ``grid`` (e.g. ``(B·stride, ny,
        nz)``) and each position is sampled in its frame's block, at this flat offset
        (:func:`stack_offsets`): B frames' slopes in one pass.

    Returns
    -------
    array (n, 3)
        In field units per Å. With "linear", the interpolant has a kink where a position lies
        exactly on a node plane; there the component across the plane is the mean of its two
        one-sided slopes (the central difference, which a symmetric arrangement of atoms on
        node planes needs to get symmetric forces). "cubic" has no kinks.
    """
    from pbsolver.arrays import array_module

    xp = array_module(field)
    cubic = choice(interpolation, "interpolation", INTERPOLATIONS) == "cubic"
    flat, _, grads = _stencil(grid, positions, periodic, cubic, xp, offsets=offsets)
    values = field.reshape(-1)[flat]  # (m³, n)
    slopes = (grads * values[None]).sum(axis=1).T
    s = _grid_units(grid, positions, xp)
    if cubic or not bool(xp.any(s == xp.floor(s))):  # no atom on a node plane: one pass
        return slopes
    # the other one-sided slope where an atom sits on a node plane: the weights are the same
    # in both cells (1 on the plane's node), so only the component across the plane changes
    flat, _, grads = _stencil(grid, positions, periodic, cubic, xp, lower=True, offsets=offsets)
    lower = (grads * field.reshape(-1)[flat][None]).sum(axis=1).T
    return 0.5 * (slopes + lower)


def interpolation_transpose(grid, values, positions, *, periodic=False, xp=np,
                            interpolation="linear", offsets=None, size=None):  # fmt: skip
    """Iᵀc: each value c_i spread on its stencil's nodes with the interpolation weights.

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
    interpolation : {"linear", "cubic"}
    offsets : array (n,), optional
        Dirichlet only: spread each value into its frame's block of a stack, at this flat
        offset (:func:`stack_offsets`); ``size`` is then the stack's node count.
    size : int, optional
        Nodes of the result (default: the grid's).

    Returns
    -------
    array, float64
        (nx, ny, nz); with ``offsets``, flat (``size``,).
    """
    cubic = choice(interpolation, "interpolation", INTERPOLATIONS) == "cubic"
    flat, weights, _ = _stencil(grid, positions, periodic, cubic, xp, offsets=offsets)
    c = xp.asarray(values, dtype=xp.float64)
    spread = xp.bincount(
        flat.reshape(-1),
        weights=(weights * c[None]).reshape(-1),
        minlength=int(np.prod(grid.shape)) if size is None else int(size),
    )
    return spread if offsets is not None else spread.reshape(grid.shape)
