"""Fast φ_c on the CPU: the far field interpolated down a grid hierarchy, the near field exact.

φ_c(r) = k Σ_a q_a / (ε_c |r − r_a|) on a grid of N nodes costs N·M pair terms as a direct
sum (:func:`pbsolver.backends.cpu.maps.coulomb_sum`). Here it costs about M·(a few ten
thousand) terms per level for a handful of levels, plus the direct sum on a small top grid.

The method (a multilevel summation with a sharp, per-atom split)
------------------------------------------------------------------
Grids 0 (the map's grid), 1, …, L: grid l+1 has twice the spacing of grid l along every axis
and ``PAD`` extra nodes a side, so that fine node i lies on coarse coordinate i/2 + PAD: on a
coarse node (even i) or half-way between two (odd i). F_l is the potential (Σ q_a K_a, in
e/Å) on grid l.

* Top: F_L = Σ_a q_a K(r − r_a) at every node of grid L, summed directly.
* Down: F_l = I F_{l+1} + Σ_a q_a (K_a − I K_a) over the nodes within ``reach_l`` of atom a,
  where I is the tensor-product Lagrange interpolation at the midpoints (``ORDER`` points a
  side, separable: an x, a y and a z pass; exact copies at even indices). I F_{l+1} carries
  the far field, which is smooth; the sum puts back each atom's own kernel exactly where its
  1/r is too sharp to interpolate.
* It is exact algebra, not an approximation of the near field: on the corrected nodes the
  interpolated part of atom a is removed again exactly, because every coarse node its
  stencil touches already holds a's exact kernel (the reach of level l+1 is at least the
  reach of level l plus the stencil's half-diagonal). The only error is that of
  interpolating the atoms farther than ``reach_l``.
* Finally the nodes on a charged atom (within the on-node tolerance,
  :data:`pbsolver.backends.bodies.maps.ON_NODE`, doubled) are summed directly over all atoms,
  so that they get the direct sum's ±inf (NaN for opposite charges on one node); inside the
  hierarchy that kernel is finite (:func:`pbsolver.backends.bodies.multilevel.finite_pair_body`).
  Everywhere else the hierarchy's kernel is the exact 1/r, so a node near an atom carries the
  same error as any other: that of interpolating the atoms farther than ``reach_l``.

Error. The interpolation error of one unit charge at distance d ≥ ``reach_l`` = ``REACH``·H
(H the coarse spacing) is estimated by
:func:`pbsolver.backends.bodies.multilevel.pair_error_estimate`: (1 + Λ + Λ²)·Π|t − x_i|·
(H/d)^(p+1)/H, which falls off as d^−(p+2); the tests check that the largest single-charge
error over random positions and directions stays below it, and that φ_c of proteins and
random molecules stays within 1e-6 of the direct sum on every node not on an atom, relative to
max|φ_c| over the nodes farther than a spacing from every atom (it is one to two orders below
that with ``ORDER`` = 10 and ``REACH`` = 8.5), and that a protein's polar solvation energy
moves by less than 1e-6 relative.

Why this method (chosen by measurement, see benchmarks/coulomb_cpu.py):

* An Ewald-type split 1/r = erfc(αr)/r + erf(αr)/r with the smooth part on a coarse grid
  needs, for this accuracy, a Gaussian sampled so finely (αH ≲ 0.25 with 8–12 point
  interpolation, by the interpolation's own error) that the short-range cutoff grows to
  ~16–30 coarse spacings, with an erfc in each of its pair terms: more work than the direct
  sum for a thousand atoms.
* FFT convolution on the fine grid (a particle–mesh method with the exact near field) is
  cheap in pair terms but its three zero-padded float64 FFTs of the fine grid cost more on
  this CPU than the whole multilevel sum, and need several times the grid's memory.
* The sharp split keeps the near field in plain 1/r terms and the far field in separable
  midpoint passes that vectorise; every level costs about the same per atom, and the cost
  model (:func:`plan_levels`) picks the number of levels and the top grid.

Where it is used. Only for grids without a periodic box: the nearest-image sum of a periodic
box is not smooth across the half-box planes, so periodic grids keep the direct sum.
:func:`use_fast` decides for ``method="auto"``: the fast sum where its estimated cost (the
per-node and per-pair costs ``COST_*``, measured on this project's CPU) is clearly below the
direct sum's and the direct sum is not trivially small (``AUTO_MIN_PAIRS``).

Determinism. The x planes of a level are split into blocks of about equal work that run in
parallel; each block takes its atoms in one fixed order (cell by cell), so every node sums
its terms in the same order whatever the number of threads.

Speed. The hot loops index with unsigned integers (so that numba emits no wrap-around test
and LLVM vectorises them) and run over whole rows of flat scratch arrays; the per-atom work
is then bounded by its ~4/3·π·(2·``REACH``)³ square roots and divisions per level, the same
operation the direct sum does once per node and atom.
"""

from __future__ import annotations

import dataclasses
import math

import numba
import numpy as np
from numba import njit, prange

from pbsolver.backends.bodies import maps as B
from pbsolver.backends.bodies import multilevel as ML
from pbsolver.exceptions import InputError

_JIT = {"cache": True, "nogil": True, "boundscheck": False, "error_model": "numpy"}
#: Reassociation lets the sums vectorise; IEEE infinities are kept (no "ninf"/"nnan").
_FM = {"reassoc", "contract", "nsz"}

_pair = njit(**_JIT, fastmath=_FM, inline="always")(ML.finite_pair_body)
_P = B.make_point_sums(njit(**_JIT), njit(**_JIT, fastmath=_FM, inline="always"))
_coulomb_pair, _grid_point = _P["coulomb_pair"], _P["grid_point"]

#: Interpolation points per axis (even; see :data:`pbsolver.backends.bodies.multilevel.ORDERS`).
ORDER = 10
#: Radius of a charge's exact (corrected) region on a level, in coarse spacings of the level
#: above.
REACH = 8.5
#: Padding of each coarser grid (nodes a side): every midpoint stencil of the finer grid fits.
PAD = ORDER // 2
# compile-time constants: the stencil loops unroll and vectorise across the rows
_W = tuple(float(v) for v in ML.midpoint_weights(ORDER))
_OFF = PAD - ORDER // 2 + 1  # first stencil node of odd fine index i: coarse i // 2 + _OFF


# ---------------------------------------------------------------------- kernels
# Every hot loop below indexes with unsigned integers: numba then drops its check for
# negative (wrap-around) indices, which otherwise keeps LLVM from vectorising the loop.
@njit(**_JIT, fastmath=_FM)
def _stencil(src, base, step, dst, dbase, n):
    """dst[dbase + s] = Σ_m w_m · src[base + m·step + s] for s < n: the midpoint stencil."""
    b, st, d = np.uint64(base), np.uint64(step), np.uint64(dbase)
    for s in range(n):
        us = np.uint64(s)
        acc = 0.0
        for m in range(ORDER):
            acc += _W[m] * src[b + np.uint64(m) * st + us]
        dst[d + us] = acc


@njit(**_JIT, fastmath=_FM)
def _copy(src, base, dst, dbase, n, step):
    """dst[dbase + s·step] = src[base + s] for s < n."""
    b, d, st = np.uint64(base), np.uint64(dbase), np.uint64(step)
    for s in range(n):
        us = np.uint64(s)
        dst[d + us * st] = src[b + us]


@njit(**_JIT, inline="always")
def _index_range(a, b, lo, hi):
    """The node indices in ``[ceil(a), floor(b)]`` (grid units) clipped to ``[lo, hi]``."""
    return max(lo, int(math.ceil(a))), min(hi, int(math.floor(b)))


@njit(**_JIT, inline="always")
def _chord_range(r2, d, c, org, sp, lo, hi):
    """``(r² − d², first, last)``: the nodes of an axis within ``√(r² − d²)`` of ``c``, clipped.

    A plane (or line) at distance ``d`` (Å) from the centre of a sphere (or circle) of radius²
    ``r2`` (Å²) cuts it in a disc (or chord) of that half-width; along the axis through ``c``
    (Å; ``org``, ``sp`` the axis' origin and spacing) its nodes, clipped to ``[lo, hi]``.
    Empty (first > last) where ``r2 < d²``.
    """
    rem = r2 - d * d
    if rem < 0.0:
        return rem, 1, 0
    half = math.sqrt(rem)
    first, last = _index_range((c - half - org) / sp, (c + half - org) / sp, lo, hi)
    return rem, first, last


@njit(**_JIT, parallel=True, fastmath=_FM)
def _prolong(coarse, fine):
    """fine = the midpoint interpolation of ``coarse`` (both C-ordered, flat views inside).

    Per fine x plane: an x pass onto the coarse (y, z) plane, a y pass and a z pass, each a
    flat run over whole rows, then the even and odd z interleaved into the plane's rows.
    """
    ncx, ncy, ncz = coarse.shape
    nx, ny, nz = fine.shape
    nyz = ncy * ncz
    src = coarse.reshape(-1)
    out = fine.reshape(-1)
    nyo, nye = ny // 2, (ny + 1) // 2  # odd and even fine y (from 0)
    nzo, nze = nz // 2, (nz + 1) // 2
    for fx in prange(nx):
        px = np.empty(nyz + ncz + 2 * ORDER)  # the flat runs read past their last row
        syo = np.empty(nyo * ncz + 2 * ORDER)
        zoe = np.empty(nye * ncz)
        zoo = np.empty(nyo * ncz)
        if fx & 1:
            _stencil(src, ((fx >> 1) + _OFF) * nyz, nyz, px, 0, nyz)
        else:
            _copy(src, ((fx >> 1) + PAD) * nyz, px, 0, nyz, 1)
        # y pass: odd fine y 2j + 1 from coarse rows j + _OFF …; even 2j is coarse row j + PAD
        if nyo > 0:
            _stencil(px, _OFF * ncz, ncz, syo, 0, nyo * ncz)
        # z pass, odd fine z 2j + 1, for the even and the odd rows
        if nzo > 0:
            _stencil(px, PAD * ncz + _OFF, 1, zoe, 0, nye * ncz)
            if nyo > 0:
                _stencil(syo, _OFF, 1, zoo, 0, nyo * ncz)
        for fy in range(ny):
            row = (fx * ny + fy) * nz
            j = fy >> 1
            if fy & 1:
                _copy(syo, j * ncz + PAD, out, row, nze, 2)
                _copy(zoo, j * ncz, out, row + 1, nzo, 2)
            else:
                _copy(px, (j + PAD) * ncz + PAD, out, row, nze, 2)
                _copy(zoe, j * ncz, out, row + 1, nzo, 2)


@njit(**_JIT, fastmath=_FM)
def _correct_atom(F, origin, spacing, corg, csp, pos, q, a, reach, tol2, p0, p1, kc, ux, syo,
                  zoe, zoo, plane, zs):  # fmt: skip
    """F += q_a (K − I K_a) on the nodes of planes p0…p1 within ``reach`` (Å) of atom a.

    ``F`` is the level's flat (C-ordered) view. K_a is the atom's kernel on the coarse nodes
    (``kc``, flat, x-major) and I the midpoint interpolation. Per fine x plane: an x pass
    over the coarse (y, z) plane, then on the square around the sphere's disc a y pass (odd
    fine y) and a z pass (odd fine z), each one flat run over whole rows, the four parities
    gathered into ``plane`` (fine y, fine z, flat), and F corrected along each row of the
    disc.
    """
    nx, ny, nz = F.shape
    Ff = F.reshape(-1)
    reach2 = reach * reach
    qa = q[a]
    rx, ry, rz = pos[a, 0], pos[a, 1], pos[a, 2]
    fx = (rx - origin[0]) / spacing[0]
    fy = (ry - origin[1]) / spacing[1]
    fz = (rz - origin[2]) / spacing[2]
    lox, hix = _index_range(fx - reach / spacing[0], fx + reach / spacing[0], p0, p1)
    loy, hiy = _index_range(fy - reach / spacing[1], fy + reach / spacing[1], 0, ny - 1)
    loz, hiz = _index_range(fz - reach / spacing[2], fz + reach / spacing[2], 0, nz - 1)
    if lox > hix or loy > hiy or loz > hiz:
        return
    # the atom's kernel on the coarse nodes of every stencil of the box
    c0x, c0y, c0z = (lox >> 1) + _OFF, (loy >> 1) + _OFF, (loz >> 1) + _OFF
    ncx = (hix >> 1) + PAD + ORDER // 2 - c0x + 1
    ncy = (hiy >> 1) + PAD + ORDER // 2 - c0y + 1
    ncz = (hiz >> 1) + PAD + ORDER // 2 - c0z + 1
    nyz = ncy * ncz
    for az in range(ncz):
        zs[az] = corg[2] + (c0z + az) * csp[2] - rz
    for ax in range(ncx):
        dx = corg[0] + (c0x + ax) * csp[0] - rx
        for ay in range(ncy):
            dy = corg[1] + (c0y + ay) * csp[1] - ry
            b = np.uint64((ax * ncy + ay) * ncz)
            for az in range(ncz):
                kc[b + np.uint64(az)] = _pair(dx, dy, zs[az], tol2)
    nbz = hiz - loz + 1
    for k in range(nbz):
        zs[k] = origin[2] + (loz + k) * spacing[2] - rz
    for fxi in range(lox, hix + 1):
        dx = origin[0] + fxi * spacing[0] - rx
        # the square around this plane's disc
        rem_x, ya, yb = _chord_range(reach2, dx, ry, origin[1], spacing[1], loy, hiy)
        _, za, zb = _chord_range(reach2, dx, rz, origin[2], spacing[2], loz, hiz)
        if ya > yb or za > zb:
            continue
        # x pass: this fine plane on the coarse (y, z) nodes
        if fxi & 1:
            _stencil(kc, ((fxi >> 1) + _OFF - c0x) * nyz, nyz, ux, 0, nyz)
        else:
            _copy(kc, ((fxi >> 1) + PAD - c0x) * nyz, ux, 0, nyz, 1)
        ye, yo = ya + (ya & 1), ya + 1 - (ya & 1)  # first even and first odd fine y
        nye, nyo = (yb - ye) // 2 + 1, (yb - yo) // 2 + 1
        ze, zo = za + (za & 1), za + 1 - (za & 1)
        nze, nzo = (zb - ze) // 2 + 1, (zb - zo) // 2 + 1
        cey, coy = (ye >> 1) + PAD - c0y, (yo >> 1) + _OFF - c0y  # coarse row / stencil start
        cez, coz = (ze >> 1) + PAD - c0z, (zo >> 1) + _OFF - c0z
        # y pass (odd fine y), then z pass (odd fine z) of the even and the odd y rows
        if nyo > 0:
            _stencil(ux, coy * ncz, ncz, syo, 0, nyo * ncz)
        if nzo > 0:
            if nye > 0:
                _stencil(ux, cey * ncz + coz, 1, zoe, 0, nye * ncz)
            if nyo > 0:
                _stencil(syo, coz, 1, zoo, 0, nyo * ncz)
        # the interpolated values on the square, by parity: plane[(y − loy)·nbz + z − loz]
        for i in range(nye):
            r = (ye - loy + 2 * i) * nbz
            _copy(ux, (cey + i) * ncz + cez, plane, r + ze - loz, nze, 2)
            if nzo > 0:
                _copy(zoe, i * ncz, plane, r + zo - loz, nzo, 2)
        for i in range(nyo):
            r = (yo - loy + 2 * i) * nbz
            _copy(syo, i * ncz + cez, plane, r + ze - loz, nze, 2)
            if nzo > 0:
                _copy(zoo, i * ncz, plane, r + zo - loz, nzo, 2)
        # the exact kernel minus the interpolated one along each row of the disc
        for fyi in range(ya, yb + 1):
            dy = origin[1] + fyi * spacing[1] - ry
            _, z0, z1 = _chord_range(rem_x, dy, rz, origin[2], spacing[2], za, zb)
            if z0 > z1:
                continue
            fb = np.uint64((fxi * ny + fyi) * nz + z0)
            pb = np.uint64((fyi - loy) * nbz + z0 - loz)
            zb0 = np.uint64(z0 - loz)
            for k in range(z1 - z0 + 1):
                uk = np.uint64(k)
                Ff[fb + uk] += qa * (_pair(dx, dy, zs[zb0 + uk], tol2) - plane[pb + uk])


@njit(**_JIT, parallel=True)
def _correct(F, origin, spacing, corg, csp, pos, q, reach, tol2, planes, start, atoms, rn):
    """:func:`_correct_atom` for every atom, the x planes split in blocks run in parallel.

    Block b owns the planes ``planes[b]`` to ``planes[b + 1]`` and takes the atoms
    ``atoms[start[b]:start[b + 1]]`` (those whose sphere meets them) in that order, one order
    for all blocks, so that every node sums its corrections in one order whatever the number
    of threads. ``rn`` bounds the reach in nodes along each axis (it sizes the scratch).
    """
    fby, fbz = 2 * rn[1] + 1, 2 * rn[2] + 1
    cbx, cby, cbz = rn[0] + ORDER + 2, rn[1] + ORDER + 2, rn[2] + ORDER + 2
    slack = 2 * cbz + ORDER  # the flat stencil runs read past their last row
    for b in prange(planes.shape[0] - 1):
        kc = np.empty(cbx * cby * cbz + slack)
        ux = np.empty(cby * cbz + slack)
        syo = np.empty((rn[1] + 2) * cbz + slack)
        zoe = np.empty((rn[1] + 2) * cbz)
        zoo = np.empty((rn[1] + 2) * cbz)
        plane = np.empty(fby * fbz)
        zs = np.empty(max(cbz, fbz))
        for s in range(start[b], start[b + 1]):
            _correct_atom(F, origin, spacing, corg, csp, pos, q, atoms[s], reach, tol2, planes[b],
                          planes[b + 1] - 1, kc, ux, syo, zoe, zoo, plane, zs)  # fmt: skip


@njit(**_JIT)
def _mark_near(mark, origin, spacing, pos, radius):
    """Mark the nodes within ``radius`` (Å) of any atom."""
    nx, ny, nz = mark.shape
    r2 = radius * radius
    for a in range(pos.shape[0]):
        f0 = (pos[a, 0] - origin[0]) / spacing[0]
        f1 = (pos[a, 1] - origin[1]) / spacing[1]
        f2 = (pos[a, 2] - origin[2]) / spacing[2]
        i0, i1 = _index_range(f0 - radius / spacing[0], f0 + radius / spacing[0], 0, nx - 1)
        j0, j1 = _index_range(f1 - radius / spacing[1], f1 + radius / spacing[1], 0, ny - 1)
        k0, k1 = _index_range(f2 - radius / spacing[2], f2 + radius / spacing[2], 0, nz - 1)
        for i in range(i0, i1 + 1):
            dx = origin[0] + i * spacing[0] - pos[a, 0]
            for j in range(j0, j1 + 1):
                dy = origin[1] + j * spacing[1] - pos[a, 1]
                for k in range(k0, k1 + 1):
                    dz = origin[2] + k * spacing[2] - pos[a, 2]
                    if dx * dx + dy * dy + dz * dz <= r2:
                        mark[i, j, k] = True


@njit(**_JIT, parallel=True, fastmath=_FM)
def _direct_nodes(out, nodes, origin, spacing, px, py, pz, q, scale, tol2, finite):
    """out[node] = scale · Σ_a q_a K(r − r_a) at the listed nodes (flat indices).

    K is 1/r with ±inf on an atom, as the direct sum, or with ``finite`` the hierarchy's
    finite kernel (the top level).
    """
    _, ny, nz = out.shape
    flat = out.reshape(-1)
    for s in prange(nodes.shape[0]):
        n = nodes[s]
        _, _, _, x, y, z = _grid_point(n, ny, nz, origin, spacing)
        acc = 0.0
        if finite:
            for a in range(q.shape[0]):
                acc += q[a] * _pair(x - px[a], y - py[a], z - pz[a], tol2)
        else:
            for a in range(q.shape[0]):
                acc += _coulomb_pair(x - px[a], y - py[a], z - pz[a], q[a], tol2)
        flat[n] = scale * acc


def prolong(coarse, shape):
    """The midpoint interpolation of a coarse level's values onto the finer grid of ``shape``.

    ``coarse`` lies on :func:`pbsolver.backends.bodies.multilevel.coarse_level` of that grid
    (padded by :data:`PAD`); exact for polynomials of degree below :data:`ORDER` along each
    axis.
    """
    fine = np.empty(tuple(shape))
    _prolong(np.ascontiguousarray(coarse, dtype=float), fine)
    return fine


# ---------------------------------------------------------------------- plan and cost
#: Measured costs on this project's CPU, in nanoseconds of one core (see the module docstring
#: and benchmarks/coulomb_cpu.py): a pair term of the direct sum, a node of a correction
#: sphere, an output of a stencil pass over a correction box, a node of a prolongation.
COST_PAIR = 1.15
COST_SPHERE = 3.0
COST_PASS = 1.3
COST_PROLONG = 3.0
#: "auto" keeps the direct sum below this many pair terms (a few milliseconds; there the fast
#: sum's fixed work, the nodes on an atom, can outweigh its gain)...
AUTO_MIN_PAIRS = 2e7
#: ...and where the fast sum is estimated to take more than this fraction of its time. The
#: estimate errs high (BENCHMARKS.md, tenth and thirty-fifth sessions), so 1, and a tie goes to
#: the fast sum: a one-level plan is the direct sum with the hierarchy's finite kernel, which
#: vectorises over the atoms (with a thousand atoms about 2.3× the direct kernel's speed).
AUTO_GAIN = 1.0
#: How φ_c is summed: "auto" picks (:func:`use_fast`), "direct" or "fast" force one.
METHODS = ("auto", "direct", "fast")


@dataclasses.dataclass(frozen=True)
class Level:
    """One grid of the hierarchy (Å): node [i, j, k] at ``origin + (i, j, k)·spacing``.

    ``reach`` (Å) is the radius around each atom inside which the level's nodes get the
    atom's exact kernel instead of the interpolation from the level above (0 at the top,
    which is summed directly).
    """

    origin: tuple
    spacing: tuple
    shape: tuple
    reach: float = 0.0

    @property
    def size(self) -> int:
        return int(np.prod(self.shape))


def _correction_cost(level):
    """Estimated ns of one atom's correction on ``level`` (its sphere and its stencil passes)."""
    h = np.asarray(level.spacing)
    r = level.reach
    sphere = min(4.0 / 3.0 * math.pi * r**3 / float(np.prod(h)), level.size)
    fine = np.minimum(2.0 * r / h + 1.0, level.shape)
    coarse = fine / 2.0 + ORDER
    passes = coarse[0] * coarse[1] * (coarse[2] + fine[2]) + fine[1] * coarse[0] * fine[2]
    return COST_SPHERE * sphere + COST_PASS * passes


def plan_levels(shape, origin, spacing, n_atoms, reach=REACH, levels=None, pos=None):
    """The grids of the hierarchy, finest (the map's grid) first, and their estimated cost.

    Returns ``(levels, ns)``: a list of :class:`Level` and the estimated core-nanoseconds of
    the whole sum. ``levels`` fixes the number of grids (1: the direct sum on the grid
    itself); by default it is the one of least estimated cost. Each level's reach is ``reach``
    coarse spacings, and at least the reach below plus the stencil's half-diagonal (so that
    every coarse node an interpolated value uses already holds the atom's exact kernel).

    ``pos`` (the charged atoms, Å), when given, counts on each level only the atoms whose
    reach meets its box, as the corrections do: a grid inside a large molecule (a focused
    grid) corrects few of the atoms, and a deeper hierarchy pays there.
    """
    grids = [Level(tuple(map(float, origin)), tuple(map(float, spacing)), tuple(map(int, shape)))]
    most = levels if levels is not None else 16
    while len(grids) < most:
        g = grids[-1]
        org, sp, shp = ML.coarse_level(g.origin, g.spacing, g.shape, PAD)
        if levels is None and np.prod(shp) > 0.6 * g.size:
            break  # the padding no longer shrinks it
        grids.append(Level(org, sp, shp))
    best = None
    below = 0.0
    fixed = 0.0  # prolongations and corrections of the levels under the top
    for top in range(len(grids)):
        if top > 0:
            g, c = grids[top - 1], grids[top]
            half_diag = 0.5 * (ORDER - 1) * math.sqrt(sum(h * h for h in g.spacing))
            # (a hair over the stencil's reach, so that rounding never leaves a node out)
            r = max(reach * max(c.spacing), below + half_diag * (1 + 1e-9) if top > 1 else 0.0)
            below = r
            grids[top - 1] = dataclasses.replace(g, reach=r)
            corrected = n_atoms if pos is None else len(_near_grid(grids[top - 1], pos, r))
            fixed += corrected * _correction_cost(grids[top - 1]) + COST_PROLONG * g.size
        ns = fixed + n_atoms * COST_PAIR * grids[top].size
        if best is None or ns < best[1] or (levels is not None and top == levels - 1):
            best = (top, ns)
    top, ns = best
    chosen = grids[: top + 1]
    chosen[top] = dataclasses.replace(chosen[top], reach=0.0)
    return chosen, ns


def direct_cost(shape, n_atoms):
    """Estimated core-nanoseconds of the direct sum over ``n_atoms`` on a grid of ``shape``."""
    return COST_PAIR * n_atoms * float(np.prod(shape))


def fast_cost(shape, spacing, n_atoms):
    """Estimated core-nanoseconds of :func:`coulomb_multilevel` (its hierarchy).

    The direct sums on the nodes on an atom, at most one or a few per atom, are left out.
    """
    _, ns = plan_levels(shape, (0.0, 0.0, 0.0), spacing, n_atoms)
    return ns


def check_method(method):
    """``method`` if it is one of :data:`METHODS`, else a :class:`~pbsolver.InputError`."""
    if method not in METHODS:
        raise InputError(f"coulomb method must be one of {METHODS}, got {method!r}")
    return method


def use_fast(method, shape, spacing, n_atoms, periodic=False):
    """Whether φ_c is summed by :func:`coulomb_multilevel` (True) or directly (False).

    ``"direct"``: never; ``"fast"``: always (an :class:`~pbsolver.InputError` with a periodic
    box, which it does not support); ``"auto"``: without a periodic box, where the direct
    sum has at least :data:`AUTO_MIN_PAIRS` pair terms and the estimated cost of the fast
    sum is at most :data:`AUTO_GAIN` times the direct sum's.
    """
    check_method(method)
    if method == "direct":
        return False
    if method == "fast":
        if periodic:
            raise InputError(
                "coulomb method 'fast' does not support a periodic box (its nearest-image sum "
                "is not smooth); use 'direct' or 'auto'"
            )
        return True
    if periodic or n_atoms * float(np.prod(shape)) < AUTO_MIN_PAIRS:
        return False
    return fast_cost(shape, spacing, n_atoms) <= AUTO_GAIN * direct_cost(shape, n_atoms)


def _near_grid(level, pos, reach):
    """Indices of the atoms within ``reach`` (Å, per axis) of the level's box."""
    f = (pos - np.asarray(level.origin)) / np.asarray(level.spacing)
    r = reach / np.asarray(level.spacing) + 1.0
    n = np.asarray(level.shape)
    return np.flatnonzero(np.all((f >= -r) & (f <= n - 1 + r), axis=1))


def _blocks(level, pos, nblocks):
    """Split the level's x planes into ``nblocks`` blocks of about equal correction work.

    Returns the block edges (planes) and, per block (CSR ``start``, ``atoms``), the atoms
    whose sphere meets it; atoms whose box misses the level are in no block (their node
    indices are never formed). Every block lists its atoms in one order, cell by cell (cells
    of half the reach, z fastest), so that consecutive atoms share most of their nodes.
    """
    h = level.spacing[0]
    n = level.shape[0]
    r = level.reach
    near = _near_grid(level, pos, r)
    xs = pos[near, 0]
    lo = np.clip(np.ceil((xs - r - level.origin[0]) / h), 0, n).astype(np.int64)
    hi = np.clip(np.floor((xs + r - level.origin[0]) / h) + 1, 0, n).astype(np.int64)
    work = np.zeros(n + 1)
    np.add.at(work, lo, 1.0)
    np.add.at(work, hi, -1.0)
    cum = np.cumsum(np.cumsum(work)[:n])
    total = cum[-1] if n else 0.0
    planes = np.searchsorted(cum, total * np.arange(1, nblocks) / nblocks, side="right")
    planes = np.unique(np.concatenate(([0], planes, [n]))).astype(np.int64)
    if len(near):
        cell = np.floor((pos[near] - pos[near].min(axis=0)) / (0.5 * r)).astype(np.int64)
        order = np.lexsort((cell[:, 2], cell[:, 1], cell[:, 0]))
    else:
        order = np.zeros(0, dtype=np.int64)
    lo, hi, ids = lo[order], hi[order], near[order]
    lists = [ids[(lo < planes[b + 1]) & (hi > planes[b])] for b in range(len(planes) - 1)]
    start = np.zeros(len(lists) + 1, dtype=np.int64)
    np.cumsum([len(a) for a in lists], out=start[1:])
    atoms = np.concatenate(lists).astype(np.int64) if lists else np.zeros(0, dtype=np.int64)
    return planes, start, atoms


def coulomb_multilevel(shape, origin, spacing, pos, q, scale, *, reach=REACH, levels=None):
    """scale · Σ_a q_a / |r_ijk − r_a| at every node by the multilevel method (no periodic box).

    Nodes on an atom get the exact direct sum (±inf, as
    :func:`pbsolver.backends.cpu.maps.coulomb_sum`).
    """
    pos = np.ascontiguousarray(pos, dtype=float).reshape(-1, 3)
    q = np.ascontiguousarray(q, dtype=float).reshape(-1)
    if not (np.isfinite(pos).all() and np.isfinite(q).all()):
        raise InputError("atom positions and charges must be finite")
    keep = q != 0.0
    pos, q = np.ascontiguousarray(pos[keep]), np.ascontiguousarray(q[keep])
    if len(q) == 0:
        return np.zeros(tuple(shape))
    spacing = tuple(float(h) for h in spacing)
    origin = tuple(float(o) for o in origin)
    tol2 = B.on_node_tol2(spacing)
    grids, _ = plan_levels(shape, origin, spacing, len(q), reach, levels, pos=pos)
    px, py, pz = (np.ascontiguousarray(pos[:, d]) for d in range(3))
    top = grids[-1]
    field = np.empty(top.shape)
    _direct_nodes(field, np.arange(top.size, dtype=np.int64), np.asarray(top.origin),
                  np.asarray(top.spacing), px, py, pz, q, 1.0, tol2, True)  # fmt: skip
    for lev in range(len(grids) - 2, -1, -1):
        g, c = grids[lev], grids[lev + 1]
        fine = np.empty(g.shape)
        _prolong(field, fine)
        rn = np.array([int(g.reach / h) + 1 for h in g.spacing], dtype=np.int64)
        planes, start, atoms = _blocks(g, pos, 2 * numba.get_num_threads())
        geometry = [np.asarray(v) for v in (g.origin, g.spacing, c.origin, c.spacing)]
        _correct(fine, *geometry, pos, q, g.reach, tol2, planes, start, atoms, rn)
        field = fine
    field *= scale
    # the nodes on an atom (twice the on-node distance: a superset of the direct sum's own
    # test, whose nodes then get that sum exactly)
    on_atom = 2.0 * math.sqrt(tol2)
    mark = np.zeros(tuple(shape), dtype=np.bool_)
    near = np.ascontiguousarray(pos[_near_grid(grids[0], pos, on_atom)])
    _mark_near(mark, np.asarray(origin), np.asarray(spacing), near, on_atom)
    nodes = np.flatnonzero(mark).astype(np.int64)
    _direct_nodes(field, nodes, np.asarray(origin), np.asarray(spacing), px, py, pz, q,
                  float(scale), tol2, False)  # fmt: skip
    return field
