"""Coulomb pair sums between sets of point charges, compiled for the CPU's cores.

:func:`pair_potentials` is Σ_j q_j / r_ij at every atom i of one set from the charges of
another (or of the same set, without the self terms): the sum the analytic Coulomb energies of
:mod:`pbsolver.molecule.energy` are made of. Each atom's sum runs over the other set in index
order on one thread, so the result does not depend on the number of threads; O(n·m) time and
no memory beyond the result.

Imported by the energy functions when they run (not with :mod:`pbsolver`), so that importing
the package does not load numba.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from pbsolver.backends import kernel_cache

kernel_cache.configure()  # before the kernel below is defined: its cache's directory


# the "numpy" error model: a zero distance divides into ±inf (found by the caller), no exception
@njit(cache=True, nogil=True, boundscheck=False, error_model="numpy", parallel=True)
def _pair_potentials(pos_a, pos_b, q_b, same, out):
    for i in prange(pos_a.shape[0]):
        x, y, z = pos_a[i, 0], pos_a[i, 1], pos_a[i, 2]
        acc = 0.0
        for j in range(pos_b.shape[0]):
            if same and j == i:
                continue
            dx = x - pos_b[j, 0]
            dy = y - pos_b[j, 1]
            dz = z - pos_b[j, 2]
            acc += q_b[j] / math.sqrt(dx * dx + dy * dy + dz * dz)
        out[i] = acc


def pair_potentials(pos_a, pos_b=None, q_b=None):
    """Σ_j q_j / r_ij (e/Å) at each row of ``pos_a`` from the charges ``q_b`` at ``pos_b``.

    Parameters
    ----------
    pos_a : ndarray (n, 3)
        Where the sums are taken, Å.
    pos_b, q_b : ndarray (m, 3) and (m,), optional
        The charges (e) and their positions (Å). Without ``pos_b`` the charges sit at
        ``pos_a`` and each atom's own term is left out.

    Returns
    -------
    phi : ndarray (n,)
        float64; ±inf or NaN where a charge of the other set sits at the same position.
    """
    pos_a = np.ascontiguousarray(pos_a, dtype=np.float64)
    same = pos_b is None
    pos_b = pos_a if same else np.ascontiguousarray(pos_b, dtype=np.float64)
    q_b = np.ascontiguousarray(q_b, dtype=np.float64)
    out = np.empty(len(pos_a))
    _pair_potentials(pos_a, pos_b, q_b, same, out)
    return out


def first_coincident_pair(phi, pos_a, pos_b=None):
    """(i, j): the first row i of ``phi`` that is not finite, and the charge j nearest to it.

    ``phi`` is :func:`pair_potentials`'s for the same positions; ``pos_b`` None means the same
    set (then j ≠ i). A sum is infinite only where a charge sits on the point, so j is that
    charge. None when every sum is finite.
    """
    bad = np.flatnonzero(~np.isfinite(phi))
    if not len(bad):
        return None
    i = int(bad[0])
    same = pos_b is None
    pos_b = pos_a if same else pos_b
    d2 = np.sum((np.asarray(pos_b) - pos_a[i]) ** 2, axis=1)
    if same:
        d2[i] = np.inf
    return i, int(np.argmin(d2))
