"""The Coulomb pair-sum kernel: Σ_j q_j / r_ij at each point, over the CPU's cores.

Each point's sum runs over the charges in index order on one thread, so the result does not
depend on the number of threads. Called through :func:`pbsolver.molecule.pair_sums.pair_potentials`.
"""

from __future__ import annotations

import math

from numba import njit, prange


# the "numpy" error model: a zero distance divides into ±inf (found by the caller), no exception
@njit(cache=True, nogil=True, boundscheck=False, error_model="numpy", parallel=True)
def pair_potentials_kernel(pos_a, pos_b, q_b, same, out):
    """out[i] = Σ_j q_b[j] / |pos_a[i] − pos_b[j]| (j ≠ i when ``same``)."""
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
