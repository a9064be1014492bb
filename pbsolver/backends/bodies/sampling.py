"""Plain-Python body of field sampling: φ and ∇φ at a point of a node field, by trilinear weights.

The gradient at a node is the central difference (one-sided on the outer layer of a Dirichlet
grid, as :func:`numpy.gradient`; wrapped on a periodic one); value and gradient at the point are
the trilinear interpolations of the node values and node gradients. The CPU compiles this body
with ``numba.njit`` (:mod:`pbsolver.backends.cpu.sampling`); a CUDA kernel compiles the same
function with ``cuda.jit(device=True)``. Importing this module imports no numba.
"""

from __future__ import annotations

import math


def sample_body(phi, row, nx, ny, nz, hx, hy, hz, s0, s1, s2, periodic, out):
    """φ and ∇φ at the point of node coordinates (s0, s1, s2) into ``out[0:4]``.

    Parameters
    ----------
    phi : array (rows, ny, nz)
        Node values; the grid's block starts at ``phi[row]`` (0 for a single grid; the block's
        first row in a stack of grids along the first axis).
    row : int
        First row of the grid's block in ``phi``.
    nx, ny, nz : int
        Nodes of the grid.
    hx, hy, hz : float
        Node spacing, Å.
    s0, s1, s2 : float
        The point in node units, ``(p − origin) / h`` per axis. A Dirichlet grid clamps them to
        the grid (callers check that points lie inside); a periodic grid wraps them.
    periodic : bool
        Wrap indices around (gradients by central differences everywhere).
    out : array (4,)
        Receives φ, ∂φ/∂x, ∂φ/∂y, ∂φ/∂z.

    Notes
    -----
    Corners of zero weight are skipped, so that a node value of ±inf (a charge on a node) next
    to a point does not turn the result into NaN.
    """
    if periodic:
        s0 = s0 % nx
        s1 = s1 % ny
        s2 = s2 % nz
        i0 = min(int(math.floor(s0)), nx - 1)
        j0 = min(int(math.floor(s1)), ny - 1)
        k0 = min(int(math.floor(s2)), nz - 1)
    else:
        s0 = min(max(s0, 0.0), nx - 1.0)
        s1 = min(max(s1, 0.0), ny - 1.0)
        s2 = min(max(s2, 0.0), nz - 1.0)
        i0 = min(int(math.floor(s0)), nx - 2)
        j0 = min(int(math.floor(s1)), ny - 2)
        k0 = min(int(math.floor(s2)), nz - 2)
    w0, w1, w2 = s0 - i0, s1 - j0, s2 - k0
    val = 0.0
    gx = 0.0
    gy = 0.0
    gz = 0.0
    for ci in range(2):
        wi = w0 if ci == 1 else 1.0 - w0
        for cj in range(2):
            wj = w1 if cj == 1 else 1.0 - w1
            for ck in range(2):
                wk = w2 if ck == 1 else 1.0 - w2
                w = wi * wj * wk
                if w == 0.0:
                    continue
                i, j, k = i0 + ci, j0 + cj, k0 + ck
                if periodic:
                    i, j, k = i % nx, j % ny, k % nz
                    iu, id_, du = (i + 1) % nx, (i - 1) % nx, 2.0 * hx
                    ju, jd, dv = (j + 1) % ny, (j - 1) % ny, 2.0 * hy
                    ku, kd, dw = (k + 1) % nz, (k - 1) % nz, 2.0 * hz
                else:
                    iu, id_ = min(i + 1, nx - 1), max(i - 1, 0)
                    ju, jd = min(j + 1, ny - 1), max(j - 1, 0)
                    ku, kd = min(k + 1, nz - 1), max(k - 1, 0)
                    du, dv, dw = hx * (iu - id_), hy * (ju - jd), hz * (ku - kd)
                val += w * phi[row + i, j, k]
                gx += w * (phi[row + iu, j, k] - phi[row + id_, j, k]) / du
                gy += w * (phi[row + i, ju, k] - phi[row + i, jd, k]) / dv
                gz += w * (phi[row + i, j, ku] - phi[row + i, j, kd]) / dw
    out[0] = val
    out[1] = gx
    out[2] = gy
    out[3] = gz
