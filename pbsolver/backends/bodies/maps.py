"""Plain-Python bodies of the map formulas, compiled by each kernel set.

Every per-line, per-atom, per-circle and per-node formula of the maps is written here once:
the CPU map kernels (:mod:`pbsolver.backends.cpu.maps`, ``numba.njit``), the CUDA map kernels
(:mod:`pbsolver.backends.cuda.maps`, ``numba.cuda.jit(device=True)``) and the stacked frame
kernels (:mod:`pbsolver.backends.frame_kernels`, both) compile these same functions; the
kernels only index their work items, hold the scratch buffers and launch. Importing this module
imports no numba.

Scratch buffers are passed in (NumPy arrays on the CPU, ``cuda.local`` arrays on the GPU); a
body that would write past a buffer returns an overflow flag instead, so the CPU sizes its
buffers to never overflow and the GPU reports the line to the caller.

Near a grid node: every φ_c body treats a node closer than ``sqrt(tol2)`` to an atom as being
on it (±inf, which the discretisation handles through its ε = ε_c rule), so that a charge one
rounding error off a node gives the same answer as one exactly on it.
"""

from __future__ import annotations

import math

import numpy as np

from pbsolver.backends.bodies.lines import accumulate_range_body, insert_sorted_body

TWO_PI = 2.0 * math.pi
#: Relative tolerance of "inside a sphere" tests on probe positions (points on a sphere are
#: accessible).
BURY_TOL = 1e-9
#: A circle's burying intervals are merged every this many new ones, so that a circle buried
#: whole (most circles inside a protein) stops at the first merge that covers it instead of
#: testing every neighbour of its atom.
BURIED_CHECK_FROM = 4
#: Edge fractions this close to 0 or 1 are 0 or 1 exactly: an edge inside the solute must give
#: ε_in bit for bit (a face of ε_in(1 + 2⁻⁵²) next to a charge on a node breaks the ε = ε_c
#: rule and turns an infinite φ_c into a huge source).
FRACTION_SNAP = 1e-12
#: A node within this fraction of the smallest spacing of an atom is on that atom (φ_c = ±inf).
ON_NODE = 1e-6
#: Columns of a free arc's row: its angles θ0 < θ1 (in [0, 2π], counter-clockwise in its
#: circle's (u, v) plane), then the directions of its ends, cos θ0, sin θ0, cos θ1, sin θ1, so
#: that the point test needs no trigonometry (see :func:`set_arc_body`).
ARC_COLUMNS = 6


#: The methods of every backend's map kernels (:meth:`pbsolver.backends.Backend.map_kernels`).
MAP_KERNELS = (
    "plane_bins",
    "neighbour_lists",
    "ses_features",
    "sphere_union_lines",
    "sphere_union_sets",
    "ses_lines",
    "coulomb_sum",
    "coulomb_points",
    "debye_huckel_points",
)


class MapKernels:
    """A backend's map kernels: the functions named in :data:`MAP_KERNELS`.

    Taken from ``module``; NumPy arrays in and out on every backend. :meth:`device_results`
    gives the kernels whose results stay on a GPU, where the module has them.
    """

    def __init__(self, module):
        for name in MAP_KERNELS:
            setattr(self, name, getattr(module, name))
        self.module = module.__name__
        self._device_results = getattr(module, "device_results", None)

    def device_results(self):
        """The kernels that leave their maps on the device (a namespace with ``xp``), or None.

        None on the CPU and wherever the device has no array library of its own (numba's
        simulator): the maps are then NumPy arrays.
        """
        return None if self._device_results is None else self._device_results()

    def __repr__(self):
        return f"MapKernels({self.module})"


class LineCapacityError(RuntimeError):
    """A line met more spheres than a GPU kernel's local arrays hold (the CPU kernels do it)."""


#: Edges of a grid line that one GPU thread of the SES line kernels classifies when a launch
#: has few lines (:func:`line_pieces`): a line is then cut into pieces of about this many edges
#: (its reentrant-zone sampling, the costly part, is cut with it), so that the few lines
#: through a solute's crevices do not hold up a whole launch.
SES_PIECE_EDGES = 16


#: Å beyond the reach of a piece's points within which its SES candidates are kept (rounding).
CANDIDATE_SLACK = 1e-6


#: Work items a launch of the SES line kernel needs before its lines are cut into pieces: a
#: piece gathers its whole line's spheres again, so pieces pay only while the lines alone
#: leave the GPU short of threads (one frame), not for a batch of frames.
SES_ITEMS_WANTED = 1 << 20


def line_pieces(nbins: int, lines: int = 1, piece_edges: int = SES_PIECE_EDGES) -> int:
    """Pieces each of ``lines`` lines of ``nbins`` edges is cut into (at least one).

    About :data:`SES_ITEMS_WANTED` work items in all, and no piece shorter than
    ``piece_edges`` edges.
    """
    most = max(1, -(-int(nbins) // int(piece_edges)))
    wanted = max(1, -(-SES_ITEMS_WANTED // max(1, int(lines))))
    return min(most, wanted)


def on_node_tol2(spacing):
    """Squared distance below which a node counts as on an atom (see :data:`ON_NODE`).

    Plain arithmetic on the three spacings: also compiled into kernels.
    """
    d = ON_NODE * min(spacing[0], min(spacing[1], spacing[2]))
    return d * d


# ---------------------------------------------------------------------- lines
def line_body(line, us, vs):
    """Indices (iu, iv) and coordinates (u, v) of work item ``line`` of a plane of lines."""
    nv = vs.shape[0]
    iu = line // nv
    iv = line - iu * nv
    return iu, iv, us[iu], vs[iv]


def point_body(axis, t, u, v):
    """3D point of parameter t on the line of ``axis`` through (u, v)."""
    if axis == 0:
        return t, u, v
    if axis == 1:
        return u, t, v
    return u, v, t


def bin_range_body(u, v, reach, u0, v0, bsize, nbu, nbv):
    """The 2D bins (inclusive ranges) within ``reach`` of the line through (u, v).

    Where no column ``v`` is in reach, no row is either (``hi_u < lo_u``): a row's bins
    ``lo_v … hi_v`` are then always bins of that row.
    """
    lo_u = max(0, int(math.floor((u - reach - u0) / bsize)))
    hi_u = min(nbu - 1, int(math.floor((u + reach - u0) / bsize)))
    lo_v = max(0, int(math.floor((v - reach - v0) / bsize)))
    hi_v = min(nbv - 1, int(math.floor((v + reach - v0) / bsize)))
    if lo_v > hi_v:
        hi_u = lo_u - 1
    return lo_u, hi_u, lo_v, hi_v


def across_body(pos, i, axis, u, v):
    """``(du, dv)``: atom i's offsets (Å) across the line along ``axis`` through (u, v)."""
    a1 = 1 if axis == 0 else 0
    a2 = 1 if axis == 2 else 2
    return pos[i, a1] - u, pos[i, a2] - v


def chord_body(starts, ends, n, du, dv, t, r):
    """Add the chord of a sphere of radius r to the intervals of a line; the new count.

    (du, dv) is the sphere centre's offset from the line across it and t its coordinate along
    it. Returns ``n`` when the sphere misses the line and −1 when the buffers are full.
    """
    d2 = du * du + dv * dv
    if d2 >= r * r:
        return n
    if n >= starts.shape[0]:
        return -1
    w = math.sqrt(r * r - d2)
    starts[n] = t - w
    ends[n] = t + w
    return n + 1


# ---------------------------------------------------------------------- SES point test
def buried_body(px, py, pz, i, pos, rad, nb_start, nb_index):
    """True when the probe centre p (on accessible sphere i) is inside another one."""
    for s in range(nb_start[i], nb_start[i + 1]):
        k = nb_index[s]
        dx = px - pos[k, 0]
        dy = py - pos[k, 1]
        dz = pz - pos[k, 2]
        rk = rad[k]
        if dx * dx + dy * dy + dz * dz < rk * rk * (1.0 - BURY_TOL):
            return True
    return False


def near_sphere_body(x, y, z, pos, rad, i, probe):
    """(dx, dy, dz, r): the point's offset from atom i's centre and its length.

    r = −1 beyond rad[i] + probe: no probe centre on that sphere is within ``probe`` of it.
    """
    dx = x - pos[i, 0]
    dy = y - pos[i, 1]
    dz = z - pos[i, 2]
    r2 = dx * dx + dy * dy + dz * dz
    reach = rad[i] + probe
    if r2 >= reach * reach:
        return dx, dy, dz, -1.0
    return dx, dy, dz, math.sqrt(r2)


def make_sphere_probe(buried, near_sphere):
    """The accessible-sphere probe body on the compiled ``buried`` and ``near_sphere`` bodies."""

    def sphere_probe_body(x, y, z, pos, rad, i, probe, limit, nb_start, nb_index):
        """(r, distance, point): the point's distance r from centre i, and its radial projection.

        r = −1 when no probe centre on accessible sphere i (radius rad[i]) is within ``probe``
        of the point. The projection is the sphere's nearest accessible point only from inside
        the ball (0 < r < rad[i]); its distance is inf where it is not, where it is ``limit``
        or more, or where the projection is buried in another sphere.
        """
        dx, dy, dz, r = near_sphere(x, y, z, pos, rad, i, probe)
        if not (0.0 < r < rad[i] and rad[i] - r < limit):
            return r, math.inf, 0.0, 0.0, 0.0
        f = rad[i] / r
        px = pos[i, 0] + f * dx
        py = pos[i, 1] + f * dy
        pz = pos[i, 2] + f * dz
        if buried(px, py, pz, i, pos, rad, nb_start, nb_index):
            return r, math.inf, px, py, pz
        return r, rad[i] - r, px, py, pz

    return sphere_probe_body


def circle_height_body(geom, c, x, y, z):
    """The point's height above circle c's plane (along its axis)."""
    return (
        (x - geom[c, 0]) * geom[c, 3]
        + (y - geom[c, 1]) * geom[c, 4]
        + (z - geom[c, 2]) * geom[c, 5]
    )


def circle_local_body(geom, c, x, y, z):
    """The point in circle c's frame: (height zz on the axis, in-plane xu, xv, radius rx, ρ)."""
    wx = x - geom[c, 0]
    wy = y - geom[c, 1]
    wz = z - geom[c, 2]
    zz = wx * geom[c, 3] + wy * geom[c, 4] + wz * geom[c, 5]
    xu = wx * geom[c, 6] + wy * geom[c, 7] + wz * geom[c, 8]
    xv = wx * geom[c, 9] + wy * geom[c, 10] + wz * geom[c, 11]
    return zz, xu, xv, math.sqrt(xu * xu + xv * xv), geom[c, 12]


def remember_body(hit, px, py, pz):
    """Cache an accessible probe centre (hit[3] = 1 marks it set)."""
    hit[0] = px
    hit[1] = py
    hit[2] = pz
    hit[3] = 1.0


def circle_point_body(geom, c, cu, cv):
    """The point of circle c in the direction (cu, cv) of its (u, v) plane (a unit vector)."""
    rho = geom[c, 12]
    return (
        geom[c, 0] + rho * (cu * geom[c, 6] + cv * geom[c, 9]),
        geom[c, 1] + rho * (cu * geom[c, 7] + cv * geom[c, 10]),
        geom[c, 2] + rho * (cu * geom[c, 8] + cv * geom[c, 11]),
    )


def make_arc_point(circle_point):
    """The body of the point at an angle of a circle, on the compiled ``circle_point``."""

    def arc_point_body(geom, c, theta):
        """The point at angle theta of circle c."""
        return circle_point(geom, c, math.cos(theta), math.sin(theta))

    return arc_point_body


def set_arc_body(arcs, a, t0, t1):
    """Row a of ``arcs``: the free arc from angle t0 to t1 (see :data:`ARC_COLUMNS`)."""
    arcs[a, 0] = t0
    arcs[a, 1] = t1
    arcs[a, 2] = math.cos(t0)
    arcs[a, 3] = math.sin(t0)
    arcs[a, 4] = math.cos(t1)
    arcs[a, 5] = math.sin(t1)


def in_arc_body(arcs, a, xu, xv):
    """True when the direction (xu, xv) of a circle's plane lies within its free arc a.

    The same test as θ0 ≤ atan2(xv, xu) mod 2π ≤ θ1, from the signs of two cross products with
    the ends' directions: (xu, xv) is within π counter-clockwise of the start and within π
    clockwise of the end. An arc longer than π is the union of those two half-planes, a shorter
    one their intersection.
    """
    after_start = arcs[a, 2] * xv - arcs[a, 3] * xu >= 0.0
    before_end = xu * arcs[a, 5] - xv * arcs[a, 4] >= 0.0
    if arcs[a, 1] - arcs[a, 0] > math.pi:
        return after_start or before_end
    return after_start and before_end


def circle_body(pos, rad, i, j, out):
    """Circle of accessible spheres i and j into out[0:13] (m, n, u, v, rho); False if none."""
    n0 = pos[j, 0] - pos[i, 0]
    n1 = pos[j, 1] - pos[i, 1]
    n2 = pos[j, 2] - pos[i, 2]
    d2 = n0 * n0 + n1 * n1 + n2 * n2
    d = math.sqrt(d2)
    ri = rad[i]
    rj = rad[j]
    if d <= abs(ri - rj) or d >= ri + rj or d == 0.0:
        return False
    n0 /= d
    n1 /= d
    n2 /= d
    aa = (d2 + ri * ri - rj * rj) / (2.0 * d)
    rho2 = ri * ri - aa * aa
    if rho2 <= 0.0:
        return False
    out[0] = pos[i, 0] + aa * n0
    out[1] = pos[i, 1] + aa * n1
    out[2] = pos[i, 2] + aa * n2
    out[3] = n0
    out[4] = n1
    out[5] = n2
    # u: perpendicular to n, built from the axis least aligned with n
    ax = 0
    if abs(n1) < abs(n0):
        ax = 1
    if abs(n2) < abs(n0 if ax == 0 else n1):
        ax = 2
    e0 = 1.0 if ax == 0 else 0.0
    e1 = 1.0 if ax == 1 else 0.0
    e2 = 1.0 if ax == 2 else 0.0
    u0 = n1 * e2 - n2 * e1
    u1 = n2 * e0 - n0 * e2
    u2 = n0 * e1 - n1 * e0
    un = math.sqrt(u0 * u0 + u1 * u1 + u2 * u2)
    u0 /= un
    u1 /= un
    u2 /= un
    out[6] = u0
    out[7] = u1
    out[8] = u2
    out[9] = n1 * u2 - n2 * u1
    out[10] = n2 * u0 - n0 * u2
    out[11] = n0 * u1 - n1 * u0
    out[12] = math.sqrt(rho2)
    return True


def make_free_arcs(sort_merge, set_arc):
    """The free-arc body of circle (i, j), on the compiled ``sort_merge`` and ``set_arc``."""

    def free_arcs_body(pos, rad, i, j, nb_start, nb_index, g, bs, be, arcs, arc0, cap):
        """Free (unburied) arcs of circle g of (i, j) as angle intervals in [0, 2π].

        Writes up to ``cap`` rows (:data:`ARC_COLUMNS`) at ``arcs[arc0:]`` and returns their
        count (0: fully buried; −1: the neighbour list is longer than the buffers ``bs``, ``be``
        hold).
        A third sphere k buries the open arc where its ball contains the circle.
        """
        rho = g[12]
        nbur = 0
        check = BURIED_CHECK_FROM
        if 2 * (nb_start[i + 1] - nb_start[i]) + 2 > bs.shape[0]:
            return -1
        for s in range(nb_start[i], nb_start[i + 1]):
            k = nb_index[s]
            if k == j:
                continue
            if nbur >= check:
                # merged so far: one interval over the whole circle is the final union too
                # (merging in place keeps the union, so the result is the same bit for bit)
                nbur = sort_merge(bs, be, nbur)
                if nbur == 1 and bs[0] <= 0.0 and be[0] >= TWO_PI:
                    return 0
                check = nbur + BURIED_CHECK_FROM
            w0 = pos[k, 0] - g[0]
            w1 = pos[k, 1] - g[1]
            w2 = pos[k, 2] - g[2]
            aa = w0 * g[6] + w1 * g[7] + w2 * g[8]
            bb = w0 * g[9] + w1 * g[10] + w2 * g[11]
            ww = w0 * w0 + w1 * w1 + w2 * w2
            rk = rad[k]
            cc = (rho * rho + ww - rk * rk) / (2.0 * rho)
            dd = math.sqrt(aa * aa + bb * bb)
            tol = BURY_TOL * (rk + rho)
            if dd <= 1e-12 * (rk + rho):
                if cc < -tol:
                    return 0
                continue
            c = cc / dd
            if c >= 1.0 - 1e-12:
                continue
            if c <= -1.0 + 1e-12:
                return 0
            alpha = math.acos(c)
            phi0 = math.atan2(bb, aa)
            s0 = (phi0 - alpha) % TWO_PI
            e0 = s0 + 2.0 * alpha
            if e0 > TWO_PI:
                bs[nbur] = s0
                be[nbur] = TWO_PI
                nbur += 1
                bs[nbur] = 0.0
                be[nbur] = e0 - TWO_PI
                nbur += 1
            else:
                bs[nbur] = s0
                be[nbur] = e0
                nbur += 1
        nm = sort_merge(bs, be, nbur)
        nfree = 0
        cur = 0.0
        for s in range(nm):
            if bs[s] > cur:
                if nfree < cap:
                    set_arc(arcs, arc0 + nfree, cur, bs[s])
                nfree += 1
            if be[s] > cur:
                cur = be[s]
        if cur < TWO_PI:
            if nfree < cap:
                set_arc(arcs, arc0 + nfree, cur, TWO_PI)
            nfree += 1
        return nfree

    return free_arcs_body


def make_ses(jit, sort_merge, accumulate, range_body=accumulate_range_body):
    """The SES bodies compiled by ``jit`` on the compiled line bodies; a dict by name.

    ``range_body`` is what the SES lines do with each solute interval of a line (signature of
    :func:`~pbsolver.backends.bodies.lines.accumulate_range_body`): add its share to the bins,
    or, for the forces, record it (:func:`~pbsolver.backends.bodies.lines.record_range_body`).
    """
    point = jit(point_body)
    bin_range = jit(bin_range_body)
    across = jit(across_body)
    chord = jit(chord_body)
    buried = jit(buried_body)
    remember = jit(remember_body)
    circle_point = jit(circle_point_body)
    arc_point = jit(make_arc_point(circle_point))
    in_arc = jit(in_arc_body)
    sphere_probe = jit(make_sphere_probe(buried, jit(near_sphere_body)))
    circle_local = jit(circle_local_body)
    circle_height = jit(circle_height_body)
    circle = jit(circle_body)
    free_arcs = jit(make_free_arcs(sort_merge, jit(set_arc_body)))
    insert_sorted = jit(insert_sorted_body)
    accumulate_range = jit(range_body)

    def bin_count(u, v, reach, u0, v0, bsize, nbu, nbv, bstart):
        """Atoms in the bins within ``reach`` of the line (an upper bound of the spheres met).

        The bins ``lo_v … hi_v`` of a row ``bu`` hold consecutive slots of the CSR order.
        """
        lo_u, hi_u, lo_v, hi_v = bin_range(u, v, reach, u0, v0, bsize, nbu, nbv)
        count = 0
        for bu in range(lo_u, hi_u + 1):
            count += bstart[bu * nbv + hi_v + 1] - bstart[bu * nbv + lo_v]
        return count

    def remember_arc(hit, geom, c, cu, cv):
        px, py, pz = circle_point(geom, c, cu, cv)
        remember(hit, px, py, pz)

    remember_arc = jit(remember_arc)

    def probe_reaches(
        x, y, z, cand, lo, hi, pos, rad, probe, nb_start, nb_index,
        circ_start, geom, arc_start, arcs, hit,
    ):  # fmt: skip
        """True when some accessible probe centre lies within ``probe`` of (x, y, z).

        ``cand[lo:hi]`` are the candidate (exposed) atoms: all exposed atoms within rad +
        probe of the point must be among them; ``rad`` are accessible radii R + r_p. ``hit``
        caches the last accessible probe centre found: it is tried first, since neighbouring
        samples along a line are usually reached by the same probe.
        """
        p2 = probe * probe
        if hit[3] == 1.0:
            dx = x - hit[0]
            dy = y - hit[1]
            dz = z - hit[2]
            if dx * dx + dy * dy + dz * dz < p2:
                return True
        for s in range(lo, hi):
            i = cand[s]
            # 1. radial projection on accessible sphere i
            r, d, px, py, pz = sphere_probe(x, y, z, pos, rad, i, probe, probe, nb_start,
                                            nb_index)  # fmt: skip
            if r < 0.0:
                continue
            if d < probe:
                remember(hit, px, py, pz)
                return True
            # 2. free arcs of the circles (i, j > i), and their ends
            for c in range(circ_start[i], circ_start[i + 1]):
                # most circles are farther than the probe from the point's plane: that test
                # needs only the height
                zz = circle_height(geom, c, x, y, z)
                if zz * zz >= p2:
                    continue
                zz, xu, xv, rx, rho = circle_local(geom, c, x, y, z)
                if (rx - rho) * (rx - rho) + zz * zz >= p2:
                    continue
                a0 = arc_start[c]
                if rx <= 1e-12 * rho:
                    # on the axis: every point of a free arc is equally near
                    remember_arc(hit, geom, c, arcs[a0, 2], arcs[a0, 3])
                    return True
                base = rx * rx + rho * rho + zz * zz
                for a in range(a0, arc_start[c + 1]):
                    if in_arc(arcs, a, xu, xv):
                        remember_arc(hit, geom, c, xu / rx, xv / rx)
                        return True
                    # the ends: |x − end|² = base − 2ρ·rx·cos(θ − θ_e), rx·cos(θ − θ_e) being
                    # (xu, xv)·(cos θ_e, sin θ_e)
                    for e in range(2):
                        ce = arcs[a, 2 + 2 * e]
                        se = arcs[a, 3 + 2 * e]
                        if base - 2.0 * rho * (xu * ce + xv * se) < p2:
                            remember_arc(hit, geom, c, ce, se)
                            return True
        return False

    probe_reaches = jit(probe_reaches)

    def solute_at(
        t, axis, u, v, cand, ckey, ncand, pos, rad, probe, reach, nb_start, nb_index,
        circ_start, geom, arc_start, arcs, hit,
    ):  # fmt: skip
        """True when the point t of the line is solute (no probe reaches it)."""
        x, y, z = point(axis, t, u, v)
        lo, hi = 0, ncand  # the candidates within ``reach`` of t along the line (sorted)
        while lo < hi:
            mid = (lo + hi) // 2
            if ckey[mid] < t - reach:
                lo = mid + 1
            else:
                hi = mid
        start = lo
        lo, hi = start, ncand
        while lo < hi:
            mid = (lo + hi) // 2
            if ckey[mid] <= t + reach:
                lo = mid + 1
            else:
                hi = mid
        return not probe_reaches(
            x, y, z, cand, start, lo, pos, rad, probe, nb_start, nb_index,
            circ_start, geom, arc_start, arcs, hit,
        )  # fmt: skip

    solute_at = jit(solute_at)

    def zone(
        out, axis, row, iu, iv, zs, ze, t0, h, k_lo, k_hi, u, v, cand, ckey, ncand, pos, acc,
        probe, reach, step, nbisect, nb_start, nb_index, circ_start, geom, arc_start, arcs, hit,
    ):  # fmt: skip
        """Classify one reentrant-zone interval [zs, ze] of a line and add its solute parts.

        Sampled every ``step``; each change of class is located by ``nbisect`` bisections.
        ``row`` is the first x plane of the line's grid in ``out`` (0, or a stacked frame's).
        Only bins ``k_lo ≤ k < k_hi`` are written, and only the samples and bisections their
        span needs are evaluated: the samples are those of the whole interval, so a line done
        in pieces gets the values of the whole (a sample interval across a piece's end is
        classified by both pieces, alike).
        """
        length = ze - zs
        if length <= 0.0:
            return
        t_lo = t0 + k_lo * h
        t_hi = t0 + k_hi * h
        if ze < t_lo or zs > t_hi:
            return
        nseg = max(1, int(math.ceil(length / step)))
        eps = min(1e-9, 0.25 * length)
        prev_t = zs + eps
        prev = False
        known = False  # whether ``prev`` holds the class at prev_t yet
        run_start = zs  # a run entered before this piece starts before every bin of it
        for q in range(1, nseg + 1):
            t = ze - eps if q == nseg else zs + length * q / nseg
            if t < t_lo:  # a sample interval before the piece: nothing of it is written
                prev_t = t
                continue
            if prev_t > t_hi:  # past the piece: a run still open is added below
                break
            if not known:
                prev = solute_at(
                    prev_t, axis, u, v, cand, ckey, ncand, pos, acc, probe, reach, nb_start,
                    nb_index, circ_start, geom, arc_start, arcs, hit,
                )  # fmt: skip
                known = True
            cur = solute_at(
                t, axis, u, v, cand, ckey, ncand, pos, acc, probe, reach, nb_start,
                nb_index, circ_start, geom, arc_start, arcs, hit,
            )  # fmt: skip
            if cur != prev:
                a, b = prev_t, t
                for _ in range(nbisect):
                    mid = 0.5 * (a + b)
                    cm = solute_at(
                        mid, axis, u, v, cand, ckey, ncand, pos, acc, probe, reach,
                        nb_start, nb_index, circ_start, geom, arc_start, arcs, hit,
                    )  # fmt: skip
                    if cm == prev:
                        a = mid
                    else:
                        b = mid
                cross = 0.5 * (a + b)
                if prev:
                    accumulate_range(out, axis, row, iu, iv, run_start, cross, t0, h, k_lo,
                                     k_hi)  # fmt: skip
                else:
                    run_start = cross
                prev = cur
            prev_t = t
        if prev:
            accumulate_range(out, axis, row, iu, iv, run_start, ze, t0, h, k_lo, k_hi)

    zone = jit(zone)

    def line_chords(
        u, v, reach, u0, v0, bsize, nbu, nbv, bstart, border, pos, axis,
        r1, s1, e1, r2, s2, e2, two,
    ):  # fmt: skip
        """Chords of the line along ``axis`` through (u, v) by the binned atoms within ``reach``.

        Spheres of radii ``r1`` add their chords to (``s1``, ``e1``) and, when ``two``, those
        of radii ``r2`` to (``s2``, ``e2``). Returns the two counts, (−1, −1) on overflow.
        The atoms come bin by bin (a row's bins hold consecutive slots, see ``bin_count``).
        """
        n1 = 0
        n2 = 0
        lo_u, hi_u, lo_v, hi_v = bin_range(u, v, reach, u0, v0, bsize, nbu, nbv)
        for bu in range(lo_u, hi_u + 1):
            for s in range(bstart[bu * nbv + lo_v], bstart[bu * nbv + hi_v + 1]):
                i = border[s]
                du, dv = across(pos, i, axis, u, v)
                n1 = chord(s1, e1, n1, du, dv, pos[i, axis], r1[i])
                if two:
                    n2 = chord(s2, e2, n2, du, dv, pos[i, axis], r2[i])
                if n1 < 0 or n2 < 0:
                    return -1, -1
        return n1, n2

    line_chords = jit(line_chords)

    def exposed_candidates(
        u, v, axis, pos, acc, probe, maxreach, key_lo, key_hi,
        e_u0, e_v0, e_bsize, e_nbu, e_nbv, e_bstart, e_border, cand, ckey,
    ):  # fmt: skip
        """Exposed atoms within acc + probe of the line, sorted along it; their count.

        Only atoms between ``key_lo`` and ``key_hi`` along the line; into ``cand`` (their keys
        in ``ckey``); −1 when ``cand`` is full.
        """
        ncand = 0
        lo_u, hi_u, lo_v, hi_v = bin_range(u, v, maxreach, e_u0, e_v0, e_bsize, e_nbu, e_nbv)
        for bu in range(lo_u, hi_u + 1):
            for s in range(e_bstart[bu * e_nbv + lo_v], e_bstart[bu * e_nbv + hi_v + 1]):
                i = e_border[s]
                du, dv = across(pos, i, axis, u, v)
                rr = acc[i] + probe
                if du * du + dv * dv >= rr * rr:
                    continue
                if pos[i, axis] < key_lo or pos[i, axis] > key_hi:
                    continue
                if ncand >= cand.shape[0]:
                    return -1
                insert_sorted(ckey, cand, ncand, pos[i, axis], i)
                ncand += 1
        return ncand

    exposed_candidates = jit(exposed_candidates)

    def union_line(
        out, axis, iu, iv, u, v, t0, h, nbins, pos, radius, maxr,
        u0, v0, bsize, nbu, nbv, bstart, border, starts, ends,
    ):  # fmt: skip
        """Covered fraction of each bin of one line by the union of spheres; 1 on overflow.

        Line (iu, iv) runs along ``axis`` through (u, v); bin k spans [t0 + k h, t0 + (k+1) h).
        """
        n, _ = line_chords(u, v, maxr, u0, v0, bsize, nbu, nbv, bstart, border, pos, axis,
                           radius, starts, ends, radius, starts, ends, False)  # fmt: skip
        if n < 0:
            return 1
        n = sort_merge(starts, ends, n)
        for s in range(n):
            accumulate(out, axis, 0, iu, iv, starts[s], ends[s], t0, h, nbins)
        return 0

    union_line = jit(union_line)

    def ses_line(
        out, axis, row, iu, iv, u, v, t0, h, nbins, k_lo, k_hi, pos, vdw, acc, probe, step,
        nbisect, maxacc, maxreach, u0, v0, bsize, nbu, nbv, bstart, border,
        e_u0, e_v0, e_bsize, e_nbu, e_nbv, e_bstart, e_border,
        nb_start, nb_index, circ_start, geom, arc_start, arcs,
        vs_, ve_, ss_, se_, cand, ckey, hit,
    ):  # fmt: skip
        """Solvent-excluded fraction of the bins ``k_lo ≤ k < k_hi`` of one line of ``nbins``.

        Into ``out`` from plane ``row``; (0, nbins) is the whole line. A piece of a line finds
        the whole line's spheres and zones and writes only its own bins (see :func:`zone`).
        Returns 1 on overflow.

        ``vdw`` are atomic radii, ``acc`` accessible radii (vdw + probe). The first bins
        (``u0`` … ``border``) hold all atoms for reach ``acc``; the second (``e_*``) only the
        exposed atoms, for reach ``acc + probe`` (the point test's candidates, kept sorted
        along the line in ``cand``/``ckey``).
        """
        nsas, nvdw = line_chords(u, v, maxacc, u0, v0, bsize, nbu, nbv, bstart, border, pos,
                                 axis, acc, ss_, se_, vdw, vs_, ve_, True)  # fmt: skip
        if nsas < 0:
            return 1
        if nsas == 0:
            return 0
        nvdw = sort_merge(vs_, ve_, nvdw)
        nsas = sort_merge(ss_, se_, nsas)
        for s in range(nvdw):
            accumulate_range(out, axis, row, iu, iv, vs_[s], ve_[s], t0, h, k_lo, k_hi)
        # only the candidates a point of this piece can reach: its zone samples and bisections
        # lie within one sample interval (≤ step) of its edges, and a point looks ``maxreach``
        # either way
        key_lo = t0 + k_lo * h - step - maxreach - CANDIDATE_SLACK
        key_hi = t0 + k_hi * h + step + maxreach + CANDIDATE_SLACK
        ncand = exposed_candidates(
            u, v, axis, pos, acc, probe, maxreach, key_lo, key_hi,
            e_u0, e_v0, e_bsize, e_nbu, e_nbv, e_bstart, e_border, cand, ckey,
        )  # fmt: skip
        if ncand < 0:
            return 1
        for k in range(4):
            hit[k] = 0.0
        # reentrant zone: accessible spheres minus vdW spheres, clipped to the line
        tmax = t0 + nbins * h
        p = 0
        for s in range(nsas):
            zs = max(ss_[s], t0)
            ze = min(se_[s], tmax)
            while zs < ze:
                # skip vdW intervals that end before zs
                while p < nvdw and ve_[p] <= zs:
                    p += 1
                if p < nvdw and vs_[p] <= zs:
                    zs = ve_[p]
                    continue
                zend = ze
                if p < nvdw and vs_[p] < ze:
                    zend = vs_[p]
                zone(
                    out, axis, row, iu, iv, zs, zend, t0, h, k_lo, k_hi, u, v, cand, ckey, ncand,
                    pos, acc, probe, maxreach, step, nbisect, nb_start, nb_index, circ_start,
                    geom, arc_start, arcs, hit,
                )  # fmt: skip
                zs = zend
        return 0

    ses_line = jit(ses_line)

    def pair_arcs(pos, rad, i, s, nb_start, nb_index, nfree, g, bs, be, dummy):
        """Pair ``s`` (atom i and its neighbour nb_index[s]): free-arc count into ``nfree[s]``.

        Returns (whether i's sphere lies inside the neighbour's, whether they meet in a
        circle, overflow). The arcs are counted for j > i only (``nfree[s]`` is 0 otherwise):
        circle (j, i) is circle (i, j), and :func:`compact_circles` credits its free arcs to
        both atoms.
        """
        j = nb_index[s]
        dx = pos[j, 0] - pos[i, 0]
        dy = pos[j, 1] - pos[i, 1]
        dz = pos[j, 2] - pos[i, 2]
        d = math.sqrt(dx * dx + dy * dy + dz * dz)
        nest = d + rad[i] < rad[j] or (d + rad[i] <= rad[j] and j < i)
        if not circle(pos, rad, i, j, g):
            return nest, False, False
        if j < i:
            nfree[s] = 0
            return nest, True, False
        k = free_arcs(pos, rad, i, j, nb_start, nb_index, g, bs, be, dummy, 0, 0)
        nfree[s] = max(k, 0)
        return nest, True, k < 0

    pair_arcs = jit(pair_arcs)

    def count_arcs(pos, rad, i, nb_start, nb_index, nfree, g, bs, be, dummy):
        """Atom i: free-arc count of every circle (i, j) into ``nfree``.

        Returns (nested, intersecting circles, overflow).
        """
        ninter = 0
        nest = False
        bad = False
        for s in range(nb_start[i], nb_start[i + 1]):
            inside, meets, over = pair_arcs(pos, rad, i, s, nb_start, nb_index, nfree, g, bs,
                                            be, dummy)  # fmt: skip
            nest = nest or inside
            ninter += 1 if meets else 0
            bad = bad or over
        return nest, ninter, bad

    count_arcs = jit(count_arcs)

    def pair_owner(nb_start, s):
        """The atom whose neighbour list holds pair ``s`` (nb_start[i] ≤ s < nb_start[i + 1])."""
        lo, hi = 0, nb_start.shape[0] - 1
        while hi - lo > 1:  # invariant: nb_start[lo] <= s < nb_start[hi]
            mid = (lo + hi) // 2
            if nb_start[mid] <= s:
                lo = mid
            else:
                hi = mid
        return lo

    pair_owner = jit(pair_owner)

    def fill_circle(pos, rad, c, i, j, nb_start, nb_index, arc_start, geom, arcs, g, bs, be):
        """Circle c of (i, j): its geometry row and its free arcs."""
        circle(pos, rad, i, j, g)
        for a in range(13):
            geom[c, a] = g[a]
        cap = arc_start[c + 1] - arc_start[c]
        free_arcs(pos, rad, i, j, nb_start, nb_index, g, bs, be, arcs, arc_start[c], cap)

    fill_circle = jit(fill_circle)
    return {
        "line": jit(line_body),
        "union_line": union_line,
        "ses_line": ses_line,
        "count_arcs": count_arcs,
        "pair_arcs": pair_arcs,
        "pair_owner": pair_owner,
        "fill_circle": fill_circle,
        "probe_reaches": probe_reaches,
        "exposed_candidates": exposed_candidates,
        "sphere_probe": sphere_probe,
        "circle_local": circle_local,
        "chord": chord,
        "bin_count": jit(bin_count),
        "bin_range": bin_range,
        "across": across,
        "point": point,
        "arc_point": arc_point,
    }


def plane_bins(pu, pv, u0, v0, size, nbu, nbv):
    """Counting sort of atoms into (nbu, nbv) bins of ``size`` Å in a plane (NumPy, host).

    Returns ``start`` (nbu*nbv + 1) and ``order`` (atom indices sorted by bin).
    """
    bu = np.clip(np.floor((pu - u0) / size).astype(np.int64), 0, nbu - 1)
    bv = np.clip(np.floor((pv - v0) / size).astype(np.int64), 0, nbv - 1)
    key = bu * nbv + bv
    order = np.argsort(key, kind="stable").astype(np.int64)
    counts = np.bincount(key, minlength=nbu * nbv)
    start = np.zeros(nbu * nbv + 1, dtype=np.int64)
    np.cumsum(counts, out=start[1:])
    return start, order


def compact_circles(nb_start, nb_index, nfree, nested, intersecting, xp=np):
    """SES features from the per-pair free-arc counts (array code: ``xp`` is NumPy or CuPy).

    Returns ``exposed`` (bool per atom), ``circ_start`` (CSR per atom over the circles
    (i, j > i) with free arcs), ``circ_i``, ``circ_j`` and ``arc_start``.
    """
    n = len(nb_start) - 1
    nfree = nfree[: len(nb_index)]
    # the atom owning each pair (a search rather than a repeat: CuPy repeats by host counts)
    owner = xp.searchsorted(nb_start, xp.arange(len(nb_index)), side="right") - 1
    keep = (nb_index > owner) & (nfree > 0)
    # a circle's free arcs are counted once, under its lower atom: they expose both
    free = keep.astype(np.float64)
    has_free = (xp.bincount(owner, weights=free, minlength=n)
                + xp.bincount(nb_index, weights=free, minlength=n)) > 0  # fmt: skip
    exposed = ~nested & ((intersecting == 0) | has_free)
    circ_i = owner[keep]
    circ_j = nb_index[keep]
    zero = xp.zeros(1, dtype=np.int64)
    circ_start = xp.concatenate([zero, xp.cumsum(xp.bincount(circ_i, minlength=n))])
    arc_start = xp.concatenate([zero, xp.cumsum(nfree[keep])])
    return exposed, circ_start.astype(np.int64), circ_i, circ_j, arc_start.astype(np.int64)


# ---------------------------------------------------------------------- point potentials
def make_point_sums(jit, fast, exp=math.exp):
    """The direct sums (φ_c, Debye–Hückel) compiled by ``fast`` (fast-math keeping ±inf).

    Also ``grid_point``, the node a flat index names and its position, for the sums' loops.
    ``exp`` is the screening's exponential: ``math.exp``, or on the CPU a compiled one that
    vectorises (:func:`pbsolver.backends.cpu.fast_math.exp64`).
    """

    def coulomb_pair(dx, dy, dz, q, tol2):
        """q / |d| for one atom (nonzero q), ±inf when |d|² ≤ ``tol2`` (on the node).

        Needs IEEE division (numba's "numpy" error model: q / 0 = ±inf).
        """
        r2 = dx * dx + dy * dy + dz * dz
        if r2 <= tol2:
            r2 = r2 - r2
        return q / math.sqrt(r2)

    coulomb_pair = fast(coulomb_pair)

    def coulomb_node(rel, q, f, x, y, z, box, tol2):
        """Σ q_a / |r − r_a| over the atoms of frame f (Å⁻¹ e); ±inf on (or near) an atom.

        A distance below √``tol2`` counts as zero. ``box`` (or None, no wrap) is the periodic
        box: each atom then contributes through its nearest image. The arithmetic follows the
        inputs' type (float32 for the frame engine, whose positions are relative to the
        frame's origin so the numbers stay small) and the sum is carried in float64 every 32
        atoms.
        """
        acc = 0.0
        part = x - x  # zero in the arithmetic's type
        for a in range(q.shape[0]):
            dx = x - rel[f, a, 0]
            dy = y - rel[f, a, 1]
            dz = z - rel[f, a, 2]
            if box is not None:
                dx -= box[0] * math.floor(dx / box[0] + 0.5)
                dy -= box[1] * math.floor(dy / box[1] + 0.5)
                dz -= box[2] * math.floor(dz / box[2] + 0.5)
            if q[a] != 0.0:
                part += coulomb_pair(dx, dy, dz, q[a], tol2)
            if (a & 31) == 31:
                acc += part
                part = x - x
        return acc + part

    def dh_term(dx, dy, dz, q, radius, kappa, eps_out, inv_c, one):
        """One atom's term q (e^{−κ(r−a)} / (ε_out (1 + κ a)) − 1/ε_c) / r of the "mdh" sum.

        ``one`` is 1 in the arithmetic's type (float32 for the frame engine).
        """
        r = math.sqrt(dx * dx + dy * dy + dz * dz)
        screened = exp(-kappa * (r - radius)) / (eps_out * (one + kappa * radius))
        return q * (screened - inv_c) / r

    dh_term = fast(dh_term)

    def debye_huckel_node(rel, q, radii, f, x, y, z, kappa, eps_out, eps_cavity, one):
        """Σ of :func:`dh_term` over the atoms of frame f at (x, y, z)."""
        acc = 0.0
        inv_c = one / eps_cavity
        for a in range(q.shape[0]):
            acc += dh_term(x - rel[f, a, 0], y - rel[f, a, 1], z - rel[f, a, 2], q[a], radii[a],
                           kappa, eps_out, inv_c, one)  # fmt: skip
        return acc

    def grid_point(n, ny, nz, origin, spacing):
        """``(i, j, k, x, y, z)`` of node ``n`` (flat, C order) of a grid of (·, ny, nz) nodes.

        ``x, y, z`` are the node's coordinates (Å) from the grid's ``origin`` and ``spacing``.
        """
        i = n // (ny * nz)
        j = (n // nz) % ny
        k = n % nz
        x = origin[0] + i * spacing[0]
        y = origin[1] + j * spacing[1]
        z = origin[2] + k * spacing[2]
        return i, j, k, x, y, z

    return {
        "grid_point": fast(grid_point),
        "coulomb_pair": coulomb_pair,
        "coulomb_node": fast(coulomb_node),
        "dh_term": dh_term,
        "debye_huckel_node": fast(debye_huckel_node),
    }


def snap_fraction_body(x):
    """An edge fraction clipped to [0, 1], within :data:`FRACTION_SNAP` of 0 or 1 made so."""
    x = min(max(x, 0.0), 1.0)
    if x >= 1.0 - FRACTION_SNAP:
        return 1.0
    if x <= FRACTION_SNAP:
        return 0.0
    return x


def face_eps_body(frac, eps_in, eps_out):
    """ε of a face from its edge fraction inside the solute (harmonic mixture).

    Exactly ε_in for a fraction within :data:`FRACTION_SNAP` of 1 (and ε_out near 0).
    """
    if frac >= 1.0 - FRACTION_SNAP:
        return eps_in
    if frac <= FRACTION_SNAP:
        return eps_out
    return 1.0 / (frac / eps_in + (1.0 - frac) / eps_out)
