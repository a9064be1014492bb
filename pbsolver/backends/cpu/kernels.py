"""Numba CPU kernels on raw arrays (no allocation, no configuration, no logging).

Every kernel is deterministic for any number of threads:

* red–black sweeps update one colour from the other colour only, so the order in which threads
  take planes cannot change a bit of the result;
* reductions accumulate one float64 partial per x-plane and add the partials in a fixed order.

Index conventions: ``cx[i, j, k]`` is the face between nodes ``(i, j, k)`` and ``(i+1, j, k)``;
``periodic`` grids wrap, Dirichlet grids update only interior nodes.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

_JIT = {"cache": True, "nogil": True, "boundscheck": False}


@njit(**_JIT, inline="always")
def _wrap(i, n):
    """(i − 1, i + 1) with periodic wrap-around."""
    lo = i - 1 if i > 0 else n - 1
    hi = i + 1 if i < n - 1 else 0
    return lo, hi


@njit(**_JIT, inline="always")
def _stencil_sum(x, b, cx, cy, cz, i, j, k, im, ip, jm, jp, km, kp):
    """b_s + Σ_n c_{s,n} x_n at node (i, j, k)."""
    return (
        b[i, j, k]
        + cx[im, j, k] * x[im, j, k]
        + cx[i, j, k] * x[ip, j, k]
        + cy[i, jm, k] * x[i, jm, k]
        + cy[i, j, k] * x[i, jp, k]
        + cz[i, j, km] * x[i, j, km]
        + cz[i, j, k] * x[i, j, kp]
    )


@njit(**_JIT, parallel=True)
def rb_sor_color(x, b, cx, cy, cz, diag, color, omega, periodic):
    """Update the nodes with ``(i + j + k) % 2 == color`` in place (over-relaxed Gauss–Seidel)."""
    nx, ny, nz = x.shape
    lo = 0 if periodic else 1
    for i in prange(lo, nx - lo):
        im, ip = _wrap(i, nx)
        for j in range(lo, ny - lo):
            jm, jp = _wrap(j, ny)
            k0 = lo + ((i + j + lo + color) & 1)
            for k in range(k0, nz - lo, 2):
                km, kp = _wrap(k, nz)
                s = _stencil_sum(x, b, cx, cy, cz, i, j, k, im, ip, jm, jp, km, kp)
                old = x[i, j, k]
                x[i, j, k] = old + omega * (s / diag[i, j, k] - old)


@njit(**_JIT, parallel=True)
def jacobi_step(x, out, b, cx, cy, cz, diag, omega, periodic):
    """``out = x + ω (D⁻¹(b + Σ c x_n) − x)`` on the unknowns; fixed nodes copied."""
    nx, ny, nz = x.shape
    lo = 0 if periodic else 1
    for i in prange(nx):
        im, ip = _wrap(i, nx)
        for j in range(ny):
            jm, jp = _wrap(j, ny)
            for k in range(nz):
                old = x[i, j, k]
                inside = lo <= i < nx - lo and lo <= j < ny - lo and lo <= k < nz - lo
                if not inside:
                    out[i, j, k] = old
                    continue
                km, kp = _wrap(k, nz)
                s = _stencil_sum(x, b, cx, cy, cz, i, j, k, im, ip, jm, jp, km, kp)
                out[i, j, k] = old + omega * (s / diag[i, j, k] - old)


@njit(**_JIT, parallel=True)
def residual(x, b, cx, cy, cz, diag, out, periodic):
    """``out = b − A x`` on the unknowns (A x = diag·x − Σ c x_n), zero on fixed nodes."""
    nx, ny, nz = x.shape
    lo = 0 if periodic else 1
    for i in prange(nx):
        im, ip = _wrap(i, nx)
        for j in range(ny):
            jm, jp = _wrap(j, ny)
            for k in range(nz):
                inside = lo <= i < nx - lo and lo <= j < ny - lo and lo <= k < nz - lo
                if not inside:
                    out[i, j, k] = 0
                    continue
                km, kp = _wrap(k, nz)
                s = _stencil_sum(x, b, cx, cy, cz, i, j, k, im, ip, jm, jp, km, kp)
                out[i, j, k] = s - diag[i, j, k] * x[i, j, k]


@njit(**_JIT, parallel=True)
def residual_sumsq(x, b, cx, cy, cz, diag, periodic):
    """Σ (b − A x)² over the unknowns in float64 (one partial per plane, fixed-order sum)."""
    nx, ny, nz = x.shape
    lo = 0 if periodic else 1
    partial = np.zeros(nx, dtype=np.float64)
    for i in prange(lo, nx - lo):
        im, ip = _wrap(i, nx)
        acc = 0.0
        for j in range(lo, ny - lo):
            jm, jp = _wrap(j, ny)
            for k in range(lo, nz - lo):
                km, kp = _wrap(k, nz)
                s = _stencil_sum(x, b, cx, cy, cz, i, j, k, im, ip, jm, jp, km, kp)
                r = np.float64(s) - np.float64(diag[i, j, k]) * np.float64(x[i, j, k])
                acc += r * r
        partial[i] = acc
    total = 0.0
    for i in range(nx):
        total += partial[i]
    return total


@njit(**_JIT, parallel=True)
def plane_sums(x):
    """Per-x-plane float64 sums (add them in order for a deterministic total)."""
    nx, ny, nz = x.shape
    partial = np.zeros(nx, dtype=np.float64)
    for i in prange(nx):
        acc = 0.0
        for j in range(ny):
            for k in range(nz):
                acc += np.float64(x[i, j, k])
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


@njit(**_JIT, parallel=True)
def assemble_rhs(phi_c, ex, ey, ez, kappa2, has_kappa2, eps_c, hx2, hy2, hz2, out, periodic):
    """The right-hand side of DESIGN §1, in float64 arithmetic, written to ``out``.

    ``b_s = Σ_n (ε_{s,n} − ε_c)(φc_n − φc_s)/h² − κ̄²_s φc_s``; a term whose face equals ε_c (or
    whose κ̄² is zero) is skipped, so a charge on a node (φ_c = ±inf) never forms 0·inf.
    Fixed (Dirichlet) nodes get zero.
    """
    nx, ny, nz = phi_c.shape
    lo = 0 if periodic else 1
    for i in prange(nx):
        im, ip = _wrap(i, nx)
        for j in range(ny):
            jm, jp = _wrap(j, ny)
            for k in range(nz):
                inside = lo <= i < nx - lo and lo <= j < ny - lo and lo <= k < nz - lo
                if not inside:
                    out[i, j, k] = 0
                    continue
                km, kp = _wrap(k, nz)
                p = np.float64(phi_c[i, j, k])
                acc = 0.0
                acc += _face_term(ex[im, j, k], eps_c, phi_c[im, j, k], p) / hx2
                acc += _face_term(ex[i, j, k], eps_c, phi_c[ip, j, k], p) / hx2
                acc += _face_term(ey[i, jm, k], eps_c, phi_c[i, jm, k], p) / hy2
                acc += _face_term(ey[i, j, k], eps_c, phi_c[i, jp, k], p) / hy2
                acc += _face_term(ez[i, j, km], eps_c, phi_c[i, j, km], p) / hz2
                acc += _face_term(ez[i, j, k], eps_c, phi_c[i, j, kp], p) / hz2
                if has_kappa2:
                    k2 = np.float64(kappa2[i, j, k])
                    if k2 != 0.0:
                        acc -= k2 * p
                out[i, j, k] = acc


@njit(**_JIT, inline="always")
def _face_term(eps_face, eps_c, phi_n, phi_s):
    w = np.float64(eps_face) - eps_c
    if w == 0.0:
        return 0.0
    return w * (np.float64(phi_n) - phi_s)
