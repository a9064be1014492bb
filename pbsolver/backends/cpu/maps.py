"""Numba CPU kernels that turn atoms into grid maps (raw arrays in, raw arrays out).

Geometry is computed along grid lines. For a line parallel to axis ``a`` through the point
(U, V) of the other two axes, every sphere that reaches the line covers one exact interval of
it; the union of those intervals, cut at the edges (or cells) of the line, gives the covered
fraction of each edge. That is exact for unions of spheres (vdW surface, ion-exclusion
region).

The solvent-excluded surface (SES) needs one more step: inside the solvent-accessible spheres
(radius R + r_p) but outside the vdW spheres, a point x belongs to the solvent when a probe
centre p that touches no atom (|p − c_k| ≥ R_k + r_p for all k) lies within r_p of x. The
closest such probe centre to x is one of: the radial projection of x on an exposed
accessible sphere, the nearest point of x on a free (unburied) arc of the circle where two
accessible spheres meet, or an end of such an arc (a probe touching three atoms). Those
candidates are enumerated exactly (arcs are precomputed as angle intervals); along each line
the class of this "reentrant zone" is sampled every ``step`` Å and every change of class is
located by bisection to ~1e-6 of a sample interval.

Each kernel body is written per line or per node (no Python objects), so a numba-cuda twin
can launch the same per-element logic one thread per line or node.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from pbsolver.backends.bodies.lines import accumulate_body

_JIT = {"cache": True, "nogil": True, "boundscheck": False}
#: Flags that let the Coulomb sum vectorise (reassociation) but keep IEEE infinities.
_FM = {"reassoc", "contract", "nsz"}

TWO_PI = 2.0 * math.pi
#: Relative tolerance of "inside a sphere" tests on probe positions (points on a sphere are
#: accessible).
_BURY_TOL = 1e-9


# ---------------------------------------------------------------------- 2D bins for lines
def plane_bins(pu, pv, u0, v0, size, nbu, nbv):
    """Counting sort of atoms into (nbu, nbv) bins of ``size`` Å in a plane (NumPy).

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


@njit(**_JIT, inline="always")
def _point(axis, t, u, v):
    """3D point of parameter t on the line of ``axis`` through (u, v)."""
    if axis == 0:
        return t, u, v
    if axis == 1:
        return u, t, v
    return u, v, t


@njit(**_JIT)
def _gather(pos, reach, axis, u, v, u0, v0, bsize, nbu, nbv, bstart, border, maxreach, srt=True):
    """Atoms whose ``reach`` sphere meets the line (sorted along it when ``srt``)."""
    a1 = 1 if axis == 0 else 0
    a2 = 1 if axis == 2 else 2
    lo_u = max(0, int(math.floor((u - maxreach - u0) / bsize)))
    hi_u = min(nbu - 1, int(math.floor((u + maxreach - u0) / bsize)))
    lo_v = max(0, int(math.floor((v - maxreach - v0) / bsize)))
    hi_v = min(nbv - 1, int(math.floor((v + maxreach - v0) / bsize)))
    count = 0
    for bu in range(lo_u, hi_u + 1):
        for bv in range(lo_v, hi_v + 1):
            b = bu * nbv + bv
            count += bstart[b + 1] - bstart[b]
    out = np.empty(count, dtype=np.int64)
    n = 0
    for bu in range(lo_u, hi_u + 1):
        for bv in range(lo_v, hi_v + 1):
            b = bu * nbv + bv
            for s in range(bstart[b], bstart[b + 1]):
                i = border[s]
                du = pos[i, a1] - u
                dv = pos[i, a2] - v
                if du * du + dv * dv < reach[i] * reach[i]:
                    out[n] = i
                    n += 1
    out = out[:n]
    if not srt:
        return out
    key = np.empty(n)
    for s in range(n):
        key[s] = pos[out[s], axis]
    return out[np.argsort(key)]


@njit(**_JIT)
def _merge(starts, ends, n):
    """Union of n intervals: sorted, disjoint (starts, ends) and their count (in place)."""
    if n == 0:
        return 0
    order = np.argsort(starts[:n])
    s2 = starts[:n][order]
    e2 = ends[:n][order]
    m = 0
    cs, ce = s2[0], e2[0]
    for s in range(1, n):
        if s2[s] <= ce:
            if e2[s] > ce:
                ce = e2[s]
        else:
            starts[m], ends[m] = cs, ce
            m += 1
            cs, ce = s2[s], e2[s]
    starts[m], ends[m] = cs, ce
    return m + 1


_accumulate_rows = njit(**_JIT)(accumulate_body)


@njit(**_JIT)
def _accumulate(out, axis, iu, iv, s, e, t0, h, nbins):
    """Add the covered length of [s, e] (in units of h) to the bins [t0 + k h, t0 + (k+1) h)."""
    _accumulate_rows(out, axis, 0, iu, iv, s, e, t0, h, nbins)


# ---------------------------------------------------------------------- union of spheres
@njit(**_JIT, parallel=True)
def sphere_union_lines(
    out, axis, us, vs, t0, h, nbins, pos, radius, u0, v0, bsize, nbu, nbv, bstart, border
):
    """Covered fraction of each bin of each line by the union of spheres (radius > 0).

    ``out`` is a 3D array indexed like the grid; line (iu, iv) runs along ``axis`` at the
    coordinates ``us[iu]``, ``vs[iv]`` of the other two axes (in increasing axis order); bin k
    spans [t0 + k h, t0 + (k + 1) h). Values are added to ``out``.
    """
    nu = us.shape[0]
    nv = vs.shape[0]
    maxr = 0.0
    for i in range(radius.shape[0]):
        maxr = max(maxr, radius[i])
    for line in prange(nu * nv):
        iu = line // nv
        iv = line % nv
        u = us[iu]
        v = vs[iv]
        atoms = _gather(
            pos, radius, axis, u, v, u0, v0, bsize, nbu, nbv, bstart, border, maxr, False
        )
        m = atoms.shape[0]
        if m == 0:
            continue
        starts = np.empty(m)
        ends = np.empty(m)
        a1 = 1 if axis == 0 else 0
        a2 = 1 if axis == 2 else 2
        for s in range(m):
            i = atoms[s]
            du = pos[i, a1] - u
            dv = pos[i, a2] - v
            w = math.sqrt(max(radius[i] * radius[i] - du * du - dv * dv, 0.0))
            starts[s] = pos[i, axis] - w
            ends[s] = pos[i, axis] + w
        nm = _merge(starts, ends, m)
        for s in range(nm):
            _accumulate(out, axis, iu, iv, starts[s], ends[s], t0, h, nbins)


# ---------------------------------------------------------------------- SES precomputation
@njit(**_JIT)
def _cells(pos, size):
    """3D cell list: cell index per atom and the grid of cells (counting sort)."""
    n = pos.shape[0]
    lo = np.empty(3)
    ncell = np.empty(3, dtype=np.int64)
    for a in range(3):
        lo[a] = pos[:, a].min()
        ncell[a] = int((pos[:, a].max() - lo[a]) / size) + 1
    cid = np.empty(n, dtype=np.int64)
    for i in range(n):
        c0 = int((pos[i, 0] - lo[0]) / size)
        c1 = int((pos[i, 1] - lo[1]) / size)
        c2 = int((pos[i, 2] - lo[2]) / size)
        cid[i] = (c0 * ncell[1] + c1) * ncell[2] + c2
    total = ncell[0] * ncell[1] * ncell[2]
    start = np.zeros(total + 1, dtype=np.int64)
    for i in range(n):
        start[cid[i] + 1] += 1
    for c in range(total):
        start[c + 1] += start[c]
    fill = start[:-1].copy()
    order = np.empty(n, dtype=np.int64)
    for i in range(n):
        order[fill[cid[i]]] = i
        fill[cid[i]] += 1
    return lo, ncell, start, order


@njit(**_JIT, parallel=True)
def neighbour_lists(pos, rad):
    """Pairs of overlapping spheres: CSR (start, index) with j ≠ i and |c_i − c_j| < R_i + R_j."""
    n = pos.shape[0]
    size = 2.0 * rad.max() + 1e-6
    lo, ncell, cstart, corder = _cells(pos, size)
    counts = np.zeros(n, dtype=np.int64)
    for sweep in range(2):
        if sweep == 1:
            start = np.zeros(n + 1, dtype=np.int64)
            for i in range(n):
                start[i + 1] = start[i] + counts[i]
            index = np.empty(start[n], dtype=np.int64)
        for i in prange(n):
            c0 = int((pos[i, 0] - lo[0]) / size)
            c1 = int((pos[i, 1] - lo[1]) / size)
            c2 = int((pos[i, 2] - lo[2]) / size)
            m = 0
            for d0 in range(max(0, c0 - 1), min(ncell[0], c0 + 2)):
                for d1 in range(max(0, c1 - 1), min(ncell[1], c1 + 2)):
                    for d2 in range(max(0, c2 - 1), min(ncell[2], c2 + 2)):
                        c = (d0 * ncell[1] + d1) * ncell[2] + d2
                        for s in range(cstart[c], cstart[c + 1]):
                            j = corder[s]
                            if j == i:
                                continue
                            dx = pos[j, 0] - pos[i, 0]
                            dy = pos[j, 1] - pos[i, 1]
                            dz = pos[j, 2] - pos[i, 2]
                            rr = rad[i] + rad[j]
                            if dx * dx + dy * dy + dz * dz < rr * rr:
                                if sweep == 1:
                                    index[start[i] + m] = j
                                m += 1
            counts[i] = m
    # nearest first: a burying neighbour is usually found within the first few
    for i in prange(n):
        lo, hi = start[i], start[i + 1]
        d2 = np.empty(hi - lo)
        for s in range(lo, hi):
            j = index[s]
            d2[s - lo] = (
                (pos[j, 0] - pos[i, 0]) ** 2
                + (pos[j, 1] - pos[i, 1]) ** 2
                + (pos[j, 2] - pos[i, 2]) ** 2
            )
        order = np.argsort(d2)
        tmp = index[lo:hi].copy()
        for s in range(hi - lo):
            index[lo + s] = tmp[order[s]]
    return start, index


@njit(**_JIT)
def _circle(pos, rad, i, j):
    """Intersection circle of spheres i and j: (ok, m[3], n[3], u[3], v[3], rho)."""
    m = np.zeros(3)
    nn = np.zeros(3)
    u = np.zeros(3)
    v = np.zeros(3)
    d2 = 0.0
    for a in range(3):
        nn[a] = pos[j, a] - pos[i, a]
        d2 += nn[a] * nn[a]
    d = math.sqrt(d2)
    ri, rj = rad[i], rad[j]
    if d <= abs(ri - rj) or d >= ri + rj or d == 0.0:
        return False, m, nn, u, v, 0.0
    for a in range(3):
        nn[a] /= d
    aa = (d2 + ri * ri - rj * rj) / (2.0 * d)
    rho2 = ri * ri - aa * aa
    if rho2 <= 0.0:
        return False, m, nn, u, v, 0.0
    for a in range(3):
        m[a] = pos[i, a] + aa * nn[a]
    # u: perpendicular to n, built from the axis least aligned with n
    ax = 0
    if abs(nn[1]) < abs(nn[ax]):
        ax = 1
    if abs(nn[2]) < abs(nn[ax]):
        ax = 2
    e = np.zeros(3)
    e[ax] = 1.0
    u[0] = nn[1] * e[2] - nn[2] * e[1]
    u[1] = nn[2] * e[0] - nn[0] * e[2]
    u[2] = nn[0] * e[1] - nn[1] * e[0]
    un = math.sqrt(u[0] * u[0] + u[1] * u[1] + u[2] * u[2])
    for a in range(3):
        u[a] /= un
    v[0] = nn[1] * u[2] - nn[2] * u[1]
    v[1] = nn[2] * u[0] - nn[0] * u[2]
    v[2] = nn[0] * u[1] - nn[1] * u[0]
    return True, m, nn, u, v, math.sqrt(rho2)


@njit(**_JIT)
def _free_arcs(pos, rad, i, j, nb_start, nb_index, m, u, v, rho, arcs):
    """Free (unburied) arcs of circle (i, j) as angle intervals in [0, 2π].

    Writes up to ``arcs.shape[0]`` rows of (θ0, θ1) and returns their count (0: fully
    buried). A third sphere k buries the open arc where its ball contains the circle.
    """
    deg = nb_start[i + 1] - nb_start[i]
    bs = np.empty(2 * deg + 2)
    be = np.empty(2 * deg + 2)
    nbur = 0
    for s in range(nb_start[i], nb_start[i + 1]):
        k = nb_index[s]
        if k == j:
            continue
        w0 = pos[k, 0] - m[0]
        w1 = pos[k, 1] - m[1]
        w2 = pos[k, 2] - m[2]
        aa = w0 * u[0] + w1 * u[1] + w2 * u[2]
        bb = w0 * v[0] + w1 * v[1] + w2 * v[2]
        ww = w0 * w0 + w1 * w1 + w2 * w2
        rk = rad[k]
        cc = (rho * rho + ww - rk * rk) / (2.0 * rho)
        dd = math.sqrt(aa * aa + bb * bb)
        tol = _BURY_TOL * (rk + rho)
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
            bs[nbur], be[nbur] = s0, TWO_PI
            nbur += 1
            bs[nbur], be[nbur] = 0.0, e0 - TWO_PI
            nbur += 1
        else:
            bs[nbur], be[nbur] = s0, e0
            nbur += 1
    nm = _merge(bs, be, nbur)
    nfree = 0
    cur = 0.0
    for s in range(nm):
        if bs[s] > cur:
            if nfree < arcs.shape[0]:
                arcs[nfree, 0], arcs[nfree, 1] = cur, bs[s]
            nfree += 1
        if be[s] > cur:
            cur = be[s]
    if cur < TWO_PI:
        if nfree < arcs.shape[0]:
            arcs[nfree, 0], arcs[nfree, 1] = cur, TWO_PI
        nfree += 1
    return nfree


@njit(**_JIT, parallel=True)
def ses_features(pos, rad, nb_start, nb_index):
    """Exposed accessible spheres and the free arcs of their intersection circles.

    ``rad`` are the accessible radii R + r_p. Returns ``exposed`` (bool per atom),
    ``circ_start`` (CSR per atom over circles (i, j > i) with free arcs), ``circ_j``,
    ``circ_geom`` (m, n, u, v, rho: 13 floats per circle), ``arc_start`` and ``arcs``.
    """
    n = pos.shape[0]
    npair = nb_index.shape[0]
    nfree = np.zeros(npair, dtype=np.int64)
    nested = np.zeros(n, dtype=np.bool_)
    intersecting = np.zeros(n, dtype=np.int64)
    for i in prange(n):
        scratch = np.empty((4, 2))
        for s in range(nb_start[i], nb_start[i + 1]):
            j = nb_index[s]
            dx = pos[j, 0] - pos[i, 0]
            dy = pos[j, 1] - pos[i, 1]
            dz = pos[j, 2] - pos[i, 2]
            d = math.sqrt(dx * dx + dy * dy + dz * dz)
            if d + rad[i] < rad[j] or (d + rad[i] <= rad[j] and j < i):
                nested[i] = True
            ok, m, nn, u, v, rho = _circle(pos, rad, i, j)
            if not ok:
                continue
            intersecting[i] += 1
            nfree[s] = _free_arcs(pos, rad, i, j, nb_start, nb_index, m, u, v, rho, scratch)
    exposed = np.zeros(n, dtype=np.bool_)
    for i in range(n):
        if nested[i]:
            continue
        if intersecting[i] == 0:
            exposed[i] = True
            continue
        for s in range(nb_start[i], nb_start[i + 1]):
            if nfree[s] > 0:
                exposed[i] = True
                break
    # compact the circles (i, j > i) that have free arcs, CSR per atom
    circ_count = np.zeros(n, dtype=np.int64)
    for i in range(n):
        for s in range(nb_start[i], nb_start[i + 1]):
            if nb_index[s] > i and nfree[s] > 0:
                circ_count[i] += 1
    circ_start = np.zeros(n + 1, dtype=np.int64)
    for i in range(n):
        circ_start[i + 1] = circ_start[i] + circ_count[i]
    nc = circ_start[n]
    circ_j = np.empty(nc, dtype=np.int64)
    circ_pair = np.empty(nc, dtype=np.int64)
    arc_count = np.empty(nc, dtype=np.int64)
    for i in range(n):
        c = circ_start[i]
        for s in range(nb_start[i], nb_start[i + 1]):
            if nb_index[s] > i and nfree[s] > 0:
                circ_j[c] = nb_index[s]
                circ_pair[c] = s
                arc_count[c] = nfree[s]
                c += 1
    arc_start = np.zeros(nc + 1, dtype=np.int64)
    for c in range(nc):
        arc_start[c + 1] = arc_start[c] + arc_count[c]
    arcs = np.empty((arc_start[nc], 2))
    geom = np.empty((nc, 13))
    for i in prange(n):
        for c in range(circ_start[i], circ_start[i + 1]):
            j = circ_j[c]
            ok, m, nn, u, v, rho = _circle(pos, rad, i, j)
            for a in range(3):
                geom[c, a] = m[a]
                geom[c, 3 + a] = nn[a]
                geom[c, 6 + a] = u[a]
                geom[c, 9 + a] = v[a]
            geom[c, 12] = rho
            k = arc_count[c]
            buf = np.empty((k, 2))
            _free_arcs(pos, rad, i, j, nb_start, nb_index, m, u, v, rho, buf)
            for a in range(k):
                arcs[arc_start[c] + a, 0] = buf[a, 0]
                arcs[arc_start[c] + a, 1] = buf[a, 1]
    return exposed, circ_start, circ_j, geom, arc_start, arcs


@njit(**_JIT, inline="always")
def _buried(px, py, pz, i, pos, rad, nb_start, nb_index):
    """True when the probe centre p (on accessible sphere i) is inside another one."""
    for s in range(nb_start[i], nb_start[i + 1]):
        k = nb_index[s]
        dx = px - pos[k, 0]
        dy = py - pos[k, 1]
        dz = pz - pos[k, 2]
        rk = rad[k]
        if dx * dx + dy * dy + dz * dz < rk * rk * (1.0 - _BURY_TOL):
            return True
    return False


@njit(**_JIT)
def probe_reaches(
    x, y, z, atoms, lo, hi, pos, rad, probe, exposed, nb_start, nb_index,
    circ_start, geom, arc_start, arcs, hit,
):  # fmt: skip
    """True when some accessible probe centre lies within ``probe`` of (x, y, z).

    ``atoms[lo:hi]`` are the candidate atoms (all atoms within rad + probe of the point must be
    among them); ``rad`` are accessible radii R + r_p. ``hit`` (4 floats) caches the last
    accessible probe centre found (hit[3] = 1 when set): it is tried first, since neighbouring
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
        i = atoms[s]
        if not exposed[i]:
            continue
        dx = x - pos[i, 0]
        dy = y - pos[i, 1]
        dz = z - pos[i, 2]
        r2 = dx * dx + dy * dy + dz * dz
        reach = rad[i] + probe
        if r2 >= reach * reach:
            continue
        r = math.sqrt(r2)
        # 1. radial projection on accessible sphere i
        # (the nearest accessible point is a radial projection only when x is inside ball i)
        if 0.0 < r < rad[i] and rad[i] - r < probe:
            f = rad[i] / r
            px = pos[i, 0] + f * dx
            py = pos[i, 1] + f * dy
            pz = pos[i, 2] + f * dz
            if not _buried(px, py, pz, i, pos, rad, nb_start, nb_index):
                _remember(hit, px, py, pz)
                return True
        # 2. free arcs of the circles (i, j > i), and their ends
        for c in range(circ_start[i], circ_start[i + 1]):
            wx = x - geom[c, 0]
            wy = y - geom[c, 1]
            wz = z - geom[c, 2]
            rho = geom[c, 12]
            zz = wx * geom[c, 3] + wy * geom[c, 4] + wz * geom[c, 5]
            xu = wx * geom[c, 6] + wy * geom[c, 7] + wz * geom[c, 8]
            xv = wx * geom[c, 9] + wy * geom[c, 10] + wz * geom[c, 11]
            rx = math.sqrt(xu * xu + xv * xv)
            dmin2 = (rx - rho) * (rx - rho) + zz * zz
            if dmin2 >= p2:
                continue
            if rx <= 1e-12 * rho:
                # on the axis: every point of a free arc is equally near
                _remember_arc(hit, geom, c, arcs[arc_start[c], 0])
                return True
            theta = math.atan2(xv, xu) % TWO_PI
            base = rx * rx + rho * rho + zz * zz
            for a in range(arc_start[c], arc_start[c + 1]):
                if arcs[a, 0] <= theta <= arcs[a, 1]:
                    _remember_arc(hit, geom, c, theta)
                    return True
                for e in range(2):
                    d2 = base - 2.0 * rho * rx * math.cos(theta - arcs[a, e])
                    if d2 < p2:
                        _remember_arc(hit, geom, c, arcs[a, e])
                        return True
    return False


@njit(**_JIT, inline="always")
def _remember(hit, px, py, pz):
    hit[0] = px
    hit[1] = py
    hit[2] = pz
    hit[3] = 1.0


@njit(**_JIT, inline="always")
def _remember_arc(hit, geom, c, theta):
    """Cache the point at angle theta of circle c."""
    ct = math.cos(theta)
    st = math.sin(theta)
    rho = geom[c, 12]
    _remember(
        hit,
        geom[c, 0] + rho * (ct * geom[c, 6] + st * geom[c, 9]),
        geom[c, 1] + rho * (ct * geom[c, 7] + st * geom[c, 10]),
        geom[c, 2] + rho * (ct * geom[c, 8] + st * geom[c, 11]),
    )


@njit(**_JIT)
def _window(atoms, pos, axis, t, reach):
    """[lo, hi) of the atoms (sorted along the axis) within ``reach`` of coordinate t."""
    n = atoms.shape[0]
    lo, hi = 0, n
    while lo < hi:
        mid = (lo + hi) // 2
        if pos[atoms[mid], axis] < t - reach:
            lo = mid + 1
        else:
            hi = mid
    start = lo
    lo, hi = start, n
    while lo < hi:
        mid = (lo + hi) // 2
        if pos[atoms[mid], axis] <= t + reach:
            lo = mid + 1
        else:
            hi = mid
    return start, lo


@njit(**_JIT)
def _solute_at(
    t, axis, u, v, atoms, pos, rad, probe, reach, exposed, nb_start, nb_index,
    circ_start, geom, arc_start, arcs, hit,
):  # fmt: skip
    x, y, z = _point(axis, t, u, v)
    lo, hi = _window(atoms, pos, axis, t, reach)
    return not probe_reaches(
        x, y, z, atoms, lo, hi, pos, rad, probe, exposed, nb_start, nb_index,
        circ_start, geom, arc_start, arcs, hit,
    )  # fmt: skip


@njit(**_JIT, parallel=True)
def ses_lines(
    out, axis, us, vs, t0, h, nbins, pos, vdw, acc, probe, step, nbisect,
    u0, v0, bsize, nbu, nbv, bstart, border,
    e_u0, e_v0, e_bsize, e_nbu, e_nbv, e_bstart, e_border,
    exposed, nb_start, nb_index, circ_start, geom, arc_start, arcs,
):  # fmt: skip
    """Solvent-excluded fraction of each bin of each line (see :func:`sphere_union_lines`).

    ``vdw`` are atomic radii, ``acc`` accessible radii (vdw + probe); ``step`` is the sampling
    interval (Å) of the reentrant zone and ``nbisect`` the bisection steps at each change.
    The first bins (``u0`` … ``border``) hold all atoms for reach ``acc``; the second
    (``e_*``) only the exposed atoms, for reach ``acc + probe`` (the point test's candidates).
    """
    nu = us.shape[0]
    nv = vs.shape[0]
    n = pos.shape[0]
    reach = np.empty(n)
    maxacc = 0.0
    maxreach = 0.0
    for i in range(n):
        reach[i] = acc[i] + probe
        maxacc = max(maxacc, acc[i])
        maxreach = max(maxreach, reach[i])
    tmax = t0 + nbins * h
    a1 = 1 if axis == 0 else 0
    a2 = 1 if axis == 2 else 2
    for line in prange(nu * nv):
        iu = line // nv
        iv = line % nv
        u = us[iu]
        v = vs[iv]
        atoms = _gather(
            pos, acc, axis, u, v, u0, v0, bsize, nbu, nbv, bstart, border, maxacc, False
        )
        m = atoms.shape[0]
        if m == 0:
            continue
        vs_ = np.empty(m)
        ve_ = np.empty(m)
        ss_ = np.empty(m)
        se_ = np.empty(m)
        nvdw = 0
        nsas = 0
        for s in range(m):
            i = atoms[s]
            du = pos[i, a1] - u
            dv = pos[i, a2] - v
            d2 = du * du + dv * dv
            if d2 < vdw[i] * vdw[i]:
                w = math.sqrt(vdw[i] * vdw[i] - d2)
                vs_[nvdw] = pos[i, axis] - w
                ve_[nvdw] = pos[i, axis] + w
                nvdw += 1
            w = math.sqrt(max(acc[i] * acc[i] - d2, 0.0))
            ss_[nsas] = pos[i, axis] - w
            se_[nsas] = pos[i, axis] + w
            nsas += 1
        nvdw = _merge(vs_, ve_, nvdw)
        nsas = _merge(ss_, se_, nsas)
        for s in range(nvdw):
            _accumulate(out, axis, iu, iv, vs_[s], ve_[s], t0, h, nbins)
        # the point test's candidates: exposed atoms within acc + probe, sorted along the line
        cand = _gather(
            pos, reach, axis, u, v, e_u0, e_v0, e_bsize, e_nbu, e_nbv, e_bstart, e_border,
            maxreach,
        )  # fmt: skip
        hit = np.zeros(4)
        # reentrant zone: accessible spheres minus vdW spheres, clipped to the line
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
                _zone(
                    out, axis, iu, iv, zs, zend, t0, h, nbins, u, v, cand, pos, acc, probe,
                    maxreach, step, nbisect, exposed, nb_start, nb_index, circ_start, geom,
                    arc_start, arcs, hit,
                )  # fmt: skip
                zs = zend


@njit(**_JIT)
def _zone(
    out, axis, iu, iv, zs, ze, t0, h, nbins, u, v, atoms, pos, acc, probe, reach, step,
    nbisect, exposed, nb_start, nb_index, circ_start, geom, arc_start, arcs, hit,
):  # fmt: skip
    """Classify one reentrant-zone interval [zs, ze] of a line and add its solute parts."""
    length = ze - zs
    if length <= 0.0:
        return
    nseg = max(1, int(math.ceil(length / step)))
    eps = min(1e-9, 0.25 * length)
    prev_t = zs + eps
    prev = _solute_at(
        prev_t, axis, u, v, atoms, pos, acc, probe, reach, exposed, nb_start, nb_index,
        circ_start, geom, arc_start, arcs, hit,
    )  # fmt: skip
    run_start = zs if prev else -1.0
    for q in range(1, nseg + 1):
        t = ze - eps if q == nseg else zs + length * q / nseg
        cur = _solute_at(
            t, axis, u, v, atoms, pos, acc, probe, reach, exposed, nb_start, nb_index,
            circ_start, geom, arc_start, arcs, hit,
        )  # fmt: skip
        if cur != prev:
            a, b = prev_t, t
            for _ in range(nbisect):
                mid = 0.5 * (a + b)
                cm = _solute_at(
                    mid, axis, u, v, atoms, pos, acc, probe, reach, exposed, nb_start,
                    nb_index, circ_start, geom, arc_start, arcs, hit,
                )  # fmt: skip
                if cm == prev:
                    a = mid
                else:
                    b = mid
            cross = 0.5 * (a + b)
            if prev:
                _accumulate(out, axis, iu, iv, run_start, cross, t0, h, nbins)
            else:
                run_start = cross
            prev = cur
        prev_t = t
    if prev:
        _accumulate(out, axis, iu, iv, run_start, ze, t0, h, nbins)


# ---------------------------------------------------------------------- point potentials
@njit(**_JIT, parallel=True, fastmath=_FM)
def coulomb_sum(out, origin, spacing, pos, q, scale, periodic, box):
    """out[i, j, k] = scale · Σ_a q_a / |r_ijk − r_a| (minimum image when periodic).

    A node exactly on a charged atom gets ±inf (IEEE division by zero). The innermost loop
    runs along z for one atom (contiguous, vectorised).
    """
    nx, ny, nz = out.shape
    n = pos.shape[0]
    for i in prange(nx):
        x = origin[0] + i * spacing[0]
        zs = np.empty(nz)
        acc = np.empty(nz)
        for k in range(nz):
            zs[k] = origin[2] + k * spacing[2]
        for j in range(ny):
            y = origin[1] + j * spacing[1]
            acc[:] = 0.0
            for a in range(n):
                dx = x - pos[a, 0]
                dy = y - pos[a, 1]
                if periodic:
                    dx -= box[0] * np.rint(dx / box[0])
                    dy -= box[1] * np.rint(dy / box[1])
                dxy = dx * dx + dy * dy
                qa = q[a]
                za = pos[a, 2]
                if periodic:
                    lz = box[2]
                    for k in range(nz):
                        dz = zs[k] - za
                        dz -= lz * np.rint(dz / lz)
                        acc[k] += qa / math.sqrt(dxy + dz * dz)
                else:
                    for k in range(nz):
                        dz = zs[k] - za
                        acc[k] += qa / math.sqrt(dxy + dz * dz)
            for k in range(nz):
                out[i, j, k] = scale * acc[k]


@njit(**_JIT, parallel=True, fastmath=_FM)
def debye_huckel_points(points, pos, q, radii, kappa, coulomb, eps_out, eps_cavity):
    """φ_rf at points from the multiple-Debye–Hückel sum of DESIGN §1 (one value per point).

    φ_rf(r) = Σ_i k q_i [exp(−κ(r_i' − a_i)) / (ε_out (1 + κ a_i) r_i') − 1/(ε_c r_i')],
    written as Σ_i (A_i exp(−κ r_i') − B_i) / r_i' with per-atom factors (no exp when κ = 0).
    """
    m = points.shape[0]
    n = pos.shape[0]
    fa = np.empty(n)
    fb = np.empty(n)
    xs = np.empty(n)
    ys = np.empty(n)
    zs = np.empty(n)
    for a in range(n):
        xs[a] = pos[a, 0]
        ys[a] = pos[a, 1]
        zs[a] = pos[a, 2]
        fa[a] = q[a] * math.exp(kappa * radii[a]) / (eps_out * (1.0 + kappa * radii[a]))
        fb[a] = q[a] / eps_cavity
    out = np.empty(m)
    for p in prange(m):
        acc = 0.0
        px = points[p, 0]
        py = points[p, 1]
        pz = points[p, 2]
        if kappa == 0.0:
            for a in range(n):
                dx = px - xs[a]
                dy = py - ys[a]
                dz = pz - zs[a]
                acc += (fa[a] - fb[a]) / math.sqrt(dx * dx + dy * dy + dz * dz)
        else:
            for a in range(n):
                dx = px - xs[a]
                dy = py - ys[a]
                dz = pz - zs[a]
                r = math.sqrt(dx * dx + dy * dy + dz * dz)
                acc += (fa[a] * math.exp(-kappa * r) - fb[a]) / r
        out[p] = coulomb * acc
    return out
