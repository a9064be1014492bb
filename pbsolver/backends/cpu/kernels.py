"""Numba CPU kernels on raw arrays (no allocation, no configuration, no logging).

The per-node arithmetic is :mod:`pbsolver.backends.bodies.operator`'s, compiled here by
``numba.njit`` (the CUDA kernels compile the same bodies); these kernels hold the loops and the
indexing. Every kernel is deterministic for any number of threads:

* red–black sweeps update one colour from the other colour only, so the order in which threads
  take planes cannot change a bit of the result;
* reductions accumulate one float64 partial per x-plane and add the partials in a fixed order.

Index conventions: ``cx[i, j, k]`` is the face between nodes ``(i, j, k)`` and ``(i+1, j, k)``;
``periodic`` grids wrap, Dirichlet grids update only interior nodes.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from pbsolver.backends.bodies.operator import compile_bodies

_JIT = {"cache": True, "nogil": True, "boundscheck": False}

#: The operator's bodies, compiled for the CPU (inlined into every kernel that calls them).
B = compile_bodies(njit(**_JIT, inline="always"))


@njit(**_JIT, inline="always")
def stencil_sum_at(x, b, cx, cy, cz, i, j, k, im, ip, jm, jp, km, kp):
    """b_s + Σ_n c_{s,n} x_n at node (i, j, k), its neighbours' indices given."""
    return B.stencil_sum(
        b[i, j, k],
        cx[im, j, k], x[im, j, k], cx[i, j, k], x[ip, j, k],
        cy[i, jm, k], x[i, jm, k], cy[i, j, k], x[i, jp, k],
        cz[i, j, km], x[i, j, km], cz[i, j, k], x[i, j, kp],
    )  # fmt: skip


@njit(**_JIT, inline="always")
def unknown(i, j, k, nx, ny, nz, periodic):
    """True on the unknowns: everywhere (periodic) or off the outer layer (Dirichlet)."""
    lo = 0 if periodic else 1
    return lo <= i < nx - lo and lo <= j < ny - lo and lo <= k < nz - lo


@njit(**_JIT, inline="always")
def stencil_indices(i, j, k, nx, ny, nz):
    """``(im, ip, jm, jp, km, kp)``: the indices of node (i, j, k)'s neighbours, wrapping."""
    im, ip = B.neighbours(i, nx)
    jm, jp = B.neighbours(j, ny)
    km, kp = B.neighbours(k, nz)
    return im, ip, jm, jp, km, kp


@njit(**_JIT, inline="always")
def ordered_sum(partial):
    """Σ partial[i] in index order: the deterministic total of per-plane float64 partials."""
    total = 0.0
    for i in range(partial.shape[0]):
        total += partial[i]
    return total


@njit(**_JIT, parallel=True)
def jacobi_step(x, out, b, cx, cy, cz, diag, omega, periodic):
    """``out = x + ω (D⁻¹(b + Σ c x_n) − x)`` on the unknowns; fixed nodes copied."""
    nx, ny, nz = x.shape
    for i in prange(nx):
        for j in range(ny):
            for k in range(nz):
                old = x[i, j, k]
                if not unknown(i, j, k, nx, ny, nz, periodic):
                    out[i, j, k] = old
                    continue
                im, ip, jm, jp, km, kp = stencil_indices(i, j, k, nx, ny, nz)
                s = stencil_sum_at(x, b, cx, cy, cz, i, j, k, im, ip, jm, jp, km, kp)
                out[i, j, k] = B.relax(old, s, diag[i, j, k], omega)


@njit(**_JIT, parallel=True)
def plane_sums(x, y=None):
    """Per-x-plane float64 sums of ``x``, or of ``x·y`` with ``y``.

    Add them in order for a deterministic total.
    """
    nx, ny, nz = x.shape
    partial = np.zeros(nx, dtype=np.float64)
    for i in prange(nx):
        acc = 0.0
        for j in range(ny):
            for k in range(nz):
                v = np.float64(x[i, j, k])
                if y is not None:  # pruned at compile time where y is omitted
                    v = v * np.float64(y[i, j, k])
                acc += v
        partial[i] = acc
    return partial


@njit(**_JIT, parallel=True)
def add_scalar(x, value):
    """x += value in place."""
    nx, ny, nz = x.shape
    for i in prange(nx):
        for j in range(ny):
            for k in range(nz):
                x[i, j, k] += value


@njit(**_JIT, parallel=True)
def axpy(y, x, a):
    """y += a·x in place."""
    nx, ny, nz = y.shape
    for i in prange(nx):
        for j in range(ny):
            for k in range(nz):
                y[i, j, k] += a * x[i, j, k]
