"""numba-cuda kernels of the CUDA backend (raw flat arrays only; no allocation, no streams).

Every kernel takes C-ordered grids as **flat 1-D arrays** plus ``(nx, ny, nz)``: node
``(i, j, k)`` is element ``p = (i·ny + j)·nz + k`` (``k``, the z index, varies fastest, so
``threadIdx.x`` walks ``k`` and loads coalesce). Index arithmetic is unsigned 64-bit on purpose:
with signed indices numba emits negative-index wrap-around code for every load, which costs about
a third of a stencil kernel's bandwidth (research/gpu-launch.md §5.1).

Conventions shared with the CPU kernels (:mod:`pbsolver.backends.cpu_kernels`):

* ``cx[p]`` is the face coefficient ε/h² between ``p`` and its +x neighbour, so the −x face of
  ``p`` is ``cx[p_{i-1}]``;
* the stencil sum is ``s = b + Σ c·x_n`` in the CPU kernel's order, the update
  ``x ← x + ω (s/diag − x)``, the residual ``s − diag·x``;
* colour of a node: ``(i + j + k) & 1``; colour 0 ("red") is relaxed first;
* Dirichlet grids update the interior only; periodic grids wrap.

The diagonal comes in one of three forms (``dmode``), chosen per stencil by the backend:

``DIAG_FACES``
    recomputed from the six faces the update loads anyway (no salt): no diagonal array is read;
``DIAG_FACES_SHIFT``
    faces plus ``d[p]`` = κ̄² (salt);
``DIAG_STORED``
    ``d[p]`` is the whole diagonal (stencils built elsewhere, e.g. multigrid coarse levels).

Determinism: no kernel uses atomics. Red–black colour passes read only the other colour; the fused
``tile`` sweep writes a second buffer; reductions write one partial per block and a single block
adds the partials in a fixed order. Reruns are bitwise identical.

Kernels with compile-time parameters (block shape, shared-memory dtype) come from cached
factories; all compile lazily on first launch (no signatures here).
"""

from __future__ import annotations

import functools

import numpy as np
from numba import cuda, float64, from_dtype, int64, uint64

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
    s = a1 + a0 + a3 + a2 + a5 + a4
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
    """``(b + Σ c·x_n, diag)`` at ``p`` — the CPU kernel's order of additions."""
    a0 = cx[im]
    a1 = cx[p]
    a2 = cy[jm]
    a3 = cy[p]
    a4 = cz[km]
    a5 = cz[p]
    s = b[p] + a0 * x[im] + a1 * x[ip] + a2 * x[jm] + a3 * x[jp] + a4 * x[km] + a5 * x[kp]
    return s, _diag(a0, a1, a2, a3, a4, a5, d, dmode, p)


@cuda.jit(device=True)
def _grid3():
    """The calling thread's (x, y, z) global index as uint64."""
    return (
        uint64(cuda.blockIdx.x) * uint64(cuda.blockDim.x) + uint64(cuda.threadIdx.x),
        uint64(cuda.blockIdx.y) * uint64(cuda.blockDim.y) + uint64(cuda.threadIdx.y),
        uint64(cuda.blockIdx.z) * uint64(cuda.blockDim.z) + uint64(cuda.threadIdx.z),
    )


# ---------------------------------------------------------------------- red–black SOR
@cuda.jit
def rb_point(x, b, cx, cy, cz, d, dmode, nx, ny, nz, color, omega, periodic):
    """One colour pass, one thread a node, colour-compacted along z (kernel shape "point").

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
    old = x[p]
    x[p] = old + omega * (s / diag - old)


@cuda.jit
def rb_march(x, b, cx, cy, cz, d, dmode, nx, ny, nz, color, omega, periodic, chunk):
    """One colour pass; each thread marches along x over ``chunk`` planes (shape "march").

    Thread ``(kk, j)`` of block row ``blockIdx.z`` handles planes
    ``[lo + chunk·blockIdx.z, …)``; the colour offset in z flips with every plane. Fewer,
    longer-lived threads than "point": index set-up is paid once per column.
    """
    nx = uint64(nx)
    ny = uint64(ny)
    nz = uint64(nz)
    lo = ZERO if periodic else ONE
    kk, j, _ = _grid3()
    j += lo
    if j + lo >= ny:
        return
    i0 = lo + uint64(cuda.blockIdx.z) * uint64(chunk)
    i1 = min(i0 + uint64(chunk), nx - lo)
    sy = nz
    sx = ny * nz
    i = i0
    while i < i1:
        k = lo + ((i + j + lo + uint64(color)) & ONE) + kk + kk
        if k + lo < nz:
            p = (i * ny + j) * nz + k
            im = _minus(i, nx, sx, p)
            ip = _plus(i, nx, sx, p)
            jm = _minus(j, ny, sy, p)
            jp = _plus(j, ny, sy, p)
            km = _minus(k, nz, ONE, p)
            kp = _plus(k, nz, ONE, p)
            s, diag = _sum_diag(x, b, cx, cy, cz, d, dmode, p, im, ip, jm, jp, km, kp)
            old = x[p]
            x[p] = old + omega * (s / diag - old)
        i += ONE


@cuda.jit(device=True)
def _wrap(h, n, periodic):
    """(valid, index) of a signed halo coordinate ``h`` on an axis of ``n`` nodes."""
    if h < 0:
        if periodic:
            return True, uint64(h + n)
        return False, ZERO
    if h >= n:
        if periodic and h == n:
            return True, ZERO
        return False, ZERO
    return True, uint64(h)


@functools.cache
def rb_tile(dtype, bk: int, bj: int):
    """The fused red–black sweep (shape "tile"): both colours in one pass over memory.

    Parameters
    ----------
    dtype : numpy dtype
        Of ``x`` (the shared-memory ring's type).
    bk, bj : int
        Block shape over (z, y). The block covers a halo region; it writes the inner
        ``(bk − 2) × (bj − 2)`` tile of every plane.

    Returns
    -------
    kernel ``(x, y, b, cx, cy, cz, d, dmode, nx, ny, nz, omega, periodic, chunk)``
        Reads ``x`` (previous iterate, never written) and writes the whole of ``y`` (fixed
        nodes copied). Launch with ``block=(bk, bj)``, ``grid=(ceil(nz/(bk−2)),
        ceil(ny/(bj−2)), ceil(nx/chunk))``.

    Notes
    -----
    Why it is race-free and gives exactly the two-pass red–black result: a red update needs only
    black values, which are all still "old" in ``x``; so each block recomputes the red values on
    its tile *plus a one-node halo* (reading ``x`` only), keeps them in a shared-memory ring of
    four planes, and then updates the black nodes of its tile from that ring. Marching along x,
    plane ``t`` gets its red values while plane ``t − 1`` gets its black ones; four ring slots
    make one barrier per plane enough, and the black step's global operands are loaded before
    that barrier so the two steps' load latencies overlap. Each block owns disjoint output
    nodes, and nobody reads ``y``. Global traffic is one read of x, the faces and b and one
    write of y per node (plus halos, mostly served by L1/L2), against two full passes for the
    colour-by-colour kernels.
    """
    nbtype = from_dtype(np.dtype(dtype))
    ok = bk - 2  # output tile along z
    oj = bj - 2  # output tile along y

    @cuda.jit
    def kernel(x, y, b, cx, cy, cz, d, dmode, nx, ny, nz, omega, periodic, chunk):
        ring = cuda.shared.array((4, bj, bk), dtype=nbtype)
        tx = cuda.threadIdx.x
        ty = cuda.threadIdx.y
        kh = int64(cuda.blockIdx.x) * ok + tx - 1
        jh = int64(cuda.blockIdx.y) * oj + ty - 1
        kvalid, k = _wrap(kh, int64(nz), periodic)
        jvalid, j = _wrap(jh, int64(ny), periodic)
        writer = tx >= 1 and tx <= ok and ty >= 1 and ty <= oj and kh < nz and jh < ny
        unx = uint64(nx)
        uny = uint64(ny)
        unz = uint64(nz)
        sy = unz
        sx = uny * unz
        i0 = int64(cuda.blockIdx.z) * int64(chunk)
        i1 = min(i0 + int64(chunk), int64(nx))
        for t in range(i1 - i0 + 2):
            slot = t & 3
            mid = (t - 1) & 3
            # --- operands of the black step (plane i0 + t − 2), loaded before the barrier so
            # that their latency overlaps the red step's loads (one exposed latency per plane)
            ib = uint64(max(i0 + t - 2, 0))
            pb = (ib * uny + j) * unz + k
            black = t >= 2 and writer
            relax = black and ((ib + j + k) & ONE) == ONE
            relax = relax and _inside(ib, j, k, unx, uny, unz, periodic)
            a0 = a1 = a2 = a3 = a4 = a5 = cx[0]
            bb = b[0]
            if relax:
                a0 = cx[_minus(ib, unx, sx, pb)]
                a1 = cx[pb]
                a2 = cy[_minus(j, uny, sy, pb)]
                a3 = cy[pb]
                a4 = cz[_minus(k, unz, ONE, pb)]
                a5 = cz[pb]
                bb = b[pb]
            diagb = _diag(a0, a1, a2, a3, a4, a5, d, dmode, pb)  # pb is in range for all
            # --- red values of plane i0 − 1 + t on the tile and its halo (reads x only)
            ivalid, i = _wrap(i0 - 1 + t, int64(nx), periodic)
            if ivalid and jvalid and kvalid:
                p = (i * uny + j) * unz + k
                v = x[p]
                if ((i + j + k) & ONE) == ZERO and _inside(i, j, k, unx, uny, unz, periodic):
                    im = _minus(i, unx, sx, p)
                    ip = _plus(i, unx, sx, p)
                    jm = _minus(j, uny, sy, p)
                    jp = _plus(j, uny, sy, p)
                    km = _minus(k, unz, ONE, p)
                    kp = _plus(k, unz, ONE, p)
                    s, diag = _sum_diag(x, b, cx, cy, cz, d, dmode, p, im, ip, jm, jp, km, kp)
                    v = v + omega * (s / diag - v)
                ring[slot, ty, tx] = v
            cuda.syncthreads()
            # --- black values of the previous plane on the tile, from the ring; write y
            if black:
                v = ring[mid, ty, tx]
                if relax:
                    s = (
                        bb
                        + a0 * ring[(t - 2) & 3, ty, tx]
                        + a1 * ring[slot, ty, tx]
                        + a2 * ring[mid, ty - 1, tx]
                        + a3 * ring[mid, ty + 1, tx]
                        + a4 * ring[mid, ty, tx - 1]
                        + a5 * ring[mid, ty, tx + 1]
                    )
                    v = v + omega * (s / diagb - v)
                y[pb] = v

    return kernel


# ---------------------------------------------------------------------- Jacobi, residual
@cuda.jit
def jacobi_point(x, out, b, cx, cy, cz, d, dmode, nx, ny, nz, omega, periodic):
    """``out = x + ω (s/diag − x)`` on the unknowns, fixed nodes copied (two buffers)."""
    nx = uint64(nx)
    ny = uint64(ny)
    nz = uint64(nz)
    k, j, i = _grid3()
    if i >= nx or j >= ny or k >= nz:
        return
    p = (i * ny + j) * nz + k
    old = x[p]
    if not _inside(i, j, k, nx, ny, nz, periodic):
        out[p] = old
        return
    im, ip, jm, jp, km, kp = _neighbours(i, j, k, nx, ny, nz, p)
    s, diag = _sum_diag(x, b, cx, cy, cz, d, dmode, p, im, ip, jm, jp, km, kp)
    out[p] = old + omega * (s / diag - old)


@cuda.jit
def residual_point(x, b, cx, cy, cz, d, dmode, nx, ny, nz, out, periodic):
    """``out = b − A x`` on the unknowns, zero on fixed nodes (``x`` may be float64)."""
    nx = uint64(nx)
    ny = uint64(ny)
    nz = uint64(nz)
    k, j, i = _grid3()
    if i >= nx or j >= ny or k >= nz:
        return
    p = (i * ny + j) * nz + k
    if not _inside(i, j, k, nx, ny, nz, periodic):
        out[p] = 0
        return
    im, ip, jm, jp, km, kp = _neighbours(i, j, k, nx, ny, nz, p)
    s, diag = _sum_diag(x, b, cx, cy, cz, d, dmode, p, im, ip, jm, jp, km, kp)
    out[p] = s - diag * x[p]


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
    nthreads = bk * bj
    if nthreads & (nthreads - 1):
        raise ValueError(f"reduction block {bk}x{bj} is not a power of two")

    @cuda.jit
    def residual_sumsq(x, b, cx, cy, cz, d, dmode, nx, ny, nz, periodic, chunk, partials):
        sm = cuda.shared.array(nthreads, dtype=float64)
        unx = uint64(nx)
        uny = uint64(ny)
        unz = uint64(nz)
        k, j, _ = _grid3()
        i0 = uint64(cuda.blockIdx.z) * uint64(chunk)
        i1 = min(i0 + uint64(chunk), unx)
        acc = float64(0.0)
        if k < unz and j < uny:
            i = i0
            while i < i1:
                if _inside(i, j, k, unx, uny, unz, periodic):
                    p = (i * uny + j) * unz + k
                    im, ip, jm, jp, km, kp = _neighbours(i, j, k, unx, uny, unz, p)
                    s, diag = _sum_diag(x, b, cx, cy, cz, d, dmode, p, im, ip, jm, jp, km, kp)
                    r = float64(s) - float64(diag) * float64(x[p])
                    acc += r * r
                i += ONE
        total = _block_sum(sm, acc, nthreads)
        if cuda.threadIdx.x == 0 and cuda.threadIdx.y == 0:
            blk = cuda.blockIdx.x + cuda.gridDim.x * (
                cuda.blockIdx.y + cuda.gridDim.y * cuda.blockIdx.z
            )
            partials[blk] = total

    @cuda.jit
    def sum_values(x, nx, ny, nz, chunk, partials):
        sm = cuda.shared.array(nthreads, dtype=float64)
        unx = uint64(nx)
        uny = uint64(ny)
        unz = uint64(nz)
        k, j, _ = _grid3()
        i0 = uint64(cuda.blockIdx.z) * uint64(chunk)
        i1 = min(i0 + uint64(chunk), unx)
        acc = float64(0.0)
        if k < unz and j < uny:
            i = i0
            while i < i1:
                acc += float64(x[(i * uny + j) * unz + k])
                i += ONE
        total = _block_sum(sm, acc, nthreads)
        if cuda.threadIdx.x == 0 and cuda.threadIdx.y == 0:
            blk = cuda.blockIdx.x + cuda.gridDim.x * (
                cuda.blockIdx.y + cuda.gridDim.y * cuda.blockIdx.z
            )
            partials[blk] = total

    return residual_sumsq, sum_values


FINISH_THREADS = 256


@cuda.jit
def finish_sum(partials, n, out, slot):
    """``out[slot] = Σ partials[:n]`` in a fixed order (launch with one block of 256)."""
    sm = cuda.shared.array(FINISH_THREADS, dtype=float64)
    t = cuda.threadIdx.x
    acc = float64(0.0)
    q = t
    while q < n:
        acc += partials[q]
        q += FINISH_THREADS
    sm[t] = acc
    cuda.syncthreads()
    step = FINISH_THREADS // 2
    while step > 0:
        if t < step:
            sm[t] += sm[t + step]
        cuda.syncthreads()
        step //= 2
    if t == 0:
        out[slot] = sm[0]


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
    sm[t] = acc
    cuda.syncthreads()
    step = FINISH_THREADS // 2
    while step > 0:
        if t < step:
            sm[t] += sm[t + step]
        cuda.syncthreads()
        step //= 2
    if t == 0:
        partials[cuda.blockIdx.x] = sm[0]


# ---------------------------------------------------------------------- set-up (float64)
@cuda.jit
def faces_from_nodes(eps, ex, ey, ez, nx, ny, nz, harmonic):
    """Face permittivities from a node map: ``ex[p] = rule(ε_p, ε_{p+x})`` (wrapping)."""
    nx = uint64(nx)
    ny = uint64(ny)
    nz = uint64(nz)
    k, j, i = _grid3()
    if i >= nx or j >= ny or k >= nz:
        return
    p = (i * ny + j) * nz + k
    e = eps[p]
    nbr = (_plus(i, nx, ny * nz, p), _plus(j, ny, nz, p), _plus(k, nz, ONE, p))
    f = eps[nbr[0]]
    ex[p] = 2.0 * e * f / (e + f) if harmonic else 0.5 * (e + f)
    f = eps[nbr[1]]
    ey[p] = 2.0 * e * f / (e + f) if harmonic else 0.5 * (e + f)
    f = eps[nbr[2]]
    ez[p] = 2.0 * e * f / (e + f) if harmonic else 0.5 * (e + f)


@cuda.jit
def divide(out, face, h2, n):
    """``out = face / h²`` computed in float64, stored in ``out``'s dtype (CPU: same)."""
    p = cuda.grid(1)
    if p < n:
        out[p] = face[p] / h2


@cuda.jit(device=True)
def _face_term(eps_face, eps_c, phi_n, phi_s):
    w = eps_face - eps_c
    if w == 0.0:
        return 0.0  # never 0·inf where a charge sits on a node
    return w * (phi_n - phi_s)


@cuda.jit
def assemble_rhs(phi_c, ex, ey, ez, k2, has_k2, eps_c, hx2, hy2, hz2, out, nx, ny, nz, periodic):
    """b of DESIGN §1 in float64 (the CPU kernel's formula and order); zero on fixed nodes."""
    nx = uint64(nx)
    ny = uint64(ny)
    nz = uint64(nz)
    k, j, i = _grid3()
    if i >= nx or j >= ny or k >= nz:
        return
    p = (i * ny + j) * nz + k
    if not _inside(i, j, k, nx, ny, nz, periodic):
        out[p] = 0.0
        return
    im, ip, jm, jp, km, kp = _neighbours(i, j, k, nx, ny, nz, p)
    s = phi_c[p]
    acc = 0.0
    acc += _face_term(ex[im], eps_c, phi_c[im], s) / hx2
    acc += _face_term(ex[p], eps_c, phi_c[ip], s) / hx2
    acc += _face_term(ey[jm], eps_c, phi_c[jm], s) / hy2
    acc += _face_term(ey[p], eps_c, phi_c[jp], s) / hy2
    acc += _face_term(ez[km], eps_c, phi_c[km], s) / hz2
    acc += _face_term(ez[p], eps_c, phi_c[kp], s) / hz2
    if has_k2:
        kk = k2[p]
        if kk != 0.0:
            acc -= kk * s
    out[p] = acc


@cuda.jit
def diagonal(ex, ey, ez, hx2, hy2, hz2, k2, has_k2, out, nx, ny, nz, periodic):
    """The diagonal Σ ε_face/h² (+ κ̄²) in float64 (1 on fixed nodes), in ``out``'s dtype."""
    nx = uint64(nx)
    ny = uint64(ny)
    nz = uint64(nz)
    k, j, i = _grid3()
    if i >= nx or j >= ny or k >= nz:
        return
    p = (i * ny + j) * nz + k
    if not _inside(i, j, k, nx, ny, nz, periodic):
        out[p] = 1.0
        return
    im, _, jm, _, km, _ = _neighbours(i, j, k, nx, ny, nz, p)
    v = ex[p] / hx2 + ex[im] / hx2 + ey[p] / hy2 + ey[jm] / hy2 + ez[p] / hz2 + ez[km] / hz2
    if has_k2:
        v += k2[p]
    out[p] = v


# ---------------------------------------------------------------------- multigrid transfers
@cuda.jit(device=True)
def _wrapped(i, n):
    """``i`` in ``[-1, n]`` moved into ``[0, n)``.

    A branch, not a 64-bit modulo: those are emulated in software on the GPU.
    """
    if i < 0:
        return i + n
    if i >= n:
        return i - n
    return i


@cuda.jit(device=True)
def _midpoint_weight(lo, hi, i):
    """½ when fine node ``i`` is a midpoint (it gives half its value to each neighbour)."""
    return 0.5 if lo[i] != hi[i] else 0.0


@cuda.jit
def restrict(
    fine, coarse, pos_x, lo_x, hi_x, pos_y, lo_y, hi_y, pos_z, lo_z, hi_z, fshape, cshape, periodic
):
    """``coarse = Pᵀ fine`` on the coarse unknowns, zero on fixed coarse nodes.

    The CPU kernel's sum (:func:`pbsolver.backends.cpu_mg_kernels.restrict`): up to 27 fine
    nodes with product weights, accumulated in float64 in the same order. One thread a coarse
    node; ``fshape``/``cshape`` are (nx, ny, nz) tuples of the fine and coarse grids.
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
    acc = float64(0.0)
    for dx in range(-1, 2):
        i = _wrapped(int64(pos_x[ci]) + dx, int64(nx))
        wx = 1.0 if dx == 0 else _midpoint_weight(lo_x, hi_x, i)
        if wx == 0.0:
            continue
        for dy in range(-1, 2):
            j = _wrapped(int64(pos_y[cj]) + dy, int64(ny))
            wy = 1.0 if dy == 0 else _midpoint_weight(lo_y, hi_y, j)
            if wy == 0.0:
                continue
            wxy = wx * wy
            for dz in range(-1, 2):
                k = _wrapped(int64(pos_z[ck]) + dz, int64(nz))
                wz = 1.0 if dz == 0 else _midpoint_weight(lo_z, hi_z, k)
                if wz != 0.0:
                    acc += wxy * wz * float64(fine[(i * ny + j) * nz + k])
    coarse[q] = acc


@cuda.jit
def prolong_add(coarse, fine, lo_x, hi_x, lo_y, hi_y, lo_z, hi_z, fshape, cshape, periodic):
    """``fine += P coarse`` (trilinear) on the fine unknowns; fixed nodes untouched.

    The CPU kernel's sum (:func:`pbsolver.backends.cpu_mg_kernels.prolong_add`), one thread a
    fine node.
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
