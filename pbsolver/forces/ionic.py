"""The ionic-boundary term: derivatives through κ̄², the ion-accessible map.

κ̄²_s enters the residual of node s as −κ̄²_s (φc_s + φ_s) = −κ̄²_s Φ_s, so

    ∂G/∂κ̄²_s = −λ_s Φ_s.                                                        (1)

The map is κ̄²_s = κ̄²_bulk (1 − C_s / S²) with C_s = Σ of the covered fractions of the cell of
node s along S² lines parallel to z (:func:`pbsolver.molecule.maps.ion_accessibility`: exact
along z, sampled at S × S points across), each covered by the union of the ion-inflated
spheres (radius R_i + ion radius). The map is therefore *not* a step function of the positions:
each line's coverage is a union of chords whose ends move smoothly with the atoms, and
:func:`ionic_gradient` differentiates exactly that map (the same lines, the same spheres, the same
periodic images), with ∂G/∂(covered fraction of a cell along one line) = −κ̄²_bulk (1) / S². The
clip of 1 − C_s/S² to [0, 1] is flat where it acts (C_s ≥ S²: no chord end inside the cell).
"""

from __future__ import annotations

import numpy as np

from pbsolver.arrays import array_module
from pbsolver.forces.lines import end_gradient, end_slopes, periodic_owners


def kappa_sensitivity(problem, phi, lam):
    """∂G/∂κ̄² at every node, equation (1) (zero where Φ is not finite)."""
    xp = array_module(phi)
    with np.errstate(invalid="ignore", over="ignore"):
        s = -lam * (xp.asarray(problem.phi_coulomb, dtype=xp.float64) + phi)
    return xp.where(xp.isfinite(s), s, 0.0)


def ionic_gradient(atoms, grid, sensitivity, kappa2_bulk, ion_radius, *, subsamples=4, box=None):
    """∂G/∂r_i through the ion-accessible map, (n, 3) in the library of ``sensitivity``.

    Parameters
    ----------
    atoms : Atoms
    grid : Grid
    sensitivity : array (nx, ny, nz)
        ∂G/∂κ̄² at each node (:func:`kappa_sensitivity`).
    kappa2_bulk : float
        κ̄² = ε_out κ² of the bulk, Å⁻².
    ion_radius : float
        Å, added to the atomic radii.
    subsamples : int
        Lines per cell side (the map's ``kappa_subsamples``).
    box : 3 floats, optional
        Periodic box (the map's periodic images).
    """
    from pbsolver.molecule.maps import line_bins

    s = int(subsamples)
    pos, rad = atoms.positions, atoms.radii + float(ion_radius)
    owners = np.arange(len(atoms))
    if box is not None:
        pos, rad, owners = periodic_owners(pos, rad, box, grid.origin, rad.max() + 1.0)
    x, y, _ = grid.axes()
    hx, hy, hz = grid.spacing
    per_line = sensitivity * (-kappa2_bulk / (s * s))
    # the S × S line sets together are one uniform plane of lines, S times finer: line
    # (iu, iv) of it is line (iu mod S, iv mod S) of cell column (iu // S, iv // S)
    us = x[0] + ((np.arange(len(x) * s) + 0.5) / s - 0.5) * hx
    vs = y[0] + ((np.arange(len(y) * s) + 0.5) / s - 0.5) * hy
    t0 = grid.origin[2] - 0.5 * hz
    bins = line_bins(pos, rad, 2, us, vs)
    xp = array_module(sensitivity)
    lines, k, owner, slopes = end_slopes(xp, "sphere_end_slopes", 2, us, vs, t0, hz, grid.shape[2],
                                         pos, rad, bins)  # fmt: skip
    return end_gradient(per_line, 2, hz, lines // s, k, owner, slopes, owners, len(atoms))


__all__ = ["ionic_gradient", "kappa_sensitivity"]
