"""Numba CPU kernels of the forces' surface terms: how each covered interval end of a line moves.

The maps' own line bodies (:func:`pbsolver.backends.bodies.maps.make_ses`: the SES lines and the
sphere-union lines) run here with a range body that records the covered intervals instead of
adding them to bins (:func:`pbsolver.backends.bodies.lines.record_range_body`), so the ends are
the maps' ends, bit for bit. Each end inside the grid is then classified:

* :func:`sphere_end_slopes` (a union of spheres: "vdw", the ion-accessible map): every end of a
  merged chord is the chord end of one sphere and moves with it;
* :func:`interval_end_slopes` (the SES; bodies in :mod:`pbsolver.backends.bodies.ses_forces`):
  an end where one recorded interval meets the next (a vdW chord continued by a reentrant run)
  moves nothing; a vdW chord end moves with its atom; a reentrant crossing moves with the one,
  two or three atoms whose accessible spheres hold the nearest probe centre.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from pbsolver.backends.bodies import maps as B
from pbsolver.backends.bodies import ses_forces as F
from pbsolver.backends.bodies.line_ends import compile_line_ends
from pbsolver.backends.bodies.lines import GRAZE, compile_lines, record_range_body
from pbsolver.backends.cpu.maps import make_ses_lines, make_union_lines

_JIT = {"cache": True, "nogil": True, "boundscheck": False, "error_model": "numpy"}
_jit = njit(**_JIT)
_S = B.make_ses(_jit, *compile_lines(_jit, record_range_body), range_body=record_range_body)
_line, _bin_count, _candidates = _S["line"], _S["bin_count"], _S["exposed_candidates"]
_record = make_ses_lines(_S["ses_line"])
_record_union = make_union_lines(_S["union_line"])
_point, _arc_point = _S["point"], _S["arc_point"]
_nearest = _jit(F.make_nearest_probe(_S["sphere_probe"], _S["circle_local"]))
_crossing_slopes = _jit(F.make_crossing_slopes(_jit(F.solve_small_body)))
_third_sphere = _jit(F.third_sphere_body)
_recorded_end, _chord_end, _sphere_end, _union_line_slopes = compile_line_ends(_jit, _S)

#: Intervals a line of the SES records before the lines are redone with room for all of them
#: (proteins need up to about 26).
FIRST_CAPACITY = 48
#: The same for a union of spheres (a few merged chords a line).
FIRST_UNION_CAPACITY = 8
#: |n · e_axis| at or below this: the line is tangent to the reentrant surface (no slope).
TANGENT = 1e-6
#: A point within this of an accessible sphere lies on it (the third sphere of an arc end).
ON_SPHERE = 1e-6


@njit(**_JIT)
def _cancelled(rec, iu, iv, n, q, t):
    """Whether another interval of the line has its opposite end exactly at t."""
    side = q % 2
    for q2 in range(2 * n):
        if q2 // 2 != q // 2 and q2 % 2 != side and rec[iu, iv, 1 + q2 // 2, q2 % 2] == t:
            return True
    return False


@njit(**_JIT, parallel=True)
def _union_slopes(
    rec, offsets, axis, us, vs, t0, h, nbins, pos, rad, maxr, u0, v0, bsize, nbu, nbv, bstart,
    border, out_bin, out_atoms, out_slopes,
):  # fmt: skip
    for line in prange(us.shape[0] * vs.shape[0]):
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
    for line in prange(us.shape[0] * vs.shape[0]):
        iu, iv, u, v = _line(line, us, vs)
        n = int(rec[iu, iv, 0, 0])
        if n == 0:
            continue
        # the exposed atoms a point of this line can take its probe from (as the map does)
        ecap = max(1, _bin_count(u, v, maxreach, e_u0, e_v0, e_bsize, e_nbu, e_nbv, e_bstart))
        cand = np.empty(ecap, dtype=np.int64)
        ncand = _candidates(u, v, axis, pos, acc, probe, maxreach, -math.inf, math.inf, e_u0,
                            e_v0, e_bsize, e_nbu, e_nbv, e_bstart, e_border, cand,
                            np.empty(ecap))  # fmt: skip
        feat = np.zeros(4)
        atoms = np.full(3, -1, dtype=np.int64)
        slopes = np.zeros((3, 3))
        g = np.zeros((3, 3))
        b = np.zeros(3)
        misses = 0
        for q in range(2 * n):
            slot = offsets[line] + q
            t, side, k = _recorded_end(rec, iu, iv, q, t0, h, nbins)
            sign = 2.0 * side - 1.0  # −1 at a start, +1 at an end
            if k < 0 or _cancelled(rec, iu, iv, n, q, t):
                continue
            i, du, dv, w, miss = _chord_end(t, side, u, v, axis, pos, vdw, maxacc, u0, v0, bsize,
                                          nbu, nbv, bstart, border)  # fmt: skip
            if miss <= 1e-10 * (1.0 + abs(t)):
                if w > GRAZE * vdw[i]:  # a grazing line has no slope (as for the sphere union)
                    _sphere_end(slot, k, sign, i, du, dv, w, axis, out_bin, out_atoms,
                                out_slopes)  # fmt: skip
                continue
            x, y, z = _point(axis, t, u, v)
            d = _nearest(x, y, z, cand, ncand, pos, acc, probe, nb_start, nb_index, circ_start,
                         geom, arc_start, arcs, feat)  # fmt: skip
            if abs(d - probe) > tol:
                misses += 1
                continue
            kind = int(feat[0])
            i = int(feat[1])
            atoms[0] = i
            if kind == F.SPHERE:
                r = math.sqrt((x - pos[i, 0]) ** 2 + (y - pos[i, 1]) ** 2 + (z - pos[i, 2]) ** 2)
                f = acc[i] / r
                cx = pos[i, 0] + f * (x - pos[i, 0])
                cy = pos[i, 1] + f * (y - pos[i, 1])
                cz = pos[i, 2] + f * (z - pos[i, 2])
                m = 1
            else:
                c = int(feat[2])
                cx, cy, cz = _arc_point(geom, c, feat[3])
                atoms[1] = circ_j[c]
                m = 2
                if kind == F.TRIPLE:
                    k3, off = _third_sphere(cx, cy, cz, i, circ_j[c], pos, acc, nb_start,
                                            nb_index)  # fmt: skip
                    if k3 < 0 or off > ON_SPHERE * acc[i]:
                        misses += 1
                        continue
                    atoms[2] = k3
                    m = 3
            if not _crossing_slopes(x, y, z, axis, cx, cy, cz, atoms, m, pos, slopes, g, b,
                                    TANGENT):  # fmt: skip
                continue
            out_bin[slot] = k
            for mm in range(m):
                out_atoms[slot, mm] = atoms[mm]
                for a in range(3):
                    out_slopes[slot, mm, a] = sign * slopes[mm, a]
        unmatched[line] = misses


def interval_end_slopes(axis, us, vs, t0, h, nbins, pos, vdw, acc, probe, step, nbisect,
                        bins, ebins, features, nb):  # fmt: skip
    """How the solute interval ends of every line along ``axis`` move with the atoms.

    Arguments are those of :func:`pbsolver.backends.cpu.maps.ses_lines` but the first
    (``features`` from
    ``ses_features``, ``nb`` the neighbour lists of the accessible spheres).

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
    arcs = arcs if len(arcs) else np.zeros((1, 2))
    maxacc = float(acc.max())
    maxreach = maxacc + float(probe)
    args = (axis, us, vs, float(t0), float(h), int(nbins), pos, vdw, acc, float(probe))
    rec, offsets, out = _recorded(
        _record, (len(us), len(vs), FIRST_CAPACITY), *args, float(step), int(nbisect), maxacc,
        maxreach, *bins, *ebins, *nb, circ_start, geom, arc_start, arcs,
    )  # fmt: skip
    unmatched = np.zeros(len(us) * len(vs), dtype=np.int64)
    tol = float(step) * 2.0 ** (-int(nbisect)) + 1e-9
    _slopes(rec, offsets, *args, tol, maxacc, maxreach, *bins, *ebins, *nb, circ_start,
            circ_j, geom, arc_start, arcs, *out, unmatched)  # fmt: skip
    return (*_kept(offsets, len(vs), *out), int(unmatched.sum()))


def sphere_end_slopes(axis, us, vs, t0, h, nbins, pos, radius, bins):
    """How the ends of the merged chords of every line along ``axis`` move with the spheres.

    Arguments are those of :func:`pbsolver.backends.cpu.maps.sphere_union_lines` but the first;
    returns ``(lines, bins, atoms, slopes)`` as :func:`interval_end_slopes` does (one atom per
    end: ``atoms[:, 0]``, ``slopes[:, 0, :]``).
    """
    args = (axis, us, vs, float(t0), float(h), int(nbins), pos, radius)
    rec, offsets, out = _recorded(_record_union, (len(us), len(vs), FIRST_UNION_CAPACITY), *args,
                                  *bins)  # fmt: skip
    maxr = float(radius.max()) if radius.size else 0.0
    _union_slopes(rec, offsets, *args, maxr, *bins, *out)
    return _kept(offsets, len(vs), *out)


def _recorded(kernel, size, *args):
    """Run a recording line ``kernel``: (intervals, slot offsets per line, output buffers).

    ``size`` is (lines along u, lines along v, intervals a line has room for at first).
    """
    nu, nv, capacity = size
    while True:
        rec = np.empty((nu, nv, capacity + 1, 2))
        rec[:, :, 0, 0] = 0.0  # the counts; the slots are written before they are read
        kernel(rec, *args)
        counts = rec[:, :, 0, 0].astype(np.int64)
        if counts.max(initial=0) <= capacity:
            break
        capacity = int(counts.max())  # redo the lines with room for all
    offsets = np.concatenate([[0], np.cumsum(2 * counts.ravel())]).astype(np.int64)
    total = int(offsets[-1])
    out = (np.full(total, -1, dtype=np.int64), np.full((total, 3), -1, dtype=np.int64),
           np.zeros((total, 3, 3)))  # fmt: skip
    return rec, offsets, out


def _kept(offsets, nv, out_bin, out_atoms, out_slopes):
    """The recorded ends that move: (lines (m, 2), bins, atoms, slopes)."""
    keep = np.flatnonzero(out_bin >= 0)
    line = np.searchsorted(offsets, keep, side="right") - 1
    lines = np.column_stack([line // nv, line % nv])
    return lines, out_bin[keep], out_atoms[keep], out_slopes[keep]
