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

from pbsolver.backends.bodies import ses_forces as F
from pbsolver.backends.bodies.lines import GRAZE

#: |n · e_axis| at or below this: the line is tangent to the reentrant surface (no slope).
TANGENT = 1e-6
#: A point within this of an accessible sphere lies on it (the third sphere of an arc end).
ON_SPHERE = 1e-6
#: An end within this of a chord's end (relative to 1 + |t|) is that chord's end: the maps and
#: these bodies compute a chord's ends by the same arithmetic, so a merged chord's end is
#: found at a distance of 0 or of a rounding error.
CHORD_END = 1e-10


def edge_of_body(t, t0, h, nbins):
    """Edge k of a line of ``nbins`` edges from t0 that holds t, or −1.

    −1 outside the grid's edges and at its two ends t0 and t0 + nbins·h themselves, where a map
    clips an interval the grid cuts (the same sums, so the clipped value equals the bound
    exactly: such an end moves nothing).
    """
    k = int(math.floor((t - t0) / h))
    if t <= t0 or t >= t0 + nbins * h or k >= nbins:
        return -1
    return k


def make_recorded_end(edge_of):
    """The recorded-end body on the compiled :func:`edge_of_body`."""

    def recorded_end_body(rec, iu, iv, q, t0, h, nbins):
        """End q of line (iu, iv)'s recorded intervals: (t, side 0 start / 1 end, edge k).

        k as :func:`edge_of_body` gives it (−1: the end moves nothing).
        """
        t = rec[iu, iv, 1 + q // 2, q % 2]
        return t, q % 2, edge_of(t, t0, h, nbins)

    return recorded_end_body


def chord_half_body(du, dv, r):
    """Half-length of the chord a sphere of radius r cuts on a line, or −1 where it misses.

    du, dv: the sphere's centre's offsets across the line.
    """
    d2 = du * du + dv * dv
    if d2 >= r * r:
        return -1.0
    return math.sqrt(r * r - d2)


def end_miss_body(t, side, centre, w):
    """How far from t the chord of half-length w about ``centre`` ends (side 1) or starts (0).

    A body of its own, apart from :func:`chord_half_body`, so that callers read the centre only
    for the spheres that meet the line.
    """
    end = centre + w if side == 1 else centre - w
    return abs(end - t)


def make_chord_end(bin_range, across, chord_half, end_miss):
    """The chord-end body on the compiled ``bin_range``, ``across`` and chord bodies.

    ``chord_half`` and ``end_miss``: :func:`chord_half_body` and :func:`end_miss_body`.
    """

    def chord_end_body(
        t, side, u, v, axis, pos, vdw, maxacc, u0, v0, bsize, nbu, nbv, bstart, border
    ):
        """(atom, du, dv, w, miss): the chord whose end (side 1) or start (side 0) is t.

        Chords of the spheres of radii ``vdw``; ``miss`` is the distance to t. The search
        starts from 2·:data:`CHORD_END`·(1 + |t|) as its best distance, so the chords ending
        farther from t are skipped, most of them by their centre alone; atom −1 (and ``miss``
        that limit) when no chord ends that near.
        """
        best = 2.0 * CHORD_END * (1.0 + abs(t))
        found = -1
        bw, bdu, bdv = 0.0, 0.0, 0.0
        lo_u, hi_u, lo_v, hi_v = bin_range(u, v, maxacc, u0, v0, bsize, nbu, nbv)
        for bu in range(lo_u, hi_u + 1):
            for s in range(bstart[bu * nbv + lo_v], bstart[bu * nbv + hi_v + 1]):
                i = border[s]
                # a chord ends within r of its centre along the line: a centre farther from t
                # than r + best cannot end nearer (the bins hold every sphere across the line,
                # wherever it lies along it)
                if abs(pos[i, axis] - t) - vdw[i] >= best:
                    continue
                du, dv = across(pos, i, axis, u, v)
                w = chord_half(du, dv, vdw[i])
                if w >= 0.0:
                    miss = end_miss(t, side, pos[i, axis], w)
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
        chord (half-length ≤ GRAZE · r), or an end that is no chord's end, has no slope and
        leaves its slot unwritten.
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


def window_body(keys, n, t, reach):
    """``(first, last)``: the entries of the sorted ``keys[:n]`` within ``reach`` of t."""
    first = 0
    while first < n and keys[first] < t - reach:
        first += 1
    last = first
    while last < n and keys[last] <= t + reach:
        last += 1
    return first, last


def cancelled_body(rec, iu, iv, n, q, t):
    """Whether another interval of the line has its opposite end exactly at t."""
    side = q % 2
    for q2 in range(2 * n):
        if q2 // 2 != q // 2 and q2 % 2 != side and rec[iu, iv, 1 + q2 // 2, q2 % 2] == t:
            return True
    return False


def make_ses_line_slopes(ses, recorded_end, cancelled, chord_end, sphere_end, nearest,
                         crossing_slopes, third_sphere, window):  # fmt: skip
    """The per-line body of the SES's end slopes, on the compiled bodies it names.

    ``ses`` is the dict of :func:`pbsolver.backends.bodies.maps.make_ses` (``line``,
    ``exposed_candidates``, ``point``, ``arc_point``); the others are this module's and
    :mod:`pbsolver.backends.bodies.ses_forces`'s bodies, compiled alike.
    """
    line_of, candidates = ses["line"], ses["exposed_candidates"]
    point, arc_point = ses["point"], ses["arc_point"]

    def ses_line_slopes_body(
        line, rec, offsets, axis, us, vs, t0, h, nbins, pos, vdw, acc, probe, tol, maxacc,
        maxreach, u0, v0, bsize, nbu, nbv, bstart, border,
        e_u0, e_v0, e_bsize, e_nbu, e_nbv, e_bstart, e_border,
        nb_start, nb_index, circ_start, circ_j, geom, arc_start, arcs,
        out_bin, out_atoms, out_slopes, cand, ckey, feat, atoms, slopes, g, b,
    ):  # fmt: skip
        """How each recorded end of line ``line`` moves; the count of unmatched ends.

        An end where one recorded interval meets the next moves nothing; a vdW chord end
        moves with its atom; a reentrant crossing moves with the one to three atoms holding
        the nearest probe centre. Ends that are neither (to ``tol``) are counted and left out.
        ``cand``/``ckey`` hold the line's exposed candidates (−1 when they do not fit),
        ``feat`` (4), ``atoms`` (3, int), ``slopes``, ``g`` (3×3) and ``b`` (3) are scratch.
        """
        iu, iv, u, v = line_of(line, us, vs)
        n = int(rec[iu, iv, 0, 0])
        if n == 0:
            return 0
        # the exposed atoms a point of this line can take its probe from (as the map does)
        ncand = candidates(u, v, axis, pos, acc, probe, maxreach, -math.inf, math.inf, e_u0,
                           e_v0, e_bsize, e_nbu, e_nbv, e_bstart, e_border, cand,
                           ckey)  # fmt: skip
        if ncand < 0:
            return -1
        misses = 0
        for q in range(2 * n):
            slot = offsets[line] + q
            t, side, k = recorded_end(rec, iu, iv, q, t0, h, nbins)
            sign = 2.0 * side - 1.0  # −1 at a start, +1 at an end
            if k < 0 or cancelled(rec, iu, iv, n, q, t):
                continue
            i, du, dv, w, miss = chord_end(t, side, u, v, axis, pos, vdw, maxacc, u0, v0, bsize,
                                           nbu, nbv, bstart, border)  # fmt: skip
            if miss <= CHORD_END * (1.0 + abs(t)):
                if w > GRAZE * vdw[i]:  # a grazing line has no slope (as for the sphere union)
                    sphere_end(slot, k, sign, i, du, dv, w, axis, out_bin, out_atoms, out_slopes)
                continue
            x, y, z = point(axis, t, u, v)
            # only a probe centre within probe + tol of the end matches it: the candidates
            # within reach of t along the line, and no feature at that distance or farther
            first, last = window(ckey, ncand, t, maxreach + tol)
            d = nearest(x, y, z, cand, first, last, probe + tol, pos, acc, probe, nb_start,
                        nb_index, circ_start, geom, arc_start, arcs, feat)  # fmt: skip
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
                cx, cy, cz = arc_point(geom, c, feat[3])
                atoms[1] = circ_j[c]
                m = 2
                if kind == F.TRIPLE:
                    k3, off = third_sphere(cx, cy, cz, i, circ_j[c], pos, acc, nb_start,
                                           nb_index)  # fmt: skip
                    if k3 < 0 or off > ON_SPHERE * acc[i]:
                        misses += 1
                        continue
                    atoms[2] = k3
                    m = 3
            if not crossing_slopes(x, y, z, axis, cx, cy, cz, atoms, m, pos, slopes, g, b,
                                   TANGENT):  # fmt: skip
                continue
            out_bin[slot] = k
            for mm in range(m):
                out_atoms[slot, mm] = atoms[mm]
                for a in range(3):
                    out_slopes[slot, mm, a] = sign * slopes[mm, a]
        return misses

    return ses_line_slopes_body


def compile_line_ends(jit, ses):
    """``(union_line_slopes, ses_line_slopes)``: the per-line bodies compiled by ``jit``.

    ``ses`` is the dict of :func:`pbsolver.backends.bodies.maps.make_ses` compiled by the same
    ``jit`` (with the recording range body).
    """
    recorded_end = jit(make_recorded_end(jit(edge_of_body)))
    chord_end = jit(make_chord_end(ses["bin_range"], ses["across"], jit(chord_half_body),
                                   jit(end_miss_body)))  # fmt: skip
    sphere_end = jit(sphere_end_body)
    union = jit(make_union_line_slopes(ses["line"], recorded_end, chord_end, sphere_end))
    nearest = jit(F.make_nearest_probe(ses["sphere_probe"], ses["circle_local"]))
    crossing_slopes = jit(F.make_crossing_slopes(jit(F.solve_small_body)))
    ses_slopes = jit(make_ses_line_slopes(ses, recorded_end, jit(cancelled_body), chord_end,
                                          sphere_end, nearest, crossing_slopes,
                                          jit(F.third_sphere_body), jit(window_body)))  # fmt: skip
    return union, ses_slopes
