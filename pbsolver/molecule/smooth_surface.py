"""The smooth vdW surface ``"svdw"``: edge fractions that are smooth functions of the atoms.

The exact edge fractions of the vdW surface (:func:`pbsolver.molecule.maps.face_fractions`) are
continuous in the atom positions but not smooth: a fraction has a kink whenever a sphere's chord
end crosses a node, whenever two chords on a line start to overlap, and an unbounded slope
(∝ 1/√(r² − d²)) where a line grazes a sphere. With the harmonic face rule the kinks are large
(the slope of ε(f) differs about (ε_out/ε_in)²-fold between an almost empty and an almost full
edge), so the energy's gradient jumps by up to tens of percent within 10⁻³ Å: an MD force that
is the exact gradient of such an energy is discontinuous, and finite differences at
10⁻³ … 10⁻² Å do not see the gradient at all.

"svdw" replaces the sharp union by a smooth one, as APBS' spline surfaces (``srfm spl2/spl4``)
do for forces: the solvent indicator is P(x) = Π_i S_i(|x − c_i|) with S_i(r) the quintic
smoothstep from 0 at r = R_i − w to 1 at r = R_i + w (C², S_i(R_i) = ½, so a flat interface
keeps its position), and the fraction of an edge inside the solute is the Gauss–Legendre
average of 1 − P over the edge (:func:`points_per_edge`: at least one point per w). Faces then
follow the same harmonic rule (:func:`pbsolver.molecule.maps.faces_from_fractions`). The
energy is C² in the positions (up to the trilinear sampling of φ_rf at the charges).

What it changes: the product fills the creases where spheres meet (there two factors are below
1), so the solute is a little larger than the sharp union; with w = 0.1 Å the energy of a
peptide differs from the "vdw" energy by about 0.1 %, that of a dense cluster of overlapping
spheres by about 0.5 %; Born ion and Kirkwood sphere are as accurate as with exact fractions
(tests/test_forces.py checks all three).

Each formula is here once, for the map (:func:`union_fractions`) and its derivative
(:func:`pbsolver.forces.smooth.smooth_gradient`): :func:`sample_pairs` enumerates the (sample
point, sphere) pairs within reach and their S, S' and offsets. Array code: NumPy or CuPy.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from pbsolver.molecule.kept import RECORDS, content_key, grid_key, recording

#: Half-width w of the smooth sphere boundary, Å (S goes from 0 at R − w to 1 at R + w).
SMOOTH_WIDTH = 0.1
#: Least Gauss–Legendre points per grid edge.
QUADRATURE = 3


def points_per_edge(spacing, width=SMOOTH_WIDTH):
    """Gauss–Legendre points on an edge of length ``spacing``: at least one per ``width``.

    Fewer points than that make the fractions, hence the energy, ripple as an atom moves across
    a cell (measured on a Born ion at h = 0.5 Å, w = 0.1 Å: 0.5 % peak to peak with 3 points,
    0.04 % with 6, as the exact fractions).
    """
    return max(QUADRATURE, math.ceil(float(spacing) / width - 1e-9))


def smooth_step(r, radius, width, xp=np):
    """S(r) and dS/dr of the quintic smoothstep from 0 at radius − width to 1 at radius + width."""
    u = xp.clip((r - (radius - width)) / (2.0 * width), 0.0, 1.0)
    s = u * u * u * (10.0 + u * (-15.0 + 6.0 * u))
    ds = 30.0 * u * u * (1.0 - u) * (1.0 - u) / (2.0 * width)
    return s, ds


def edge_points(count=QUADRATURE):
    """Gauss–Legendre abscissae in (0, 1) along an edge and their weights (summing to 1)."""
    x, w = np.polynomial.legendre.leggauss(int(count))
    return 0.5 * (1.0 + x), 0.5 * w


@dataclass
class SamplePairs:
    """(sample point, sphere) pairs of one edge orientation within reach of the sphere.

    Attributes
    ----------
    point : array of int
        Sample point index, ``q · N + node`` (q: the quadrature point, node: the flat index of
        the edge's first node, N nodes).
    sphere : array of int
        Sphere index.
    s, ds : arrays
        S_i and dS_i/dr at the point.
    offset : array (m, 3)
        x − c_i, Å.
    r : array
        |x − c_i|, Å.
    """

    point: object
    sphere: object
    s: object
    ds: object
    offset: object
    r: object


def _ranges(lo, hi, start, step, count, xp):
    """Index range [first, first + n) of the coordinates start + k·step in [lo, hi]."""
    first = xp.clip(xp.ceil((lo - start) / step).astype(xp.int64), 0, count)
    last = xp.clip(xp.floor((hi - start) / step).astype(xp.int64), -1, count - 1)
    return first, xp.maximum(last - first + 1, 0)


def sample_pairs(positions, radii, grid, axis, width=SMOOTH_WIDTH, xp=np):
    """Every (sample point, sphere) pair with the point within R + w of the sphere's centre.

    The sample points of axis ``axis`` are node + t_q h_a e_a for every node and every
    Gauss–Legendre abscissa t_q of :func:`edge_points` (:func:`points_per_edge` of them; edges
    of the last layer leave the grid: the wrap-around edges of a periodic box). Spheres of
    radius 0 are left out (S ≡ 1).
    """
    quadrature = points_per_edge(grid.spacing[axis], width)
    pos = xp.asarray(positions, dtype=xp.float64)
    rad = xp.asarray(radii, dtype=xp.float64)
    keep = xp.flatnonzero(rad > 0)
    pos, rad = pos[keep], rad[keep]
    shape = grid.shape
    origin = xp.asarray(grid.origin, dtype=xp.float64)
    h = xp.asarray(grid.spacing, dtype=xp.float64)
    ts, _ = edge_points(quadrature)
    reach = rad + width
    firsts, counts = [], []
    for a in range(3):
        lo = pos[:, a] - reach
        hi = pos[:, a] + reach
        if a == axis:  # the edge's points lie up to one spacing beyond its first node
            lo = lo - h[a]
        f, n = _ranges(lo, hi, origin[a], h[a], shape[a], xp)
        firsts.append(f)
        counts.append(n)
    per = counts[0] * counts[1] * counts[2]
    offsets = xp.concatenate([xp.zeros(1, dtype=xp.int64), xp.cumsum(per)])
    total = int(offsets[-1])
    empty = xp.zeros(0, dtype=xp.int64)
    if total == 0:
        z = xp.zeros(0)
        return SamplePairs(empty, empty, z, z, xp.zeros((0, 3)), z)
    pair = xp.arange(total, dtype=xp.int64)
    sph = xp.searchsorted(offsets, pair, side="right") - 1
    local = pair - offsets[sph]
    k = local % counts[2][sph]
    rest = local // counts[2][sph]
    j = rest % counts[1][sph]
    i = rest // counts[1][sph]
    ijk = [firsts[0][sph] + i, firsts[1][sph] + j, firsts[2][sph] + k]
    node = (ijk[0] * shape[1] + ijk[1]) * shape[2] + ijk[2]
    base = xp.stack([origin[a] + ijk[a] * h[a] - pos[sph, a] for a in range(3)], axis=1)
    n_nodes = int(np.prod(shape))
    points, spheres, offs = [], [], []
    for q, t in enumerate(ts):
        d = base.copy()
        d[:, axis] += t * h[axis]
        r2 = (d * d).sum(axis=1)
        near = r2 < reach[sph] * reach[sph]
        points.append(q * n_nodes + node[near])
        spheres.append(sph[near])
        offs.append(d[near])
    point = xp.concatenate(points)
    sphere = xp.concatenate(spheres)
    offset = xp.concatenate(offs)
    r = xp.sqrt((offset * offset).sum(axis=1))
    s, ds = smooth_step(r, rad[sphere], width, xp)
    return SamplePairs(point, keep[sphere], s, ds, offset, r)


def pairs_key(positions, radii, grid, axis, width):
    """The key under which :func:`union_fractions` keeps an axis' sample pairs when recording."""
    return ("svdw", int(axis), float(width), grid_key(grid, None), *content_key(positions, radii))


def recorded_pairs(positions, radii, grid, axis, width):
    """``(pairs, product, slot)`` of an axis as the recording map kept them, or None.

    The map's :func:`sample_pairs` and :func:`point_products` (within
    :func:`~pbsolver.molecule.kept.recording_lines`, NumPy), for the same spheres (periodic
    images included), grid, axis and width.
    """
    return RECORDS.get(pairs_key(positions, radii, grid, axis, width))


def point_products(pairs, xp=np):
    """Per distinct sample point: its index, P = Π S over its pairs, and each pair's point slot.

    Returns ``(points, product, slot)``: ``product[slot[p]]`` is P at pair p's point. P is
    formed as exp(Σ log S) over the pairs with S > 0, and is 0 where any S is 0.
    """
    points, slot = xp.unique(pairs.point, return_inverse=True)
    slot = slot.reshape(-1)
    positive = pairs.s > 0
    logs = xp.where(positive, xp.log(xp.where(positive, pairs.s, 1.0)), 0.0)
    sumlog = xp.bincount(slot, weights=logs, minlength=points.shape[0])
    zeros = xp.bincount(slot, weights=(~positive).astype(xp.float64), minlength=points.shape[0])
    product = xp.where(zeros > 0, 0.0, xp.exp(sumlog))
    return points, product, slot


def union_fractions(positions, radii, grid, width=SMOOTH_WIDTH, xp=np):
    """Edge fractions ``(fx, fy, fz)`` of the smooth vdW surface (see the module), float64.

    Parameters
    ----------
    positions : array (m, 3)
        Sphere centres, Å (periodic images included by the caller).
    radii : array (m,)
        Atomic radii, Å.
    grid : Grid
    width : float
        Half-width of the smooth boundary, Å.
    xp : module
        numpy or cupy.
    """
    n_nodes = int(np.prod(grid.shape))
    record = xp is np and recording()
    out = []
    for axis in range(3):
        _, weights = edge_points(points_per_edge(grid.spacing[axis], width))
        pairs = sample_pairs(positions, radii, grid, axis, width, xp)
        points, product, slot = point_products(pairs, xp)
        if record:  # the forces' smooth_gradient takes them (kept.recording_lines)
            kept = (pairs, product, slot)
            fields = [getattr(pairs, f.name) for f in dataclasses.fields(pairs)]
            nbytes = sum(a.nbytes for a in (*fields, product, slot))
            RECORDS.put(pairs_key(positions, radii, grid, axis, width), kept, nbytes)
        q = points // n_nodes
        inside = xp.asarray(weights)[q] * (1.0 - product)
        f = xp.bincount(points % n_nodes, weights=inside, minlength=n_nodes)
        out.append(f.reshape(grid.shape))
    return tuple(out)


__all__ = [
    "QUADRATURE",
    "SMOOTH_WIDTH",
    "SamplePairs",
    "edge_points",
    "pairs_key",
    "points_per_edge",
    "point_products",
    "recorded_pairs",
    "sample_pairs",
    "union_fractions",
    "smooth_step",
]
