"""Node-by-node CPU kernels: the references the vectorised and CUDA kernels are tested against.

They visit one node at a time, in the plainest loop, with the operator's bodies
(:mod:`pbsolver.backends.bodies.operator`, compiled for the CPU as the package's kernels use them).
"""

from __future__ import annotations

from numba import njit, prange

from pbsolver.backends.cpu.kernels import B, stencil_sum_at


@njit(cache=True, parallel=True)
def rb_sor_color(x, b, cx, cy, cz, diag, color, omega, periodic):
    """Update the nodes with ``(i + j + k) % 2 == color`` in place (over-relaxed Gauss–Seidel)."""
    nx, ny, nz = x.shape
    lo = 0 if periodic else 1
    for i in prange(lo, nx - lo):
        im, ip = B.neighbours(i, nx)
        for j in range(lo, ny - lo):
            jm, jp = B.neighbours(j, ny)
            k0 = lo + ((i + j + lo + color) & 1)
            for k in range(k0, nz - lo, 2):
                km, kp = B.neighbours(k, nz)
                s = stencil_sum_at(x, b, cx, cy, cz, i, j, k, im, ip, jm, jp, km, kp)
                x[i, j, k] = B.relax(x[i, j, k], s, diag[i, j, k], omega)


@njit(cache=True, parallel=True)
def residual(x, b, cx, cy, cz, diag, out, periodic):
    """``out = b − A x`` on the unknowns (A x = diag·x − Σ c x_n), zero on fixed nodes."""
    nx, ny, nz = x.shape
    lo = 0 if periodic else 1
    for i in prange(nx):
        im, ip = B.neighbours(i, nx)
        for j in range(ny):
            jm, jp = B.neighbours(j, ny)
            for k in range(nz):
                inside = lo <= i < nx - lo and lo <= j < ny - lo and lo <= k < nz - lo
                if not inside:
                    out[i, j, k] = 0
                    continue
                km, kp = B.neighbours(k, nz)
                s = stencil_sum_at(x, b, cx, cy, cz, i, j, k, im, ip, jm, jp, km, kp)
                out[i, j, k] = B.residual(s, diag[i, j, k], x[i, j, k])
