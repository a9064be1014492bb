"""The solvent-excluded surface of part of a molecule, from the whole molecule's.

A binding energy needs the SES of a complex and of its receptor, the complex less a ligand.
Taking the ligand away changes the surface only near it, so the receptor's edge fractions are
the complex's except on the grid lines that pass near the ligand, which are computed again.

**How near.** A point x is solvent-excluded unless a probe of radius r_p fits within r_p of it
without touching an accessible sphere (radius R = r_vdW + r_p). A grid line's kernel consults
the atoms whose accessible sphere comes within r_p of the line (R_i + r_p), and their SES
features: their neighbour lists, exposure and the free arcs of their intersection circles.
Atom i's features depend only on the spheres that meet its own (a circle (i, j) lies on i's
sphere, so a sphere that buries part of it meets i's). Removing the atoms j therefore changes
what a line consults only through

* the removed atoms themselves, and
* the remaining atoms whose accessible sphere meets a removed one's (|c_i − c_j| < R_i + R_j).

A line farther than R_i + r_p from each of these "changed" atoms consults nothing that changed:
its fractions are the whole's, as computed. Lines are kept or recomputed whole; the recomputed
ones are those within R_i + r_p (plus ``LINE_SLACK``) of a changed atom, inside a window per
axis around them. At most that is 3·max R + r_p from a removed atom (:func:`part_reach`).
"""

from __future__ import annotations

import math

import numpy as np
from scipy.spatial import cKDTree

from pbsolver.exceptions import InputError
from pbsolver.molecule.maps import (
    map_backend,
    ses_geometry,
    ses_line_fractions,
    snap_fractions,
)

#: Å added to each changed atom's reach when lines are picked, so that a line at the reach
#: (to rounding) is recomputed rather than kept.
LINE_SLACK = 0.01


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


def changed_atoms(part, removed, probe_radius: float):
    """The atoms whose SES features can differ between the whole and ``part``: (centres, R).

    ``removed`` and the atoms of ``part`` whose accessible sphere (radius R = r + r_p) meets a
    removed atom's; R of each (module docstring).
    """
    acc_part = part.radii + probe_radius
    acc_removed = removed.radii + probe_radius
    tree = cKDTree(part.positions)
    near = tree.query_ball_point(removed.positions, acc_removed + float(acc_part.max()))
    meets = np.zeros(len(part), dtype=bool)
    for j, candidates in enumerate(near):
        idx = np.asarray(candidates, dtype=np.int64)
        d = np.linalg.norm(part.positions[idx] - removed.positions[j], axis=1)
        meets[idx[d < acc_part[idx] + acc_removed[j]]] = True
    centres = np.concatenate([part.positions[meets], removed.positions])
    return centres, np.concatenate([acc_part[meets], acc_removed])


def lines_near(grid, axis, window, centres, reach):
    """Which lines along ``axis`` of ``window`` pass within ``reach[i]`` of some ``centres[i]``.

    A bool array ``(len(w1), len(w2))`` over the window's two transverse node ranges.
    """
    a1, a2 = [a for a in range(3) if a != axis]
    w1, w2 = window
    axes = grid.axes()
    us, vs = axes[a1][w1], axes[a2][w2]
    near = np.zeros((len(us), len(vs)), dtype=bool)
    for c, r in zip(centres, reach, strict=True):
        lo1, hi1 = np.searchsorted(us, [c[a1] - r, c[a1] + r])
        lo2, hi2 = np.searchsorted(vs, [c[a2] - r, c[a2] + r])
        du = (us[lo1:hi1] - c[a1])[:, None]
        dv = (vs[lo2:hi2] - c[a2])[None, :]
        near[lo1:hi1, lo2:hi2] |= du * du + dv * dv < r * r
    return near


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
    if len(part) == 0:
        return tuple(np.zeros(grid.shape) for _ in range(3))
    centres, acc = changed_atoms(part, removed, probe)
    line_reach = acc + probe + LINE_SLACK
    windows = part_windows(grid, centres, float(line_reach.max()))
    out = [np.array(f, dtype=np.float64) for f in whole_fractions]
    pos, rad = part.positions, part.radii
    geometry = ses_geometry(backend, pos, rad, probe)
    axes = grid.axes()
    for axis, (w1, w2) in enumerate(windows):
        a1, a2 = [a for a in range(3) if a != axis]
        near = lines_near(grid, axis, (w1, w2), centres, line_reach)
        lines = ses_line_fractions(backend, grid, axis, axes[a1][w1], axes[a2][w2], pos, rad,
                                   probe, geometry, ses_step, nbisect, only=near)  # fmt: skip
        lines = np.array(lines, dtype=np.float64)
        snap_fractions(lines)
        index = [slice(None)] * 3
        index[a1], index[a2] = w1, w2
        shape = [1, 1, 1]
        shape[a1], shape[a2] = near.shape
        np.copyto(out[axis][tuple(index)], lines, where=near.reshape(shape))
    return tuple(out)
