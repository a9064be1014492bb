"""Two red–black sweeps in one pass (measurement only: not faster on the H200, see below).

:mod:`pbsolver.backends.cuda.fused_sweep` reads the iterate, b and the three faces once a
sweep. This kernel reads them once for two sweeps, so the smoother's two pre- and two
post-sweeps of a V(2,2) cycle each stream a level once. Each block owns a tile of
``(2·BK) × BJ`` z-columns (two a thread, as the one-sweep kernel) and marches along x through
its planes, four half-sweeps in a pipeline, each two planes behind the one before:

1. plane ``q``: the first colour from ``x`` (global memory; every column of the tile);
2. plane ``q − 2``: the other colour from the first colour's new values;
3. plane ``q − 4``: the first colour again, from those;
4. plane ``q − 6``: the other colour again; both colours of that plane go to ``y``.

Every value a stage reads was written in an earlier plane step, so one barrier a plane is
enough; the planes live in a ring of eight shared-memory slots. A stage's new values need the
previous stage's in-plane neighbours, so stage ``s`` relaxes only the tile's nodes at least
``s − 1`` nodes from its edge, and a block writes the ``(2·BK − 6) × (BJ − 6)`` nodes at least
three from it (:data:`MARGIN`). A chunk of ``chunk`` planes walks ``chunk + 9``.

The same floating-point operations in the same order as two sweeps of the one-sweep kernel
(:data:`~pbsolver.backends.cuda.fused_sweep.HELPERS`' relaxation), so the iterates are the same
bits. ``tests/test_fused_sweep_emulation.py`` compiles this source as C++ and compares it with
two reference sweeps; ``benchmarks/double_sweep_variants.py`` times it on a GPU beside two
one-sweep launches and checks its bits there.

Why the package does not use it: it moves half the bytes of two one-sweep launches but takes
as long (BENCHMARKS.md, thirtieth session): both kernels issue about the same instructions a
node-update, and neither is bound by DRAM bandwidth.
"""

from __future__ import annotations

import functools

import numpy as np

from pbsolver.backends.cuda import fused_sweep

#: Threads a block over (z pairs, y rows), the three-node halo included.
BLOCK = (32, 16)
#: Blocks a multiprocessor must hold (``__launch_bounds__``'s second argument).
MIN_BLOCKS = 2
#: Nodes a block recomputes on each side in y and z.
MARGIN = 3
#: Planes a block walks beyond its chunk: the pipeline's depth.
EXTRA_PLANES = 9

#: The kernel (after :data:`~pbsolver.backends.cuda.fused_sweep.HELPERS`).
KERNEL = r"""
#define MARGIN 3
#define OK (2 * BK - 2 * MARGIN)
#define OJ (BJ - 2 * MARGIN)

// the ring slot of plane step t (eight slots: a negative t wraps as two's complement does)
__device__ __forceinline__ int slot_of(int t) { return (t & 7) * PLANE; }

// relaxes ring node r of plane slot `here` from its ring neighbours: the planes before and
// after it in x, the tile's rows (y) and columns (z)
__device__ __forceinline__ void relax_in_ring(REAL *ring, int below, int here, int above, int r,
                                             const Coeffs &c, REAL omega) {
    ring[here + r] = relax_with(c, ring[below + r], ring[above + r], ring[here + r - WIDTH],
                                ring[here + r + WIDTH], ring[here + r - 1], ring[here + r + 1],
                                ring[here + r], omega);
}

extern "C" __global__ void LAUNCH_BOUNDS rb_fused_twice(SWEEP_ARGS) {
    __shared__ REAL ring[8 * PLANE];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int c0 = 2 * tx, c1 = c0 + 1;
    const int rb = ty * WIDTH + c0;  // this thread's first column in a ring slot
    const int kh = (int)blockIdx.x * OK + c0 - MARGIN;
    const int jh = (int)blockIdx.y * OJ + ty - MARGIN;
    unsigned k0, k1, j;
    const bool v0 = wrap_axis(kh, nz, &k0);
    const bool v1 = wrap_axis(kh + 1, nz, &k1);
    const bool jv = wrap_axis(jh, ny, &j);
    // how far each column lies from the tile's edge: stage s relaxes a node at depth >= s - 1
    const int my = min(ty, BJ - 1 - ty);
    const int m0 = min(min(c0, WIDTH - 1 - c0), my), m1 = min(min(c1, WIDTH - 1 - c1), my);
    const bool w0 = jv && v0 && m0 >= MARGIN && kh < nz && jh < ny;
    const bool w1 = jv && v1 && m1 >= MARGIN && kh + 1 < nz && jh < ny;
    const unsigned unx = nx, uny = ny, unz = nz, sx = uny * unz;
    const unsigned o0 = j * unz + k0, o1 = j * unz + k1;
    const bool in0 = v0 && inner(j, uny) && inner(k0, unz);
    const bool in1 = v1 && inner(j, uny) && inner(k1, unz);
    const unsigned par0 = (j + k0) & 1u;
    const unsigned colour = (unsigned)first;
    const int i0 = (int)blockIdx.z * chunk;
    const int i1 = min(i0 + chunk, nx);
    for (int t = 0; t < i1 - i0 + 9; ++t) {
        const int q = i0 - 3 + t;  // stage 1's plane; stage s works on plane q - 2 (s - 1)
        if (jv) {
            unsigned i;
            // stage 1: the first colour on plane q from x; both columns into the ring
            if (q <= i1 + 2 && wrap_axis(q, nx, &i)) {
                const unsigned pi = i * sx;
                const bool a0 = ((i + par0) & 1u) == colour;
                REAL n0 = (REAL)0, n1 = (REAL)0;
                if (v0) n0 = x[pi + o0];
                if (v1) n1 = x[pi + o1];
                if ((a0 ? in0 : in1) && inner(i, unx)) {
                    const unsigned k = a0 ? k0 : k1;
                    const unsigned p = pi + (a0 ? o0 : o1);
                    const unsigned im = minus_of(i, unx, sx, p), ip = plus_of(i, unx, sx, p);
                    const unsigned jm = minus_of(j, uny, unz, p), jp = plus_of(j, uny, unz, p);
                    const unsigned km = minus_of(k, unz, 1u, p), kp = plus_of(k, unz, 1u, p);
                    const REAL v = relax_node(b, cx, cy, cz, d, p, im, jm, km, x[im], x[ip],
                                              x[jm], x[jp], x[km], x[kp], a0 ? n0 : n1, omega);
                    if (a0) n0 = v; else n1 = v;
                }
                const int here = slot_of(t);
                if (v0) ring[here + rb] = n0;
                if (v1) ring[here + rb + 1] = n1;
            }
            // stages 2-4: the other colour, the first, the other, from the ring
#pragma unroll
            for (int s = 2; s <= 4; ++s) {
                const int qs = q - 2 * (s - 1);
                if (qs < i0 - (4 - s) || qs > i1 - 1 + (4 - s) || !wrap_axis(qs, nx, &i))
                    continue;
                const bool a0 = ((i + par0) & 1u) == colour;
                const bool use0 = (s & 1) ? a0 : !a0;  // the column holding this stage's colour
                if ((use0 ? in0 && m0 >= s - 1 : in1 && m1 >= s - 1) && inner(i, unx)) {
                    const unsigned k = use0 ? k0 : k1;
                    const unsigned p = i * sx + (use0 ? o0 : o1);
                    const Coeffs c = load_coeffs(b, cx, cy, cz, d, p, minus_of(i, unx, sx, p),
                                                 minus_of(j, uny, unz, p),
                                                 minus_of(k, unz, 1u, p));
                    const int ts = t - 2 * (s - 1);
                    relax_in_ring(ring, slot_of(ts - 1), slot_of(ts), slot_of(ts + 1),
                                  rb + (use0 ? 0 : 1), c, omega);
                }
                if (s == 4) {  // plane qs is done: both columns into y
                    const int here = slot_of(t - 6);
                    if (w0) y[i * sx + o0] = ring[here + rb];
                    if (w1) y[i * sx + o1] = ring[here + rb + 1];
                }
            }
        }
        __syncthreads();
    }
}
"""

#: The whole source.
SOURCE = fused_sweep.HELPERS + KERNEL


@functools.cache
def kernel(dtype, periodic, dmode, block=BLOCK, min_blocks=MIN_BLOCKS):
    """The kernel as a ``cupy.RawKernel`` for these constants (NVRTC compiles it on first use).

    Arguments ``(x, y, b, cx, cy, cz, d, nx, ny, nz, first, omega, chunk)`` as
    :func:`~pbsolver.backends.cuda.fused_sweep.kernel`'s; ``y`` gets two sweeps of ``x``;
    launch over :func:`launch_grid`.
    """
    import cupy as cp

    src = fused_sweep.defines(dtype, *block, periodic, dmode, min_blocks) + SOURCE
    return cp.RawKernel(src, "rb_fused_twice")


def chunk_for(shape, multiprocessors, block=BLOCK, resident=MIN_BLOCKS):
    """Planes a block: :func:`~pbsolver.backends.cuda.fused_sweep.chunk_for` for this pipeline."""
    return fused_sweep.chunk_for(shape, multiprocessors, block, resident, MARGIN, EXTRA_PLANES)


def launch_grid(shape, chunk, block=BLOCK):
    """Blocks over a grid of ``shape``: (z, y, x)."""
    return fused_sweep.launch_grid(shape, chunk, block, MARGIN)


def shared_bytes(dtype, block=BLOCK) -> int:
    """Shared memory a block holds: eight planes of its tile."""
    return 8 * 2 * block[0] * block[1] * np.dtype(dtype).itemsize


__all__ = [
    "BLOCK",
    "EXTRA_PLANES",
    "KERNEL",
    "MARGIN",
    "MIN_BLOCKS",
    "SOURCE",
    "chunk_for",
    "kernel",
    "launch_grid",
    "shared_bytes",
]
