"""numba-cuda kernels that build a multigrid level's coarse operator on the device.

:func:`pbsolver.backends.coarse.coarse_coefficients` (NumPy/CuPy array code, the reference)
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
The per-node arithmetic is the operator bodies' (:mod:`pbsolver.backends.bodies.operator`);
:func:`pbsolver.backends.coarse.build_with_kernels` launches them level by level.
"""

from __future__ import annotations

from numba import cuda

from pbsolver.backends.cuda.kernels import B, store_faces


@cuda.jit
def coarse_faces(
    cx, cy, cz, k2, has_k2, out64, out, pos_x, lo_x, hi_x, two_x, pos_y, lo_y, hi_y, two_y,
    pos_z, lo_z, hi_z, two_z, fshape, cshape,
):  # fmt: skip
    """Coarse faces and κ̄² of one coarse node a thread (the body ``coarse_node``).

    ``out64`` = (cx, cy, cz, κ̄²) work arrays of the coarse level (float64 for a stack; a
    grid's are its stencil's own faces), ``out`` = (cx, cy, cz) of its stencil (any float
    dtype); ``two_*[I]`` is 1 where coarse node ``I``'s interval to the next spans two fine
    intervals. ``has_k2`` 0: no salt (``k2`` is not read; the coarse κ̄² is 0).
    """
    q = cuda.grid(1)
    mx, my, mz = cshape
    if q >= mx * my * mz:
        return
    I, J, K = q // (mz * my), (q // mz) % my, q % mz
    sx, sy, sz, kk = B.coarse_node(
        cx, cy, cz, k2, has_k2, pos_x[I], pos_y[J], pos_z[K], two_x[I] != 0, two_y[J] != 0,
        two_z[K] != 0, lo_x, hi_x, lo_y, hi_y, lo_z, hi_z, fshape[0], fshape[1], fshape[2],
    )  # fmt: skip
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
    I, J, K = q // (mz * my), (q // mz) % my, q % mz
    diag[q] = B.stack_diagonal(cx, cy, cz, k2, q, I, J, K, my, mz, nx_block, stride, penalty)


@cuda.jit
def grid_diagonal(cx, cy, cz, k2, diag, cshape, periodic):
    """``diag = Σ faces + κ̄²`` of one grid's level; 1 on a Dirichlet grid's outer layer."""
    q = cuda.grid(1)
    mx, my, mz = cshape
    if q >= mx * my * mz:
        return
    I, J, K = q // (mz * my), (q // mz) % my, q % mz
    diag[q] = B.grid_diagonal(cx, cy, cz, k2, q, I, J, K, mx, my, mz, periodic)


__all__ = ["coarse_diagonal", "coarse_faces", "grid_diagonal"]
