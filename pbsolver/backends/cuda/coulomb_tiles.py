"""The direct φ_c sum of the CUDA backends: atoms tiled in shared memory, several nodes a thread.

One kernel factory serves both users: the frame engine (:mod:`pbsolver.backends.frame_kernels`,
float32, B frames a launch) and the general maps (:mod:`pbsolver.backends.cuda.maps`, float64,
one grid). Grid ``(node blocks, frames)``: each block stages ``THREADS`` atoms of its frame at a
time in shared memory, and each thread sums them for ``nodes`` nodes ``THREADS`` apart, so that
one shared-memory read serves that many pairs and the inner loop is a few arithmetic operations
and one inverse square root, with no branch:

* an atom on a node gives q · rsqrt(0) = ±inf (the exact answer there); an atom a rounding error
  off a node gets a large finite term, and each user's one-thread-an-atom on-node pass, launched
  after this kernel, makes such nodes ±inf as the CPU's pair body does (a compare and select in
  this loop, which runs atoms × nodes times, would cost more);
* an uncharged atom is staged at x = +inf, so its distance is infinite and its term
  q · rsqrt(inf) = 0 (not 0 · inf = NaN).

Node coordinates are ``(i, j, k) · h`` and atom positions are relative to the grid's origin
(``rel``), in the kernel's type. Partial sums are kept per tile of atoms in that type and carried
across tiles in float64. No fast-math (numba-cuda's would let the compiler assume there are no
infinities); NVVM still contracts the squares into FMAs.

The inverse square roots: :func:`rsqrt32` is the one-instruction float32 approximation
(``rsqrtf``), :func:`rsqrt64` libdevice's float64 ``rsqrt`` (1 ulp); the simulator, which has no
libdevice, divides instead.
"""

from __future__ import annotations

import functools
import math

import numpy as np
from numba import cuda

from pbsolver.backends.launch_sizes import THREADS, simulated

if simulated():

    @cuda.jit(device=True)
    def rsqrt32(x):
        """1 / √x in float32 (+inf at 0, 0 at +inf, as the hardware's)."""
        if x == 0.0:
            return np.float32(math.inf)
        return np.float32(1.0) / math.sqrt(x)

    @cuda.jit(device=True)
    def rsqrt64(x):
        """1 / √x in float64 (+inf at 0, 0 at +inf)."""
        return 1.0 / math.sqrt(x) if x > 0.0 else math.inf

else:
    from numba.cuda import libdevice

    rsqrt32 = libdevice.rsqrtf  # one rsqrt.approx: sqrt + divide would be two slow-pipe ops
    rsqrt64 = libdevice.rsqrt  # one call for a square root and a divide


@functools.cache
def tiled_coulomb_kernel(dtype, nodes: int, inverse_sqrt):
    """The tiled φ_c kernel in ``dtype`` with ``nodes`` nodes a thread (compiled once each).

    ``kernel[(blocks, frames), THREADS](out, rel, q, scale, nx, ny, nz, stride, h)`` writes
    ``scale · Σ_a q_a / |r − r_a|`` of frame ``f``'s node ``(i, j, k)`` to
    ``out[f·stride + i, j, k]``; ``rel`` is (frames, atoms, 3) relative to each frame's origin,
    ``h`` the spacing, both in ``dtype``; ``blocks`` covers ``nx·ny·nz / (nodes·THREADS)``.
    ``inverse_sqrt`` is :func:`rsqrt32` or :func:`rsqrt64` (or a variant to measure).
    """

    @cuda.jit(device=True)
    def node_xyz(c, nn, ny, nz, h):
        a = c if c < nn else 0
        i, j, k = a // (ny * nz), (a // nz) % ny, a % nz
        return i, j, k, dtype(i * h[0]), dtype(j * h[1]), dtype(k * h[2])

    @cuda.jit
    def coulomb(out, rel, q, scale, nx, ny, nz, stride, h):
        f = cuda.blockIdx.y
        tid = cuda.threadIdx.x
        c0 = cuda.blockIdx.x * nodes * THREADS + tid
        nn = nx * ny * nz
        xs = cuda.local.array(nodes, dtype=dtype)
        ys = cuda.local.array(nodes, dtype=dtype)
        zs = cuda.local.array(nodes, dtype=dtype)
        acc = cuda.local.array(nodes, dtype=np.float64)
        part = cuda.local.array(nodes, dtype=dtype)
        for n in range(nodes):
            _, _, _, xs[n], ys[n], zs[n] = node_xyz(c0 + n * THREADS, nn, ny, nz, h)
            acc[n] = 0.0
        tile = cuda.shared.array((THREADS, 4), dtype=dtype)
        na = q.shape[0]
        for base in range(0, na, THREADS):
            a = base + tid
            if a < na:
                qa = q[a]
                tile[tid, 0] = rel[f, a, 0] if qa != dtype(0.0) else dtype(math.inf)
                tile[tid, 1] = rel[f, a, 1]
                tile[tid, 2] = rel[f, a, 2]
                tile[tid, 3] = qa
            cuda.syncthreads()
            for n in range(nodes):
                part[n] = dtype(0.0)
            for t in range(min(THREADS, na - base)):
                px, py, pz, qa = tile[t, 0], tile[t, 1], tile[t, 2], tile[t, 3]
                for n in range(nodes):
                    dx, dy, dz = xs[n] - px, ys[n] - py, zs[n] - pz
                    part[n] += qa * inverse_sqrt(dx * dx + dy * dy + dz * dz)
            for n in range(nodes):
                acc[n] += part[n]
            cuda.syncthreads()
        for n in range(nodes):
            c = c0 + n * THREADS
            if c < nn:
                i, j, k, _, _, _ = node_xyz(c, nn, ny, nz, h)
                out[f * stride + i, j, k] = scale * acc[n]

    return coulomb


__all__ = ["rsqrt32", "rsqrt64", "tiled_coulomb_kernel"]
