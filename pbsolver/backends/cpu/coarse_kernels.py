"""Numba CPU kernels that build a multigrid level's coarse operator, one coarse node an item.

The twins of :mod:`pbsolver.backends.cuda.coarse_kernels` (same signatures, flat C-ordered
arrays): each loops over the coarse nodes in parallel and calls the operator bodies
(:mod:`pbsolver.backends.bodies.operator`: ``coarse_node``, ``stack_diagonal``,
``grid_diagonal``) that the CUDA kernels call, so both backends compute each coarse face with
one formula. :func:`pbsolver.backends.coarse.build_with_kernels` runs them level by level.
Every value is written by one item from inputs no item writes: deterministic for any number
of threads.
"""

from __future__ import annotations

from numba import njit, prange

from pbsolver.backends.cpu.kernels import B

_JIT = {"cache": True, "nogil": True, "boundscheck": False}


@njit(**_JIT, parallel=True)
def coarse_faces(
    cx, cy, cz, k2, has_k2, out64, out, pos_x, lo_x, hi_x, two_x, pos_y, lo_y, hi_y, two_y,
    pos_z, lo_z, hi_z, two_z, fshape, cshape,
):  # fmt: skip
    """Coarse faces and κ̄² of every coarse node (``out64`` work, ``out`` the stencil's faces)."""
    mx, my, mz = cshape
    for q in prange(mx * my * mz):
        I, J, K = q // (mz * my), (q // mz) % my, q % mz
        sx, sy, sz, kk = B.coarse_node(
            cx, cy, cz, k2, has_k2, pos_x[I], pos_y[J], pos_z[K], two_x[I] != 0, two_y[J] != 0,
            two_z[K] != 0, lo_x, hi_x, lo_y, hi_y, lo_z, hi_z, fshape[0], fshape[1], fshape[2],
        )  # fmt: skip
        out64[0][q], out64[1][q], out64[2][q], out64[3][q] = sx, sy, sz, kk
        out[0][q], out[1][q], out[2][q] = sx, sy, sz


@njit(**_JIT, parallel=True)
def coarse_diagonal(cx, cy, cz, k2, diag, cshape, nx_block, stride, penalty):
    """``diag = Σ faces + κ̄²`` on the unknowns of a stack, ``penalty`` on its fixed nodes."""
    mx, my, mz = cshape
    for q in prange(mx * my * mz):
        I, J, K = q // (mz * my), (q // mz) % my, q % mz
        diag[q] = B.stack_diagonal(cx, cy, cz, k2, q, I, J, K, my, mz, nx_block, stride, penalty)


@njit(**_JIT, parallel=True)
def grid_diagonal(cx, cy, cz, k2, diag, cshape, periodic):
    """``diag = Σ faces + κ̄²`` of one grid's level; 1 on a Dirichlet grid's outer layer."""
    mx, my, mz = cshape
    for q in prange(mx * my * mz):
        I, J, K = q // (mz * my), (q // mz) % my, q % mz
        diag[q] = B.grid_diagonal(cx, cy, cz, k2, q, I, J, K, mx, my, mz, periodic)


__all__ = ["coarse_diagonal", "coarse_faces", "grid_diagonal"]
