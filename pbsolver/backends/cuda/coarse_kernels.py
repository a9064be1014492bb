"""numba-cuda kernels that build a multigrid level's coarse operator on the device.

:func:`pbsolver.multigrid.hierarchy.coarse_coefficients` (NumPy/CuPy array code, the reference)
costs hundreds of small array operations a level, host time whatever the grid size. The frame
engine rebuilds its stack's hierarchy on every call and a Newton solve its grid's hierarchy on
every step, so there the same arithmetic runs as two kernels a level (captured in one CUDA graph
with the rest of the rebuild):

``coarse_faces``
    one thread a coarse node: its three faces — the fine faces along the axis in series
    (``1/Σ 1/c``, zero if any is zero), added across the two other axes with the restriction
    weights (1 on the line through the coarse node, ½ on midpoint lines) — and ``Pᵀ κ̄²``,
    in float64, into float64 work arrays and the level's stencil arrays;
``coarse_diagonal``
    the diagonal ``Σ faces + κ̄²`` of every unknown, :data:`PENALTY` on the fixed nodes of a
    stack of blocks (every block's outer layer and padding planes);
``grid_diagonal``
    the same for one grid: 1 on a Dirichlet grid's outer layer (as the array code), the
    neighbours wrapped on a periodic one.

Arrays are flat, C-ordered; shapes come as ``(nx, ny, nz)`` tuples (see :mod:`.kernels`).
"""

from __future__ import annotations

from numba import cuda, float64, int64

from pbsolver.backends.cuda.kernels import B, store_faces


@cuda.jit(device=True)
def _weight(lo, hi, n, i):
    """Restriction weight of fine node ``i`` (wrapped into ``[0, n)``) beside a coarse node."""
    return B.midpoint_weight(lo, hi, B.wrap(i, n))


@cuda.jit(device=True)
def _series(c, p, step, two):
    """Faces ``c[p]`` (and ``c[p + step]`` when ``two``) in series; 0 if either is 0."""
    a = c[p]
    if a == 0.0:
        return 0.0
    s = 1.0 / a
    if two:
        b = c[p + step]
        if b == 0.0:
            return 0.0
        s += 1.0 / b
    return 1.0 / s


@cuda.jit(device=True)
def _node(q, shape):
    """(i, j, k) of flat C-order index ``q`` on a grid of ``shape``."""
    nz, ny = shape[2], shape[1]
    return q // (nz * ny), (q // nz) % ny, q % nz


@cuda.jit(device=True)
def _index(i, j, k, shape):
    return (i * int64(shape[1]) + j) * int64(shape[2]) + k


@cuda.jit
def coarse_faces(
    cx, cy, cz, k2, has_k2, out64, out, pos_x, lo_x, hi_x, two_x, pos_y, lo_y, hi_y, two_y,
    pos_z, lo_z, hi_z, two_z, fshape, cshape,
):  # fmt: skip
    """Coarse faces and κ̄² of one coarse node a thread.

    ``out64`` = (cx, cy, cz, κ̄²) work arrays of the coarse level (float64 for a stack; a
    grid's are its stencil's own faces), ``out`` = (cx, cy, cz) of its stencil (any float
    dtype); ``two_*[I]`` is 1 where coarse node ``I``'s interval to the next spans two fine
    intervals. ``has_k2`` 0: no salt (``k2`` is not read; the coarse κ̄² is 0).
    """
    q = cuda.grid(1)
    if q >= cshape[0] * cshape[1] * cshape[2]:
        return
    I, J, K = _node(q, cshape)
    nx, ny, nz = fshape
    pi, pj, pk = int64(pos_x[I]), int64(pos_y[J]), int64(pos_z[K])
    sx, sy, sz = 0.0, 0.0, 0.0
    kk = 0.0
    for dx in range(-1, 2):
        wx = 1.0 if dx == 0 else _weight(lo_x, hi_x, nx, pi + dx)
        if wx == 0.0:
            continue
        i = B.wrap(pi + dx, int64(nx))
        for dy in range(-1, 2):
            wy = 1.0 if dy == 0 else _weight(lo_y, hi_y, ny, pj + dy)
            if wy == 0.0:
                continue
            j = B.wrap(pj + dy, int64(ny))
            for dz in range(-1, 2):
                wz = 1.0 if dz == 0 else _weight(lo_z, hi_z, nz, pk + dz)
                if wz == 0.0:
                    continue
                k = B.wrap(pk + dz, int64(nz))
                p = _index(i, j, k, fshape)
                if has_k2:
                    kk += wx * wy * wz * k2[p]
                # a face along x lies on the line through (j, k): only dx = 0 carries it
                if dx == 0:
                    sx += wy * wz * _series(cx, p, int64(ny) * int64(nz), two_x[I] != 0)
                if dy == 0:
                    sy += wx * wz * _series(cy, p, int64(nz), two_y[J] != 0)
                if dz == 0:
                    sz += wx * wy * _series(cz, p, int64(1), two_z[K] != 0)
    store_faces(out64, q, sx, sy, sz)
    out64[3][q] = kk
    store_faces(out, q, sx, sy, sz)


@cuda.jit
def coarse_diagonal(cx, cy, cz, k2, diag, cshape, nx_block, stride, penalty):
    """``diag = Σ faces + κ̄²`` on the unknowns of a stack, ``penalty`` on its fixed nodes."""
    q = cuda.grid(1)
    mx, my, mz = cshape
    if q >= mx * my * mz:
        return
    I, J, K = _node(q, cshape)
    local = I % stride
    if local == 0 or local >= nx_block - 1 or J == 0 or J == my - 1 or K == 0 or K == mz - 1:
        diag[q] = penalty
        return
    faces = B.diagonal_sum(cx[q - mz * my], float64(cx[q]), cy[q - mz], cy[q], cz[q - 1], cz[q])
    diag[q] = faces + k2[q]


@cuda.jit
def grid_diagonal(cx, cy, cz, k2, diag, cshape, periodic):
    """``diag = Σ faces + κ̄²`` of one grid's level; 1 on a Dirichlet grid's outer layer."""
    q = cuda.grid(1)
    mx, my, mz = cshape
    if q >= mx * my * mz:
        return
    I, J, K = _node(q, cshape)
    if not periodic and (I == 0 or I == mx - 1 or J == 0 or J == my - 1 or K == 0 or K == mz - 1):
        diag[q] = 1.0
        return
    xm = _index(B.wrap(I - 1, int64(mx)), J, K, cshape)
    ym = _index(I, B.wrap(J - 1, int64(my)), K, cshape)
    zm = _index(I, J, B.wrap(K - 1, int64(mz)), cshape)
    faces = B.diagonal_sum(cx[xm], float64(cx[q]), cy[ym], cy[q], cz[zm], cz[q])
    diag[q] = faces + k2[q]


__all__ = ["coarse_diagonal", "coarse_faces", "grid_diagonal"]
