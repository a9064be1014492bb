"""Numba CPU kernels that turn atoms into grid maps (raw arrays in, NumPy arrays out).

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

Every formula is a body of :mod:`pbsolver.backends.bodies.maps` (the CUDA kernels of
:mod:`pbsolver.backends.cuda.maps` compile the same ones); these kernels only loop over the
lines, atoms, circles or nodes with ``prange`` and size the scratch buffers so that no line
overflows. :data:`KERNELS` is what :meth:`CPUBackend.map_kernels` returns.
"""

from __future__ import annotations

import functools
import math
import sys

import numpy as np
from numba import njit, prange

from pbsolver.backends.bodies import maps as B
from pbsolver.backends.bodies.lines import compile_lines, record_range_body
from pbsolver.backends.cpu import coulomb_fast as CF
from pbsolver.backends.cpu.fast_math import exp64

#: The "numpy" error model: a charge on a node divides by zero into ±inf, as on the GPU.
_JIT = {"cache": True, "nogil": True, "boundscheck": False, "error_model": "numpy"}
#: Flags that let the direct sums vectorise (reassociation) but keep IEEE infinities.
_FM = {"reassoc", "contract", "nsz"}

_jit = njit(**_JIT)
_LINES = compile_lines(_jit)
_S = B.make_ses(_jit, *_LINES)
#: The same bodies with a recorder in place of the bins (the forces' interval ends; the line
#: slope bodies of :mod:`pbsolver.backends.cpu.line_ends` compile on these too).
RECORDING_BODIES = B.make_ses(_jit, *compile_lines(_jit, record_range_body),
                              range_body=record_range_body)  # fmt: skip
_union_line_record = RECORDING_BODIES["union_line"]
_ses_line_record = RECORDING_BODIES["ses_line"]
#: The record array's stand-in where the kernels fill bins.
_NO_RECORD = np.zeros((1, 1, 1, 2))
_EVERY_LINE = np.zeros(0, dtype=np.bool_)
_P = B.make_point_sums(_jit, njit(**_JIT, fastmath=_FM, inline="always"), exp=exp64)
_line, _union_line, _ses_line = _S["line"], _S["union_line"], _S["ses_line"]
_bin_count = _S["bin_count"]
_count_arcs, _fill_circle = _S["count_arcs"], _S["fill_circle"]
_coulomb_pair, _dh_term = _P["coulomb_pair"], _P["dh_term"]
plane_bins = B.plane_bins


# ---------------------------------------------------------------------- union of spheres
@njit(**_JIT, parallel=True)
def union_lines_kernel(
    out, rec, record, axis, us, vs, t0, h, nbins, pos, radius, u0, v0, bsize, nbu, nbv, bstart,
    border,
):  # fmt: skip
    """The sphere-union line body over every line of a plane.

    The maps add each line's coverage to the bins of ``out``; with ``record`` the forces
    (:mod:`pbsolver.backends.cpu.line_ends`) have each line's merged intervals recorded in
    ``rec`` instead (:func:`pbsolver.backends.bodies.lines.record_range_body`; the unused array
    may be a dummy). One module-level kernel for both, not a factory's closure: numba's disk
    cache keys a closure by its cell contents, which change from process to process, so a
    closure would be compiled again in every process.
    """
    nu = us.shape[0]
    nv = vs.shape[0]
    maxr = 0.0
    for i in range(radius.shape[0]):
        maxr = max(maxr, radius[i])
    for line in prange(nu * nv):
        iu, iv, u, v = _line(line, us, vs)
        cap = _bin_count(u, v, maxr, u0, v0, bsize, nbu, nbv, bstart)
        if cap == 0:
            continue
        starts = np.empty(cap)
        ends = np.empty(cap)
        if record:
            _union_line_record(rec, axis, iu, iv, u, v, t0, h, nbins, pos, radius, maxr,
                               u0, v0, bsize, nbu, nbv, bstart, border, starts, ends)  # fmt: skip
        else:
            _union_line(out, axis, iu, iv, u, v, t0, h, nbins, pos, radius, maxr,
                        u0, v0, bsize, nbu, nbv, bstart, border, starts, ends)  # fmt: skip


_accumulate = _LINES[1]


@njit(**_JIT, parallel=True)
def bin_intervals(out, rec, axis, t0, h, nbins):
    """Add each line's recorded intervals (``rec`` as the line kernels record them) to its bins.

    In the recorded order, with the maps' own accumulation body: the same additions to each
    bin as the line kernel's direct run makes, so the same values bit for bit.
    """
    nu, nv = rec.shape[0], rec.shape[1]
    for line in prange(nu * nv):
        iu = line // nv
        iv = line - iu * nv
        for n in range(1, int(rec[iu, iv, 0, 0]) + 1):
            _accumulate(out, axis, 0, iu, iv, rec[iu, iv, n, 0], rec[iu, iv, n, 1], t0, h, nbins)


@njit(**_JIT, parallel=True)
def bin_subsampled_intervals(out, rec, s, t0, h, nbins):
    """Add the recorded intervals of an s-times-finer plane of lines along z to its cells.

    Line (i·s + a, j·s + b) of ``rec`` is line (a, b) of the cell column (i, j); each column
    adds its lines set by set (a, then b) as :func:`sphere_union_sets` adds the s² sets, then
    each line's intervals in order: the same additions to each bin, bit for bit.
    """
    nu, nv = out.shape[0], out.shape[1]
    for column in prange(nu * nv):
        i = column // nv
        j = column - i * nv
        for a in range(s):
            for b in range(s):
                iu, iv = i * s + a, j * s + b
                for n in range(1, int(rec[iu, iv, 0, 0]) + 1):
                    _accumulate(out, 2, 0, i, j, rec[iu, iv, n, 0], rec[iu, iv, n, 1], t0, h,
                                nbins)  # fmt: skip


def sphere_union_lines(out_shape, axis, us, vs, t0, h, nbins, pos, radius, bins):
    """Covered fraction of each bin of each line by the union of spheres (radius > 0).

    Returns an array of ``out_shape`` indexed like the grid: line (iu, iv) runs along
    ``axis`` at the coordinates ``us[iu]``, ``vs[iv]`` of the other two axes (in increasing
    axis order); bin k spans [t0 + k h, t0 + (k + 1) h). ``bins`` are the atoms' 2D bins
    across the axis (``u0, v0, size, nbu, nbv, start, order``).
    """
    return sphere_union_sets(out_shape, axis, [(us, vs, bins)], t0, h, nbins, pos, radius)


def sphere_union_sets(out_shape, axis, line_sets, t0, h, nbins, pos, radius):
    """The sum of :func:`sphere_union_lines` over several sets of lines, in one array.

    ``line_sets`` is a sequence of ``(us, vs, bins)``, each set's lines and atom bins; the
    kernel adds every set's coverage into the same bins, in the sets' order (the ion-accessible
    map's subsampled lines across each cell).
    """
    out = np.zeros(out_shape)
    for us, vs, bins in line_sets:
        union_lines_kernel(out, _NO_RECORD, False, axis, us, vs, float(t0), float(h), int(nbins),
                           pos, radius, *bins)  # fmt: skip
    return out


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


@njit(**_JIT, parallel=True)
def _count_all_arcs(pos, rad, nb_start, nb_index, nfree, nested, intersecting):
    for i in prange(pos.shape[0]):
        deg = nb_start[i + 1] - nb_start[i]
        g = np.empty(13)
        bs = np.empty(2 * deg + 2)
        be = np.empty(2 * deg + 2)
        dummy = np.empty((1, B.ARC_COLUMNS))
        nest, ninter, _ = _count_arcs(pos, rad, i, nb_start, nb_index, nfree, g, bs, be, dummy)
        nested[i] = nest
        intersecting[i] = ninter


@njit(**_JIT, parallel=True)
def _fill_circles(pos, rad, circ_i, circ_j, nb_start, nb_index, arc_start, geom, arcs):
    for c in prange(circ_i.shape[0]):
        i = circ_i[c]
        deg = nb_start[i + 1] - nb_start[i]
        g = np.empty(13)
        bs = np.empty(2 * deg + 2)
        be = np.empty(2 * deg + 2)
        _fill_circle(pos, rad, c, i, circ_j[c], nb_start, nb_index, arc_start, geom, arcs, g,
                     bs, be)  # fmt: skip


def ses_features(pos, rad, nb_start, nb_index):
    """Exposed accessible spheres and the free arcs of their intersection circles.

    ``rad`` are the accessible radii R + r_p. Returns ``exposed`` (bool per atom),
    ``circ_start`` (CSR per atom over circles (i, j > i) with free arcs), ``circ_j``,
    ``circ_geom`` (m, n, u, v, rho: 13 floats per circle), ``arc_start`` and ``arcs``.
    """
    n = pos.shape[0]
    nfree = np.zeros(nb_index.shape[0], dtype=np.int64)
    nested = np.zeros(n, dtype=np.bool_)
    inter = np.zeros(n, dtype=np.int64)
    _count_all_arcs(pos, rad, nb_start, nb_index, nfree, nested, inter)
    exposed, circ_start, circ_i, circ_j, arc_start = B.compact_circles(
        nb_start, nb_index, nfree, nested, inter
    )
    geom = np.zeros((len(circ_i), 13))
    arcs = np.zeros((int(arc_start[-1]), B.ARC_COLUMNS))
    if len(circ_i):
        _fill_circles(pos, rad, circ_i, circ_j, nb_start, nb_index, arc_start, geom, arcs)
    return exposed, circ_start, circ_j, geom, arc_start, arcs


@njit(**_JIT, parallel=True)
def ses_lines_kernel(
    out, rec, record, axis, us, vs, t0, h, nbins, pos, vdw, acc, probe, step, nbisect, maxacc,
    maxreach, u0, v0, bsize, nbu, nbv, bstart, border,
    e_u0, e_v0, e_bsize, e_nbu, e_nbv, e_bstart, e_border,
    nb_start, nb_index, circ_start, geom, arc_start, arcs, only,
):  # fmt: skip
    """The SES line body over every line of a plane.

    It fills the bins of ``out``, or with ``record`` each line's solute intervals in ``rec``
    (as :func:`union_lines_kernel`). A non-empty ``only`` (bool, a line each, ``iu·nv + iv``)
    leaves out the lines where it is False.
    """
    nu = us.shape[0]
    nv = vs.shape[0]
    for line in prange(nu * nv):
        if only.shape[0] != 0 and not only[line]:
            continue
        iu, iv, u, v = _line(line, us, vs)
        cap = _bin_count(u, v, maxacc, u0, v0, bsize, nbu, nbv, bstart)
        if cap == 0:
            continue
        ecap = max(1, _bin_count(u, v, maxreach, e_u0, e_v0, e_bsize, e_nbu, e_nbv,
                                 e_bstart))  # fmt: skip
        args = (
            axis, 0, iu, iv, u, v, t0, h, nbins, 0, nbins, pos, vdw, acc, probe, step,
            nbisect, maxacc, maxreach, u0, v0, bsize, nbu, nbv, bstart, border,
            e_u0, e_v0, e_bsize, e_nbu, e_nbv, e_bstart, e_border,
            nb_start, nb_index, circ_start, geom, arc_start, arcs,
            np.empty(cap), np.empty(cap), np.empty(cap), np.empty(cap),
            np.empty(ecap, dtype=np.int64), np.empty(ecap), np.zeros(4),
        )  # fmt: skip
        if record:
            _ses_line_record(rec, *args)
        else:
            _ses_line(out, *args)


def ses_lines(out_shape, axis, us, vs, t0, h, nbins, pos, vdw, acc, probe, step, nbisect,
              bins, ebins, features, nb, only=None):  # fmt: skip
    """Solvent-excluded fraction of each bin of each line (see :func:`sphere_union_lines`).

    ``vdw`` are atomic radii, ``acc`` accessible radii (vdw + probe); ``step`` is the sampling
    interval (Å) of the reentrant zone and ``nbisect`` the bisection steps at each change.
    ``bins`` hold all atoms for reach ``acc``; ``ebins`` only the exposed atoms, for reach
    ``acc + probe`` (the point test's candidates). ``features`` are :func:`ses_features`'s
    and ``nb`` the neighbour lists. ``only`` (bool, shaped ``(len(us), len(vs))``), when given,
    names the lines to compute: the others are left 0.
    """
    out = np.zeros(out_shape)
    ses_lines_kernel(out, _NO_RECORD, False,
                     *ses_kernel_args(axis, us, vs, t0, h, nbins, pos, vdw, acc, probe, step,
                                      nbisect, bins, ebins, features, nb, only))  # fmt: skip
    return out


def ses_kernel_args(axis, us, vs, t0, h, nbins, pos, vdw, acc, probe, step, nbisect, bins,
                    ebins, features, nb, only=None):  # fmt: skip
    """:func:`ses_lines_kernel`'s arguments after the first three, from :func:`ses_lines`'."""
    _exposed, circ_start, _cj, geom, arc_start, arcs = features
    maxacc = float(acc.max())
    return (
        axis, us, vs, float(t0), float(h), int(nbins), pos, vdw, acc, float(probe), float(step),
        int(nbisect), maxacc, maxacc + float(probe), *bins, *ebins, *nb, circ_start,
        geom if len(geom) else np.zeros((1, 13)), arc_start,
        arcs if len(arcs) else np.zeros((1, B.ARC_COLUMNS)), every_line(only),
    )  # fmt: skip


def every_line(only=None):
    """``only`` as the SES line kernel's flat mask; no mask (an empty one) for None."""
    if only is None:
        return _EVERY_LINE
    return np.ascontiguousarray(only, dtype=np.bool_).ravel()


# ---------------------------------------------------------------------- faces
_face_eps = njit(**_JIT, inline="always")(B.face_eps_body)
_snap = njit(**_JIT, inline="always")(B.snap_fraction_body)


@njit(**_JIT, parallel=True)
def snap_fractions(frac):
    """Every edge fraction of ``frac`` (C-ordered) snapped in place by the frames' body.

    :func:`pbsolver.backends.bodies.maps.snap_fraction_body`: the values of
    :func:`pbsolver.molecule.maps.snap_fractions`' array code, in one pass.
    """
    f = frac.reshape(-1)
    for n in prange(f.shape[0]):
        f[n] = _snap(f[n])


@njit(**_JIT, parallel=True)
def faces_from_fractions(frac, eps_in, eps_out, out):
    """``out`` = the harmonic face ε of every edge fraction of ``frac`` (C-ordered, same shape).

    The face body of the frame engine (:func:`pbsolver.backends.bodies.maps.face_eps_body`),
    without fast-math: bit for bit the NumPy rule of
    :func:`pbsolver.molecule.maps.faces_from_fractions`, in one pass over the maps.
    """
    f = frac.reshape(-1)
    o = out.reshape(-1)
    for n in prange(f.shape[0]):
        o[n] = _face_eps(f[n], eps_in, eps_out)


# ---------------------------------------------------------------------- point potentials
@njit(**_JIT, parallel=True, fastmath=_FM)
def _coulomb_sum(out, origin, spacing, pos, q, scale, periodic, box, tol2):
    # one atom at a time along z (contiguous, vectorised): the per-node loop over atoms of
    # the GPU kernel does not vectorise here
    nx, ny, nz = out.shape
    for i in prange(nx):
        x = origin[0] + i * spacing[0]
        zs = np.empty(nz)
        acc = np.empty(nz)
        for k in range(nz):
            zs[k] = origin[2] + k * spacing[2]
        for j in range(ny):
            y = origin[1] + j * spacing[1]
            acc[:] = 0.0
            for a in range(q.shape[0]):
                dx = x - pos[a, 0]
                dy = y - pos[a, 1]
                if periodic:
                    dx -= box[0] * math.floor(dx / box[0] + 0.5)
                    dy -= box[1] * math.floor(dy / box[1] + 0.5)
                    for k in range(nz):
                        dz = zs[k] - pos[a, 2]
                        dz -= box[2] * math.floor(dz / box[2] + 0.5)
                        acc[k] += _coulomb_pair(dx, dy, dz, q[a], tol2)
                else:
                    for k in range(nz):
                        acc[k] += _coulomb_pair(dx, dy, zs[k] - pos[a, 2], q[a], tol2)
            for k in range(nz):
                out[i, j, k] = scale * acc[k]


def coulomb_sum(shape, origin, spacing, pos, q, scale, box=None, *, method="auto"):
    """scale · Σ_a q_a / |r_ijk − r_a| at every node (nearest image with a periodic ``box``).

    A node on a charged atom, or closer to it than :data:`~pbsolver.backends.bodies.maps.ON_NODE`
    of the smallest spacing, gets ±inf; charges of opposite sign there give NaN.

    ``method`` is "direct" (every pair term), "fast" (the multilevel sum of
    :mod:`pbsolver.backends.cpu.coulomb_fast`: within 1e-6 of the largest value on the nodes
    farther than a spacing from every atom, the direct sum on the others; no periodic box) or
    "auto" (the fast sum where it pays, :func:`~pbsolver.backends.cpu.coulomb_fast.use_fast`).
    """
    periodic = box is not None
    if CF.use_fast(method, shape, spacing, len(q), periodic):
        return CF.coulomb_multilevel(shape, origin, spacing, pos, q, scale)
    out = np.empty(tuple(shape))
    _coulomb_sum(
        out, np.asarray(origin, float), np.asarray(spacing, float),
        np.ascontiguousarray(pos, dtype=float), np.ascontiguousarray(q, dtype=float),
        float(scale), periodic, np.asarray(box if periodic else (1.0, 1.0, 1.0), float),
        B.on_node_tol2(spacing),
    )  # fmt: skip
    return out


def coulomb_points(points, pos, q, scale, tol2):
    """scale · Σ_a q_a / |p − r_a| at each of ``points`` (m, 3), Å: φ_c where a map is not needed.

    The pair body of :func:`coulomb_sum`: a point within √``tol2`` of a charged atom gets ±inf
    (NaN for opposite charges), as a node does there with
    :func:`~pbsolver.backends.bodies.maps.on_node_tol2` of the grid's spacing.
    """
    q = np.ascontiguousarray(q, dtype=float)
    out = np.empty(len(points))
    # unscreened: the radii, κ and permittivities are not read (q stands in for the radii)
    _point_sums(out, np.ascontiguousarray(points, dtype=float),
                np.ascontiguousarray(pos, dtype=float), q, q, False, float(tol2), 0.0,
                float(scale), 1.0, 1.0)  # fmt: skip
    return out


#: Points a work item of the point sums (φ_c, Debye–Hückel): the atoms run outside, these
#: points inside, in contiguous coordinates, so that the terms (the screening's exponential
#: included) vectorise.
POINT_BLOCK = 256


@njit(**_JIT, parallel=True, fastmath=_FM)
def _point_sums(out, points, pos, q, radii, screened, tol2, kappa, scale, eps_out, eps_cavity):
    """``scale`` · Σ over the atoms at each point: 1/r terms, or with ``screened`` the "mdh" ones.

    Each point adds its atoms' terms in atom order: the Coulomb pairs as the body's
    ``coulomb_node`` does (charged atoms only, carried into the total every 32 atoms), the
    Debye–Hückel terms one by one.
    """
    n = points.shape[0]
    inv_c = 1.0 / eps_cavity
    for b in prange((n + POINT_BLOCK - 1) // POINT_BLOCK):
        lo = b * POINT_BLOCK
        m = min(n, lo + POINT_BLOCK) - lo
        xs, ys, zs = (
            points[lo : lo + m, 0].copy(),
            points[lo : lo + m, 1].copy(),
            points[lo : lo + m, 2].copy(),
        )
        acc = np.zeros(m)
        part = np.zeros(m)
        for a in range(q.shape[0]):
            ax, ay, az, qa = pos[a, 0], pos[a, 1], pos[a, 2], q[a]
            if screened:
                ra = radii[a]
                for s in range(m):
                    acc[s] += _dh_term(xs[s] - ax, ys[s] - ay, zs[s] - az, qa, ra, kappa,
                                       eps_out, inv_c, 1.0)  # fmt: skip
                continue
            if qa != 0.0:
                for s in range(m):
                    part[s] += _coulomb_pair(xs[s] - ax, ys[s] - ay, zs[s] - az, qa, tol2)
            if (a & 31) == 31:
                for s in range(m):
                    acc[s] += part[s]
                    part[s] = 0.0
        for s in range(m):
            out[lo + s] = scale * (acc[s] + part[s])


def debye_huckel_points(points, pos, q, radii, kappa, coulomb, eps_out, eps_cavity):
    """φ_rf at points from the multiple-Debye–Hückel sum (one value per point).

    φ_rf(r) = Σ_i k q_i [exp(−κ(r_i' − a_i)) / (ε_out (1 + κ a_i) r_i') − 1/(ε_c r_i')];
    ``eps_out = inf`` leaves the unscreened Coulomb sum (negated), ``eps_cavity = inf`` the
    screened one alone.
    """
    out = np.empty(len(points))
    _point_sums(
        out, np.ascontiguousarray(points, dtype=float), np.ascontiguousarray(pos, dtype=float),
        np.ascontiguousarray(q, dtype=float), np.ascontiguousarray(radii, dtype=float), True,
        0.0, float(kappa), float(coulomb), float(eps_out), float(eps_cavity),
    )  # fmt: skip
    return out


#: The CPU map kernels (:meth:`pbsolver.backends.cpu.CPUBackend.map_kernels`), φ_c by "auto".
KERNELS = B.MapKernels(sys.modules[__name__])
_BY_METHOD = {"auto": KERNELS}


def kernels(coulomb="auto"):
    """The CPU map kernels whose ``coulomb_sum`` uses ``coulomb`` ("auto", "direct", "fast")."""
    CF.check_method(coulomb)
    if coulomb not in _BY_METHOD:
        k = B.MapKernels(sys.modules[__name__])
        k.coulomb_sum = functools.partial(coulomb_sum, method=coulomb)
        _BY_METHOD[coulomb] = k
    return _BY_METHOD[coulomb]
