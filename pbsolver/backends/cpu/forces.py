"""Numba CPU loops of the force sums (bodies in :mod:`pbsolver.backends.bodies.forces`).

The radial sums (:func:`coulomb_sums`, :func:`debye_huckel_sums`) form each (node, atom) term
in float32 and add them up in float64 (partial sums of at most :data:`TILE_NODES` terms in
float32): a quarter of the float64 loop's time, within about 1e-5 of the float64 sum relative to
each atom's largest component (the tests hold them to a float64 reference), far below the
forces' 1e-3 against finite differences (the CUDA twins form them alike). Every atom sums its
nodes in the same order whatever the thread count. B frames of a stack (the stacked engine's)
go frame by frame (:func:`frame_radial_sums`, :func:`frame_grid_coulomb_sums`). Also
μ = ∂G/∂φ_c at every node and the weighted nodes' coordinates (:func:`grid_nodes`), which those
sums read.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from pbsolver.backends.bodies import forces as B
from pbsolver.backends.cpu.fast_math import exp32
from pbsolver.backends.cpu.kernels import B as OPERATOR

_JIT = {"cache": True, "nogil": True, "boundscheck": False, "error_model": "numpy"}
#: Reassociation lets the inner sums vectorise (the φ_c map's kernel does the same); "afn" lets
#: 1/√r² be a vector reciprocal square root with a Newton step in float32.
_FM = {"reassoc", "contract", "nsz", "arcp", "afn"}
_inverse_cube, _dh_slope, _image = (njit(**_JIT, fastmath=_FM, inline="always")(body)
                                    for body in B.radial_bodies(np.float32, exp32))  # fmt: skip
_term = njit(**_JIT, fastmath=_FM, inline="always")(B.make_radial_term(_inverse_cube, _dh_slope,
                                                                        _image))  # fmt: skip
_sensitivity = njit(**_JIT, inline="always")(B.coulomb_sensitivity_body)
_kappa = njit(**_JIT, inline="always")(B.kappa_sensitivity_body)
_fraction = njit(**_JIT, inline="always")(B.fraction_sensitivity_body)
_node = njit(**_JIT, inline="always")(B.node_body)

#: Nodes of a tile of the radial sums: four float32 rows of it (32 kB) stay in L1 while every
#: centre of a work item reads them.
TILE_NODES = 2048
#: Centres of one work item of the radial sums (one tile of nodes serves them all).
CENTRES_PER_ITEM = 8


@njit(**_JIT, parallel=True)
def _fraction_sensitivities(lam, phic, phi, fx, fy, fz, cx, cy, cz, slope, ox, oy, oz):
    nx, ny, nz = lam.shape
    for i in prange(nx):
        for j in range(ny):
            for k in range(nz):
                ox[i, j, k] = _fraction(lam, phic, phi, fx, 0, i, j, k, cx, slope)
                oy[i, j, k] = _fraction(lam, phic, phi, fy, 1, i, j, k, cy, slope)
                oz[i, j, k] = _fraction(lam, phic, phi, fz, 2, i, j, k, cz, slope)


def fraction_sensitivities(lam, phi_coulomb, phi, faces, spacing, slope):
    """∂G/∂f of every face (:func:`pbsolver.forces.dielectric.fraction_sensitivities`).

    ``lam`` and ``phi`` float64; ``phi_coulomb`` and ``faces`` any float dtype (formed in
    float64); ``slope`` = 1/ε_out − 1/ε_in.
    """
    out = tuple(np.empty(lam.shape) for _ in range(3))
    c = [1.0 / (h * h) for h in spacing]
    _fraction_sensitivities(*(np.ascontiguousarray(a) for a in (lam, phi_coulomb, phi, *faces)),
                            *c, float(slope), *out)  # fmt: skip
    return out


@njit(**_JIT, parallel=True)
def _fraction_sensitivity_at(lam, phic, phi, face, axis, c, slope, nodes, out):
    for e in prange(nodes.shape[0]):
        i, j, k = _node(nodes[e], lam.shape)
        out[e] = _fraction(lam, phic, phi, face, axis, i, j, k, c, slope)


def fraction_sensitivity_at(lam, phi_coulomb, phi, face, axis, spacing, slope, nodes):
    """∂G/∂f of the faces along ``axis`` at the nodes ``nodes`` (C-order flat indices) only.

    :func:`fraction_sensitivities`' values there (the same body), without the whole grids:
    the surface forces read them at line ends and sample points alone.
    """
    nodes = np.ascontiguousarray(nodes, dtype=np.int64)
    out = np.empty(nodes.shape[0])
    _fraction_sensitivity_at(*(np.ascontiguousarray(a) for a in (lam, phi_coulomb, phi, face)),
                             int(axis), 1.0 / (spacing[axis] * spacing[axis]), float(slope),
                             nodes, out)  # fmt: skip
    return out


@njit(**_JIT, parallel=True)
def _kappa_sensitivity(lam, phic, phi, out):
    nx, ny, nz = lam.shape
    for i in prange(nx):
        for j in range(ny):
            for k in range(nz):
                out[i, j, k] = _kappa(lam, phic, phi, i, j, k)


def kappa_sensitivity(lam, phi_coulomb, phi):
    """∂G/∂κ̄² at every node (:func:`pbsolver.forces.ionic.kappa_sensitivity`).

    ``lam`` and ``phi`` float64, ``phi_coulomb`` any float dtype.
    """
    out = np.empty(lam.shape)
    _kappa_sensitivity(*(np.ascontiguousarray(a) for a in (lam, phi_coulomb, phi)), out)
    return out


@njit(**_JIT, parallel=True)
def _coulomb_sensitivity(lam, fx, fy, fz, kappa2, salt, eps_c, cx, cy, cz, out):
    nx, ny, nz = lam.shape
    for i in prange(nx):
        im, ip = OPERATOR.neighbours(i, nx)
        for j in range(ny):
            jm, jp = OPERATOR.neighbours(j, ny)
            # a row's two ends wrap; between them k ± 1 (no branch: the loop vectorises)
            for k in (0, nz - 1):
                km, kp = OPERATOR.neighbours(k, nz)
                out[i, j, k] = _sensitivity(lam, fx, fy, fz, kappa2, salt, i, j, k, im, ip, jm,
                                            jp, km, kp, eps_c, cx, cy, cz)  # fmt: skip
            for k in range(1, nz - 1):
                out[i, j, k] = _sensitivity(lam, fx, fy, fz, kappa2, salt, i, j, k, im, ip, jm,
                                            jp, k - 1, k + 1, eps_c, cx, cy, cz)  # fmt: skip


def coulomb_sensitivity(lam, faces, kappa2, eps_cavity, spacing):
    """μ = ∂G/∂φ_c at every node (:func:`pbsolver.forces.coulomb.coulomb_sensitivity`).

    ``faces``: the three face-permittivity arrays (any float dtype); ``kappa2`` None without
    salt; ``lam`` float64.
    """
    out = np.empty(lam.shape)
    salt = kappa2 is not None
    c = [1.0 / (h * h) for h in spacing]
    _coulomb_sensitivity(np.ascontiguousarray(lam, dtype=np.float64),
                         *(np.ascontiguousarray(f) for f in faces),
                         np.ascontiguousarray(kappa2) if salt else lam, salt, float(eps_cavity),
                         *c, out)  # fmt: skip
    return out


@njit(**_JIT, parallel=True)
def _count_planes(field, counts):
    for i in prange(field.shape[0]):
        n = 0
        for j in range(field.shape[1]):
            for k in range(field.shape[2]):
                if field[i, j, k] != 0.0:
                    n += 1
        counts[i] = n


@njit(**_JIT, parallel=True)
def _grid_nodes(field, starts, origin, spacing, points, weights):
    # plane i writes its nodes from starts[i] on, in C order: the serial loop's order
    for i in prange(field.shape[0]):
        m = starts[i]
        x = origin[0] + i * spacing[0]
        for j in range(field.shape[1]):
            y = origin[1] + j * spacing[1]
            for k in range(field.shape[2]):
                w = field[i, j, k]
                if w != 0.0:
                    points[0, m] = x
                    points[1, m] = y
                    points[2, m] = origin[2] + k * spacing[2]
                    weights[m] = w
                    m += 1


def grid_nodes(field, origin, spacing):
    """Coordinates (3, m), one row per axis, and values (m,) of the nodes where ``field`` ≠ 0."""
    field = np.ascontiguousarray(field, dtype=np.float64)
    counts = np.empty(field.shape[0], dtype=np.int64)
    _count_planes(field, counts)
    starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    m = int(starts[-1])
    points, weights = np.empty((3, m)), np.empty(m)
    _grid_nodes(field, starts, np.asarray(origin, dtype=np.float64),
                np.asarray(spacing, dtype=np.float64), points, weights)  # fmt: skip
    return points, weights


@njit(**_JIT, parallel=True, fastmath=_FM)
def _radial_sums(px, py, pz, weights, centres, box, periodic, mdh, radii, kappa, eps_out, inv_c,
                 out):  # fmt: skip
    """``out[i]`` += Σ_p w_p g(|p − c_i|)(p − c_i); g the Coulomb or (``mdh``) the DH slope.

    Float32 in (coordinates relative to a point near the centres, the scalars too), float64
    out. A work item is :data:`CENTRES_PER_ITEM` centres; the nodes go by in tiles of
    :data:`TILE_NODES`, each tile's float32 partial sum added to the float64 total, so every
    centre sums in the same order whatever the thread count. ``periodic`` and ``mdh`` are
    loop-invariant: the branches cost nothing in the inner loop.
    """
    n = centres.shape[0]
    m = px.shape[0]
    for item in prange((n + CENTRES_PER_ITEM - 1) // CENTRES_PER_ITEM):
        first = item * CENTRES_PER_ITEM
        last = min(n, first + CENTRES_PER_ITEM)
        for lo in range(0, m, TILE_NODES):
            hi = min(m, lo + TILE_NODES)
            # slices from 0: the loop's indices are then known non-negative, so its loads are
            # contiguous vector loads (indices from ``lo`` would compile to gathers)
            tx, ty, tz, tw = px[lo:hi], py[lo:hi], pz[lo:hi], weights[lo:hi]
            for i in range(first, last):
                cx, cy, cz, radius = centres[i, 0], centres[i, 1], centres[i, 2], radii[i]
                gx = np.float32(0.0)
                gy = np.float32(0.0)
                gz = np.float32(0.0)
                for p in range(hi - lo):
                    fx, fy, fz = _term(tx[p], ty[p], tz[p], tw[p], cx, cy, cz, box, periodic, mdh,
                                       radius, kappa, eps_out, inv_c)  # fmt: skip
                    gx += fx
                    gy += fy
                    gz += fz
                out[i, 0] += gx
                out[i, 1] += gy
                out[i, 2] += gz


@njit(**_JIT, parallel=True, fastmath=_FM)
def _grid_coulomb_sums(weights, xs, py, pz, centres, box, periodic, out):
    """:func:`_radial_sums` of the Coulomb term over every node of a grid, from its axes.

    ``weights`` (nx, ny·nz) float32; ``xs`` the x of each plane, ``py``, ``pz`` the y and z of
    each node of a plane (float32, relative to a point near the centres). A plane's x is one
    number, so each tile's Σ_p w_p/r³ · (x − c_x) is (x − c_x) Σ_p w_p/r³. A node of weight 0
    adds nothing (as if left out of a node list: not 0·∞ where it sits on a centre). Tiles of
    :data:`TILE_NODES` nodes of a plane, float32 partial sums, float64 totals, the same order
    whatever the thread count.
    """
    n = centres.shape[0]
    nx, m = weights.shape
    zero = np.float32(0.0)
    for item in prange((n + CENTRES_PER_ITEM - 1) // CENTRES_PER_ITEM):
        first = item * CENTRES_PER_ITEM
        last = min(n, first + CENTRES_PER_ITEM)
        for plane in range(nx):
            row = weights[plane]
            for lo in range(0, m, TILE_NODES):
                hi = min(m, lo + TILE_NODES)
                ty, tz, tw = py[lo:hi], pz[lo:hi], row[lo:hi]  # slices from 0: vector loads
                for i in range(first, last):
                    cy, cz = centres[i, 1], centres[i, 2]
                    dx = xs[plane] - centres[i, 0]
                    if periodic:
                        dx = _image(dx, box[0])
                    dx2 = dx * dx
                    g = zero
                    gy = zero
                    gz = zero
                    for p in range(hi - lo):
                        dy = ty[p] - cy
                        dz = tz[p] - cz
                        if periodic:
                            dy = _image(dy, box[1])
                            dz = _image(dz, box[2])
                        r2 = dx2 + dy * dy + dz * dz
                        f = tw[p] * _inverse_cube(r2) if tw[p] != zero else zero
                        g += f
                        gy += f * dy
                        gz += f * dz
                    out[i, 0] += g * dx
                    out[i, 1] += gy
                    out[i, 2] += gz


def coulomb_grid_sums(field, origin, spacing, centres, box=None):
    """:func:`coulomb_sums` over every node of a grid, weighted by ``field`` (nx, ny, nz).

    Nodes where ``field`` is zero add nothing, as :func:`grid_nodes` would leave them out;
    but no node list is made: the coordinates come from the grid's axes.
    """
    centres = np.asarray(centres, dtype=np.float64).reshape(-1, 3)
    out = np.zeros((len(centres), 3))
    field = np.asarray(field)
    if len(centres) == 0 or field.size == 0:
        return out
    nx, ny, nz = field.shape
    ref = 0.5 * (centres.min(axis=0) + centres.max(axis=0))  # as _sums, for float32
    axes = [np.asarray(origin[a], dtype=np.float64) + np.arange(n) * float(spacing[a])
            for a, n in enumerate(field.shape)]  # fmt: skip
    xs, ys, zs = (np.asarray(ax - r, dtype=np.float32) for ax, r in zip(axes, ref, strict=True))
    py = np.ascontiguousarray(np.repeat(ys, nz))
    pz = np.ascontiguousarray(np.tile(zs, ny))
    weights = np.ascontiguousarray(field, dtype=np.float32).reshape(nx, ny * nz)
    periodic = box is not None
    box32 = np.asarray(box if periodic else (1.0,) * 3, dtype=np.float32)
    _grid_coulomb_sums(weights, xs, py, pz, np.asarray(centres - ref, dtype=np.float32), box32,
                       periodic, out)  # fmt: skip
    return out


@njit(**_JIT, parallel=True)
def _relative32(points, ref, out):
    """``out`` = ``points`` − ``ref`` (one row per axis), rounded to float32."""
    for p in prange(points.shape[1]):
        for a in range(3):
            out[a, p] = np.float32(points[a, p] - ref[a])


def _sums(points, weights, centres, box=None, radii=None, kappa=0.0, eps_out=1.0, inv_c=1.0):
    centres = np.asarray(centres, dtype=np.float64).reshape(-1, 3)
    out = np.zeros((len(centres), 3))
    points = np.asarray(points, dtype=np.float64)
    if len(centres) == 0 or points.shape[1] == 0:
        return out
    periodic = box is not None
    mdh = radii is not None
    # float32 keeps ~7 digits of a coordinate: relative to the centres' middle the differences
    # p − c are good to about 1e-6 Å on grids of tens of Å
    ref = 0.5 * (centres.min(axis=0) + centres.max(axis=0))
    rows = np.empty((3, points.shape[1]), dtype=np.float32)
    _relative32(points, ref, rows)

    def f32(a):
        return np.ascontiguousarray(a, dtype=np.float32)

    _radial_sums(*rows, f32(weights), f32(centres - ref), f32(box if periodic else (1.0,) * 3),
                 periodic, mdh, f32(radii if mdh else np.zeros(len(centres))),
                 np.float32(kappa), np.float32(eps_out), np.float32(inv_c), out)  # fmt: skip
    return out


def coulomb_sums(points, weights, centres, box=None):
    """Σ_p w_p (p − c_i)/|p − c_i|³ for every centre (nearest image with ``box``): (n, 3).

    ``points`` is (3, m), one row per axis (as :func:`grid_nodes` gives them).
    """
    return _sums(points, weights, centres, box)


def frame_radial_sums(points, weights, centres, node_start, centre_start, box=None, radii=None,
                      kappa=0.0, eps_out=1.0, inv_c=1.0):  # fmt: skip
    """The radial sums of B frames: frame f's centres over frame f's nodes only, (n, 3).

    Frame f owns the nodes ``node_start[f] … node_start[f + 1]`` of ``points`` (3, m) and the
    centres ``centre_start[f] …`` of ``centres`` (n, 3); g is the Coulomb slope, or with
    ``radii`` the "mdh" slope (the arguments of :func:`debye_huckel_sums` after its centres).
    """
    centres = np.asarray(centres, dtype=np.float64).reshape(-1, 3)
    out = np.zeros((len(centres), 3))
    for f in range(len(node_start) - 1):
        nodes = slice(int(node_start[f]), int(node_start[f + 1]))
        rows = slice(int(centre_start[f]), int(centre_start[f + 1]))
        out[rows] = _sums(points[:, nodes], weights[nodes], centres[rows], box,
                          None if radii is None else radii[rows], kappa, eps_out,
                          inv_c)  # fmt: skip
    return out


def frame_grid_coulomb_sums(field, origin, spacing, stride, nx, centres, centre_start, box=None):
    """:func:`coulomb_grid_sums` of B frames of a stack: frame f's centres over its own block.

    ``field`` is (B·stride, ny, nz), frame f's grid its planes f·stride … f·stride + nx − 1
    (of ``origin``, ``spacing``); frame f owns the centres ``centre_start[f] …``. Returns
    (n, 3).
    """
    centres = np.asarray(centres, dtype=np.float64).reshape(-1, 3)
    out = np.zeros((len(centres), 3))
    for f in range(len(centre_start) - 1):
        rows = slice(int(centre_start[f]), int(centre_start[f + 1]))
        block = field[f * stride : f * stride + nx]
        out[rows] = coulomb_grid_sums(block, origin, spacing, centres[rows], box)
    return out


def debye_huckel_sums(points, weights, centres, radii, kappa, eps_out, eps_cavity):
    """Σ_p w_p (−T_i'(r)/r)(p − c_i) of the "mdh" terms for every centre: (n, 3).

    ``points`` is (3, m), one row per axis.
    """
    return _sums(points, weights, centres, None, radii, kappa, eps_out, 1.0 / float(eps_cavity))
