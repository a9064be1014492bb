"""Plain-Python bodies of the recorded interval ends of a grid line and how they move.

A map's line body run with :func:`pbsolver.backends.bodies.lines.record_range_body` leaves, per
line (iu, iv), the count of its covered intervals in ``rec[iu, iv, 0, 0]`` and interval n in
``rec[iu, iv, 1 + n, :]`` (start, end). End q of a line is ``rec[iu, iv, 1 + q // 2, q % 2]``
(q even: a start, odd: an end). These bodies find the chord of a sphere that an end belongs
to, and write its slope, for the CPU loops (:mod:`pbsolver.backends.cpu.line_ends`) and the
CUDA kernels (:mod:`pbsolver.backends.cuda.line_ends`) alike. Importing this module imports no
numba.
"""

from __future__ import annotations

import math

from pbsolver.backends.bodies.lines import GRAZE


def recorded_end_body(rec, iu, iv, q, t0, h, nbins):
    """End q of line (iu, iv)'s recorded intervals: (t, side 0 start / 1 end, edge k).

    k = −1 outside the grid's edges (and at t0 itself, where an interval is cut by the grid).
    """
    t = rec[iu, iv, 1 + q // 2, q % 2]
    k = int(math.floor((t - t0) / h))
    if t <= t0 or k >= nbins:
        k = -1
    return t, q % 2, k


def make_chord_end(bin_range, across):
    """The chord-end body on the compiled map bodies ``bin_range`` and ``across``."""

    def chord_end_body(
        t, side, u, v, axis, pos, vdw, maxacc, u0, v0, bsize, nbu, nbv, bstart, border
    ):
        """(atom, du, dv, w, miss): the chord whose end (side 1) or start (side 0) lies nearest t.

        Chords of the spheres of radii ``vdw``; ``miss`` is the distance to t; atom −1 when no
        sphere meets the line.
        """
        best = math.inf
        found = -1
        bw, bdu, bdv = 0.0, 0.0, 0.0
        lo_u, hi_u, lo_v, hi_v = bin_range(u, v, maxacc, u0, v0, bsize, nbu, nbv)
        for bu in range(lo_u, hi_u + 1):
            for s in range(bstart[bu * nbv + lo_v], bstart[bu * nbv + hi_v + 1]):
                i = border[s]
                du, dv = across(pos, i, axis, u, v)
                d2 = du * du + dv * dv
                r = vdw[i]
                if d2 >= r * r:
                    continue
                w = math.sqrt(r * r - d2)
                end = pos[i, axis] + w if side == 1 else pos[i, axis] - w
                miss = abs(end - t)
                if miss < best:
                    best, found, bw, bdu, bdv = miss, i, w, du, dv
        return found, bdu, bdv, bw, best

    return chord_end_body


def sphere_end_body(slot, k, sign, i, du, dv, w, axis, out_bin, out_atoms, out_slopes):
    """Record the slope of sphere i's chord end (a start: sign −1) in edge k.

    ∂(t ± w)/∂c_axis = 1, ∂(t ± w)/∂c_a1 = ∓du/w (du = c_a1 − u): times the sign, the covered
    length's slope is (sign, −du/w, −dv/w).
    """
    out_bin[slot] = k
    out_atoms[slot, 0] = i
    a1 = 1 if axis == 0 else 0
    a2 = 1 if axis == 2 else 2
    out_slopes[slot, 0, axis] = sign
    out_slopes[slot, 0, a1] = -du / w
    out_slopes[slot, 0, a2] = -dv / w


def make_union_line_slopes(line_of, recorded_end, chord_end, sphere_end):
    """The per-line body of a sphere union's end slopes, on the compiled bodies above."""

    def union_line_slopes_body(
        line, rec, offsets, axis, us, vs, t0, h, nbins, pos, rad, maxr, u0, v0, bsize, nbu, nbv,
        bstart, border, out_bin, out_atoms, out_slopes,
    ):  # fmt: skip
        """Every end in the grid of line ``line``'s merged chords: its sphere and its slope.

        The line's slots start at ``offsets[line]`` (two a recorded interval); a grazing
        chord (half-length ≤ GRAZE · r) has no slope and leaves its slot unwritten.
        """
        iu, iv, u, v = line_of(line, us, vs)
        for q in range(2 * int(rec[iu, iv, 0, 0])):
            t, side, k = recorded_end(rec, iu, iv, q, t0, h, nbins)
            if k < 0:
                continue
            i, du, dv, w, _miss = chord_end(t, side, u, v, axis, pos, rad, maxr, u0, v0, bsize,
                                            nbu, nbv, bstart, border)  # fmt: skip
            if i >= 0 and w > GRAZE * rad[i]:
                sphere_end(offsets[line] + q, k, 2.0 * side - 1.0, i, du, dv, w, axis, out_bin,
                           out_atoms, out_slopes)  # fmt: skip

    return union_line_slopes_body


def compile_line_ends(jit, ses):
    """``(recorded_end, chord_end, sphere_end, union_line_slopes)`` compiled by ``jit``.

    ``ses`` is the dict of :func:`pbsolver.backends.bodies.maps.make_ses` compiled by the same
    ``jit`` (its ``line``, ``bin_range`` and ``across``).
    """
    recorded_end = jit(recorded_end_body)
    chord_end = jit(make_chord_end(ses["bin_range"], ses["across"]))
    sphere_end = jit(sphere_end_body)
    union = jit(make_union_line_slopes(ses["line"], recorded_end, chord_end, sphere_end))
    return recorded_end, chord_end, sphere_end, union
