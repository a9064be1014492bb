"""Numba CPU kernels of the forces' surface terms: how each covered interval end of a line moves.

The maps' own line bodies (:func:`pbsolver.backends.bodies.maps.make_ses`: the SES lines and the
sphere-union lines) run here with a range body that records the covered intervals instead of
adding them to bins (:func:`pbsolver.backends.bodies.lines.record_range_body`), so the ends are
the maps' ends, bit for bit. Each end inside the grid is then classified:

* :func:`sphere_end_slopes` (a union of spheres: "vdw", the ion-accessible map): every end of a
  merged chord is the chord end of one sphere and moves with it;
* :func:`interval_end_slopes` (the SES; bodies in :mod:`pbsolver.backends.bodies.line_ends`
  and :mod:`pbsolver.backends.bodies.ses_forces`):
  an end where one recorded interval meets the next (a vdW chord continued by a reentrant run)
  moves nothing; a vdW chord end moves with its atom; a reentrant crossing moves with the one,
  two or three atoms whose accessible spheres hold the nearest probe centre.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from pbsolver.backends.bodies.line_ends import compile_line_ends
from pbsolver.backends.bodies.maps import ARC_COLUMNS
from pbsolver.backends.cpu.maps import (
    RECORDING_BODIES,
    bin_intervals,
    bin_subsampled_intervals,
    ses_kernel_args,
    ses_lines_kernel,
    union_lines_kernel,
)

_JIT = {"cache": True, "nogil": True, "boundscheck": False, "error_model": "numpy"}
_jit = njit(**_JIT)
_bin_count = RECORDING_BODIES["bin_count"]
_union_line_slopes, _ses_line_slopes = compile_line_ends(_jit, RECORDING_BODIES)

#: The bins' stand-in where the map kernels record intervals.
_NO_BINS = np.zeros((1, 1, 1))
#: Intervals a line of the SES records before the lines are redone with room for all of them
#: (proteins need up to about 26).
FIRST_CAPACITY = 48
#: The same for a union of spheres (a few merged chords a line).
FIRST_UNION_CAPACITY = 8


@njit(**_JIT, parallel=True)
def _union_slopes(
    rec, offsets, axis, us, vs, t0, h, nbins, pos, rad, maxr, u0, v0, bsize, nbu, nbv, bstart,
    border, out_bin, out_atoms, out_slopes,
):  # fmt: skip
    for line in prange(us.shape[0] * vs.shape[0]):
        # a line without ends has no slots: skipped from the compact offsets, not from its
        # count in ``rec`` (one cache line a line of a large array)
        if offsets[line + 1] == offsets[line]:
            continue
        _union_line_slopes(line, rec, offsets, axis, us, vs, t0, h, nbins, pos, rad, maxr, u0, v0,
                           bsize, nbu, nbv, bstart, border, out_bin, out_atoms,
                           out_slopes)  # fmt: skip


@njit(**_JIT, parallel=True)
def _slopes(
    rec, offsets, axis, us, vs, t0, h, nbins, pos, vdw, acc, probe, tol, maxacc, maxreach,
    u0, v0, bsize, nbu, nbv, bstart, border,
    e_u0, e_v0, e_bsize, e_nbu, e_nbv, e_bstart, e_border,
    nb_start, nb_index, circ_start, circ_j, geom, arc_start, arcs,
    out_bin, out_atoms, out_slopes, unmatched,
):  # fmt: skip
    nv = vs.shape[0]
    for line in prange(us.shape[0] * nv):
        iu = line // nv
        if offsets[line + 1] == offsets[line]:  # no ends (as in :func:`_union_slopes`)
            continue
        # the candidate buffers hold every exposed atom in reach of the line
        ecap = max(1, _bin_count(us[iu], vs[line - iu * nv], maxreach, e_u0, e_v0, e_bsize,
                                 e_nbu, e_nbv, e_bstart))  # fmt: skip
        unmatched[line] = _ses_line_slopes(
            line, rec, offsets, axis, us, vs, t0, h, nbins, pos, vdw, acc, probe, tol, maxacc,
            maxreach, u0, v0, bsize, nbu, nbv, bstart, border,
            e_u0, e_v0, e_bsize, e_nbu, e_nbv, e_bstart, e_border,
            nb_start, nb_index, circ_start, circ_j, geom, arc_start, arcs,
            out_bin, out_atoms, out_slopes, np.empty(ecap, dtype=np.int64), np.empty(ecap),
            np.zeros(4), np.full(3, -1, dtype=np.int64), np.zeros((3, 3)), np.zeros((3, 3)),
            np.zeros(3),
        )  # fmt: skip


def ses_lines_recorded(out_shape, axis, us, vs, t0, h, nbins, pos, vdw, acc, probe, step,
                       nbisect, bins, ebins, features, nb):  # fmt: skip
    """:func:`pbsolver.backends.cpu.maps.ses_lines`' fractions, and the intervals they add up.

    The line kernel records each line's solute intervals, and :func:`bin_intervals` adds them
    to the bins: the same fractions bit for bit. Returns ``(fractions, recorded)``;
    :func:`interval_end_slopes` takes ``recorded`` instead of running the kernel again.
    """
    recorded = _record_ses_lines(axis, us, vs, t0, h, nbins, pos, vdw, acc, probe, step,
                                 nbisect, bins, ebins, features, nb)  # fmt: skip
    out = np.zeros(out_shape)
    bin_intervals(out, recorded[0], axis, float(t0), float(h), int(nbins))
    return out, recorded


def interval_end_slopes(axis, us, vs, t0, h, nbins, pos, vdw, acc, probe, step, nbisect,
                        bins, ebins, features, nb, recorded=None):  # fmt: skip
    """How the solute interval ends of every line along ``axis`` move with the atoms.

    Arguments are those of :func:`pbsolver.backends.cpu.maps.ses_lines` but the first
    (``features`` from
    ``ses_features``, ``nb`` the neighbour lists of the accessible spheres); ``recorded``:
    :func:`ses_lines_recorded`'s intervals of these lines, where the maps kept them.

    Returns
    -------
    lines : int64 (m, 2)
        (iu, iv) of each moving end's line.
    bins : int64 (m,)
        The edge k of the line the end lies in.
    atoms : int64 (m, 3)
        The atoms (−1: none) the end moves with.
    slopes : float64 (m, 3, 3)
        ``slopes[e, j, :]`` is ∂(covered length of the edge)/∂(position of atoms[e, j]).
    unmatched : int
        Ends that were neither a vdW chord end nor a crossing at the probe radius (to
        ``step·2⁻ⁿᵇⁱˢᵉᶜᵗ``); their slopes are left out.
    """
    _exposed, circ_start, circ_j, geom, arc_start, arcs = features
    geom = geom if len(geom) else np.zeros((1, 13))
    arcs = arcs if len(arcs) else np.zeros((1, ARC_COLUMNS))
    maxacc = float(acc.max())
    maxreach = maxacc + float(probe)
    args = (axis, us, vs, float(t0), float(h), int(nbins), pos, vdw, acc, float(probe))
    if recorded is None:
        recorded = _record_ses_lines(axis, us, vs, t0, h, nbins, pos, vdw, acc, probe, step,
                                     nbisect, bins, ebins, features, nb)  # fmt: skip
    rec, offsets = recorded
    out = _slots(offsets, 3)
    unmatched = np.zeros(len(us) * len(vs), dtype=np.int64)
    tol = float(step) * 2.0 ** (-int(nbisect)) + 1e-9
    _slopes(rec, offsets, *args, tol, maxacc, maxreach, *bins, *ebins, *nb, circ_start,
            circ_j, geom, arc_start, arcs, *out, unmatched)  # fmt: skip
    return (*kept_ends(offsets, len(vs), *out), int(unmatched.sum()))


def union_cells_recorded(out_shape, s, us, vs, t0, h, nbins, pos, radius, bins):
    """Covered cells of the ion-accessible map's s² line sets along z, and their intervals.

    ``us``, ``vs`` are the s-times-finer plane of lines (line i·s + a of it is set a's line i);
    the fractions are those of :func:`pbsolver.backends.cpu.maps.sphere_union_sets` over the s²
    sets, bit for bit (not divided by s²). Returns ``(covered, recorded)``;
    :func:`sphere_end_slopes` takes ``recorded``.
    """
    recorded = _recorded_intervals(union_lines_kernel, (len(us), len(vs), FIRST_UNION_CAPACITY),
                                   2, us, vs, float(t0), float(h), int(nbins), pos, radius,
                                   *bins)  # fmt: skip
    out = np.zeros(out_shape)
    bin_subsampled_intervals(out, recorded[0], int(s), float(t0), float(h), int(nbins))
    return out, recorded


def sphere_end_slopes(axis, us, vs, t0, h, nbins, pos, radius, bins, recorded=None):
    """How the ends of the merged chords of every line along ``axis`` move with the spheres.

    Arguments are those of :func:`pbsolver.backends.cpu.maps.sphere_union_lines` but the first;
    ``recorded``: :func:`union_cells_recorded`'s intervals of these lines, where the maps kept
    them. Returns ``(lines, bins, atoms, slopes)`` as :func:`interval_end_slopes` does (one atom
    per end: ``atoms[:, 0]``, ``slopes[:, 0, :]``).
    """
    args = (axis, us, vs, float(t0), float(h), int(nbins), pos, radius)
    size = (len(us), len(vs), FIRST_UNION_CAPACITY)
    if recorded is None:
        recorded = _recorded_intervals(union_lines_kernel, size, *args, *bins)
    rec, offsets = recorded
    out = _slots(offsets, 1)
    maxr = float(radius.max()) if radius.size else 0.0
    _union_slopes(rec, offsets, *args, maxr, *bins, *out)
    return kept_ends(offsets, len(vs), *out)


def _record_ses_lines(axis, us, vs, *args):
    """The SES line kernel's recorded intervals (arguments of :func:`ses_lines_recorded`)."""
    return _recorded_intervals(ses_lines_kernel, (len(us), len(vs), FIRST_CAPACITY),
                               *ses_kernel_args(axis, us, vs, *args))  # fmt: skip


def _recorded_intervals(kernel, size, *args):
    """Run a recording line ``kernel``: (intervals, slot offsets per line).

    ``size`` is (lines along u, lines along v, intervals a line has room for at first).
    """
    nu, nv, capacity = size
    while True:
        rec = np.empty((nu, nv, capacity + 1, 2))
        rec[:, :, 0, 0] = 0.0  # the counts; the slots are written before they are read
        kernel(_NO_BINS, rec, True, *args)
        counts = rec[:, :, 0, 0].astype(np.int64)
        if counts.max(initial=0) <= capacity:
            break
        capacity = int(counts.max())  # redo the lines with room for all
    return rec, slot_offsets(counts)


def _slots(offsets, width):
    """The slope kernels' output buffers for the slots of ``offsets`` (bin −1: unwritten).

    ``width`` atoms an end: 3 for the SES (a crossing moves with up to three), 1 for a sphere
    union (an end moves with its sphere).
    """
    total = int(offsets[-1])
    return (np.full(total, -1, dtype=np.int64), np.full((total, width), -1, dtype=np.int64),
            np.zeros((total, width, 3)))  # fmt: skip


def slot_offsets(counts):
    """Where each line's slots start (two a recorded interval), and the total at the end."""
    return np.concatenate([[0], np.cumsum(2 * counts.ravel())]).astype(np.int64)


def kept_ends(offsets, nv, out_bin, out_atoms, out_slopes):
    """The recorded ends that move: (lines (m, 2), bins, atoms, slopes).

    Host arrays of the slope kernels' slots (line ``l`` owns ``offsets[l] … offsets[l + 1]``;
    an unwritten slot has bin −1); the CUDA wrappers copy theirs back and call this too.
    """
    arrays = (np.ascontiguousarray(a) for a in (out_bin, out_atoms, out_slopes))
    return _kept_ends(np.ascontiguousarray(offsets, dtype=np.int64), int(nv), *arrays)


@njit(**_JIT)
def _kept_ends(offsets, nv, out_bin, out_atoms, out_slopes):
    kept = 0
    for slot in range(offsets[-1]):
        if out_bin[slot] >= 0:
            kept += 1
    lines = np.empty((kept, 2), dtype=np.int64)
    bins = np.empty(kept, dtype=np.int64)
    atoms = np.empty((kept, out_atoms.shape[1]), dtype=np.int64)
    slopes = np.empty((kept,) + out_slopes.shape[1:])
    e = 0
    for line in range(offsets.shape[0] - 1):
        for slot in range(offsets[line], offsets[line + 1]):
            if out_bin[slot] >= 0:
                lines[e, 0] = line // nv
                lines[e, 1] = line % nv
                bins[e] = out_bin[slot]
                # element by element: numba's row assignments cost a view each
                for m in range(atoms.shape[1]):
                    atoms[e, m] = out_atoms[slot, m]
                    for a in range(3):
                        slopes[e, m, a] = out_slopes[slot, m, a]
                e += 1
    return lines, bins, atoms, slopes


@njit(**_JIT)
def _end_forces(s, atoms, slopes, owners, grad):
    n_atoms = grad.shape[0]
    for e in range(s.shape[0]):
        for m in range(atoms.shape[1]):
            j = atoms[e, m]
            if j >= 0 and owners[j] < n_atoms:
                o = owners[j]
                for a in range(3):
                    grad[o, a] += s[e] * slopes[e, m, a]


def end_forces(s, atoms, slopes, owners, n_atoms):
    """Σ over ends e and their atoms m of s[e]·slopes[e, m, :], added up per owner atom.

    ``atoms`` (m, k) are the ends' atoms (−1: none) as :func:`kept_ends` gives them, whose
    images ``owners`` maps to atoms; returns (``n_atoms``, 3), float64 (the ends in order).
    """
    grad = np.zeros((int(n_atoms), 3))
    _end_forces(np.ascontiguousarray(s, dtype=np.float64), np.ascontiguousarray(atoms),
                np.ascontiguousarray(slopes, dtype=np.float64),
                np.ascontiguousarray(owners, dtype=np.int64), grad)  # fmt: skip
    return grad
