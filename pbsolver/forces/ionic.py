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
from pbsolver.forces.coulomb import force_loops
from pbsolver.forces.lines import end_gradient, end_slopes, periodic_owners


def kappa_sensitivity(problem, phi, lam):
    """∂G/∂κ̄² at every node, equation (1) (zero where Φ is not finite)."""
    xp = array_module(phi)
    return force_loops(xp).kappa_sensitivity(xp.asarray(lam, dtype=xp.float64),
                                             problem.phi_coulomb,
                                             xp.asarray(phi, dtype=xp.float64))  # fmt: skip


def ionic_gradient(atoms, grid, sensitivity, kappa2_bulk, ion_radius, *, subsamples=4, box=None,
                   ends=None):  # fmt: skip
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
    ends : tuple or callable, optional
        The lines' chord ends, ``(lines, bins, atoms, slopes, …)`` as
        :func:`pbsolver.backends.cpu.line_ends.sphere_end_slopes` gives them, recorded by the
        caller; or a function of ``sensitivity`` that sums them itself per atom (the stacked
        engine, for all its frames at once: :meth:`pbsolver.md.engine.StackedFrames.ion_end_sums`,
        ``atoms`` then the frames' rows); None: recorded here.
    """
    from pbsolver.backends.cpu import line_ends
    from pbsolver.molecule.maps import ion_lines, line_bins, recorded_ion_lines

    s = int(subsamples)
    pos, rad = atoms.positions, atoms.radii + float(ion_radius)
    owners = np.arange(len(atoms))
    if box is not None:
        pos, rad, owners = periodic_owners(pos, rad, box, grid.origin, rad.max() + 1.0)
    hz = grid.spacing[2]
    # the S × S line sets together are one uniform plane of lines, S times finer: line
    # (iu, iv) of it is line (iu mod S, iv mod S) of cell column (iu // S, iv // S)
    xp = array_module(sensitivity)
    # each of the s² line sets carries 1/s² of a cell's κ̄² = κ̄²_bulk · (accessible share)
    scale = -kappa2_bulk / (s * s)
    if callable(ends):
        return scale * ends(sensitivity)
    if ends is not None:
        lines, k, owner, slopes = ends[:4]
    else:
        us, vs, t0 = ion_lines(grid, s)
        bins = line_bins(pos, rad, 2, us, vs)
        args = (2, us, vs, t0, hz, grid.shape[2], pos, rad, bins)
        recorded = None
        if xp is np:  # the intervals the CPU map recorded (kept.recording_lines), if kept
            recorded = recorded_ion_lines(us, vs, t0, hz, grid.shape[2], pos, rad)
        if recorded is not None:
            lines, k, owner, slopes = line_ends.sphere_end_slopes(*args, recorded=recorded)
        else:
            lines, k, owner, slopes = end_slopes(xp, "sphere_end_slopes", *args)
    return scale * end_gradient(sensitivity, 2, hz, lines // s, k, owner, slopes, owners,
                                len(atoms))  # fmt: skip


__all__ = ["ionic_gradient", "kappa_sensitivity"]
