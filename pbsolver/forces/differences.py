"""Central differences of an energy: the check every exact force in :mod:`pbsolver.forces` meets.

An exact force is −∂G/∂r of the energy G the code reports, so the plain check is to move one
atom a little along each axis and difference G. The step must be small against the distance
over which G is smooth (:mod:`pbsolver.forces` lists where it is not: kinks of the "vdw",
"mol" and "smol" fractions, a following grid re-placed) and large against G's own rounding and
solver tolerance.
"""

from __future__ import annotations

import numpy as np

from pbsolver.options import positive


def central_difference_forces(energy, positions, atoms, delta=1e-3):
    """−∂E/∂r of ``energy`` at ``positions`` by central differences, for the listed atoms.

    Parameters
    ----------
    energy : callable
        ``energy(positions) -> float`` for an (n, 3) array of positions, Å.
    positions : array (n, 3)
        Where to differentiate, Å (not modified).
    atoms : sequence of int
        The atoms whose forces are wanted.
    delta : float
        Step, Å: each coordinate moves by ±delta in turn (two evaluations per coordinate).

    Returns
    -------
    ndarray (len(atoms), 3)
        −(E(r + δ e_a) − E(r − δ e_a)) / 2δ, in the energy's unit per Å.
    """
    delta = positive(delta, "delta")
    base = np.array(positions, dtype=np.float64)
    out = np.zeros((len(atoms), 3))
    for n, i in enumerate(atoms):
        for a in range(3):
            moved = []
            for sign in (1.0, -1.0):
                pos = base.copy()
                pos[i, a] += sign * delta
                moved.append(float(energy(pos)))
            out[n, a] = -(moved[0] - moved[1]) / (2.0 * delta)
    return out


__all__ = ["central_difference_forces"]
