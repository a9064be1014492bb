"""Numba CPU kernels for the multigrid cycle (raw arrays only; no allocation, no host logic).

The grid transfers between a fine level and the next coarser one are described, per axis, by
three small integer maps (see :class:`pbsolver.backends.Transfer`):

``pos[I]``
    fine index of coarse node ``I`` (coarse nodes are a subset of the fine nodes);
``lo[i], hi[i]``
    the coarse nodes that fine node ``i`` interpolates from: ``lo == hi == I`` when ``i`` is
    coarse node ``I``, else the two coarse neighbours of the midpoint ``i`` (wrapping on
    periodic axes).

Prolongation is trilinear interpolation ``P`` (weight ½ per midpoint direction) and restriction
is its transpose ``Pᵀ`` (the coarse operators are scaled to match, see
:mod:`pbsolver.multigrid`). Both kernels are deterministic for any number of threads: every
output value is written by exactly one thread from inputs nobody writes.

Every kernel is one parallel entry point (``prange`` over x-planes). Coarse levels are small:
there a parallel region costs more than the work (and on an oversubscribed machine a thread
that has been descheduled stalls the whole region for a scheduler time slice), so the CPU
backend runs these kernels on the calling thread alone below :data:`SERIAL_BELOW` points
(``CPUBackend``'s ``_launch``). One thread through the parallel entry point
rather than a serial ``range`` twin: numba outlines a ``prange`` body into a function of its
own, where LLVM vectorises the z-rows that it leaves scalar in an inlined serial loop
(``benchmarks/mg_level_sweeps.py`` times both; the figures are in BENCHMARKS.md).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from pbsolver.backends.cpu.kernels import (
    B,
    ordered_sum,
    plane_sums,
)

_JIT = {"cache": True, "nogil": True, "boundscheck": False}

#: Grids with fewer points than this run on the calling thread alone: below it a parallel
#: region's start-up and an oversubscribed machine's stalls cost more than the work
#: (``benchmarks/mg_level_sweeps.py --one-thread-below N`` measures the threshold).
SERIAL_BELOW = 20_000


@njit(**_JIT, inline="always")
def _neighbours(pos, lo, hi, c, n):
    """Fine indices ``pos[c] − 1, pos[c], pos[c] + 1`` (wrapped) and the outer two's weights.

    A neighbour that is a midpoint (``lo != hi``) gets ½, a coarse node 0.
    """
    i = pos[c]
    im, ip = B.neighbours(i, n)
    return im, i, ip, B.midpoint_weight(lo, hi, im), B.midpoint_weight(lo, hi, ip)


@njit(**_JIT, inline="always")
def _line(f, i, j, km, k, kp, wm, wp):
    """``wm f[i, j, km] + f[i, j, k] + wp f[i, j, kp]`` in float64."""
    return wm * np.float64(f[i, j, km]) + np.float64(f[i, j, k]) + wp * np.float64(f[i, j, kp])


@njit(**_JIT, inline="always")
def _plane(f, i, jm, j, jp, wym, wyp, km, k, kp, wzm, wzp):
    return (
        wym * _line(f, i, jm, km, k, kp, wzm, wzp)
        + _line(f, i, j, km, k, kp, wzm, wzp)
        + wyp * _line(f, i, jp, km, k, kp, wzm, wzp)
    )


@njit(**_JIT, inline="always")
def _fill_plane(x, i, value):
    """``x[i] = value`` (a plane of fixed nodes, or one plane of :func:`fill`)."""
    for j in range(x.shape[1]):
        for k in range(x.shape[2]):
            x[i, j, k] = value


# ---------------------------------------------------------------------- restriction
@njit(**_JIT, inline="always")
def _restrict_plane(fine, coarse, ci, pos_x, lo_x, hi_x, pos_y, lo_y, hi_y, pos_z, lo_z, hi_z, lo):
    nx, ny, nz = fine.shape
    mx, my, mz = coarse.shape
    if ci < lo or ci >= mx - lo:
        _fill_plane(coarse, ci, 0)
        return
    im, i, ip, wxm, wxp = _neighbours(pos_x, lo_x, hi_x, ci, nx)
    for cj in range(my):
        if cj < lo or cj >= my - lo:
            for ck in range(mz):
                coarse[ci, cj, ck] = 0
            continue
        jm, j, jp, wym, wyp = _neighbours(pos_y, lo_y, hi_y, cj, ny)
        for ck in range(mz):
            if ck < lo or ck >= mz - lo:
                coarse[ci, cj, ck] = 0
                continue
            km, k, kp, wzm, wzp = _neighbours(pos_z, lo_z, hi_z, ck, nz)
            coarse[ci, cj, ck] = (
                wxm * _plane(fine, im, jm, j, jp, wym, wyp, km, k, kp, wzm, wzp)
                + _plane(fine, i, jm, j, jp, wym, wyp, km, k, kp, wzm, wzp)
                + wxp * _plane(fine, ip, jm, j, jp, wym, wyp, km, k, kp, wzm, wzp)
            )


@njit(**_JIT, parallel=True)
def restrict(fine, coarse, pos_x, lo_x, hi_x, pos_y, lo_y, hi_y, pos_z, lo_z, hi_z, periodic):
    """``coarse = Pᵀ fine`` on the coarse unknowns; zero on fixed (Dirichlet) coarse nodes.

    Each coarse node gathers its own fine node (weight 1) and, along each axis, the two fine
    neighbours with weight ½ where they are midpoints (``lo != hi``) and 0 where they are coarse
    nodes themselves: a 27-term product-weight sum, accumulated in float64.
    """
    lo = 0 if periodic else 1
    for ci in prange(coarse.shape[0]):
        _restrict_plane(
            fine, coarse, ci, pos_x, lo_x, hi_x, pos_y, lo_y, hi_y, pos_z, lo_z, hi_z, lo
        )


# ---------------------------------------------------------------------- prolongation
@njit(**_JIT, inline="always")
def _prolong_plane(coarse, fine, i, lo_x, hi_x, lo_y, hi_y, lo_z, hi_z, lo):
    nx, ny, nz = fine.shape
    a0 = lo_x[i]
    a1 = hi_x[i]
    for j in range(lo, ny - lo):
        b0 = lo_y[j]
        b1 = hi_y[j]
        for k in range(lo, nz - lo):
            c0 = lo_z[k]
            c1 = hi_z[k]
            s = (
                coarse[a0, b0, c0]
                + coarse[a0, b0, c1]
                + coarse[a0, b1, c0]
                + coarse[a0, b1, c1]
                + coarse[a1, b0, c0]
                + coarse[a1, b0, c1]
                + coarse[a1, b1, c0]
                + coarse[a1, b1, c1]
            )
            fine[i, j, k] += 0.125 * s


@njit(**_JIT, parallel=True)
def prolong_add(coarse, fine, lo_x, hi_x, lo_y, hi_y, lo_z, hi_z, periodic):
    """``fine += P coarse`` on the fine unknowns (fixed Dirichlet nodes untouched).

    ``(P e)[i, j, k] = ⅛ Σ e[a, b, c]`` over ``a ∈ {lo_x[i], hi_x[i]}``, ``b ∈ {lo_y[j],
    hi_y[j]}``, ``c ∈ {lo_z[k], hi_z[k]}`` — trilinear interpolation, exact on coarse nodes.
    """
    lo = 0 if periodic else 1
    for i in prange(lo, fine.shape[0] - lo):
        _prolong_plane(coarse, fine, i, lo_x, hi_x, lo_y, hi_y, lo_z, hi_z, lo)


# ---------------------------------------------------------------------- smoothing, residual
# Row kernels: the interior of each z-row (k = 1 … nz − 2) is computed over all k in one
# unit-stride loop that LLVM vectorises, then the colour's entries are copied back; the two ends
# of a periodic row wrap and are done one by one. The same bodies in the same order as a
# node-by-node sweep, hence bitwise its results (tests/reference_kernels.py is that sweep).


@njit(**_JIT, inline="always")
def _row_sum(xr, br, cxm, cx0, cym, cy0, cz0, xim, xip, xjm, xjp, k, km, kp):
    """The stencil sum at entry ``k`` of a z-row (its z neighbours ``km``, ``kp``)."""
    return B.stencil_sum(
        br[k], cxm[k], xim[k], cx0[k], xip[k], cym[k], xjm[k], cy0[k], xjp[k],
        cz0[km], xr[km], cz0[k], xr[kp],
    )  # fmt: skip


@njit(**_JIT, inline="always")
def _point_update(xr, br, dr, cxm, cx0, cym, cy0, cz0, xim, xip, xjm, xjp, k, km, kp, omega):
    s = _row_sum(xr, br, cxm, cx0, cym, cy0, cz0, xim, xip, xjm, xjp, k, km, kp)
    return B.relax(xr[k], s, dr[k], omega)


@njit(**_JIT, inline="always")
def _rb_plane(x, b, cx, cy, cz, diag, i, color, omega, lo, tmp):
    nx, ny, nz = x.shape
    im, ip = B.neighbours(i, nx)
    last = nz - 1
    for j in range(lo, ny - lo):
        jm, jp = B.neighbours(j, ny)
        xr, br, dr = x[i, j], b[i, j], diag[i, j]
        xim, xip, xjm, xjp = x[im, j], x[ip, j], x[i, jm], x[i, jp]
        cxm, cx0, cym, cy0, cz0 = cx[im, j], cx[i, j], cy[i, jm], cy[i, j], cz[i, j]
        for k in range(1, last):
            tmp[k] = _point_update(
                xr, br, dr, cxm, cx0, cym, cy0, cz0, xim, xip, xjm, xjp, k, k - 1, k + 1, omega
            )
        k0 = lo + ((i + j + lo + color) & 1)
        if k0 == 0:  # periodic row: k = 0 wraps to nz − 1
            xr[0] = _point_update(
                xr, br, dr, cxm, cx0, cym, cy0, cz0, xim, xip, xjm, xjp, 0, last, 1 % nz, omega
            )
            k0 = 2
        for k in range(k0, last, 2):
            xr[k] = tmp[k]
        if lo == 0 and last >= k0 and (last - k0) % 2 == 0:  # periodic: k = nz − 1 wraps to 0
            xr[last] = _point_update(
                xr, br, dr, cxm, cx0, cym, cy0, cz0, xim, xip, xjm, xjp, last, last - 1, 0, omega
            )


@njit(**_JIT, parallel=True)
def rb_sor_color(x, b, cx, cy, cz, diag, color, omega, periodic):
    """Update the unknowns with ``(i + j + k) % 2 == color`` in place (over-relaxed GS).

    Vectorised along z (see the note above).
    """
    lo = 0 if periodic else 1
    for i in prange(lo, x.shape[0] - lo):
        tmp = np.empty(x.shape[2], dtype=x.dtype)
        _rb_plane(x, b, cx, cy, cz, diag, i, color, omega, lo, tmp)


@njit(**_JIT, parallel=True)
def rb_sor_sweep(x, b, cx, cy, cz, diag, first, omega, periodic, threads):
    """Colour ``first``, then the other, in one pass over the x planes: a whole SOR sweep.

    The values of :func:`rb_sor_color` for ``first`` then for ``1 − first``, bit for bit, while
    reading the arrays about once instead of twice. A node of one colour reads only nodes of
    the other, so plane p's second colour may follow as soon as planes p − 1 … p + 1 have their
    first: each block of planes runs its first colour plane by plane with the second one plane
    behind; a block's two end planes, whose neighbours lie in other blocks, get their second
    colour after every block has its first (the second loop). One block a thread
    (``threads``).
    """
    lo = 0 if periodic else 1
    second = 1 - first
    planes = x.shape[0] - 2 * lo
    nblocks = max(1, min(threads, planes))
    for blk in prange(nblocks):
        tmp = np.empty(x.shape[2], dtype=x.dtype)
        start = lo + blk * planes // nblocks
        end = lo + (blk + 1) * planes // nblocks
        for p in range(start, end):
            _rb_plane(x, b, cx, cy, cz, diag, p, first, omega, lo, tmp)
            if p - 1 > start:
                _rb_plane(x, b, cx, cy, cz, diag, p - 1, second, omega, lo, tmp)
    for blk in prange(nblocks):
        tmp = np.empty(x.shape[2], dtype=x.dtype)
        start = lo + blk * planes // nblocks
        end = lo + (blk + 1) * planes // nblocks
        if end > start:
            _rb_plane(x, b, cx, cy, cz, diag, start, second, omega, lo, tmp)
        if end - 1 > start:
            _rb_plane(x, b, cx, cy, cz, diag, end - 1, second, omega, lo, tmp)


@njit(**_JIT, inline="always")
def _residual_plane(x, b, cx, cy, cz, diag, out, i, lo):
    nx, ny, nz = x.shape
    if i < lo or i >= nx - lo:
        _fill_plane(out, i, 0)
        return
    im, ip = B.neighbours(i, nx)
    last = nz - 1
    for j in range(ny):
        orow = out[i, j]
        if j < lo or j >= ny - lo:
            for k in range(nz):
                orow[k] = 0
            continue
        jm, jp = B.neighbours(j, ny)
        xr, br, dr = x[i, j], b[i, j], diag[i, j]
        xim, xip, xjm, xjp = x[im, j], x[ip, j], x[i, jm], x[i, jp]
        cxm, cx0, cym, cy0, cz0 = cx[im, j], cx[i, j], cy[i, jm], cy[i, j], cz[i, j]
        for k in range(1, last):
            s = _row_sum(xr, br, cxm, cx0, cym, cy0, cz0, xim, xip, xjm, xjp, k, k - 1, k + 1)
            orow[k] = B.residual(s, dr[k], xr[k])
        if lo == 1:
            orow[0] = 0
            orow[last] = 0
        else:
            for k, km, kp in ((0, last, 1 % nz), (last, last - 1, 0)):
                s = _row_sum(xr, br, cxm, cx0, cym, cy0, cz0, xim, xip, xjm, xjp, k, km, kp)
                orow[k] = B.residual(s, dr[k], xr[k])


@njit(**_JIT, parallel=True)
def residual(x, b, cx, cy, cz, diag, out, periodic):
    """``out = b − A x`` on the unknowns, zero on fixed nodes.

    Vectorised along z (see the note above).
    """
    lo = 0 if periodic else 1
    for i in prange(x.shape[0]):
        _residual_plane(x, b, cx, cy, cz, diag, out, i, lo)


@njit(**_JIT, inline="always")
def _sumsq_plane(x, b, cx, cy, cz, diag, i, lo, lanes):
    """Σ (b − A x)² over plane ``i``'s unknowns, in float64, vectorised along z.

    ``lanes[k]`` gathers column k's squares row by row (a unit-stride loop LLVM vectorises);
    the columns are then added in k order, so the sum's order is fixed for any thread count.
    """
    nx, ny, nz = x.shape
    im, ip = B.neighbours(i, nx)
    last = nz - 1
    for k in range(nz):
        lanes[k] = 0.0
    for j in range(lo, ny - lo):
        jm, jp = B.neighbours(j, ny)
        xr, br, dr = x[i, j], b[i, j], diag[i, j]
        xim, xip, xjm, xjp = x[im, j], x[ip, j], x[i, jm], x[i, jp]
        cxm, cx0, cym, cy0, cz0 = cx[im, j], cx[i, j], cy[i, jm], cy[i, j], cz[i, j]
        for k in range(1, last):
            s = _row_sum(xr, br, cxm, cx0, cym, cy0, cz0, xim, xip, xjm, xjp, k, k - 1, k + 1)
            r = B.residual(np.float64(s), np.float64(dr[k]), np.float64(xr[k]))
            lanes[k] += r * r
        if lo == 0:  # periodic: the row's two ends wrap (one end on a one-node row)
            for k, km, kp in ((0, last, 1 % nz), (last, last - 1, 0)):
                s = _row_sum(xr, br, cxm, cx0, cym, cy0, cz0, xim, xip, xjm, xjp, k, km, kp)
                r = B.residual(np.float64(s), np.float64(dr[k]), np.float64(xr[k]))
                lanes[k] += r * r
                if last == 0:
                    break
    acc = 0.0
    for k in range(nz):
        acc += lanes[k]
    return acc


@njit(**_JIT, parallel=True)
def residual_sumsq(x, b, cx, cy, cz, diag, periodic):
    """Σ (b − A x)² over the unknowns in float64 (a partial per plane, added in plane order)."""
    nx = x.shape[0]
    lo = 0 if periodic else 1
    partial = np.zeros(nx, dtype=np.float64)
    for i in prange(lo, nx - lo):
        lanes = np.empty(x.shape[2], dtype=np.float64)
        partial[i] = _sumsq_plane(x, b, cx, cy, cz, diag, i, lo, lanes)
    return ordered_sum(partial)


# ---------------------------------------------------------------------- vector operations
@njit(**_JIT, parallel=True)
def fill(x, value):
    """``x[...] = value`` in place."""
    for i in prange(x.shape[0]):
        _fill_plane(x, i, value)


@njit(**_JIT)
def dot(x, y):
    """Σ x·y in float64 (one partial per x-plane, in parallel; added in a fixed order)."""
    return ordered_sum(plane_sums(x, y))


@njit(**_JIT, parallel=True)
def axpby(y, x, a, b):
    """``y = a·x + b·y`` in place."""
    nx, ny, nz = y.shape
    for i in prange(nx):
        for j in range(ny):
            for k in range(nz):
                y[i, j, k] = a * x[i, j, k] + b * y[i, j, k]
