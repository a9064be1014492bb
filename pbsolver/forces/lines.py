"""Derivative of sphere-union coverage along grid lines with respect to the sphere centres.

The map kernels (:func:`pbsolver.backends.cpu.maps.sphere_union_lines` and the bodies of
:mod:`pbsolver.backends.bodies.maps`) cover each line along axis ``a`` through (u, v) with the
chords [t − w, t + w] of the spheres that reach it (w = √(r² − du² − dv²), du = c_{a1} − u,
dv = c_{a2} − v, t = c_a), merge them (touching chords merge), and add to each bin k (the edge
or cell [t0 + k h, t0 + (k+1) h)) the covered length over h.

The covered fraction of a bin moves only through the ends of the merged intervals that lie
inside it: an end e of atom i's chord adds +∂e/h, a start s adds −∂s/h, with
∂(t ± w)/∂c_a = 1 and ∂(t ± w)/∂c_{a1} = ∓du/w (∂c_{a2} alike). Both give
∂f/∂c_{a1} = −du/(w h), ∂f/∂c_a = ±1/h. The derivative is exact where the union is smooth:
everywhere except where an end crosses a node (the fraction has a kink: one-sided slopes
differ by the sensitivities of the two bins) and where a line grazes a sphere (w → 0, the
slope ∝ 1/w is integrable but unbounded); both are sets of measure zero in the positions, but
near them the energy is rough on a scale of 10⁻³ Å (see :mod:`pbsolver.molecule.smooth_surface`,
whose "svdw" surface is smooth). Chords of half-length below
:data:`pbsolver.backends.bodies.lines.GRAZE` · r (a line tangent to a sphere up to rounding) are
left out.

:func:`union_gradient` takes the ends from the map kernels themselves: the sphere-union line
body runs with a recorder of the merged intervals, and each end in the grid is matched to the
sphere whose chord it ends (:func:`pbsolver.backends.cpu.line_ends.sphere_end_slopes`, or its
CUDA twin for CuPy sensitivities: :func:`end_slopes`); the sensitivities are gathered at those
edges where they are (NumPy or CuPy, :func:`end_gradient`).
"""

from __future__ import annotations

import numpy as np

from pbsolver.arrays import array_module, to_numpy


def union_gradient(positions, radii, owners, axis, us, vs, t0, h, nbins, sensitivity, n_atoms):
    """∂/∂c of Σ sensitivity[bin] · (covered fraction of the bin), accumulated per owner atom.

    Parameters
    ----------
    positions : array (m, 3)
        Sphere centres, Å (periodic images included).
    radii : array (m,)
        Sphere radii, Å (spheres of radius 0 cover nothing).
    owners : array (m,) of int
        The atom each sphere moves with (an image moves with its atom).
    axis : int
        The lines' direction.
    us, vs : 1-D arrays
        Uniformly spaced coordinates of the lines along the other two axes (in increasing axis
        order), as the map kernels take them.
    t0, h : float
        Start of bin 0 and the bin length along ``axis``, Å.
    nbins : int
    sensitivity : array
        Grid-shaped: ``sensitivity[k, iu, iv]`` (bin index in position ``axis``) is the
        derivative of the quantity with respect to the covered fraction of bin k of line
        (iu, iv). NumPy or CuPy; the result is in the same library.
    n_atoms : int
        Length of the result.

    Returns
    -------
    array (n_atoms, 3)
    """
    from pbsolver.molecule.maps import line_bins

    pos = np.ascontiguousarray(positions, dtype=np.float64)
    rad = np.ascontiguousarray(radii, dtype=np.float64)
    us = np.ascontiguousarray(to_numpy(us), dtype=np.float64)
    vs = np.ascontiguousarray(to_numpy(vs), dtype=np.float64)
    bins = line_bins(pos, rad, axis, us, vs)
    ends = end_slopes(array_module(sensitivity), "sphere_end_slopes", axis, us, vs, t0, h, nbins,
                      pos, rad, bins)  # fmt: skip
    return end_gradient(sensitivity, axis, h, *ends, owners, n_atoms)


def end_slopes(xp, name, *args):
    """The line-end kernel ``name`` for arrays of ``xp``: ``(lines, bins, atoms, slopes, …)``.

    ``name`` is "sphere_end_slopes" or "interval_end_slopes" of
    :mod:`pbsolver.backends.cpu.line_ends` (NumPy) or of its CUDA twin (CuPy,
    :mod:`pbsolver.backends.cuda.line_ends`: the same ends). Where a line holds more spheres or
    probe candidates than the CUDA kernels do, the CPU kernels record them, as the maps do.
    """
    from pbsolver.backends.cpu import line_ends as cpu

    if xp is not np:
        from pbsolver.backends.bodies.maps import LineCapacityError
        from pbsolver.backends.cuda import line_ends as cuda

        try:
            return getattr(cuda, name)(*args)
        except LineCapacityError:
            pass
    return getattr(cpu, name)(*args)


def end_gradient(sensitivity, axis, h, lines, bins, atoms, slopes, owners, n_atoms):
    """Σ over moving interval ends of sensitivity[edge]/h · slope, per owner atom: (n_atoms, 3).

    ``lines``, ``bins``, ``atoms``, ``slopes`` are the line-end kernels' output
    (:mod:`pbsolver.backends.cpu.line_ends`) for lines along ``axis``; ``sensitivity`` (a NumPy
    or CuPy grid, or anything indexed like one by (i, j, k) arrays) is read at the ends' edges;
    the result is in its array library. Ends on the host are summed there in order
    (:func:`~pbsolver.backends.cpu.line_ends.end_forces`); ends left on a GPU (the stacked
    engine's, :func:`pbsolver.md.line_ends.frame_line_ends`) are summed there, per atom in an
    order the device chooses (atomic adds: reruns may differ by rounding).
    """
    from pbsolver.backends.cpu.line_ends import end_forces

    xp = array_module(sensitivity)
    a1, a2 = [a for a in range(3) if a != axis]
    if not len(bins):
        return xp.zeros((n_atoms, 3))
    idx = [None, None, None]
    idx[axis], idx[a1], idx[a2] = bins, lines[:, 0], lines[:, 1]
    s = sensitivity[tuple(xp.asarray(i) for i in idx)]
    if xp is not np and array_module(slopes) is xp:
        return array_end_forces(s / h, atoms, slopes, owners, n_atoms)
    grad = end_forces(to_numpy(s) / h, atoms, slopes, owners, n_atoms)
    return xp.asarray(grad)


def array_end_forces(s, atoms, slopes, owners, n_atoms):
    """:func:`pbsolver.backends.cpu.line_ends.end_forces` in array code of the ends' library.

    For ends left on a GPU: the per-atom sums are atomic adds there (``bincount``), in an order
    the device chooses.
    """
    xp = array_module(slopes)
    owner = xp.asarray(np.asarray(owners, dtype=np.int64))[xp.maximum(atoms, 0)]
    keep = ((atoms >= 0) & (owner < n_atoms)).ravel()
    terms = (s[:, None, None] * slopes).reshape(-1, 3)[keep]
    who = owner.ravel()[keep]
    return xp.stack([xp.bincount(who, weights=terms[:, a], minlength=n_atoms)
                     for a in range(3)], axis=1)  # fmt: skip


def periodic_owners(positions, radii, box, origin, cutoff):
    """Spheres of :func:`pbsolver.molecule.maps.periodic_images` with the atom each one images.

    Returns ``(positions, radii, owners)``: the same images, in the same order, as the maps
    use for the same ``cutoff``.
    """
    from pbsolver.molecule.maps import periodic_images

    n = len(radii)
    pos, tagged = periodic_images(positions, np.column_stack([radii, np.arange(n)]), box, origin,
                                  cutoff)  # fmt: skip
    return pos, tagged[:, 0], tagged[:, 1].astype(np.int64)


__all__ = ["array_end_forces", "end_gradient", "end_slopes", "periodic_owners", "union_gradient"]
