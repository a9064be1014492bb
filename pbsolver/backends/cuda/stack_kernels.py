"""numba-cuda kernels that assemble and take apart a stack of Dirichlet problems on the device.

:func:`pbsolver.batched.stack_problems` (NumPy/CuPy array code, the reference) costs dozens of
small array operations a problem: about 42 ms of host time for 16 problems of 97³ on the H200
machine, more than the stacked multigrid solve itself. The same arithmetic runs here as one
kernel launch a problem:

``stack_block``
    one thread a node of one block (its ``stride`` planes, padding included): the lifted face
    coefficients, stored diagonal and lifted right-hand side of the block (both in the checked
    and in the sweep stencil's dtype), the block's unlifted faces and κ̄² (a stacked multigrid
    hierarchy's inputs), its boundary values (the fixed layer, for :func:`unstack`) and its
    initial guess;
``unstack``
    every block's solved interior inside its boundary values, as one ``(B, nx, ny, nz)`` array.

Inputs are one problem's flat C-ordered float64 grids; outputs are flat stacks of
``B · stride · ny · nz`` nodes, the block starting at element ``base``. The formulas are
:mod:`pbsolver.operator`'s (see :class:`pbsolver.batched.StackedSystem`).
"""

from __future__ import annotations

from numba import cuda, int64


@cuda.jit(device=True)
def _face(eps, faces, from_nodes, harmonic, p, q):
    """ε of the face joining nodes ``p`` and ``q`` (from a node map, or read from ``faces``)."""
    if from_nodes:
        e = eps[p]
        f = eps[q]
        if harmonic:
            return 2.0 * e * f / (e + f)
        return 0.5 * (e + f)
    return faces[p]


@cuda.jit(device=True)
def _flux(eps_face, eps_c, h2, phi_n, phi_s):
    """(ε − ε_c)(φc_n − φc_s)/h²; exactly zero where ε = ε_c (even with φc = ±inf)."""
    w = eps_face - eps_c
    if w == 0.0:
        return 0.0
    return w * (phi_n - phi_s) / h2


@cuda.jit(device=True)
def _store(out, out32, q, cx, cy, cz, diag, b):
    out[0][q] = cx
    out[1][q] = cy
    out[2][q] = cz
    out[3][q] = diag
    out[4][q] = b
    out32[0][q] = cx
    out32[1][q] = cy
    out32[2][q] = cz
    out32[3][q] = diag
    out32[4][q] = b


@cuda.jit
def stack_block(eps, ex, ey, ez, from_nodes, harmonic, phic, k2, has_k2, g, has_g, x0, has_x0,
                eps_c, h2, shape, stride, base, out, out32, unl, fixed, x):  # fmt: skip
    """Block ``base`` of the stack from one problem (see the module docstring).

    ``eps`` is the node map when ``from_nodes`` (``ex, ey, ez`` unused), else ``ex, ey, ez``
    are the face permittivities; ``h2`` = (h²x, h²y, h²z); ``shape`` = (nx, ny, nz);
    ``out``/``out32`` = (cx, cy, cz, diag, b) of the checked and the sweep stencil; ``unl`` =
    the unlifted faces (x, y, z) and κ̄²; ``fixed`` receives the boundary values on the outer
    layer (zero elsewhere), ``x`` the guess inside (zero elsewhere).
    """
    item = cuda.grid(1)
    nx, ny, nz = int64(shape[0]), int64(shape[1]), int64(shape[2])
    plane = ny * nz
    if item >= int64(stride) * plane:
        return
    i = item // plane
    j = (item - i * plane) // nz
    k = item - i * plane - j * nz
    q = int64(base) + item
    if i >= nx:  # a padding plane: decoupled, nothing of the block's own
        _store(out, out32, q, 0.0, 0.0, 0.0, 1.0, 0.0)
        for a in range(4):
            unl[a][q] = 0.0
        fixed[q] = 0.0
        x[q] = 0.0
        return
    p = item
    sx, sy = plane, nz
    # the node's own (unlifted) faces; those leaving the block are zero
    fxp = _face(eps, ex, from_nodes, harmonic, p, p + sx) if i < nx - 1 else 0.0
    fyp = _face(eps, ey, from_nodes, harmonic, p, p + sy) if j < ny - 1 else 0.0
    fzp = _face(eps, ez, from_nodes, harmonic, p, p + 1) if k < nz - 1 else 0.0
    kk = k2[p] if has_k2 else 0.0
    unl[0][q] = fxp / h2[0]
    unl[1][q] = fyp / h2[1]
    unl[2][q] = fzp / h2[2]
    unl[3][q] = kk
    if i == 0 or i == nx - 1 or j == 0 or j == ny - 1 or k == 0 or k == nz - 1:
        _store(out, out32, q, 0.0, 0.0, 0.0, 1.0, 0.0)  # a fixed node: 1·x = 0
        fixed[q] = g[p] if has_g else 0.0
        x[q] = 0.0
        return
    fxm = _face(eps, ex, from_nodes, harmonic, p - sx, p)
    fym = _face(eps, ey, from_nodes, harmonic, p - sy, p)
    fzm = _face(eps, ez, from_nodes, harmonic, p - 1, p)
    ps = phic[p]
    b = (
        _flux(fxm, eps_c, h2[0], phic[p - sx], ps)
        + _flux(fxp, eps_c, h2[0], phic[p + sx], ps)
        + _flux(fym, eps_c, h2[1], phic[p - sy], ps)
        + _flux(fyp, eps_c, h2[1], phic[p + sy], ps)
        + _flux(fzm, eps_c, h2[2], phic[p - 1], ps)
        + _flux(fzp, eps_c, h2[2], phic[p + 1], ps)
    )
    if kk != 0.0:
        b -= kk * ps
    if has_g:  # fixed neighbours on the outer layer move to the right-hand side ("lifting")
        if i == 1:
            b += fxm / h2[0] * g[p - sx]
        if i == nx - 2:
            b += fxp / h2[0] * g[p + sx]
        if j == 1:
            b += fym / h2[1] * g[p - sy]
        if j == ny - 2:
            b += fyp / h2[1] * g[p + sy]
        if k == 1:
            b += fzm / h2[2] * g[p - 1]
        if k == nz - 2:
            b += fzp / h2[2] * g[p + 1]
    diag = (fxp + fxm) / h2[0] + (fyp + fym) / h2[1] + (fzp + fzm) / h2[2] + kk
    # faces between two unknowns only: the fixed layer is decoupled
    cx = fxp / h2[0] if i < nx - 2 else 0.0
    cy = fyp / h2[1] if j < ny - 2 else 0.0
    cz = fzp / h2[2] if k < nz - 2 else 0.0
    _store(out, out32, q, cx, cy, cz, diag, b)
    fixed[q] = 0.0
    x[q] = x0[p] if has_x0 else 0.0


@cuda.jit
def unstack(x, fixed, shape, stride, out):
    """``out[f, i, j, k]``: block f's solution inside, its boundary values on the outer layer."""
    item = cuda.grid(1)
    nx, ny, nz = int64(shape[0]), int64(shape[1]), int64(shape[2])
    block = nx * ny * nz
    if item >= int64(out.size):
        return
    f = item // block
    p = item - f * block
    i = p // (ny * nz)
    j = (p - i * ny * nz) // nz
    k = p - i * ny * nz - j * nz
    q = f * int64(stride) * ny * nz + p
    if i == 0 or i == nx - 1 or j == 0 or j == ny - 1 or k == 0 or k == nz - 1:
        out[item] = fixed[q]
    else:
        out[item] = x[q]
