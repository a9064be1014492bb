"""Derivative of the SES edge fractions ("mol", and "smol" before its smoothing) in the atoms.

The SES map (:func:`pbsolver.molecule.maps.face_fractions`) adds to each edge the solute
intervals of its line: vdW chords, and the runs of the reentrant zone between the vdW and the
accessible spheres that no probe reaches. An edge's covered fraction moves only through the
interval ends inside it; an end shared by two intervals (a vdW chord continued by a reentrant
run) moves nothing. The others move with their atoms
(:mod:`pbsolver.backends.bodies.ses_forces` derives each kind):

* a vdW chord end: with its atom, as for the union of spheres (:mod:`pbsolver.forces.lines`);
* a reentrant crossing, where the nearest accessible probe centre is at the probe radius: with
  the atoms whose accessible spheres hold that centre (one: a radial projection; two: a point
  of a free arc, the torus; three: an arc end, the probe touching three atoms).

The ends are the map's own: :func:`pbsolver.backends.cpu.line_ends.interval_end_slopes` runs
the map's SES line body with a recorder in place of the bins, or takes the intervals the CPU
map build recorded (:func:`pbsolver.molecule.kept.recording_lines`). The map finds each crossing by
``nbisect`` bisections of a sample interval (to ``ses_step·2⁻ⁿᵇⁱˢᵉᶜᵗ``, about 8e-6 Å by
default), so the computed energy is a staircase at that scale around the smooth energy of the
exact surface; these are the slopes of the exact surface's energy. Where it is not
differentiable: as for "vdw" (ends crossing nodes, grazing lines), and where the nearest probe
centre switches from one feature to another (a kink), or the reentrant surface meets itself (a
cusp). The ends are recorded and classified where the sensitivities are: by the CPU loops for
NumPy, by the CUDA kernels of :mod:`pbsolver.backends.cuda.line_ends` for CuPy (with the CUDA
maps' SES geometry).
"""

from __future__ import annotations

import logging

import numpy as np

from pbsolver.arrays import array_module
from pbsolver.exceptions import InputError
from pbsolver.forces.lines import end_gradient, end_slopes


def ses_gradient(positions, radii, owners, probe, grid, sensitivity, n_atoms, *, ses_step=None,
                 nbisect=14, ends=None):  # fmt: skip
    """∂/∂c of Σ_axes Σ sensitivity · (SES edge fraction), accumulated per owner atom.

    Parameters
    ----------
    positions, radii, owners : arrays (m, 3), (m,), (m,)
        Sphere centres (Å), vdW radii (Å) and the atom each sphere moves with (periodic images
        included, as :func:`pbsolver.forces.lines.periodic_owners` gives them).
    probe : float
        Probe radius, Å (> 0).
    grid : Grid
    sensitivity : 3 arrays of ``grid.shape``
        ∂(quantity)/∂(edge fraction) per orientation (NumPy or CuPy).
    n_atoms : int
        Length of the result.
    ses_step, nbisect
        The map's sampling of the reentrant zone (:func:`pbsolver.molecule.maps.face_fractions`).
    ends : 3 tuples, optional
        The interval ends of each axis, ``(lines, bins, atoms, slopes, unmatched)`` as
        :func:`pbsolver.backends.cpu.line_ends.interval_end_slopes` gives them for these
        spheres and this grid, recorded by the caller (the stacked engine records all its
        frames' at once, :meth:`pbsolver.md.ses.FrameSES.interval_ends`); None: recorded here.

    Returns
    -------
    array (n_atoms, 3)
        In the sensitivities' array library.
    """
    from pbsolver.backends.cpu import line_ends
    from pbsolver.molecule.maps import (
        line_bins,
        map_backend,
        recorded_ses_lines,
        ses_bisections,
        ses_geometry,
        ses_sampling_step,
    )

    if not probe > 0:
        raise InputError(f"the SES slopes need a probe radius > 0, got {probe}")
    nbisect = ses_bisections(nbisect)
    xp = array_module(sensitivity[0])
    if ends is not None:
        grad = xp.zeros((n_atoms, 3))
        for axis, (*kept, unmatched) in enumerate(ends):
            _warn_unmatched(unmatched, axis)
            grad = grad + end_gradient(sensitivity[axis], axis, grid.spacing[axis], *kept,
                                       owners, n_atoms)  # fmt: skip
        return grad
    pos = np.ascontiguousarray(positions, dtype=np.float64)
    vdw = np.ascontiguousarray(radii, dtype=np.float64)
    owners = np.asarray(owners, dtype=np.int64)
    acc = vdw + probe
    # the geometry of these atoms that the maps of the sensitivities' device used (kept by the
    # map build: the same arrays; on the GPU its own kernels' geometry, not the CPU's again)
    maps_on = map_backend("cpu" if xp is np else "cuda")
    nb, features, exposed = ses_geometry(maps_on, pos, vdw, probe)
    axes = grid.axes()
    grad = xp.zeros((n_atoms, 3))
    for axis in range(3):
        a1, a2 = [a for a in range(3) if a != axis]
        h = grid.spacing[axis]
        step = ses_sampling_step(h, ses_step)
        bins = line_bins(pos, acc, axis, axes[a1], axes[a2])
        ebins = line_bins(pos, acc + probe, axis, axes[a1], axes[a2], subset=exposed)
        args = (axis, axes[a1], axes[a2], grid.origin[axis], h, grid.shape[axis], pos, vdw, acc,
                probe, step, nbisect, bins, ebins, features, nb)  # fmt: skip
        recorded = None
        if xp is np:  # the intervals the CPU maps recorded (kept.recording_lines), if kept
            lines = (axis, axes[a1], axes[a2], grid.origin[axis], h, grid.shape[axis])
            recorded = recorded_ses_lines(*lines, pos, vdw, probe, step, nbisect)
        if recorded is not None:
            *ends, unmatched = line_ends.interval_end_slopes(*args, recorded=recorded)
        else:
            *ends, unmatched = end_slopes(xp, "interval_end_slopes", *args)
        _warn_unmatched(unmatched, axis)
        grad = grad + end_gradient(sensitivity[axis], axis, h, *ends, owners, n_atoms)
    return grad


def _warn_unmatched(unmatched, axis):
    if unmatched:
        logging.getLogger("pbsolver").warning(
            "SES forces: %d interval ends along axis %d are neither a vdW chord end nor a "
            "crossing at the probe radius; their share of the forces is left out",
            unmatched, axis,
        )  # fmt: skip


__all__ = ["ses_gradient"]
