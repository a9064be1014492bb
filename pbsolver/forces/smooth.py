"""Derivative of the smooth vdW surface's edge fractions (surface ``"svdw"``).

An edge's fraction is f = Σ_q w_q (1 − P(x_q)) with P = Π_i S_i(|x − c_i|)
(:mod:`pbsolver.molecule.smooth_surface`), so

    ∂f/∂c_i = Σ_q w_q (P(x_q) / S_i) S_i'(r) (x_q − c_i) / r,   r = |x_q − c_i|,

over the sample points in the transition shell of sphere i (S_i' = 0 elsewhere; where another
S_j is 0 the point is inside sphere j's core, P = 0 and nothing moves). The pairs, S and S' are
those the map was made from (:func:`pbsolver.molecule.smooth_surface.sample_pairs`).
"""

from __future__ import annotations

import numpy as np

from pbsolver.arrays import array_module
from pbsolver.molecule.smooth_surface import (
    SMOOTH_WIDTH,
    edge_points,
    point_products,
    points_per_edge,
    recorded_pairs,
    sample_pairs,
)


def smooth_gradient(positions, radii, owners, grid, sensitivity, n_atoms, width=SMOOTH_WIDTH):
    """∂/∂c of Σ_faces sensitivity · f over the three face orientations, per owner atom.

    Parameters
    ----------
    positions, radii : arrays (m, 3), (m,)
        Spheres (periodic images included), Å.
    owners : array (m,) of int
        The atom each sphere moves with.
    grid : Grid
    sensitivity : 3 arrays (nx, ny, nz)
        ∂G/∂f of each face's fraction (NumPy or CuPy; the result follows), read by ``take``
        at flat node indices.
    n_atoms : int
    width : float
        The surface's half-width, Å (that of the map).

    Returns
    -------
    array (n_atoms, 3)
    """
    xp = array_module(sensitivity[0])
    own = xp.asarray(owners, dtype=xp.int64)
    n_nodes = int(np.prod(grid.shape))
    grad = xp.zeros((n_atoms, 3))
    for axis in range(3):
        # the pairs the CPU map kept (kept.recording_lines), or computed again
        kept = recorded_pairs(positions, radii, grid, axis, width) if xp is np else None
        if kept is None:
            pairs = sample_pairs(positions, radii, grid, axis, width, xp)
            if pairs.point.shape[0] == 0:
                continue
            _, product, slot = point_products(pairs, xp)
        else:
            pairs, product, slot = kept
            if pairs.point.shape[0] == 0:
                continue
        weights = xp.asarray(edge_points(points_per_edge(grid.spacing[axis], width))[1])
        moving = (pairs.s > 0) & (pairs.ds > 0) & (pairs.r > 0)
        safe_s = xp.where(moving, pairs.s, 1.0)
        safe_r = xp.where(moving, pairs.r, 1.0)
        sens = sensitivity[axis].take(pairs.point % n_nodes)  # flat indices
        coef = weights[pairs.point // n_nodes] * sens * product[slot] / safe_s * pairs.ds / safe_r
        coef = xp.where(moving, coef, 0.0)
        atom = own[pairs.sphere]
        for a in range(3):
            grad[:, a] += xp.bincount(atom, weights=coef * pairs.offset[:, a], minlength=n_atoms)
    return grad


__all__ = ["smooth_gradient"]
