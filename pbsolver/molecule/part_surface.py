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


def changed_lines(xp, shape, spacing, origins, frame, centres, reach):
    """Per axis, a flag per (frame, grid line): whether it passes within ``reach`` of a centre.

    Parameters
    ----------
    xp : module
        NumPy or CuPy (the arrays' library).
    shape, spacing : 3 ints, 3 floats
        Every frame's grid (nodes; Å).
    origins : array (B, 3)
        Each frame's grid origin, Å.
    frame, centres, reach : arrays (C,), (C, 3), (C,)
        Each centre's frame, position (Å) and reach (Å): for a part's SES, the changed atoms
        (:func:`changed_atoms`) with R + r_p + ``LINE_SLACK``.

    Returns
    -------
    list of 3 bool arrays
        Axis ``a``'s flags, flat over (frame, i₁, i₂), the other two axes in increasing order.
    """
    nf = int(origins.shape[0])
    rmax = float(reach.max()) if reach.shape[0] else 0.0
    flags = []
    for axis in range(3):
        a1, a2 = [a for a in range(3) if a != axis]
        n1, n2 = shape[a1], shape[a2]
        h1, h2 = spacing[a1], spacing[a2]
        # each centre's lines: a fixed box of offsets from its first line, tested exactly
        k1, k2 = int(2.0 * rmax / h1) + 2, int(2.0 * rmax / h2) + 2
        flag = xp.zeros(nf * n1 * n2, dtype=np.bool_)
        step = max(1, (1 << 22) // (k1 * k2))  # centres at a time
        for c0 in range(0, int(centres.shape[0]), step):
            f, c, r = frame[c0 : c0 + step], centres[c0 : c0 + step], reach[c0 : c0 + step]
            u0, v0 = origins[f, a1], origins[f, a2]
            i1 = xp.ceil((c[:, a1] - r - u0) / h1).astype(np.int64)[:, None, None]
            i2 = xp.ceil((c[:, a2] - r - v0) / h2).astype(np.int64)[:, None, None]
            i1 = i1 + xp.arange(k1)[None, :, None]
            i2 = i2 + xp.arange(k2)[None, None, :]
            du = u0[:, None, None] + i1 * h1 - c[:, a1, None, None]
            dv = v0[:, None, None] + i2 * h2 - c[:, a2, None, None]
            near = (du * du + dv * dv < (r * r)[:, None, None]) & (i1 >= 0) & (i1 < n1)
            near &= (i2 >= 0) & (i2 < n2)
            flag[((f[:, None, None] * n1 + i1) * n2 + i2)[near]] = True
        flags.append(flag)
    return flags


def _window(flags):
    """The smallest (slice, slice) holding every True of a 2-D flag array."""
    rows = np.flatnonzero(flags.any(axis=1))
    cols = np.flatnonzero(flags.any(axis=0))
    return slice(int(rows[0]), int(rows[-1]) + 1), slice(int(cols[0]), int(cols[-1]) + 1)


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
    flags = changed_lines(np, grid.shape, grid.spacing, np.asarray([grid.origin], dtype=float),
                          np.zeros(len(centres), dtype=np.int64), centres,
                          acc + probe + LINE_SLACK)  # fmt: skip
    out = [np.array(f, dtype=np.float64) for f in whole_fractions]
    pos, rad = part.positions, part.radii
    geometry = ses_geometry(backend, pos, rad, probe)
    axes = grid.axes()
    for axis, flag in enumerate(flags):
        a1, a2 = [a for a in range(3) if a != axis]
        flag = flag.reshape(grid.shape[a1], grid.shape[a2])
        if not flag.any():
            continue
        w1, w2 = _window(flag)
        near = flag[w1, w2]
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
