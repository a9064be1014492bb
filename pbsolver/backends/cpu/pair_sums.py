"""The Coulomb pair-sum kernel: Σ_j q_j / r_ij at each point, over the CPU's cores.

Each point's sum runs over the charges in index order on one thread, so the result does not
depend on the number of threads. The pair term is the φ_c sums' own
(:func:`pbsolver.backends.bodies.maps.make_point_sums`, ``coulomb_pair``; no on-node tolerance
here: only a zero distance gives ±inf). Called through
:func:`pbsolver.molecule.pair_sums.pair_potentials`.
"""

from __future__ import annotations

from numba import njit, prange

from pbsolver.backends.bodies import maps as B

# the "numpy" error model: a zero distance divides into ±inf (found by the caller), no exception
_JIT = {"cache": True, "nogil": True, "boundscheck": False, "error_model": "numpy"}
_coulomb_pair = B.make_point_sums(
    njit(**_JIT), njit(**_JIT, fastmath={"reassoc", "contract", "nsz"}, inline="always")
)["coulomb_pair"]


@njit(**_JIT, parallel=True)
def pair_potentials_kernel(pos_a, pos_b, q_b, same, out):
    """out[i] = Σ_j q_b[j] / |pos_a[i] − pos_b[j]| (j ≠ i when ``same``)."""
    for i in prange(pos_a.shape[0]):
        x, y, z = pos_a[i, 0], pos_a[i, 1], pos_a[i, 2]
        acc = 0.0
        for j in range(pos_b.shape[0]):
            if not (same and j == i):
                acc += _coulomb_pair(x - pos_b[j, 0], y - pos_b[j, 1], z - pos_b[j, 2], q_b[j],
                                     0.0)  # fmt: skip
        out[i] = acc
