"""The solvent-excluded surface of part of a molecule, from the whole molecule's.

A binding energy needs the SES of a complex and of its receptor, the complex less a ligand.
Taking the ligand away changes the surface only near it, so the receptor's edge fractions are
the complex's except on the grid lines that pass near the ligand, which are computed again.

**How near.** A point x is solvent-excluded unless a probe of radius r_p fits within r_p of it
without touching an accessible sphere (radius R = r_vdW + r_p). Removing atom j changes where a
probe fits only within R_j of c_j, so it can change x's side only within R_j + r_p of c_j. The
line kernels see more than the geometry: a line consults the atoms within R + r_p of it, and
their SES features (the free arcs of their intersection circles, their exposure), which change
for the atoms whose accessible sphere meets j's (|c_i − c_j| < R_i + R_j). A line farther than
3·max R + r_p from every removed atom therefore consults nothing that changed: its fractions
are the whole's, as computed. Lines are kept or recomputed whole; the recomputed ones are those
whose two transverse coordinates lie within that reach (plus one grid step) of the removed
atoms' bounding box, along each axis.
"""

from __future__ import annotations

import math

import numpy as np

from pbsolver.exceptions import InputError
from pbsolver.molecule.maps import (
    map_backend,
    ses_geometry,
    ses_line_fractions,
    snap_fractions,
)


def part_reach(radii, probe_radius: float) -> float:
    """How far (Å) from a removed atom a line's SES fractions may change: 3·max(R) + r_p."""
    return 3.0 * (float(np.max(radii)) + probe_radius) + probe_radius


def part_windows(grid, removed_positions, reach: float) -> list[tuple[slice, slice]]:
    """Per axis, the node ranges of the two transverse axes whose lines are recomputed.

    The lines along axis ``a`` whose transverse coordinates lie within ``reach`` + one grid step
    of the bounding box of ``removed_positions``, as two slices of node indices.
    """
    lo = removed_positions.min(axis=0)
    hi = removed_positions.max(axis=0)
    spans = []
    for b in range(3):
        h = grid.spacing[b]
        first = math.floor((lo[b] - reach - h - grid.origin[b]) / h)
        last = math.ceil((hi[b] + reach + h - grid.origin[b]) / h)
        spans.append(slice(max(0, first), min(grid.shape[b], last + 1)))
    windows = []
    for axis in range(3):
        a1, a2 = [a for a in range(3) if a != axis]
        windows.append((spans[a1], spans[a2]))
    return windows


def part_face_fractions(
    part, whole_fractions, removed, grid, probe_radius=1.4, *, ses_step=None, nbisect=14,
    backend="cpu",
):  # fmt: skip
    """SES ("mol") edge fractions of ``part``, a molecule less the atoms ``removed``.

    Parameters
    ----------
    part : Atoms
        The atoms that remain (e.g. a receptor).
    whole_fractions : tuple of 3 arrays
        :func:`pbsolver.molecule.maps.face_fractions` of ``part`` and ``removed`` together on
        ``grid`` with ``surface="mol"`` and the same ``probe_radius``, ``ses_step`` and
        ``nbisect``; not modified.
    removed : Atoms
        The atoms taken away (e.g. a ligand).
    grid : Grid
        A Dirichlet grid (no periodic images).
    probe_radius : float
        Probe radius, Å (> 0: a zero probe's surface is the union of the spheres).
    ses_step, nbisect, backend
        As for :func:`~pbsolver.molecule.maps.face_fractions`.

    Returns
    -------
    tuple of 3 float64 arrays
        ``part``'s fractions: the whole's on the lines far from ``removed`` (module docstring),
        computed on the others. Smooth them for "smol" (``smooth_fractions``), as
        ``face_fractions`` does.
    """
    if not probe_radius > 0:
        raise InputError(f"part_face_fractions needs a probe radius > 0 Å, got {probe_radius}")
    if len(removed) == 0:
        return tuple(np.array(f, dtype=np.float64) for f in whole_fractions)
    for f in whole_fractions:
        if np.shape(f) != grid.shape:
            raise InputError(f"whole_fractions have shape {np.shape(f)}, the grid {grid.shape}")
    backend = map_backend(backend)
    probe = float(probe_radius)
    reach = part_reach(np.concatenate([part.radii, removed.radii]), probe)
    if len(part) == 0:
        return tuple(np.zeros(grid.shape) for _ in range(3))
    windows = part_windows(grid, removed.positions, reach)
    out = [np.array(f, dtype=np.float64) for f in whole_fractions]
    pos, rad = part.positions, part.radii
    geometry = ses_geometry(backend, pos, rad, probe)
    axes = grid.axes()
    for axis, (w1, w2) in enumerate(windows):
        a1, a2 = [a for a in range(3) if a != axis]
        lines = ses_line_fractions(backend, grid, axis, axes[a1][w1], axes[a2][w2], pos, rad,
                                   probe, geometry, ses_step, nbisect)  # fmt: skip
        lines = np.array(lines, dtype=np.float64)
        snap_fractions(lines)
        index = [slice(None)] * 3
        index[a1], index[a2] = w1, w2
        out[axis][tuple(index)] = lines
    return tuple(out)
