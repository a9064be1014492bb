"""Measurement-only SOR kernel shapes and launch modes of the CUDA backend, side by side.

The package keeps one red–black kernel ("point": one thread a node, two colour passes) and one
launch mode (each batch of sweeps captured as a CUDA graph and replayed). This script keeps
the alternatives it was chosen against, to measure them again on new hardware:

kernel shapes (``VariantBackend(kernel=...)``)
    ``"point"`` (the package's); ``"march"``, as "point" but each thread walks ``march_chunk``
    x-planes (the colour offset flips every plane, so no register reuse within one colour);
    ``"tile"``, both colours fused into one pass through shared memory (:func:`rb_tile`): half
    the bytes of "point", but each block walks its planes one barrier at a time; ``"pair"``,
    the same fusion with two z-columns a thread (:func:`rb_pair`): no idle threads, the
    second colour's x-neighbours in registers; ``"pair32"``, "pair" written in CUDA C with
    32-bit indices (:mod:`sweep_pair_c`: numba types every index in 64 bits, and "pair" is
    bound by instruction issue).
launch modes (``VariantBackend(launch=...)``)
    ``"graph"`` (the package's); ``"stream"``, every kernel launched from Python on the
    backend's stream; ``"naive"``, as "stream" plus a host synchronisation after every SOR
    sweep (the seed thread's loop).
the whole loop on the device (:meth:`VariantBackend.sor_until`)
    SOR batches and residual checks as one CUDA graph with a conditional WHILE node: one
    launch and one wait however many sweeps it takes (cuda.core ≥ 1.0, CUDA ≥ 12.4 driver).

All variants give bitwise the same iterates as the package's kernel (tests/test_cuda_sim.py
checks them in the simulator against the CPU). On a GPU machine::

    python benchmarks/sweep_variants.py [--sizes 100,256,384] [--quick] [--json out.json]

prints per-sweep GPU time, bytes a node and the multiple of the copy floor for each shape, and
wall against GPU-busy time per sweep for each launch mode and for the WHILE-node loop.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numba import cuda, from_dtype, int64, uint32, uint64

sys.path.append(str(Path(__file__).resolve().parents[1]))  # after an installed or PYTHONPATH tree

from benchmarks.sweep_pair_c import rb_pair32  # noqa: E402
from pbsolver.backends.cuda import fused_sweep  # noqa: E402
from pbsolver.backends.cuda import kernels as K  # noqa: E402
from pbsolver.backends.cuda.backend import (  # noqa: E402
    CUDABackend,
    KernelConfig,
    _ceil,
)
from pbsolver.backends.cuda.device import CuPyDevice  # noqa: E402
from pbsolver.backends.cuda.kernels import (  # noqa: E402
    ONE,
    ZERO,
    B,
    _diag,
    _grid3,
    _inside,
    _minus,
    _plus,
    _sum_diag,
)
from pbsolver.exceptions import InputError  # noqa: E402

LAUNCH_MODES = ("graph", "stream", "naive")
SOR_KERNELS = ("point", "tile", "pair", "pair32", "march")

#: Bytes each full red–black sweep must move per node, by kernel shape, without salt:
#: "point"/"march" two colour passes, "tile" and "pair" one.
#: The fused shapes, which sweep from one buffer into a second.
FUSED = ("tile", "pair", "pair32")
SWEEP_BYTES = {"point": 48, "march": 48, "tile": 24, "pair": 24, "pair32": 24}


# ---------------------------------------------------------------------- kernels
@cuda.jit
def rb_march(x, b, cx, cy, cz, d, dmode, nx, ny, nz, color, omega, periodic, chunk):
    """One colour pass; each thread marches along x over ``chunk`` planes ("march").

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
            x[p] = B.relax(x[p], s, diag, omega)
        i += ONE


@cuda.jit(device=True)
def _halo(h, n, periodic):
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
    """The fused red–black sweep ("tile"): both colours in one pass over memory.

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
        kvalid, k = _halo(kh, int64(nz), periodic)
        jvalid, j = _halo(jh, int64(ny), periodic)
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
            ivalid, i = _halo(i0 - 1 + t, int64(nx), periodic)
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
                    v = B.relax(v, s, diag, omega)
                ring[slot, ty, tx] = v
            cuda.syncthreads()
            # --- black values of the previous plane on the tile, from the ring; write y
            if black:
                v = ring[mid, ty, tx]
                if relax:
                    s = B.stencil_sum(
                        bb, a0, ring[(t - 2) & 3, ty, tx], a1, ring[slot, ty, tx],
                        a2, ring[mid, ty - 1, tx], a3, ring[mid, ty + 1, tx],
                        a4, ring[mid, ty, tx - 1], a5, ring[mid, ty, tx + 1],
                    )  # fmt: skip
                    v = B.relax(v, s, diagb, omega)
                y[pb] = v

    return kernel


@cuda.jit(device=True)
def _wrap(h, n, periodic):
    """(valid, index) of a signed coordinate ``h`` within one period of an axis of ``n``."""
    if h < 0:
        if periodic and h + n >= 0:
            return True, uint64(h + n)
        return False, ZERO
    if h >= n:
        if periodic and h - n < n:
            return True, uint64(h - n)
        return False, ZERO
    return True, uint64(h)


@functools.cache
def rb_pair(dtype, bk: int, bj: int, periodic: bool, dmode: int):
    """The fused red–black sweep with two z-columns a thread ("pair").

    As :func:`rb_tile` (both colours in one pass, a one-node halo recomputed, ``x`` read and
    ``y`` written), but thread ``tx`` owns the columns ``2·tx`` and ``2·tx + 1`` of a block
    that covers ``2·bk`` columns along z and ``bj`` rows along y, writing the inner
    ``(2·bk − 2) × (bj − 2)``. Of two neighbouring columns exactly one holds the first colour
    on a plane, and a warp's threads all pick the same one: every thread relaxes one node of
    each colour per plane, without divergence. The column that takes the first colour on
    plane t takes the second on plane t − 1, so the second colour's x-neighbours, its own old
    value and its pair-mate are the thread's registers; only the other in-plane neighbours
    go through the shared ring (three planes, one barrier a plane).

    ``periodic`` and ``dmode`` (:mod:`pbsolver.backends.cuda.kernels`) are compiled in: a
    Dirichlet grid's unknowns have no wrapped neighbours, and the diagonal's form needs no
    branch.

    Returns
    -------
    kernel ``(x, y, b, cx, cy, cz, d, nx, ny, nz, first, omega, chunk)``
        Launch with ``block=(bk, bj)``, ``grid=(ceil(nz/(2bk−2)), ceil(ny/(bj−2)),
        ceil(nx/chunk))``.
    """
    nbtype = from_dtype(np.dtype(dtype))
    ok = 2 * bk - 2  # written columns along z
    oj = bj - 2  # written rows along y
    width = 2 * bk  # local columns
    plane = bj * width  # one slot of the ring
    ring_size = 3 * plane

    @cuda.jit(device=True)
    def nbr(i, j, k, nx, ny, nz, p):
        """Flat indices of an unknown's six neighbours (a Dirichlet unknown's never wrap)."""
        sx = ny * nz
        if periodic:
            return (_minus(i, nx, sx, p), _plus(i, nx, sx, p), _minus(j, ny, nz, p),
                    _plus(j, ny, nz, p), _minus(k, nz, ONE, p), _plus(k, nz, ONE, p))  # fmt: skip
        return p - sx, p + sx, p - nz, p + nz, p - ONE, p + ONE

    @cuda.jit(device=True)
    def inner(i, n):
        """Whether coordinate i is off the outer layer (always, on a periodic grid)."""
        return periodic or (i >= ONE and i + ONE < n)

    @cuda.jit(device=True)
    def diagonal(a0, a1, a2, a3, a4, a5, d, p):
        """:func:`~pbsolver.backends.cuda.kernels._diag` with its mode compiled in."""
        if dmode == K.DIAG_STORED:
            return d[p]
        s = B.diagonal_sum(a0, a1, a2, a3, a4, a5)
        if dmode == K.DIAG_FACES_SHIFT:
            s += d[p]
        return s

    @cuda.jit
    def rb_pair_kernel(x, y, b, cx, cy, cz, d, nx, ny, nz, first, omega, chunk):
        ring = cuda.shared.array(ring_size, dtype=nbtype)
        tx = cuda.threadIdx.x
        ty = cuda.threadIdx.y
        c0 = 2 * tx
        c1 = c0 + 1
        rb = ty * width + c0  # this thread's first column in a ring slot
        kh = int64(cuda.blockIdx.x) * ok + c0 - 1
        jh = int64(cuda.blockIdx.y) * oj + ty - 1
        v0, k0 = _wrap(kh, int64(nz), periodic)
        v1, k1 = _wrap(kh + 1, int64(nz), periodic)
        jv, j = _wrap(jh, int64(ny), periodic)
        rows = ty >= 1 and ty <= oj and jh < ny
        w0 = rows and c0 >= 1 and kh < nz
        w1 = rows and c1 <= ok and kh + 1 < nz
        unx = uint64(nx)
        uny = uint64(ny)
        unz = uint64(nz)
        sx = uny * unz
        o0 = j * unz + k0  # in-plane offsets of the two columns
        o1 = j * unz + k1
        # per column: off the outer layer in y and z; the parity of j + k
        in0 = inner(j, uny) and inner(k0, unz)
        in1 = inner(j, uny) and inner(k1, unz)
        par0 = (j + k0) & ONE
        colour = uint64(first)
        zero = omega - omega
        i0 = int64(cuda.blockIdx.z) * int64(chunk)
        i1 = min(i0 + int64(chunk), int64(nx))
        # first-colour states of this thread's two nodes on planes q (a) and q − 1 (b)
        s0a = s1a = s0b = s1b = zero
        slot = 0  # ring slot of plane q + 1 (written now); plane q's is ``mid``
        mid = 2 * plane
        q = i0 - 2  # the second colour's plane; the first colour's is q + 1
        for _ in range(i1 - i0 + 2):
            # --- the first colour at plane q + 1 on both columns (reads x only)
            iv, i = _wrap(q + 1, int64(nx), periodic)
            first0 = ((i + par0) & ONE) == colour  # column 0 holds it (and the second on q)
            n0 = n1 = zero
            if iv and jv:
                pi = i * sx
                if v0:
                    n0 = x[pi + o0]
                if v1:
                    n1 = x[pi + o1]
                if (in0 if first0 else in1) and inner(i, unx):
                    p = pi + (o0 if first0 else o1)
                    im, ip, jm, jp, km, kp = nbr(i, j, k0 if first0 else k1, unx, uny, unz, p)
                    a0 = cx[im]
                    a1 = cx[p]
                    a2 = cy[jm]
                    a3 = cy[p]
                    a4 = cz[km]
                    a5 = cz[p]
                    s = B.stencil_sum(b[p], a0, x[im], a1, x[ip], a2, x[jm], a3, x[jp], a4, x[km],
                                      a5, x[kp])  # fmt: skip
                    diag = diagonal(a0, a1, a2, a3, a4, a5, d, p)
                    if first0:
                        n0 = B.relax(n0, s, diag, omega)
                    else:
                        n1 = B.relax(n1, s, diag, omega)
                if v0:
                    ring[slot + rb] = n0
                if v1:
                    ring[slot + rb + 1] = n1
            cuda.syncthreads()
            # --- plane q into y: the first colour from the registers, the second relaxed from
            # its first-colour neighbours (x and its pair-mate: registers; the rest: the ring)
            if q >= i0:
                iq = uint64(q)
                pq = iq * sx + (o0 if first0 else o1)
                if first0:  # column 0 holds the second colour on plane q, column 1 the first
                    if w1:
                        y[pq - k0 + k1] = s1a
                    if w0:
                        v = s0a
                        if in0 and inner(iq, unx):
                            im, ip, jm, jp, km, kp = nbr(iq, j, k0, unx, uny, unz, pq)
                            a0 = cx[im]
                            a1 = cx[pq]
                            a2 = cy[jm]
                            a3 = cy[pq]
                            a4 = cz[km]
                            a5 = cz[pq]
                            s = B.stencil_sum(
                                b[pq], a0, s0b, a1, n0, a2, ring[mid + rb - width],
                                a3, ring[mid + rb + width], a4, ring[mid + rb - 1], a5, s1a,
                            )  # fmt: skip
                            v = B.relax(s0a, s, diagonal(a0, a1, a2, a3, a4, a5, d, pq), omega)
                        y[pq] = v
                else:
                    if w0:
                        y[pq - k1 + k0] = s0a
                    if w1:
                        v = s1a
                        if in1 and inner(iq, unx):
                            im, ip, jm, jp, km, kp = nbr(iq, j, k1, unx, uny, unz, pq)
                            a0 = cx[im]
                            a1 = cx[pq]
                            a2 = cy[jm]
                            a3 = cy[pq]
                            a4 = cz[km]
                            a5 = cz[pq]
                            s = B.stencil_sum(
                                b[pq], a0, s1b, a1, n1, a2, ring[mid + rb + 1 - width],
                                a3, ring[mid + rb + 1 + width], a4, s0a, a5, ring[mid + rb + 2],
                            )  # fmt: skip
                            v = B.relax(s1a, s, diagonal(a0, a1, a2, a3, a4, a5, d, pq), omega)
                        y[pq] = v
            s0b = s0a
            s1b = s1a
            s0a = n0
            s1a = n1
            mid = slot
            slot = 0 if slot == 2 * plane else slot + plane
            q += 1

    return rb_pair_kernel


@functools.cache
def while_check():
    """The one-thread kernel that decides whether the WHILE body runs again."""
    set_condition = cuda.declare_device("cudaGraphSetConditional", "void(uint64, uint32)", abi="c")

    @cuda.jit
    def check(sums, count, step, maxiter, threshold2, handle):
        n = count[0] + step
        count[0] = n
        keep = uint32(1) if (sums[0] > threshold2 and n < maxiter) else uint32(0)
        set_condition(handle, keep)

    return check


# ---------------------------------------------------------------------- the backend
@dataclass(frozen=True)
class VariantConfig(KernelConfig):
    """:class:`KernelConfig` plus the launch shapes of "march" and "tile".

    Attributes
    ----------
    march_block, march_chunk :
        Threads over (z pairs, y) and x-planes per thread for "march".
    tile_block, tile_chunk :
        Threads over (z, y) incl. a one-node halo, and x-planes per block, for "tile"
        (``tile_chunk=None``: chosen from the grid so that about 8 blocks per multiprocessor
        exist, between 4 and 64 planes).
    pair_block, pair_chunk :
        The same for "pair" and "pair32": threads over (z pairs, y), a block covering twice as
        many columns as it has threads along z.
    pair_min_blocks, pair_prefetch, pair_waves :
        "pair32" only: the blocks a multiprocessor must hold (``__launch_bounds__``'s second
        argument, which caps the registers; 0 leaves it to the compiler); the second colour's
        coefficients loaded before each plane's barrier; and ``pair_chunk=None`` choosing the
        chunk by whole waves of resident blocks (:meth:`VariantBackend._wave_chunk`) instead
        of by about 8 blocks a multiprocessor.
    """

    march_block: tuple = (32, 8)
    march_chunk: int = 16
    tile_block: tuple = (32, 16)
    tile_chunk: int | None = None
    pair_block: tuple = (32, 8)
    pair_chunk: int | None = None
    pair_min_blocks: int = 0
    pair_prefetch: bool = False
    pair_waves: bool = False


class VariantBackend(CUDABackend):
    """The CUDA backend with a choice of SOR kernel shape and launch mode (see the docstring).

    Parameters
    ----------
    launch : {"graph", "stream", "naive"}
    kernel : {"point", "tile", "pair", "march"}
    device, config :
        As :class:`CUDABackend` (``config`` a :class:`VariantConfig`).
    """

    def __init__(self, launch="graph", kernel="point", *, device=None, config=None):
        if launch not in LAUNCH_MODES:
            raise InputError(f"launch must be one of {LAUNCH_MODES}, got {launch!r}")
        if kernel not in SOR_KERNELS:
            raise InputError(f"kernel must be one of {SOR_KERNELS}, got {kernel!r}")
        super().__init__(device=device, config=config or VariantConfig())
        if launch != "graph" and self.dev.name == "cupy":
            self.dev = CuPyDevice(graphs=False)
            self._sums = self.dev.empty((8,), np.float64)
        self.launch = launch
        self.kernel = kernel
        self._work = {}
        self._loops = {}
        self._collect = None  # buffers a runner or WHILE loop being built must keep alive
        self._sms = (
            int(self.dev.cp.cuda.Device().attributes["MultiProcessorCount"])
            if self.dev.name == "cupy"
            else 4
        )

    def __repr__(self):
        return f"VariantBackend(launch={self.launch!r}, kernel={self.kernel!r})"

    def _pair32(self, dtype, periodic, dmode):
        cfg = self.config
        bk, bj = cfg.pair_block
        return rb_pair32(dtype, bk, bj, periodic, dmode, cfg.pair_min_blocks, cfg.pair_prefetch)

    def _wave_chunk(self, shape, kernel):
        """Planes a block of "pair32" so that its blocks fill whole waves.

        The package's rule (:func:`~pbsolver.backends.cuda.fused_sweep.chunk_for`), with the
        resident blocks a multiprocessor that the driver reports for this kernel and block.
        """
        import cupy as cp

        bk, bj = self.config.pair_block
        threads = bk * bj
        try:
            per_sm = cp.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(
                kernel.kernel.ptr, threads, 0
            )
        except AttributeError:  # the rule of the register file: 64 K registers, 64 warps
            regs = -(-kernel.num_regs * 32 // 256) * 256
            per_sm = min(65536 // (regs * (threads // 32)), 64 // (threads // 32), 32)
        return fused_sweep.chunk_for(shape, self._sms, (bk, bj), max(1, per_sm))

    def _tile_chunk(self, shape):
        cfg = self.config
        if self.kernel == "pair32" and cfg.pair_chunk is None and cfg.pair_waves:
            return self._wave_chunk(shape, self._pair32(np.float32, False, K.DIAG_FACES))
        if self.kernel in ("pair", "pair32"):
            chunk, (bk, bj) = cfg.pair_chunk, cfg.pair_block
            bk = 2 * bk
        else:
            chunk, (bk, bj) = cfg.tile_chunk, cfg.tile_block
        if chunk is not None:
            return chunk
        nx, ny, nz = shape
        columns = _ceil(nz, bk - 2) * _ceil(ny, bj - 2)
        return int(min(64, max(4, math.ceil(nx * columns / (8 * self._sms)))))

    def _work_for(self, x):
        """The second buffer of the fused sweep for ``x`` (a few are kept, oldest dropped).

        A graph bakes this buffer's pointer in: plain graph keys include it, and runners and
        WHILE loops being built collect it (``self._collect``) and keep it alive themselves.
        """
        key = self.dev.key(x)
        w = self._work.get(key)
        if w is None:
            if len(self._work) >= 4:
                self._work.pop(next(iter(self._work)))
            w = self.dev.empty(x.shape, x.dtype)
            self._work[key] = w
        if self._collect is not None:
            self._collect[id(w)] = w
        return w

    def sor_sweeps(self, st, x, omega, count):
        if count <= 0:
            return
        w = x.dtype.type(omega)
        work = self._work_for(x) if self.kernel in FUSED else None
        key = self._key("sor", self.kernel, x, work, *self._st_items(st), float(w), count)
        with self.dev.io():
            self.dev.run(key, lambda: self._sor(st, x, w, count))

    def _sor(self, st, x, w, count):
        naive = self.launch == "naive"
        if self.kernel in FUSED:
            src, dst = x, self._work_for(x)
            for _ in range(count):
                self._tile_sweep(st, src, dst, w)
                src, dst = dst, src
                if naive:
                    self.dev.sync_each_sweep()
            if src is not x:
                self._flat(K.copy, x, src)
            return
        for _ in range(count):
            self._colour(st, x, 0, w)
            self._colour(st, x, 1, w)
            if naive:
                self.dev.sync_each_sweep()

    def _colour(self, st, x, color, w):
        if self.kernel != "march":  # "tile" has no single-colour pass: the multigrid uses "point"
            super()._colour(st, x, color, w)
            return
        cfg = self.config
        nx, ny, nz = st.shape
        block = (*cfg.march_block, 1)
        lo = 0 if st.periodic else 1
        grid = (_ceil(_ceil(nz - 2 * lo, 2), block[0]), _ceil(ny - 2 * lo, block[1]),
                _ceil(nx - 2 * lo, cfg.march_chunk))  # fmt: skip
        self.dev.launch(
            rb_march, grid, block, self._v(x), *self._stencil_args(st), nx, ny, nz, color, w,
            st.periodic, cfg.march_chunk,
        )  # fmt: skip

    def _tile_sweep(self, st, src, dst, w):
        if self.kernel in ("pair", "pair32"):
            self._pair_sweep(st, src, dst, w, 0)
            return
        cfg = self.config
        nx, ny, nz = st.shape
        bk, bj = cfg.tile_block
        chunk = self._tile_chunk(st.shape)
        grid = (_ceil(nz, bk - 2), _ceil(ny, bj - 2), _ceil(nx, chunk))
        self.dev.launch(
            rb_tile(src.dtype, bk, bj), grid, (bk, bj, 1), self._v(src), self._v(dst),
            *self._stencil_args(st), nx, ny, nz, w, st.periodic, chunk,
        )  # fmt: skip

    def _pair_sweep(self, st, src, dst, w, first):
        nx, ny, nz = st.shape
        bk, bj = self.config.pair_block
        chunk = self._tile_chunk(st.shape)
        grid = (_ceil(nz, 2 * bk - 2), _ceil(ny, bj - 2), _ceil(nx, chunk))
        if self.kernel == "pair32":
            import cupy as cp

            if nx * ny * nz >= 2**31:
                raise InputError("pair32 indexes in 32 bits: grids below 2**31 nodes")
            d, dmode = self._diagonal_of(st)
            kernel = self._pair32(src.dtype, st.periodic, dmode)
            args = (src, dst, st.b, st.cx, st.cy, st.cz, d, cp.int32(nx), cp.int32(ny),
                    cp.int32(nz), cp.int32(first), w, cp.int32(chunk))  # fmt: skip
            kernel(grid, (bk, bj, 1), args, stream=self.dev.stream)
            return
        b, cx, cy, cz, d, dmode = self._stencil_args(st)
        self.dev.launch(
            rb_pair(src.dtype, bk, bj, st.periodic, dmode), grid, (bk, bj, 1), self._v(src),
            self._v(dst), b, cx, cy, cz, d, nx, ny, nz, first, w, chunk,
        )  # fmt: skip

    def capture(self, fn, key=None):
        """As :meth:`CUDABackend.capture`; the runner also keeps the work buffers it uses."""
        holds = {}

        def collecting():
            outer, self._collect = self._collect, holds
            try:
                fn()
            finally:
                self._collect = outer

        runner = super().capture(collecting, key)
        runner.holds = holds
        return runner

    def sor_until(self, st, x, omega, atol, maxiter, check_every=10, on_device=True):
        """SOR sweeps in batches of ``check_every`` until ``‖b − A x‖₂ ≤ atol`` or ``maxiter``.

        With ``on_device`` (CuPy layer, ``launch="graph"``) the whole loop is one CUDA graph
        with a conditional WHILE node. Otherwise the host checks after every batch (as the
        Solver does). Both stop after the same batch and leave bitwise the same ``x``.

        Returns
        -------
        (int, float)
            Sweeps done and the last residual norm (computed in float64).
        """
        if on_device and self.dev.name == "cupy" and self.launch == "graph":
            key = self._key("while", x, *self._st_items(st), float(omega), float(atol))
            key += (int(maxiter), int(check_every), self.kernel)
            loop = self._loops.get(key)
            if loop is None:
                if len(self._loops) >= 8:
                    self._loops.pop(next(iter(self._loops)))
                loop = WhileLoop(self, st, x, omega, atol, maxiter, check_every)
                self._loops[key] = loop
            return loop.run()
        sweeps = 0
        while True:
            self.sor_sweeps(st, x, omega, check_every)
            sweeps += check_every
            r = self.residual_norm(st, x)
            if not r > atol or sweeps >= maxiter:
                return sweeps, r


class WhileLoop:
    """A completed WHILE-node graph for one (stencil, x, ω, threshold, maxiter, batch).

    The graph's body is ``check_every`` sweeps, the residual reduction, and a one-thread kernel
    that counts sweeps and sets the loop condition with ``cudaGraphSetConditional`` (a CUDA
    device runtime function numba declares as an external device function). Built with
    cuda.core's ``GraphBuilder``; numba-cuda launches into a ``GraphBuilder`` as into a stream.
    """

    def __init__(self, backend, st, x, omega, threshold, maxiter, check_every):
        from cuda.core import Device, Stream

        self.backend = backend
        dev = backend.dev
        self.count = dev.empty((1,), np.int64)
        device = Device()
        device.set_current()
        check = while_check()
        gb = device.create_graph_builder().begin_building()
        cond = gb.create_condition(default_value=1)
        body = gb.while_loop(cond)
        body.begin_building()
        self.holds = {}  # work buffers the graph writes: alive as long as the loop
        saved, dev.nb_stream, dev.capturing = dev.nb_stream, body, True
        backend._collect = self.holds
        try:
            backend._sor(st, x, x.dtype.type(omega), check_every)
            backend.enqueue_residual_sumsq(st, x, copy=False)
            dev.launch(
                check, 1, 1, backend._v(backend._sums), backend._v(self.count), check_every,
                maxiter, float(threshold) ** 2, np.uint64(int(cond.handle)),
            )  # fmt: skip
        finally:
            dev.nb_stream, dev.capturing = saved, False
            backend._collect = None
        body.end_building()
        gb.end_building()
        self.graph = gb.complete()
        self.core_stream = Stream.from_handle(dev.stream.ptr)
        self.graph.upload(self.core_stream)

    def run(self):
        """Launch the loop once and wait for it; return (sweeps done, residual norm)."""
        dev, be = self.backend.dev, self.backend
        with dev.io():
            be._fill(self.count, 0)
            self.graph.launch(self.core_stream)
            dev.copy_to_host_async(be._sums, 0)
            rt = dev.cp.cuda.runtime
            rt.memcpyAsync(
                dev.host.ctypes.data + 8, self.count.data.ptr, 8, rt.memcpyDeviceToHost,
                dev.stream.ptr,
            )  # fmt: skip
            r2 = dev.read_scalar(be._sums, 0)
            sweeps = int(dev.host[1:2].view(np.int64)[0])
        return sweeps, math.sqrt(r2)


# ---------------------------------------------------------------------- measurement
def sweep_rows(sizes, copy_bps):
    """Per-sweep GPU time of each kernel shape (graph replay of 20 sweeps, CUDA events)."""
    import cupy as cp

    from pbsolver.bench import COPY_FLOOR_BYTES, _progress, random_problem, sweep_row

    variants = [
        ("tile", VariantConfig()),
        ("pair", VariantConfig()),
        ("pair", VariantConfig(pair_block=(32, 16))),
        ("pair", VariantConfig(pair_block=(32, 16), pair_chunk=64)),
        ("pair", VariantConfig(pair_block=(32, 12))),
        ("pair32", VariantConfig()),
        ("pair32", VariantConfig(pair_min_blocks=5)),
        ("pair32", VariantConfig(pair_min_blocks=5, pair_waves=True)),
        ("pair32", VariantConfig(pair_min_blocks=5, pair_waves=True, pair_prefetch=True)),
        ("pair32", VariantConfig(pair_waves=True, pair_prefetch=True)),
        ("pair32", VariantConfig(pair_block=(32, 12))),
        ("pair32", VariantConfig(pair_block=(32, 12), pair_waves=True)),
        ("pair32", VariantConfig(pair_block=(32, 12), pair_waves=True, pair_prefetch=True)),
        (
            "pair32",
            VariantConfig(
                pair_block=(32, 12), pair_min_blocks=4, pair_waves=True, pair_prefetch=True
            ),
        ),  # fmt: skip
        ("pair32", VariantConfig(pair_block=(32, 16), pair_waves=True, pair_prefetch=True)),
        (
            "pair32",
            VariantConfig(
                pair_block=(32, 16), pair_min_blocks=3, pair_waves=True, pair_prefetch=True
            ),
        ),  # fmt: skip
        ("point", VariantConfig()),
        ("march", VariantConfig()),
    ]
    rows = []
    for n in sizes:
        st = CUDABackend().stencil(random_problem(n, xp=cp, seed=n), np.float32)
        x0 = cp.random.standard_normal((n, n, n), dtype=cp.float32)
        floor_s = COPY_FLOOR_BYTES * n**3 / copy_bps
        want = x0.copy()
        CUDABackend().sor_sweeps(st, want, 1.9, 3)
        for kernel, cfg in variants:
            gpu = VariantBackend(kernel=kernel, config=cfg)
            got = x0.copy()
            gpu.sor_sweeps(st, got, 1.9, 3)  # the same iterate as "point" (the package's)?
            diff = float(cp.abs(got - want).max() / cp.abs(want).max())
            label = kernel
            if kernel in FUSED:
                bk, bj = cfg.tile_block if kernel == "tile" else cfg.pair_block
                label = f"{kernel} {bk}x{bj} chunk {gpu._tile_chunk((n, n, n))}"
                if kernel == "pair32":
                    label += f" min blocks {cfg.pair_min_blocks}" if cfg.pair_min_blocks else ""
                    label += " waves" if cfg.pair_waves else ""
                    label += " prefetch" if cfg.pair_prefetch else ""
            row = sweep_row(gpu, st, x0, n, label, SWEEP_BYTES[kernel], floor_s)
            rows.append({**row, "max_rel_diff_vs_point": diff})
            _progress(rows[-1])
        st = x0 = None
        cp.get_default_memory_pool().free_all_blocks()
    return rows


def launch_rows(quick):
    """Wall vs GPU-busy time per sweep for each launch mode, and the WHILE-node loop."""
    import cupy as cp

    from pbsolver.bench import _progress, busy_us_per_sweep, launch_row, random_problem

    rows = []
    for n in (64, 100):
        st = CUDABackend().stencil(random_problem(n, xp=cp, seed=7 + n), np.float32)
        busy_us = busy_us_per_sweep(CUDABackend(), st, n)
        for mode in LAUNCH_MODES:
            gpu = VariantBackend(launch=mode)
            for loop in ("sweeps", "solver loop"):
                rows.append({**launch_row(gpu, st, n, loop, busy_us, quick), "mode": mode})
                _progress(rows[-1])
        for on_device in (False, True):
            rows.append(until_row(st, n, busy_us, on_device))
            _progress(rows[-1])
    return rows


def until_row(st, n, busy_us, on_device):
    """SOR to 1e-4 from x = 0: a host check every 10 sweeps, or one WHILE-node graph launch.

    Float32, no refinement, the optimal ω of the constant-coefficient Laplacian.
    """
    omega = 2.0 / (1.0 + math.sqrt(1.0 - math.cos(math.pi / (n - 1)) ** 2))
    gpu = VariantBackend()
    try:
        x = gpu.zeros((n, n, n), np.float32)  # one buffer: its graphs are reused
        bnorm = gpu.residual_norm(st, x)
        times = []
        for _ in range(4):  # the first builds the graphs (and compiles)
            gpu.fill(x, 0.0)
            gpu.synchronize()
            t0 = time.perf_counter()
            sweeps, r = gpu.sor_until(st, x, omega, 1e-4 * bnorm, 20000, 10, on_device)
            times.append(time.perf_counter() - t0)
    except Exception as exc:
        return {"n": n, "mode": f"while-node={on_device}", "error": repr(exc)}
    seconds = float(np.median(times[1:]))
    wall_us = seconds / sweeps * 1e6
    return {
        "n": n,
        "mode": "while-node" if on_device else "graph+host",
        "loop": "to 1e-4 (f32)",
        "sweeps": sweeps,
        "relative_residual": r / bnorm,
        "wall_us_per_sweep": wall_us,
        "gpu_busy_us_per_sweep": busy_us,
        "wall_over_busy": wall_us / busy_us,
        "seconds": seconds,
    }


def main(argv=None):
    """Measure every kernel shape and launch mode; print the tables (and write ``--json``)."""
    from pbsolver.bench import copy_rate, environment, format_tables

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="100,256,384", help="grid sizes n (n³) for the sweeps")
    ap.add_argument("--quick", action="store_true", help="fewer sizes and repeats")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--no-launch", action="store_true", help="the kernel shapes only")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    if args.quick:
        sizes = [n for n in sizes if n <= 256][:2] or [64]
    res = {"environment": environment(True)}
    res["copy_GBps"] = copy_rate(args.quick) / 1e9
    res["sweeps"] = sweep_rows(sizes, res["copy_GBps"] * 1e9)
    res["launch"] = [] if args.no_launch else launch_rows(args.quick)
    print("\n" + format_tables(res))
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1, default=float))


if __name__ == "__main__":
    main()
