"""numba-cuda kernels of the CUDA backend (raw flat arrays only; no allocation, no streams).

Every kernel takes C-ordered grids as **flat 1-D arrays** plus ``(nx, ny, nz)``: node
``(i, j, k)`` is element ``p = (i·ny + j)·nz + k`` (``k``, the z index, varies fastest, so
``threadIdx.x`` walks ``k`` and loads coalesce). Index arithmetic is unsigned 64-bit on purpose:
with signed indices numba emits negative-index wrap-around code for every load, a large share of
a stencil kernel's bandwidth.

The per-node arithmetic is :mod:`pbsolver.backends.bodies.operator`'s, compiled here as device
functions (the CPU kernels of :mod:`pbsolver.backends.cpu.kernels` compile the same bodies);
these kernels hold the indexing. Conventions shared with the CPU kernels:

* ``cx[p]`` is the face coefficient ε/h² between ``p`` and its +x neighbour, so the −x face of
  ``p`` is ``cx[p_{i-1}]``;
* colour of a node: ``(i + j + k) & 1``; colour 0 ("red") is relaxed first;
* Dirichlet grids update the interior only; periodic grids wrap.

The diagonal comes in one of three forms (``dmode``), chosen per stencil by the backend:

``DIAG_FACES``
    recomputed from the six faces the update loads anyway (no salt): no diagonal array is read;
``DIAG_FACES_SHIFT``
    faces plus ``d[p]`` = κ̄² (salt);
``DIAG_STORED``
    ``d[p]`` is the whole diagonal (stencils built elsewhere, e.g. multigrid coarse levels).

Determinism: no kernel uses atomics. Red–black colour passes read only the other colour;
reductions write one partial per block and a single block adds the partials in a fixed order.
Reruns are bitwise identical.

Kernels with compile-time parameters (block shape) come from cached factories; all compile
lazily on first launch (no signatures here).
"""

from __future__ import annotations

import functools

import numpy as np
from numba import cuda, float64, int64, uint64

from pbsolver.backends.bodies.operator import FACE_MAPS, compile_bodies
from pbsolver.backends.launch_sizes import FINISH_THREADS, simulated

#: The operator's bodies as device functions (also used by the stack and coarse kernels).
B = compile_bodies(cuda.jit(device=True))

ZERO = np.uint64(0)
ONE = np.uint64(1)

DIAG_FACES = 0
DIAG_FACES_SHIFT = 1
DIAG_STORED = 2


# ---------------------------------------------------------------------- device helpers
@cuda.jit(device=True)
def _minus(i, n, stride, p):
    """Flat index of the −1 neighbour along an axis (wrapping at 0)."""
    if i > ZERO:
        return p - stride
    return p + (n - ONE) * stride


@cuda.jit(device=True)
def _plus(i, n, stride, p):
    """Flat index of the +1 neighbour along an axis (wrapping at n − 1)."""
    if i + ONE < n:
        return p + stride
    return p - (n - ONE) * stride


@cuda.jit(device=True)
def _inside(i, j, k, nx, ny, nz, periodic):
    """True on the unknowns: everywhere (periodic) or off the outer layer (Dirichlet)."""
    if periodic:
        return True
    return i >= ONE and j >= ONE and k >= ONE and i + ONE < nx and j + ONE < ny and k + ONE < nz


@cuda.jit(device=True)
def _diag(a0, a1, a2, a3, a4, a5, d, dmode, p):
    """The operator's diagonal at ``p`` (see the module docstring for ``dmode``)."""
    if dmode == DIAG_STORED:
        return d[p]
    s = B.diagonal_sum(a0, a1, a2, a3, a4, a5)
    if dmode == DIAG_FACES_SHIFT:
        s += d[p]
    return s


@cuda.jit(device=True)
def _neighbours(i, j, k, nx, ny, nz, p):
    """Flat indices of the six neighbours (−x, +x, −y, +y, −z, +z), wrapping."""
    sy = nz
    sx = ny * nz
    return (
        _minus(i, nx, sx, p),
        _plus(i, nx, sx, p),
        _minus(j, ny, sy, p),
        _plus(j, ny, sy, p),
        _minus(k, nz, ONE, p),
        _plus(k, nz, ONE, p),
    )


@cuda.jit(device=True)
def _sum_diag(x, b, cx, cy, cz, d, dmode, p, im, ip, jm, jp, km, kp):
    """``(b + Σ c·x_n, diag)`` at ``p``."""
    a0 = cx[im]
    a1 = cx[p]
    a2 = cy[jm]
    a3 = cy[p]
    a4 = cz[km]
    a5 = cz[p]
    s = B.stencil_sum(b[p], a0, x[im], a1, x[ip], a2, x[jm], a3, x[jp], a4, x[km], a5, x[kp])
    return s, _diag(a0, a1, a2, a3, a4, a5, d, dmode, p)


@cuda.jit(device=True)
def _grid3():
    """The calling thread's (x, y, z) global index as uint64."""
    return (
        uint64(cuda.blockIdx.x) * uint64(cuda.blockDim.x) + uint64(cuda.threadIdx.x),
        uint64(cuda.blockIdx.y) * uint64(cuda.blockDim.y) + uint64(cuda.threadIdx.y),
        uint64(cuda.blockIdx.z) * uint64(cuda.blockDim.z) + uint64(cuda.threadIdx.z),
    )


@cuda.jit(device=True)
def _node(nx, ny, nz):
    """(on the grid, i, j, k, p, nx, ny, nz) of the calling thread, one thread a node (uint64)."""
    nx = uint64(nx)
    ny = uint64(ny)
    nz = uint64(nz)
    k, j, i = _grid3()
    return i < nx and j < ny and k < nz, i, j, k, (i * ny + j) * nz + k, nx, ny, nz


#: What :func:`_stencil_node` found at the calling thread: no node, a fixed node, an unknown.
OFF, FIXED, UNKNOWN = 0, 1, 2


@cuda.jit(device=True)
def _stencil_node(nx, ny, nz, periodic):
    """The calling thread's node of a one-thread-a-node stencil kernel.

    Returns ``(where, p, im, ip, jm, jp, km, kp)``: ``where`` is :data:`OFF` (no node),
    :data:`FIXED` (``p`` is a fixed node) or :data:`UNKNOWN` (``p`` and its six neighbours'
    flat indices, wrapping; they are ``p`` otherwise).
    """
    on, i, j, k, p, nx, ny, nz = _node(nx, ny, nz)
    if not on:
        return OFF, p, p, p, p, p, p, p
    if not _inside(i, j, k, nx, ny, nz, periodic):
        return FIXED, p, p, p, p, p, p, p
    im, ip, jm, jp, km, kp = _neighbours(i, j, k, nx, ny, nz, p)
    return UNKNOWN, p, im, ip, jm, jp, km, kp


@cuda.jit(device=True)
def store_faces(out, q, cx, cy, cz):
    """``out[0..2][q] = cx, cy, cz``: a node's faces into (cx, cy, cz, …) flat arrays."""
    out[0][q] = cx
    out[1][q] = cy
    out[2][q] = cz


# ---------------------------------------------------------------------- red–black SOR
@cuda.jit
def rb_point(x, b, cx, cy, cz, d, dmode, nx, ny, nz, color, omega, periodic):
    """One colour pass, one thread a node, colour-compacted along z.

    Thread ``(kk, j, i)`` owns node ``k = k0 + 2·kk`` of colour ``color``; launch over
    ``(ceil(n_z/2), n_y, n_x)`` unknowns (offset by 1 on Dirichlet grids).
    """
    nx = uint64(nx)
    ny = uint64(ny)
    nz = uint64(nz)
    lo = ZERO if periodic else ONE
    kk, j, i = _grid3()
    i += lo
    j += lo
    if i + lo >= nx or j + lo >= ny:
        return
    k = lo + ((i + j + lo + uint64(color)) & ONE) + kk + kk
    if k + lo >= nz:
        return
    p = (i * ny + j) * nz + k
    im, ip, jm, jp, km, kp = _neighbours(i, j, k, nx, ny, nz, p)
    s, diag = _sum_diag(x, b, cx, cy, cz, d, dmode, p, im, ip, jm, jp, km, kp)
    x[p] = B.relax(x[p], s, diag, omega)


# ---------------------------------------------------------------------- Jacobi, residual
@cuda.jit
def jacobi_point(x, out, b, cx, cy, cz, d, dmode, nx, ny, nz, omega, periodic):
    """``out = x + ω (s/diag − x)`` on the unknowns, fixed nodes copied (two buffers)."""
    where, p, im, ip, jm, jp, km, kp = _stencil_node(nx, ny, nz, periodic)
    if where == FIXED:
        out[p] = x[p]
    elif where == UNKNOWN:
        s, diag = _sum_diag(x, b, cx, cy, cz, d, dmode, p, im, ip, jm, jp, km, kp)
        out[p] = B.relax(x[p], s, diag, omega)


@cuda.jit
def residual_point(x, b, cx, cy, cz, d, dmode, nx, ny, nz, out, periodic):
    """``out = b − A x`` on the unknowns, zero on fixed nodes (``x`` may be float64)."""
    where, p, im, ip, jm, jp, km, kp = _stencil_node(nx, ny, nz, periodic)
    if where == FIXED:
        out[p] = 0
    elif where == UNKNOWN:
        s, diag = _sum_diag(x, b, cx, cy, cz, d, dmode, p, im, ip, jm, jp, km, kp)
        out[p] = B.residual(s, diag, x[p])


# ---------------------------------------------------------------------- reductions
@cuda.jit(device=True)
def _block_sum(sm, value, nthreads):
    """Tree-sum ``value`` over the block (fixed order); the total is valid in thread 0."""
    t = cuda.threadIdx.x + cuda.threadIdx.y * cuda.blockDim.x
    sm[t] = value
    cuda.syncthreads()
    step = nthreads // 2
    while step > 0:
        if t < step:
            sm[t] += sm[t + step]
        cuda.syncthreads()
        step //= 2
    return sm[0]


@cuda.jit(device=True)
def _column(nx, ny, nz, chunk):
    """(j, k, i0, i1, nx, ny, nz): the thread's (y, z) column and its planes ``[i0, i1)``.

    Block row ``blockIdx.z`` takes x-planes ``[i0, i1)``, ``chunk`` of them (uint64); a thread
    off the grid gets no planes (``i1 = i0``).
    """
    nx = uint64(nx)
    ny = uint64(ny)
    nz = uint64(nz)
    k, j, _ = _grid3()
    i0 = uint64(cuda.blockIdx.z) * uint64(chunk)
    i1 = min(i0 + uint64(chunk), nx) if k < nz and j < ny else i0
    return j, k, i0, i1, nx, ny, nz


@cuda.jit(device=True)
def _unknown_column(nx, ny, nz, chunk, periodic):
    """:func:`_column` cut to the unknowns (``_inside``): ``(j, k, i0, i1, nx, ny, nz)``.

    On a Dirichlet grid a column of the outer layer gets no planes, any other the planes off
    the outer layer.
    """
    j, k, i0, i1, nx, ny, nz = _column(nx, ny, nz, chunk)
    if not periodic:
        if j < ONE or k < ONE or j + ONE >= ny or k + ONE >= nz:
            i1 = i0
        else:
            i0 = max(i0, ONE)
            i1 = min(i1, nx - ONE)
    return j, k, i0, i1, nx, ny, nz


@cuda.jit(device=True)
def _flat_stencil(i, j, k, nx, ny, nz):
    """``(p, im, ip, jm, jp, km, kp)``: node (i, j, k)'s flat index and its neighbours'."""
    p = (i * ny + j) * nz + k
    im, ip, jm, jp, km, kp = _neighbours(i, j, k, nx, ny, nz, p)
    return p, im, ip, jm, jp, km, kp


@cuda.jit(device=True)
def _store_partial(sm, acc, nthreads, partials):
    """``partials[block] = Σ acc`` over the block's threads, added in a fixed order."""
    total = _block_sum(sm, acc, nthreads)
    if cuda.threadIdx.x == 0 and cuda.threadIdx.y == 0:
        blk = cuda.blockIdx.y + cuda.gridDim.y * cuda.blockIdx.z
        partials[cuda.blockIdx.x + cuda.gridDim.x * blk] = total


def _reduction_threads(bk: int, bj: int) -> int:
    """Threads of a ``(bk, bj)`` reduction block; ValueError unless a power of two."""
    nthreads = bk * bj
    if nthreads & (nthreads - 1):
        raise ValueError(f"reduction block {bk}x{bj} is not a power of two")
    return nthreads


@functools.cache
def reductions(bk: int, bj: int):
    """Partial-sum kernels for a ``(bk, bj)`` block (``bk·bj`` a power of two).

    Returns
    -------
    (residual_sumsq, sum_values) : kernels
        ``residual_sumsq(x, b, cx, cy, cz, d, dmode, nx, ny, nz, periodic, chunk, partials)``
        and ``sum_values(x, nx, ny, nz, chunk, partials)``; each block marches ``chunk``
        x-planes of a ``(bk, bj)`` column tile and writes its float64 sum to
        ``partials[block]``. Launch over ``(ceil(nz/bk), ceil(ny/bj), ceil(nx/chunk))``, then
        :func:`finish_sum`.
    """
    nthreads = _reduction_threads(bk, bj)

    @cuda.jit
    def residual_sumsq(x, b, cx, cy, cz, d, dmode, nx, ny, nz, periodic, chunk, partials):
        sm = cuda.shared.array(nthreads, dtype=float64)
        j, k, i, i1, unx, uny, unz = _unknown_column(nx, ny, nz, chunk, periodic)
        acc = float64(0.0)
        while i < i1:
            p, im, ip, jm, jp, km, kp = _flat_stencil(i, j, k, unx, uny, unz)
            s, diag = _sum_diag(x, b, cx, cy, cz, d, dmode, p, im, ip, jm, jp, km, kp)
            r = B.residual(float64(s), float64(diag), float64(x[p]))
            acc += r * r
            i += ONE
        _store_partial(sm, acc, nthreads, partials)

    @cuda.jit
    def sum_values(x, nx, ny, nz, chunk, partials):
        sm = cuda.shared.array(nthreads, dtype=float64)
        j, k, i, i1, _, uny, unz = _column(nx, ny, nz, chunk)
        acc = float64(0.0)
        while i < i1:
            acc += float64(x[(i * uny + j) * unz + k])
            i += ONE
        _store_partial(sm, acc, nthreads, partials)

    return residual_sumsq, sum_values


@cuda.jit
def finish_sum(partials, n, out, slot):
    """``out[slot] = Σ partials[:n]`` in a fixed order (one block of FINISH_THREADS)."""
    sm = cuda.shared.array(FINISH_THREADS, dtype=float64)
    t = cuda.threadIdx.x
    acc = float64(0.0)
    q = t
    while q < n:
        acc += partials[q]
        q += FINISH_THREADS
    total = _block_sum(sm, acc, FINISH_THREADS)
    if t == 0:
        out[slot] = total


@cuda.jit
def block_sumsq(a, per_block, chunks, partials):
    """``partials[f·chunks + c] = Σ a²`` over chunk ``c`` of block ``f`` of a stack.

    Block ``f`` is ``a[f·per_block : (f+1)·per_block]``; grid ``(chunks, blocks)`` of
    :data:`FINISH_THREADS` threads, each summing in a fixed order (reruns are bitwise equal).
    """
    sm = cuda.shared.array(FINISH_THREADS, dtype=float64)
    c, f, t = int64(cuda.blockIdx.x), int64(cuda.blockIdx.y), int64(cuda.threadIdx.x)
    per = int64(per_block)
    length = (per + chunks - 1) // chunks
    start = f * per + c * length
    stop = min(start + length, (f + 1) * per)
    acc = float64(0.0)
    q = start + t
    while q < stop:
        v = a[q]
        acc += v * v
        q += FINISH_THREADS
    total = _block_sum(sm, acc, FINISH_THREADS)
    if t == 0:
        partials[f * chunks + c] = total


@cuda.jit(device=True)
def _nan_max(a, b):
    """max(a, b) that keeps a NaN (a NaN residual must reach the host as NaN)."""
    if a != a:
        return a
    if b != b or b > a:
        return b
    return a


@cuda.jit
def weighted_block_max(partials, chunks, weights, n_blocks, out, slot):
    """``out[slot] = max_f w_f² Σ_c partials[f·chunks + c]`` (one block of FINISH_THREADS)."""
    sm = cuda.shared.array(FINISH_THREADS, dtype=float64)
    t = cuda.threadIdx.x
    best = float64(0.0)
    f = t
    while f < n_blocks:
        s = float64(0.0)
        for c in range(chunks):
            s += partials[f * chunks + c]
        w = weights[f]
        # a block without a threshold of its own (w = 0) counts only with a NaN
        best = _nan_max(best, w * w * s if w != 0.0 else (s if s != s else 0.0))
        f += FINISH_THREADS
    sm[t] = best
    cuda.syncthreads()
    step = FINISH_THREADS // 2
    while step > 0:
        if t < step:
            sm[t] = _nan_max(sm[t], sm[t + step])
        cuda.syncthreads()
        step //= 2
    if t == 0:
        out[slot] = sm[0]


# ---------------------------------------------------------------------- elementwise
@cuda.jit
def axpy(y, x, a, n):
    """``y += a·x`` (flat; ``y`` may be float64 while ``x`` is float32)."""
    p = cuda.grid(1)
    if p < n:
        y[p] += a * x[p]


@cuda.jit
def axpby(y, x, a, b, n):
    """``y = a·x + b·y`` (flat)."""
    p = cuda.grid(1)
    if p < n:
        y[p] = a * x[p] + b * y[p]


@cuda.jit
def fill(x, value, n):
    """``x[:] = value`` (flat)."""
    p = cuda.grid(1)
    if p < n:
        x[p] = value


@cuda.jit
def copy(dst, src, n):
    """``dst[:] = src`` (flat, casting)."""
    p = cuda.grid(1)
    if p < n:
        dst[p] = src[p]


@cuda.jit
def dense_matvec(x, inverse, b, n):
    """``x = inverse @ b`` (flat views; ``inverse`` row-major n×n), one thread a row, float64 sums.

    The multigrid's exact coarsest solve: a kernel, not cuBLAS, because cuBLAS refuses to run
    inside a CUDA graph capture and the whole cycle is captured.
    """
    i = cuda.grid(1)
    if i < n:
        acc = float64(0.0)
        row = i * n
        for j in range(n):
            acc += float64(inverse[row + j]) * float64(b[j])
        x[i] = acc


@cuda.jit
def subtract_mean(x, sums, slot, n):
    """``x -= sums[slot] / n`` with the sum read on the device (no host round trip)."""
    p = cuda.grid(1)
    if p < n:
        x[p] -= sums[slot] / float64(n)


@cuda.jit
def dot_partials(x, y, n, partials):
    """Per-block float64 partials of ``Σ x·y`` over a grid-stride loop (fixed grid)."""
    sm = cuda.shared.array(FINISH_THREADS, dtype=float64)
    t = cuda.threadIdx.x
    acc = float64(0.0)
    p = cuda.blockIdx.x * FINISH_THREADS + t
    stride = cuda.gridDim.x * FINISH_THREADS
    while p < n:
        acc += float64(x[p]) * float64(y[p])
        p += stride
    total = _block_sum(sm, acc, FINISH_THREADS)
    if t == 0:
        partials[cuda.blockIdx.x] = total


# ---------------------------------------------------------------------- set-up and a problem's
# operator (pbsolver.backends.ProblemOperator): faces formed from the problem's own maps, float64
@cuda.jit(device=True)
def _faces_at(e0, e1, e2, mode, p, im, ip, jm, jp, km, kp):
    """The six face permittivities (−x, +x, −y, +y, −z, +z) at ``p``, in float64.

    ``mode`` FACE_MAPS: ``e0, e1, e2`` are the face maps; else ``e0`` is the node map and
    ``mode`` its face rule (``B.face_rule``, the lower-index node first).
    """
    if mode == FACE_MAPS:
        return (float64(e0[im]), float64(e0[p]), float64(e1[jm]), float64(e1[p]),
                float64(e2[km]), float64(e2[p]))  # fmt: skip
    s = float64(e0[p])
    return (
        B.face_rule(float64(e0[im]), s, mode),
        B.face_rule(s, float64(e0[ip]), mode),
        B.face_rule(float64(e0[jm]), s, mode),
        B.face_rule(s, float64(e0[jp]), mode),
        B.face_rule(float64(e0[km]), s, mode),
        B.face_rule(s, float64(e0[kp]), mode),
    )


@cuda.jit(device=True)
def _operator_residual(x, b, e0, e1, e2, mode, k2, has_k2, ihx2, ihy2, ihz2, p, im, ip, jm, jp,
                       km, kp):  # fmt: skip
    """``b − A x`` at unknown ``p`` in float64, A's coefficients formed here.

    ``ihx2, ihy2, ihz2`` are 1/h² (a product a face where a float64 division costs a
    reciprocal and its refinement; the coefficients differ from ``face / h²`` by rounding).
    """
    fxm, fxp, fym, fyp, fzm, fzp = _faces_at(e0, e1, e2, mode, p, im, ip, jm, jp, km, kp)
    cxm = fxm * ihx2
    cxp = fxp * ihx2
    cym = fym * ihy2
    cyp = fyp * ihy2
    czm = fzm * ihz2
    czp = fzp * ihz2
    s = B.stencil_sum(float64(b[p]), cxm, float64(x[im]), cxp, float64(x[ip]), cym,
                      float64(x[jm]), cyp, float64(x[jp]), czm, float64(x[km]), czp,
                      float64(x[kp]))  # fmt: skip
    d = B.diagonal_sum(cxm, cxp, cym, cyp, czm, czp)
    if has_k2:
        d += float64(k2[p])
    return B.residual(s, d, float64(x[p]))


@cuda.jit
def operator_residual_point(x, b, e0, e1, e2, mode, k2, has_k2, hx2, hy2, hz2, nx, ny, nz, out,
                            periodic):  # fmt: skip
    """``out = b − A x`` of a problem's operator on the unknowns, zero on fixed nodes."""
    where, p, im, ip, jm, jp, km, kp = _stencil_node(nx, ny, nz, periodic)
    if where == FIXED:
        out[p] = 0
    elif where == UNKNOWN:
        out[p] = _operator_residual(x, b, e0, e1, e2, mode, k2, has_k2, 1.0 / hx2, 1.0 / hy2,
                                    1.0 / hz2, p, im, ip, jm, jp, km, kp)  # fmt: skip


@cuda.jit
def operator_stencil(phi_c, e0, e1, e2, mode, k2, has_k2, eps_c, hx2, hy2, hz2, b, stencil,
                     cx, cy, cz, diag, write_diag, shift, nx, ny, nz, periodic):  # fmt: skip
    """The right-hand side and, with ``stencil``, the stencil from the problem's own maps.

    One pass, no float64 face arrays. ``b`` (float64) gets ``B.rhs_node`` on the unknowns, 0
    on fixed nodes. With ``stencil``: ``cx, cy, cz`` each node's +x, +y, +z coefficient
    ``ε_face/h²`` on every node; ``diag`` (``write_diag``) the float64 sum of the six plus κ̄²
    rounded once to its dtype (1 on fixed nodes); ``shift`` κ̄² (with salt). Without
    ``stencil`` only ``b`` is written (the others may be any arrays; ``write_diag`` False).
    Faces ``ε_face/h²`` divided in float64 and stored in the outputs' dtype, as the CPU
    backend's :func:`pbsolver.backends.cpu.operator_kernels.assemble`.
    """
    on, i, j, k, p, unx, uny, unz = _node(nx, ny, nz)
    if not on:
        return
    im, ip, jm, jp, km, kp = _neighbours(i, j, k, unx, uny, unz, p)
    fxm, fxp, fym, fyp, fzm, fzp = _faces_at(e0, e1, e2, mode, p, im, ip, jm, jp, km, kp)
    cxp = fxp / hx2
    cyp = fyp / hy2
    czp = fzp / hz2
    kk = float64(k2[p]) if has_k2 else 0.0
    if stencil:
        cx[p] = cxp
        cy[p] = cyp
        cz[p] = czp
        if has_k2:
            shift[p] = kk
    if not _inside(i, j, k, unx, uny, unz, periodic):
        if write_diag:
            diag[p] = 1.0
        b[p] = 0.0
        return
    if write_diag:
        d = B.diagonal_sum(fxm / hx2, cxp, fym / hy2, cyp, fzm / hz2, czp)
        if has_k2:
            d += kk
        diag[p] = d
    b[p] = B.rhs_node(
        float64(phi_c[p]), eps_c, fxm, float64(phi_c[im]), fxp, float64(phi_c[ip]), fym,
        float64(phi_c[jm]), fyp, float64(phi_c[jp]), fzm, float64(phi_c[km]), fzp,
        float64(phi_c[kp]), hx2, hy2, hz2, kk,
    )  # fmt: skip


#: Threads an SM keeps resident of the float64 operator's residual sum (its launch bounds):
#: unbounded, ptxas (13.0, sm_90) gave it 102 registers, two blocks of 256 (25 % occupancy,
#: latency-bound in Nsight Compute); bounded to 1024 threads it takes 63, without spilling
#: (``benchmarks/cuda_registers.py operator``).
OPERATOR_THREADS = 1024


@functools.cache
def operator_reduction(bk: int, bj: int):
    """The residual-sum kernels of :func:`reductions` for a problem's operator.

    Returns
    -------
    (operator_sumsq, operator_residual_sumsq) : kernels
        ``operator_sumsq(x, b, e0, e1, e2, mode, k2, has_k2, hx2, hy2, hz2, nx, ny, nz,
        periodic, chunk, partials)``, launched and finished as ``residual_sumsq``; and
        ``operator_residual_sumsq(…, periodic, chunk, out, partials)``, which also writes the
        residual into ``out`` (zero on fixed nodes), as :func:`operator_residual_point` does:
        the same values, and partial sums equal to ``operator_sumsq``'s bit for bit (each
        thread adds the same nodes' squares in the same order).
    """
    nthreads = _reduction_threads(bk, bj)
    # launch bounds on the GPU only (numba's simulator takes no such option)
    bounds = {}
    if not simulated():
        bounds = {"launch_bounds": (nthreads, max(1, OPERATOR_THREADS // nthreads))}

    @cuda.jit(**bounds)
    def operator_sumsq(x, b, e0, e1, e2, mode, k2, has_k2, hx2, hy2, hz2, nx, ny, nz, periodic,
                       chunk, partials):  # fmt: skip
        sm = cuda.shared.array(nthreads, dtype=float64)
        j, k, i, i1, unx, uny, unz = _unknown_column(nx, ny, nz, chunk, periodic)
        ihx2, ihy2, ihz2 = 1.0 / hx2, 1.0 / hy2, 1.0 / hz2
        acc = float64(0.0)
        while i < i1:
            p, im, ip, jm, jp, km, kp = _flat_stencil(i, j, k, unx, uny, unz)
            r = _operator_residual(x, b, e0, e1, e2, mode, k2, has_k2, ihx2, ihy2, ihz2, p, im,
                                   ip, jm, jp, km, kp)  # fmt: skip
            acc += r * r
            i += ONE
        _store_partial(sm, acc, nthreads, partials)

    @cuda.jit(**bounds)
    def operator_residual_sumsq(x, b, e0, e1, e2, mode, k2, has_k2, hx2, hy2, hz2, nx, ny, nz,
                                periodic, chunk, out, partials):  # fmt: skip
        sm = cuda.shared.array(nthreads, dtype=float64)
        j, k, i, i1, unx, uny, unz = _column(nx, ny, nz, chunk)
        ihx2, ihy2, ihz2 = 1.0 / hx2, 1.0 / hy2, 1.0 / hz2
        acc = float64(0.0)
        while i < i1:
            if _inside(i, j, k, unx, uny, unz, periodic):
                p, im, ip, jm, jp, km, kp = _flat_stencil(i, j, k, unx, uny, unz)
                r = _operator_residual(x, b, e0, e1, e2, mode, k2, has_k2, ihx2, ihy2, ihz2, p,
                                       im, ip, jm, jp, km, kp)  # fmt: skip
                out[p] = r
                acc += r * r
            else:
                out[(i * uny + j) * unz + k] = 0
            i += ONE
        _store_partial(sm, acc, nthreads, partials)

    return operator_sumsq, operator_residual_sumsq


# ---------------------------------------------------------------------- multigrid transfers
@cuda.jit(device=True)
def _restriction_axis(pos, lo, hi, c, n):
    """Fine nodes ``pos[c] − 1, pos[c], pos[c] + 1`` (wrapped) and the outer two's weights."""
    i = int64(pos[c])
    im, ip = B.neighbours(i, int64(n))
    return im, i, ip, B.midpoint_weight(lo, hi, im), B.midpoint_weight(lo, hi, ip)


@cuda.jit(device=True)
def _restriction_line(fine, row, km, k, kp, wm, wp):
    return wm * float64(fine[row + km]) + float64(fine[row + k]) + wp * float64(fine[row + kp])


@cuda.jit(device=True)
def _restriction_plane(fine, i, jm, j, jp, wym, wyp, km, k, kp, wzm, wzp, ny, nz):
    return (
        wym * _restriction_line(fine, (i * ny + jm) * nz, km, k, kp, wzm, wzp)
        + _restriction_line(fine, (i * ny + j) * nz, km, k, kp, wzm, wzp)
        + wyp * _restriction_line(fine, (i * ny + jp) * nz, km, k, kp, wzm, wzp)
    )


@cuda.jit
def restrict(
    fine, coarse, pos_x, lo_x, hi_x, pos_y, lo_y, hi_y, pos_z, lo_z, hi_z, fshape, cshape, periodic
):
    """``coarse = Pᵀ fine`` on the coarse unknowns, zero on fixed coarse nodes.

    The CPU kernel's sum (:func:`pbsolver.backends.cpu.mg_kernels.restrict`) in its order (a
    line along z, three lines a plane, three planes; float64), so the two agree bit for bit.
    One thread a coarse node; ``fshape``/``cshape`` are (nx, ny, nz) tuples of the fine and
    coarse grids. The simulator's twin of :mod:`pbsolver.backends.cuda.transfers`.
    """
    nx, ny, nz = fshape
    mx, my, mz = cshape
    ck, cj, ci = _grid3()
    if ci >= uint64(mx) or cj >= uint64(my) or ck >= uint64(mz):
        return
    q = (ci * uint64(my) + cj) * uint64(mz) + ck
    if not _inside(ci, cj, ck, uint64(mx), uint64(my), uint64(mz), periodic):
        coarse[q] = 0
        return
    im, i, ip, wxm, wxp = _restriction_axis(pos_x, lo_x, hi_x, ci, nx)
    jm, j, jp, wym, wyp = _restriction_axis(pos_y, lo_y, hi_y, cj, ny)
    km, k, kp, wzm, wzp = _restriction_axis(pos_z, lo_z, hi_z, ck, nz)
    ny, nz = int64(ny), int64(nz)
    coarse[q] = (
        wxm * _restriction_plane(fine, im, jm, j, jp, wym, wyp, km, k, kp, wzm, wzp, ny, nz)
        + _restriction_plane(fine, i, jm, j, jp, wym, wyp, km, k, kp, wzm, wzp, ny, nz)
        + wxp * _restriction_plane(fine, ip, jm, j, jp, wym, wyp, km, k, kp, wzm, wzp, ny, nz)
    )


@cuda.jit
def prolong_add(coarse, fine, lo_x, hi_x, lo_y, hi_y, lo_z, hi_z, fshape, cshape, periodic):
    """``fine += P coarse`` (trilinear) on the fine unknowns; fixed nodes untouched.

    The CPU kernel's sum (:func:`pbsolver.backends.cpu.mg_kernels.prolong_add`), one thread a
    fine node. The simulator's twin of :mod:`pbsolver.backends.cuda.transfers`.
    """
    nx, ny, nz = fshape
    _, my, mz = cshape
    k, j, i = _grid3()
    unx = uint64(nx)
    uny = uint64(ny)
    unz = uint64(nz)
    if i >= unx or j >= uny or k >= unz:
        return
    if not _inside(i, j, k, unx, uny, unz, periodic):
        return
    a0 = int64(lo_x[i]) * my
    a1 = int64(hi_x[i]) * my
    b0 = int64(lo_y[j])
    b1 = int64(hi_y[j])
    c0 = int64(lo_z[k])
    c1 = int64(hi_z[k])
    s = (
        coarse[(a0 + b0) * mz + c0]
        + coarse[(a0 + b0) * mz + c1]
        + coarse[(a0 + b1) * mz + c0]
        + coarse[(a0 + b1) * mz + c1]
        + coarse[(a1 + b0) * mz + c0]
        + coarse[(a1 + b0) * mz + c1]
        + coarse[(a1 + b1) * mz + c0]
        + coarse[(a1 + b1) * mz + c1]
    )
    p = (i * uny + j) * unz + k
    fine[p] += 0.125 * s
