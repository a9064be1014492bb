"""numba-cuda kernels that assemble and take apart a stack of Dirichlet problems on the device.

The array code of :mod:`pbsolver.solving.batched` (NumPy/CuPy, the reference) costs dozens of
small array operations a problem, host time that can exceed the stacked solve itself. Here the
problems' grids are copied one after the other into staging buffers (a copy per grid) and the
arithmetic is one launch for the whole stack (not one a problem: numba's argument handling
costs a launch about a millisecond):

``stack_blocks``
    one thread a node of the stack (every block's ``stride`` planes, padding included): the
    lifted face coefficients, stored diagonal and lifted right-hand side of its block (in the
    checked and in the sweep stencil's dtype), the block's unlifted faces and κ̄² (a stacked
    multigrid hierarchy's inputs), its boundary values (the fixed layer, for :func:`unstack`)
    and its initial guess;
``unstack``
    every block's solved interior inside its boundary values, as one ``(B, nx, ny, nz)`` array.

Inputs are the problems' flat C-ordered float64 grids one after the other; outputs are flat
stacks of ``B · stride · ny · nz`` nodes. The formulas are :mod:`pbsolver.operator`'s, the
right-hand side through the bodies of :mod:`pbsolver.backends.bodies.operator`.
"""

from __future__ import annotations

from numba import cuda, int64

from pbsolver.backends.cuda.kernels import B, store_faces


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
def _store_stencil(out, q, cx, cy, cz, diag, b):
    """Node ``q`` of a stencil's (cx, cy, cz, diag, b) flat arrays."""
    store_faces(out, q, cx, cy, cz)
    out[3][q] = diag
    out[4][q] = b


@cuda.jit(device=True)
def _store(out, out32, q, cx, cy, cz, diag, b):
    """Node ``q`` of the checked and of the sweep stencil."""
    _store_stencil(out, q, cx, cy, cz, diag, b)
    _store_stencil(out32, q, cx, cy, cz, diag, b)


#: Slots of the ``inputs`` tuple and of the per-block ``flags`` of :func:`stack_blocks`.
EPS, EX, EY, EZ, PHIC, K2, G, X0 = range(8)
FROM_NODES, HARMONIC, HAS_K2, HAS_G, HAS_X0 = range(5)
NFLAGS = 5


@cuda.jit
def stack_blocks(inputs, flags, eps_c, h2, shape, stride, out, out32, unl, has_unl, fixed, x):
    """Every block of the stack, one thread a node (see the module docstring).

    ``inputs`` = (ε nodes, ε faces x, y, z, φc, κ̄², boundary values, guess): each the B
    problems' grids one after the other (``B·nx·ny·nz``; a 1-element stand-in when no
    problem has it); ``flags[f·NFLAGS : (f+1)·NFLAGS]`` = (from nodes, harmonic, has κ̄²,
    has boundary values, has a guess) and ``eps_c[f]`` of block f; ``h2`` = (h²x, h²y,
    h²z); ``shape`` = (nx, ny, nz); ``out``/``out32`` = (cx, cy, cz, diag, b) of the checked
    and the sweep stencil;
    ``unl`` = the unlifted faces (x, y, z) and κ̄² (written only when ``has_unl``); ``fixed``
    receives the boundary values on the outer layer (zero elsewhere), ``x`` the guess inside
    (zero elsewhere).
    """
    item = cuda.grid(1)
    nx, ny, nz = int64(shape[0]), int64(shape[1]), int64(shape[2])
    plane = ny * nz
    per_block = int64(stride) * plane
    if item >= int64(eps_c.shape[0]) * per_block:
        return
    f = item // per_block
    local = item - f * per_block
    i = local // plane
    j = (local - i * plane) // nz
    k = local - i * plane - j * nz
    q = item
    if i >= nx:  # a padding plane: decoupled, nothing of the block's own
        _store(out, out32, q, 0.0, 0.0, 0.0, 1.0, 0.0)
        if has_unl:
            for a in range(4):
                unl[a][q] = 0.0
        fixed[q] = 0.0
        x[q] = 0.0
        return
    p = f * nx * plane + local  # the node in the problems' inputs
    from_nodes, harmonic = flags[f * NFLAGS + FROM_NODES] != 0, flags[f * NFLAGS + HARMONIC] != 0
    eps, g, phic = inputs[EPS], inputs[G], inputs[PHIC]
    sx, sy = plane, nz
    # the node's own (unlifted) faces; those leaving the block are zero
    fxp = _face(eps, inputs[EX], from_nodes, harmonic, p, p + sx) if i < nx - 1 else 0.0
    fyp = _face(eps, inputs[EY], from_nodes, harmonic, p, p + sy) if j < ny - 1 else 0.0
    fzp = _face(eps, inputs[EZ], from_nodes, harmonic, p, p + 1) if k < nz - 1 else 0.0
    kk = inputs[K2][p] if flags[f * NFLAGS + HAS_K2] != 0 else 0.0
    if has_unl:
        unl[0][q] = fxp / h2[0]
        unl[1][q] = fyp / h2[1]
        unl[2][q] = fzp / h2[2]
        unl[3][q] = kk
    has_g = flags[f * NFLAGS + HAS_G] != 0
    if i == 0 or i == nx - 1 or j == 0 or j == ny - 1 or k == 0 or k == nz - 1:
        _store(out, out32, q, 0.0, 0.0, 0.0, 1.0, 0.0)  # a fixed node: 1·x = 0
        fixed[q] = g[p] if has_g else 0.0
        x[q] = 0.0
        return
    fxm = _face(eps, inputs[EX], from_nodes, harmonic, p - sx, p)
    fym = _face(eps, inputs[EY], from_nodes, harmonic, p - sy, p)
    fzm = _face(eps, inputs[EZ], from_nodes, harmonic, p - 1, p)
    b = B.rhs_node(
        phic[p], eps_c[f], fxm, phic[p - sx], fxp, phic[p + sx], fym, phic[p - sy],
        fyp, phic[p + sy], fzm, phic[p - 1], fzp, phic[p + 1], h2[0], h2[1], h2[2], kk,
    )  # fmt: skip
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
    x[q] = inputs[X0][p] if flags[f * NFLAGS + HAS_X0] != 0 else 0.0


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
