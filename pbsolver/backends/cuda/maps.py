"""numba-cuda twins of the map kernels of :mod:`.cpu_maps` (one thread per grid line or node).

The per-line logic is the CPU one (same interval arithmetic, same SES point test, same
sampling and bisection), written with fixed-size local arrays: a line may meet at most
``MAX_SPHERES`` atomic spheres and ``MAX_CANDIDATES`` exposed probe candidates; a line that
needs more sets ``overflow[0]`` and the caller falls back to the CPU kernels. Each thread owns
its line's bins, so no atomics are needed and results do not depend on scheduling.

Compiled lazily on first launch; this module is imported only when ``backend="cuda"`` is
asked for (importing ``numba.cuda`` touches no driver). The SES features (exposed
spheres, circle arcs) and the 2D bins are built by the CPU code and copied to the device.
Tested under ``NUMBA_ENABLE_CUDASIM=1`` against the CPU kernels on tiny grids
(tests/test_cuda_maps.py); not yet measured on a GPU.
"""

from __future__ import annotations

import math

import numpy as np
from numba import cuda

from pbsolver.backends.bodies.lines import accumulate_body, sort_merge_body

MAX_SPHERES = 384
MAX_CANDIDATES = 384
THREADS = 128
TWO_PI = 2.0 * math.pi
_BURY_TOL = 1e-9


dev = cuda.jit(device=True)


@dev
def point(axis, t, u, v):
    if axis == 0:
        return t, u, v
    if axis == 1:
        return u, t, v
    return u, v, t


sort_merge = dev(sort_merge_body)
_accumulate_rows = dev(accumulate_body)


@dev
def accumulate(out, axis, iu, iv, s, e, t0, h, nbins):
    """Add the covered share of each edge of the line to ``out`` (one grid, no stacking)."""
    _accumulate_rows(out, axis, 0, iu, iv, s, e, t0, h, nbins)


@dev
def bin_range(u, v, reach, u0, v0, bsize, nbu, nbv):
    lo_u = max(0, int(math.floor((u - reach - u0) / bsize)))
    hi_u = min(nbu - 1, int(math.floor((u + reach - u0) / bsize)))
    lo_v = max(0, int(math.floor((v - reach - v0) / bsize)))
    hi_v = min(nbv - 1, int(math.floor((v + reach - v0) / bsize)))
    return lo_u, hi_u, lo_v, hi_v


# ------------------------------------------------------------------ union of spheres
@cuda.jit
def _k_sphere_union_lines(
    out, axis, us, vs, t0, h, nbins, pos, radius, maxr,
    u0, v0, bsize, nbu, nbv, bstart, border, overflow,
):  # fmt: skip
    line = cuda.grid(1)
    nu = us.shape[0]
    nv = vs.shape[0]
    if line >= nu * nv:
        return
    iu = line // nv
    iv = line % nv
    u = us[iu]
    v = vs[iv]
    a1 = 1 if axis == 0 else 0
    a2 = 1 if axis == 2 else 2
    starts = cuda.local.array(MAX_SPHERES, dtype=np.float64)
    ends = cuda.local.array(MAX_SPHERES, dtype=np.float64)
    n = 0
    lo_u, hi_u, lo_v, hi_v = bin_range(u, v, maxr, u0, v0, bsize, nbu, nbv)
    for bu in range(lo_u, hi_u + 1):
        for bv in range(lo_v, hi_v + 1):
            b = bu * nbv + bv
            for s in range(bstart[b], bstart[b + 1]):
                i = border[s]
                du = pos[i, a1] - u
                dv = pos[i, a2] - v
                d2 = du * du + dv * dv
                r = radius[i]
                if d2 < r * r:
                    if n >= MAX_SPHERES:
                        overflow[0] = 1
                        return
                    w = math.sqrt(r * r - d2)
                    starts[n] = pos[i, axis] - w
                    ends[n] = pos[i, axis] + w
                    n += 1
    n = sort_merge(starts, ends, n)
    for s in range(n):
        accumulate(out, axis, iu, iv, starts[s], ends[s], t0, h, nbins)


# ------------------------------------------------------------------ SES point test
@dev
def buried(px, py, pz, i, pos, rad, nb_start, nb_index):
    for s in range(nb_start[i], nb_start[i + 1]):
        k = nb_index[s]
        dx = px - pos[k, 0]
        dy = py - pos[k, 1]
        dz = pz - pos[k, 2]
        rk = rad[k]
        if dx * dx + dy * dy + dz * dz < rk * rk * (1.0 - _BURY_TOL):
            return True
    return False


@dev
def remember(hit, px, py, pz):
    hit[0] = px
    hit[1] = py
    hit[2] = pz
    hit[3] = 1.0


@dev
def remember_arc(hit, geom, c, theta):
    ct = math.cos(theta)
    st = math.sin(theta)
    rho = geom[c, 12]
    remember(
        hit,
        geom[c, 0] + rho * (ct * geom[c, 6] + st * geom[c, 9]),
        geom[c, 1] + rho * (ct * geom[c, 7] + st * geom[c, 10]),
        geom[c, 2] + rho * (ct * geom[c, 8] + st * geom[c, 11]),
    )


@dev
def probe_reaches(
    x, y, z, cand, lo, hi, pos, rad, probe, nb_start, nb_index,
    circ_start, geom, arc_start, arcs, hit,
):  # fmt: skip
    p2 = probe * probe
    if hit[3] == 1.0:
        dx = x - hit[0]
        dy = y - hit[1]
        dz = z - hit[2]
        if dx * dx + dy * dy + dz * dz < p2:
            return True
    for s in range(lo, hi):
        i = cand[s]
        dx = x - pos[i, 0]
        dy = y - pos[i, 1]
        dz = z - pos[i, 2]
        r2 = dx * dx + dy * dy + dz * dz
        reach = rad[i] + probe
        if r2 >= reach * reach:
            continue
        r = math.sqrt(r2)
        if 0.0 < r < rad[i] and rad[i] - r < probe:
            f = rad[i] / r
            px = pos[i, 0] + f * dx
            py = pos[i, 1] + f * dy
            pz = pos[i, 2] + f * dz
            if not buried(px, py, pz, i, pos, rad, nb_start, nb_index):
                remember(hit, px, py, pz)
                return True
        for c in range(circ_start[i], circ_start[i + 1]):
            wx = x - geom[c, 0]
            wy = y - geom[c, 1]
            wz = z - geom[c, 2]
            rho = geom[c, 12]
            zz = wx * geom[c, 3] + wy * geom[c, 4] + wz * geom[c, 5]
            xu = wx * geom[c, 6] + wy * geom[c, 7] + wz * geom[c, 8]
            xv = wx * geom[c, 9] + wy * geom[c, 10] + wz * geom[c, 11]
            rx = math.sqrt(xu * xu + xv * xv)
            if (rx - rho) * (rx - rho) + zz * zz >= p2:
                continue
            if rx <= 1e-12 * rho:
                remember_arc(hit, geom, c, arcs[arc_start[c], 0])
                return True
            theta = math.atan2(xv, xu) % TWO_PI
            base = rx * rx + rho * rho + zz * zz
            for a in range(arc_start[c], arc_start[c + 1]):
                if arcs[a, 0] <= theta <= arcs[a, 1]:
                    remember_arc(hit, geom, c, theta)
                    return True
                for e in range(2):
                    d2 = base - 2.0 * rho * rx * math.cos(theta - arcs[a, e])
                    if d2 < p2:
                        remember_arc(hit, geom, c, arcs[a, e])
                        return True
    return False


@dev
def solute_at(
    t, axis, u, v, cand, ckey, ncand, pos, rad, probe, reach, nb_start, nb_index,
    circ_start, geom, arc_start, arcs, hit,
):  # fmt: skip
    x, y, z = point(axis, t, u, v)
    lo, hi = 0, ncand
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


@dev
def zone(
    out, axis, iu, iv, zs, ze, t0, h, nbins, u, v, cand, ckey, ncand, pos, acc, probe,
    reach, step, nbisect, nb_start, nb_index, circ_start, geom, arc_start, arcs, hit,
):  # fmt: skip
    length = ze - zs
    if length <= 0.0:
        return
    nseg = max(1, int(math.ceil(length / step)))
    eps = min(1e-9, 0.25 * length)
    prev_t = zs + eps
    prev = solute_at(
        prev_t, axis, u, v, cand, ckey, ncand, pos, acc, probe, reach, nb_start,
        nb_index, circ_start, geom, arc_start, arcs, hit,
    )  # fmt: skip
    run_start = zs if prev else -1.0
    for q in range(1, nseg + 1):
        t = ze - eps if q == nseg else zs + length * q / nseg
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
                accumulate(out, axis, iu, iv, run_start, cross, t0, h, nbins)
            else:
                run_start = cross
            prev = cur
        prev_t = t
    if prev:
        accumulate(out, axis, iu, iv, run_start, ze, t0, h, nbins)


@cuda.jit
def _k_ses_lines(
    out, axis, us, vs, t0, h, nbins, pos, vdw, acc, probe, step, nbisect, maxacc, maxreach,
    u0, v0, bsize, nbu, nbv, bstart, border,
    e_u0, e_v0, e_bsize, e_nbu, e_nbv, e_bstart, e_border,
    nb_start, nb_index, circ_start, geom, arc_start, arcs, overflow,
):  # fmt: skip
    line = cuda.grid(1)
    nu = us.shape[0]
    nv = vs.shape[0]
    if line >= nu * nv:
        return
    iu = line // nv
    iv = line % nv
    u = us[iu]
    v = vs[iv]
    a1 = 1 if axis == 0 else 0
    a2 = 1 if axis == 2 else 2
    vs_ = cuda.local.array(MAX_SPHERES, dtype=np.float64)
    ve_ = cuda.local.array(MAX_SPHERES, dtype=np.float64)
    ss_ = cuda.local.array(MAX_SPHERES, dtype=np.float64)
    se_ = cuda.local.array(MAX_SPHERES, dtype=np.float64)
    cand = cuda.local.array(MAX_CANDIDATES, dtype=np.int64)
    ckey = cuda.local.array(MAX_CANDIDATES, dtype=np.float64)
    hit = cuda.local.array(4, dtype=np.float64)
    nvdw = 0
    nsas = 0
    lo_u, hi_u, lo_v, hi_v = bin_range(u, v, maxacc, u0, v0, bsize, nbu, nbv)
    for bu in range(lo_u, hi_u + 1):
        for bv in range(lo_v, hi_v + 1):
            b = bu * nbv + bv
            for s in range(bstart[b], bstart[b + 1]):
                i = border[s]
                du = pos[i, a1] - u
                dv = pos[i, a2] - v
                d2 = du * du + dv * dv
                if d2 >= acc[i] * acc[i]:
                    continue
                if nsas >= MAX_SPHERES:
                    overflow[0] = 1
                    return
                if d2 < vdw[i] * vdw[i]:
                    w = math.sqrt(vdw[i] * vdw[i] - d2)
                    vs_[nvdw] = pos[i, axis] - w
                    ve_[nvdw] = pos[i, axis] + w
                    nvdw += 1
                w = math.sqrt(acc[i] * acc[i] - d2)
                ss_[nsas] = pos[i, axis] - w
                se_[nsas] = pos[i, axis] + w
                nsas += 1
    if nsas == 0:
        return
    nvdw = sort_merge(vs_, ve_, nvdw)
    nsas = sort_merge(ss_, se_, nsas)
    for s in range(nvdw):
        accumulate(out, axis, iu, iv, vs_[s], ve_[s], t0, h, nbins)
    # exposed candidates within acc + probe, insertion-sorted along the line
    ncand = 0
    lo_u, hi_u, lo_v, hi_v = bin_range(u, v, maxreach, e_u0, e_v0, e_bsize, e_nbu, e_nbv)
    for bu in range(lo_u, hi_u + 1):
        for bv in range(lo_v, hi_v + 1):
            b = bu * e_nbv + bv
            for s in range(e_bstart[b], e_bstart[b + 1]):
                i = e_border[s]
                du = pos[i, a1] - u
                dv = pos[i, a2] - v
                rr = acc[i] + probe
                if du * du + dv * dv >= rr * rr:
                    continue
                if ncand >= MAX_CANDIDATES:
                    overflow[0] = 1
                    return
                key = pos[i, axis]
                j = ncand - 1
                while j >= 0 and ckey[j] > key:
                    ckey[j + 1] = ckey[j]
                    cand[j + 1] = cand[j]
                    j -= 1
                ckey[j + 1] = key
                cand[j + 1] = i
                ncand += 1
    for k in range(4):
        hit[k] = 0.0
    tmax = t0 + nbins * h
    p = 0
    for s in range(nsas):
        zs = max(ss_[s], t0)
        ze = min(se_[s], tmax)
        while zs < ze:
            while p < nvdw and ve_[p] <= zs:
                p += 1
            if p < nvdw and vs_[p] <= zs:
                zs = ve_[p]
                continue
            zend = ze
            if p < nvdw and vs_[p] < ze:
                zend = vs_[p]
            zone(
                out, axis, iu, iv, zs, zend, t0, h, nbins, u, v, cand, ckey, ncand, pos,
                acc, probe, maxreach, step, nbisect, nb_start, nb_index, circ_start, geom,
                arc_start, arcs, hit,
            )  # fmt: skip
            zs = zend


# ------------------------------------------------------------------ point potentials
@cuda.jit
def _k_coulomb_sum(out, origin, spacing, pos, q, scale, periodic, box):
    node = cuda.grid(1)
    nx, ny, nz = out.shape
    if node >= nx * ny * nz:
        return
    i = node // (ny * nz)
    j = (node // nz) % ny
    k = node % nz
    x = origin[0] + i * spacing[0]
    y = origin[1] + j * spacing[1]
    z = origin[2] + k * spacing[2]
    acc = 0.0
    for a in range(pos.shape[0]):
        dx = x - pos[a, 0]
        dy = y - pos[a, 1]
        dz = z - pos[a, 2]
        if periodic:
            dx -= box[0] * math.floor(dx / box[0] + 0.5)
            dy -= box[1] * math.floor(dy / box[1] + 0.5)
            dz -= box[2] * math.floor(dz / box[2] + 0.5)
        r2 = dx * dx + dy * dy + dz * dz
        if r2 == 0.0:
            acc += math.inf if q[a] > 0 else -math.inf
        else:
            acc += q[a] / math.sqrt(r2)
    out[i, j, k] = scale * acc


@cuda.jit
def _k_debye_huckel_points(points, pos, q, radii, kappa, coulomb, eps_out, eps_cavity, out):
    p = cuda.grid(1)
    if p >= points.shape[0]:
        return
    acc = 0.0
    for a in range(pos.shape[0]):
        dx = points[p, 0] - pos[a, 0]
        dy = points[p, 1] - pos[a, 1]
        dz = points[p, 2] - pos[a, 2]
        r = math.sqrt(dx * dx + dy * dy + dz * dz)
        screened = math.exp(-kappa * (r - radii[a])) / (eps_out * (1.0 + kappa * radii[a]))
        acc += q[a] * (screened - 1.0 / eps_cavity) / r
    out[p] = coulomb * acc


# ------------------------------------------------------------------ SES features
MAX_NEIGHBOURS = 192
#: Arc-endpoint buffer per circle. A named constant, not an expression at the call: numba-cuda
#: needs a literal size for local arrays (the simulator accepts an expression, the GPU not).
ARC_BUFFER = 2 * MAX_NEIGHBOURS + 2


@dev
def circle(pos, rad, i, j, out):
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


@dev
def free_arcs(pos, rad, i, j, nb_start, nb_index, g, bs, be, arcs, arc0, cap):
    """Free arcs of circle g of (i, j); writes up to cap rows at arcs[arc0:]; returns count.

    Returns -1 when the neighbour list is longer than the local buffers hold.
    """
    rho = g[12]
    nbur = 0
    if 2 * (nb_start[i + 1] - nb_start[i]) + 2 > bs.shape[0]:
        return -1
    for s in range(nb_start[i], nb_start[i + 1]):
        k = nb_index[s]
        if k == j:
            continue
        w0 = pos[k, 0] - g[0]
        w1 = pos[k, 1] - g[1]
        w2 = pos[k, 2] - g[2]
        aa = w0 * g[6] + w1 * g[7] + w2 * g[8]
        bb = w0 * g[9] + w1 * g[10] + w2 * g[11]
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
                arcs[arc0 + nfree, 0] = cur
                arcs[arc0 + nfree, 1] = bs[s]
            nfree += 1
        if be[s] > cur:
            cur = be[s]
    if cur < TWO_PI:
        if nfree < cap:
            arcs[arc0 + nfree, 0] = cur
            arcs[arc0 + nfree, 1] = TWO_PI
        nfree += 1
    return nfree


@cuda.jit
def _k_count_arcs(pos, rad, nb_start, nb_index, nfree, nested, intersecting, overflow):
    """Per atom i: free-arc count of every circle (i, j), nesting and intersection counts."""
    i = cuda.grid(1)
    if i >= pos.shape[0]:
        return
    g = cuda.local.array(13, dtype=np.float64)
    bs = cuda.local.array(ARC_BUFFER, dtype=np.float64)
    be = cuda.local.array(ARC_BUFFER, dtype=np.float64)
    dummy = cuda.local.array((1, 2), dtype=np.float64)
    ninter = 0
    nest = False
    for s in range(nb_start[i], nb_start[i + 1]):
        j = nb_index[s]
        dx = pos[j, 0] - pos[i, 0]
        dy = pos[j, 1] - pos[i, 1]
        dz = pos[j, 2] - pos[i, 2]
        d = math.sqrt(dx * dx + dy * dy + dz * dz)
        if d + rad[i] < rad[j] or (d + rad[i] <= rad[j] and j < i):
            nest = True
        if not circle(pos, rad, i, j, g):
            continue
        ninter += 1
        k = free_arcs(pos, rad, i, j, nb_start, nb_index, g, bs, be, dummy, 0, 0)
        if k < 0:
            overflow[0] = 1
            k = 0
        nfree[s] = k
    nested[i] = nest
    intersecting[i] = ninter


@cuda.jit
def _k_fill_circles(pos, rad, circ_i, circ_j, nb_start, nb_index, arc_start, geom, arcs):
    """Per circle c: its geometry row and its free arcs."""
    c = cuda.grid(1)
    if c >= circ_i.shape[0]:
        return
    g = cuda.local.array(13, dtype=np.float64)
    bs = cuda.local.array(ARC_BUFFER, dtype=np.float64)
    be = cuda.local.array(ARC_BUFFER, dtype=np.float64)
    i = circ_i[c]
    j = circ_j[c]
    circle(pos, rad, i, j, g)
    for a in range(13):
        geom[c, a] = g[a]
    cap = arc_start[c + 1] - arc_start[c]
    free_arcs(pos, rad, i, j, nb_start, nb_index, g, bs, be, arcs, arc_start[c], cap)


def _kernels():
    """The kernels by name (compiled lazily by numba-cuda on first launch)."""
    return {
        "sphere_union_lines": _k_sphere_union_lines,
        "ses_lines": _k_ses_lines,
        "coulomb_sum": _k_coulomb_sum,
        "debye_huckel_points": _k_debye_huckel_points,
        "count_arcs": _k_count_arcs,
        "fill_circles": _k_fill_circles,
    }


def _blocks(n):
    return (n + THREADS - 1) // THREADS


class LineCapacityError(RuntimeError):
    """A line met more spheres than the kernel's local arrays hold (use the CPU kernels)."""


def _device(a):
    from numba import cuda

    return cuda.to_device(np.ascontiguousarray(a))


def sphere_union_lines(out_shape, axis, us, vs, t0, h, nbins, pos, radius, bins):
    """Device twin of :func:`.cpu_maps.sphere_union_lines`; returns a device array."""
    k = _kernels()["sphere_union_lines"]
    out = cuda.to_device(np.zeros(out_shape))
    overflow = cuda.to_device(np.zeros(1, dtype=np.int64))
    u0, v0, bsize, nbu, nbv, bstart, border = bins
    maxr = float(radius.max()) if radius.size else 0.0
    n = len(us) * len(vs)
    k[_blocks(n), THREADS](
        out, axis, _device(us), _device(vs), float(t0), float(h), int(nbins), _device(pos),
        _device(radius), maxr, float(u0), float(v0), float(bsize), int(nbu), int(nbv),
        _device(bstart), _device(border), overflow,
    )  # fmt: skip
    if overflow.copy_to_host()[0]:
        raise LineCapacityError("a grid line meets more spheres than the CUDA kernel holds")
    return out


def ses_lines(out_shape, axis, us, vs, t0, h, nbins, pos, vdw, acc, probe, step, nbisect,
              bins, ebins, features, nb):  # fmt: skip
    """Device twin of :func:`.cpu_maps.ses_lines`; returns a device array."""
    k = _kernels()["ses_lines"]
    exposed, circ_start, _cj, geom, arc_start, arcs = features
    nb_start, nb_index = nb
    out = cuda.to_device(np.zeros(out_shape))
    overflow = cuda.to_device(np.zeros(1, dtype=np.int64))
    n = len(us) * len(vs)
    maxacc = float(acc.max())
    geom = geom if len(geom) else np.zeros((1, 13))
    arcs = arcs if len(arcs) else np.zeros((1, 2))
    k[_blocks(n), THREADS](
        out, axis, _device(us), _device(vs), float(t0), float(h), int(nbins), _device(pos),
        _device(vdw), _device(acc), float(probe), float(step), int(nbisect), maxacc,
        maxacc + float(probe),
        float(bins[0]), float(bins[1]), float(bins[2]), int(bins[3]), int(bins[4]),
        _device(bins[5]), _device(bins[6]),
        float(ebins[0]), float(ebins[1]), float(ebins[2]), int(ebins[3]), int(ebins[4]),
        _device(ebins[5]), _device(ebins[6]),
        _device(nb_start), _device(nb_index), _device(circ_start), _device(geom),
        _device(arc_start), _device(arcs), overflow,
    )  # fmt: skip
    if overflow.copy_to_host()[0]:
        raise LineCapacityError("a grid line meets more spheres than the CUDA kernel holds")
    return out


def coulomb_sum(shape, origin, spacing, pos, q, scale, periodic, box):
    """Device twin of :func:`.cpu_maps.coulomb_sum`; returns a device array."""
    k = _kernels()["coulomb_sum"]
    out = cuda.device_array(shape, dtype=np.float64)
    n = int(np.prod(shape))
    k[_blocks(n), THREADS](
        out, _device(np.asarray(origin, float)), _device(np.asarray(spacing, float)),
        _device(pos), _device(q), float(scale), bool(periodic), _device(np.asarray(box, float)),
    )  # fmt: skip
    return out


def debye_huckel_points(points, pos, q, radii, kappa, coulomb, eps_out, eps_cavity):
    """Device twin of :func:`.cpu_maps.debye_huckel_points`; returns a host array."""
    k = _kernels()["debye_huckel_points"]
    out = cuda.device_array(len(points), dtype=np.float64)
    k[_blocks(len(points)), THREADS](
        _device(points), _device(pos), _device(q), _device(radii), float(kappa),
        float(coulomb), float(eps_out), float(eps_cavity), out,
    )  # fmt: skip
    return out.copy_to_host()


def ses_features(pos, rad, nb_start, nb_index):
    """Device twin of :func:`.cpu_maps.ses_features` (same outputs, as host arrays).

    Two launches (one thread per atom to count free arcs, one per circle to fill them) and
    NumPy prefix sums in between. Raises :class:`LineCapacityError` when an atom has more
    than ``MAX_NEIGHBOURS`` neighbours (the caller falls back to the CPU).
    """
    k = _kernels()
    n = pos.shape[0]
    npair = nb_index.shape[0]
    d_pos, d_rad = _device(pos), _device(rad)
    d_start, d_index = _device(nb_start), _device(nb_index)
    nfree = cuda.to_device(np.zeros(max(npair, 1), dtype=np.int64))
    nested = cuda.to_device(np.zeros(n, dtype=np.bool_))
    inter = cuda.to_device(np.zeros(n, dtype=np.int64))
    overflow = cuda.to_device(np.zeros(1, dtype=np.int64))
    k["count_arcs"][_blocks(n), THREADS](
        d_pos, d_rad, d_start, d_index, nfree, nested, inter, overflow
    )
    if overflow.copy_to_host()[0]:
        raise LineCapacityError("an atom has more neighbours than the CUDA kernel holds")
    nfree = nfree.copy_to_host()[:npair]
    nested = nested.copy_to_host()
    inter = inter.copy_to_host()
    owner = np.repeat(np.arange(n), np.diff(nb_start))
    has_free = np.zeros(n, dtype=bool)
    np.logical_or.at(has_free, owner, nfree > 0)
    exposed = ~nested & ((inter == 0) | has_free)
    keep = (nb_index > owner) & (nfree > 0)
    circ_i = owner[keep]
    circ_j = nb_index[keep]
    circ_start = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(circ_i, minlength=n), out=circ_start[1:])
    arc_start = np.zeros(len(circ_i) + 1, dtype=np.int64)
    np.cumsum(nfree[keep], out=arc_start[1:])
    nc = len(circ_i)
    geom = np.zeros((nc, 13))
    arcs = np.zeros((int(arc_start[-1]), 2))
    if nc:
        d_geom = cuda.to_device(geom)
        d_arcs = cuda.to_device(arcs)
        k["fill_circles"][_blocks(nc), THREADS](
            d_pos, d_rad, _device(circ_i), _device(circ_j), d_start, d_index,
            _device(arc_start), d_geom, d_arcs,
        )  # fmt: skip
        geom = d_geom.copy_to_host()
        arcs = d_arcs.copy_to_host()
    return exposed, circ_start, circ_j, geom, arc_start, arcs
