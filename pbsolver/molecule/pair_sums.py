"""Coulomb pair sums between sets of point charges: Σ_j q_j / r_ij at every atom.

The sum the analytic Coulomb energies of :mod:`pbsolver.molecule.energy` are made of, in
float64, O(n·m) time and O(n) memory. Many pairs go to a numba kernel over both cores
(:mod:`pbsolver.backends.cpu.pair_sums`); few stay in NumPy blocks, because numba's first use
in a process (its import and its type registries) would cost more than NumPy takes for them,
and APBS inputs without a solve (point charges in a uniform medium, tens of thousands of
pairs) need nothing else from it. Every input that solves loads numba anyway, so the limit
:data:`NUMPY_PAIRS_MOST` is kept well below the break-even of a process without numba: NumPy
takes tens of milliseconds at the limit, the kernel a few (BENCHMARKS.md, eighteenth and
twenty-third sessions, has the times). The choice depends on the sizes only, so a given input
always takes the same path; the two paths differ by rounding.
"""

from __future__ import annotations

import numpy as np

#: Up to this many pairs the sum runs in NumPy (see the module's docstring).
NUMPY_PAIRS_MOST = 1 << 20
#: Pairs whose distances a NumPy block holds at once (float64: 32 MiB).
PAIR_BLOCK = 1 << 22


def pair_potentials(pos_a, pos_b=None, q_b=None):
    """Σ_j q_j / r_ij (e/Å) at each row of ``pos_a`` from the charges ``q_b`` at ``pos_b``.

    Parameters
    ----------
    pos_a : ndarray (n, 3)
        Where the sums are taken, Å.
    pos_b, q_b : ndarray (m, 3) and (m,)
        The charges (e) and their positions (Å). ``pos_b`` None: the charges sit at ``pos_a``
        and each atom's own term is left out.

    Returns
    -------
    phi : ndarray (n,)
        float64; ±inf or NaN where a charge sits on the point.
    """
    pos_a = np.ascontiguousarray(pos_a, dtype=np.float64)
    same = pos_b is None
    pos_b = pos_a if same else np.ascontiguousarray(pos_b, dtype=np.float64)
    q_b = np.ascontiguousarray(q_b, dtype=np.float64)
    if len(pos_a) * len(pos_b) <= NUMPY_PAIRS_MOST:
        return _numpy_sums(pos_a, pos_b, q_b, same)
    from pbsolver.backends.cpu.pair_sums import pair_potentials_kernel

    out = np.empty(len(pos_a))
    pair_potentials_kernel(pos_a, pos_b, q_b, same, out)
    return out


def _numpy_sums(pos_a, pos_b, q_b, same):
    """:func:`pair_potentials` by blocks of rows of at most :data:`PAIR_BLOCK` pairs."""
    out = np.zeros(len(pos_a))
    rows = max(1, PAIR_BLOCK // max(len(pos_b), 1))
    with np.errstate(divide="ignore", invalid="ignore"):
        for a in range(0, len(pos_a), rows):
            b = min(len(pos_a), a + rows)
            r2 = np.zeros((b - a, len(pos_b)))
            for axis in range(3):
                d = np.subtract.outer(pos_a[a:b, axis], pos_b[:, axis])
                r2 += d * d
            inv = 1.0 / np.sqrt(r2)
            if same:
                inv[np.arange(b - a), np.arange(a, b)] = 0.0  # no self term
            out[a:b] = inv @ q_b
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
