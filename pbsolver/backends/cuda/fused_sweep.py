"""The fused red–black sweep: both colours in one pass, from one buffer into another.

The package's two-pass sweep (``kernels.rb_point``) streams the iterate, the three faces and b
once per colour: a 32-byte sector holds both colours, so each pass reads everything. This
kernel reads everything once a sweep. Thread ``tx`` of a block owns the z-columns ``2·tx`` and
``2·tx + 1``; the block marches along x through its planes:

* on plane ``q + 1`` it relaxes the first colour from ``x`` (one node a thread: of two
  neighbouring columns exactly one holds that colour on a plane, and a warp's threads all pick
  the same one) and puts the plane's values in a ring of three shared-memory planes;
* after one barrier it relaxes the second colour on plane ``q``: its x-neighbours, its own
  first-colour value and its pair-mate are the thread's registers, its other in-plane
  neighbours come from the ring; both colours of plane ``q`` go to ``y``.

A block writes the inner ``(2·BK − 2) × (BJ − 2)`` of the columns it covers (a one-node halo is
recomputed) and ``chunk`` planes. The same floating-point operations in the same order as the
two-pass sweep: on the H200 the iterates are the same bit for bit
(``benchmarks/sweep_variants.py``, ``max_rel_diff_vs_point``).

It is written in CUDA C and compiled by NVRTC through ``cupy.RawKernel`` because numba types
every index in 64 bits: the same algorithm in numba (``sweep_variants.rb_pair``) issues half
again as many instructions and is slower. Indices here are 32-bit, so grids of at most
:data:`MAX_NODES` nodes. ``benchmarks/sweep_pair_c.py --emulate`` compiles the same source as
C++ on a CPU and checks it against a two-pass sweep (numba's simulator cannot run it).

On a Dirichlet grid the backend launches :data:`DIRICHLET_KERNEL` instead: the same algorithm
and arithmetic compiled for the grid's shape, whose constant strides let every neighbour and face
be read at an immediate offset from one address (fewer instructions a node; the same bits).

The multigrid smoother uses it where a level has at least :data:`FUSED_MIN_NODES` nodes (on
small grids the plane-by-plane march has too few blocks to hide its latency, and the two-pass
sweep is faster), sweeping between the level's iterate and its residual buffer, which is free
while the level smooths.
"""

from __future__ import annotations

import functools
import math

import numpy as np

#: Threads a block over (z pairs, y rows), a one-node halo included.
BLOCK = (32, 8)
#: Blocks a multiprocessor must hold (``__launch_bounds__``'s second argument: it caps the
#: registers, so that five blocks of 256 threads fit).
MIN_BLOCKS = 5
#: Levels with fewer nodes keep the two-pass sweep.
FUSED_MIN_NODES = 160**3
#: 32-bit flat indices.
MAX_NODES = 2**31 - 1

#: What every sweep kernel shares: index wrapping, a node's coefficients, the relaxation.
#: Compile-time constants: REAL, PERIODIC (0/1) and DMODE (as
#: :mod:`pbsolver.backends.cuda.kernels`: 0 faces, 1 faces + d, 2 d stored). The kernels add
#: BK, BJ, PREFETCH (0/1: the second colour's coefficients are loaded before the plane's
#: barrier, beside the first's) and LAUNCH_BOUNDS.
HELPERS = r"""
// (valid, index) of a signed coordinate h within one period of an axis of n
__device__ __forceinline__ bool wrap_axis(int h, int n, unsigned *idx) {
    if (h < 0) {
        if (PERIODIC && h + n >= 0) { *idx = (unsigned)(h + n); return true; }
        *idx = 0u; return false;
    }
    if (h >= n) {
        if (PERIODIC && h - n < n) { *idx = (unsigned)(h - n); return true; }
        *idx = 0u; return false;
    }
    *idx = (unsigned)h; return true;
}

// off the outer layer (always, on a periodic grid)
__device__ __forceinline__ bool inner(unsigned i, unsigned n) {
    return PERIODIC || (i >= 1u && i + 1u < n);
}

__device__ __forceinline__ unsigned minus_of(unsigned i, unsigned n, unsigned s, unsigned p) {
    if (!PERIODIC) return p - s;
    return i > 0u ? p - s : p + (n - 1u) * s;
}

__device__ __forceinline__ unsigned plus_of(unsigned i, unsigned n, unsigned s, unsigned p) {
    if (!PERIODIC) return p + s;
    return i + 1u < n ? p + s : p - (n - 1u) * s;
}

// a node's right-hand side, six faces (-x, +x, -y, +y, -z, +z) and diagonal
struct Coeffs { REAL b, a0, a1, a2, a3, a4, a5, diag; };

// I: unsigned (the general kernels' wrapped indices) or int (offsets with constant strides)
template <typename I>
__device__ __forceinline__ Coeffs load_coeffs(
        const REAL *__restrict__ b, const REAL *__restrict__ cx, const REAL *__restrict__ cy,
        const REAL *__restrict__ cz, const REAL *__restrict__ d, I p, I im, I jm, I km) {
    Coeffs c;
    c.b = b[p];
    c.a0 = cx[im]; c.a1 = cx[p]; c.a2 = cy[jm]; c.a3 = cy[p]; c.a4 = cz[km]; c.a5 = cz[p];
    if (DMODE == 2) {
        c.diag = d[p];
    } else {  // the two-pass kernel's order: +x, -x, +y, -y, +z, -z
        c.diag = c.a1 + c.a0 + c.a3 + c.a2 + c.a5 + c.a4;
        if (DMODE == 1) c.diag += d[p];
    }
    return c;
}

// the over-relaxed value of a node from its coefficients and six neighbours' values
__device__ __forceinline__ REAL relax_with(const Coeffs &c, REAL xim, REAL xip, REAL xjm,
                                          REAL xjp, REAL xkm, REAL xkp, REAL old, REAL omega) {
    REAL s = c.b + c.a0 * xim + c.a1 * xip + c.a2 * xjm + c.a3 * xjp + c.a4 * xkm + c.a5 * xkp;
    return old + omega * (s / c.diag - old);
}

__device__ __forceinline__ REAL relax_node(
        const REAL *__restrict__ b, const REAL *__restrict__ cx, const REAL *__restrict__ cy,
        const REAL *__restrict__ cz, const REAL *__restrict__ d, unsigned p, unsigned im,
        unsigned jm, unsigned km, REAL xim, REAL xip, REAL xjm, REAL xjp, REAL xkm, REAL xkp,
        REAL old, REAL omega) {
    return relax_with(load_coeffs(b, cx, cy, cz, d, p, im, jm, km), xim, xip, xjm, xjp, xkm,
                      xkp, old, omega);
}

#define WIDTH (2 * BK)
#define PLANE (BJ * WIDTH)

// every sweep kernel's arguments: x in, y out, b, the three faces, d, the grid's sizes, the
// first colour, omega and the planes a block (so that a backend launches any of them alike)
#define SWEEP_ARGS                                                                           \
    const REAL *__restrict__ x, REAL *__restrict__ y, const REAL *__restrict__ b,            \
        const REAL *__restrict__ cx, const REAL *__restrict__ cy, const REAL *__restrict__ cz, \
        const REAL *__restrict__ d, int nx, int ny, int nz, int first, REAL omega, int chunk

// a one-sweep kernel's plane q into y: the first colour from the registers, the second relaxed
// from its first-colour neighbours (x and its pair-mate: registers; the rest: the ring slot of
// plane q, `at` = the slot + the thread's first column). first0: column 1 holds the first colour
// on plane q; y0, y1: the two columns' indices in y
template <typename I>
__device__ __forceinline__ void store_plane(
        REAL *__restrict__ y, const REAL *ring, int at, bool first0, bool w0, bool w1,
        bool relax_q, const Coeffs &cq, I y0, I y1, REAL s0a, REAL s1a, REAL s0b, REAL s1b,
        REAL n0, REAL n1, REAL omega) {
    if (first0) {  // column 0 holds the second colour on plane q, column 1 the first
        if (w1) y[y1] = s1a;
        if (w0)
            y[y0] = relax_q ? relax_with(cq, s0b, n0, ring[at - WIDTH], ring[at + WIDTH],
                                         ring[at - 1], s1a, s0a, omega)
                            : s0a;
    } else {
        if (w0) y[y0] = s0a;
        if (w1)
            y[y1] = relax_q ? relax_with(cq, s1b, n1, ring[at + 1 - WIDTH], ring[at + 1 + WIDTH],
                                         s0a, ring[at + 2], s1a, omega)
                            : s1a;
    }
}
"""

#: The one-sweep kernel (after :data:`HELPERS`).
KERNEL = r"""
#define OK (2 * BK - 2)
#define OJ (BJ - 2)

extern "C" __global__ void LAUNCH_BOUNDS rb_fused(SWEEP_ARGS) {
    __shared__ REAL ring[3 * PLANE];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int c0 = 2 * tx, c1 = c0 + 1;
    const int rb = ty * WIDTH + c0;  // this thread's first column in a ring slot
    const int kh = (int)blockIdx.x * OK + c0 - 1;
    const int jh = (int)blockIdx.y * OJ + ty - 1;
    unsigned k0, k1, j;
    const bool v0 = wrap_axis(kh, nz, &k0);
    const bool v1 = wrap_axis(kh + 1, nz, &k1);
    const bool jv = wrap_axis(jh, ny, &j);
    const bool rows = ty >= 1 && ty <= OJ && jh < ny;
    const bool w0 = rows && c0 >= 1 && kh < nz;
    const bool w1 = rows && c1 <= OK && kh + 1 < nz;
    const unsigned unx = nx, uny = ny, unz = nz, sx = uny * unz;
    const unsigned o0 = j * unz + k0, o1 = j * unz + k1;
    const bool in0 = inner(j, uny) && inner(k0, unz);
    const bool in1 = inner(j, uny) && inner(k1, unz);
    const unsigned par0 = (j + k0) & 1u;
    const unsigned colour = (unsigned)first;
    const REAL zero = (REAL)0;
    const int i0 = (int)blockIdx.z * chunk;
    const int i1 = min(i0 + chunk, nx);
    REAL s0a = zero, s1a = zero, s0b = zero, s1b = zero;
    int slot = 0, mid = 2 * PLANE;
    int q = i0 - 2;  // the second colour's plane; the first colour's is q + 1
    for (int t = 0; t < i1 - i0 + 2; ++t) {
        // the first colour at plane q + 1 on both columns (reads x only)
        unsigned i;
        const bool iv = wrap_axis(q + 1, nx, &i);
        const bool first0 = ((i + par0) & 1u) == colour;
        REAL n0 = zero, n1 = zero;
        if (iv && jv) {
            const unsigned pi = i * sx;
            if (v0) n0 = x[pi + o0];
            if (v1) n1 = x[pi + o1];
            if ((first0 ? in0 : in1) && inner(i, unx)) {
                const unsigned k = first0 ? k0 : k1;
                const unsigned p = pi + (first0 ? o0 : o1);
                const unsigned im = minus_of(i, unx, sx, p), ip = plus_of(i, unx, sx, p);
                const unsigned jm = minus_of(j, uny, unz, p), jp = plus_of(j, uny, unz, p);
                const unsigned km = minus_of(k, unz, 1u, p), kp = plus_of(k, unz, 1u, p);
                const REAL old = first0 ? n0 : n1;
                const REAL v = relax_node(b, cx, cy, cz, d, p, im, jm, km, x[im], x[ip], x[jm],
                                          x[jp], x[km], x[kp], old, omega);
                if (first0) n0 = v; else n1 = v;
            }
            if (v0) ring[slot + rb] = n0;
            if (v1) ring[slot + rb + 1] = n1;
        }
        // the second colour's node on plane q: where it is, whether it is relaxed, and (with
        // PREFETCH) its coefficients loaded before the barrier, beside the first colour's
        const unsigned iq = (unsigned)q;
        const unsigned kq = first0 ? k0 : k1;
        const unsigned pq = iq * sx + (first0 ? o0 : o1);
        const bool relax_q = q >= i0 && (first0 ? w0 && in0 : w1 && in1) && inner(iq, unx);
        Coeffs cq;
        if (PREFETCH && relax_q)
            cq = load_coeffs(b, cx, cy, cz, d, pq, minus_of(iq, unx, sx, pq),
                             minus_of(j, uny, unz, pq), minus_of(kq, unz, 1u, pq));
        __syncthreads();
        // plane q into y: the first colour from the registers, the second relaxed from its
        // first-colour neighbours (x and its pair-mate: registers; the rest: the ring)
        if (q >= i0) {
            if (!PREFETCH && relax_q)
                cq = load_coeffs(b, cx, cy, cz, d, pq, minus_of(iq, unx, sx, pq),
                                 minus_of(j, uny, unz, pq), minus_of(kq, unz, 1u, pq));
            store_plane(y, ring, mid + rb, first0, w0, w1, relax_q, cq, iq * sx + o0,
                        iq * sx + o1, s0a, s1a, s0b, s1b, n0, n1, omega);
        }
        s0b = s0a; s1b = s1a; s0a = n0; s1a = n1;
        mid = slot;
        slot = slot == 2 * PLANE ? 0 : slot + PLANE;
        ++q;
    }
}
"""

SOURCE = HELPERS + KERNEL

#: The one-sweep kernel on a Dirichlet grid whose shape is a compile-time constant (NX, NY, NZ:
#: :func:`shape_defines`), after :data:`HELPERS`. The same algorithm and arithmetic as
#: :data:`KERNEL`, but its indices are signed offsets from a node with constant strides, so the
#: compiler folds every neighbour and face into one address and an immediate offset, where the
#: general kernel's unsigned wrapped indices cost an address computation a load.
DIRICHLET_KERNEL = r"""
#define OK (2 * BK - 2)
#define OJ (BJ - 2)
#define SY NZ
#define SX (NY * NZ)

// a node's coefficients at offset p: the faces below it one stride back
__device__ __forceinline__ Coeffs coeffs_at(
        const REAL *__restrict__ b, const REAL *__restrict__ cx, const REAL *__restrict__ cy,
        const REAL *__restrict__ cz, const REAL *__restrict__ d, int p) {
    return load_coeffs(b, cx, cy, cz, d, p, p - SX, p - SY, p - 1);
}

// a thread's place in its block's tile: its two columns (z = k, k + 1) of row j, whether they
// lie on the grid (jv, v0, v1), are written (w0, w1) and relaxed (in0, in1), and its planes
struct Tile {
    int tx, rb, k, j, o0, par0, i0, i1;
    bool jv, v0, v1, w0, w1, in0, in1;
};

__device__ __forceinline__ Tile tile_of(int chunk) {
    Tile t;
    t.tx = threadIdx.x;
    const int ty = threadIdx.y, c0 = 2 * t.tx, c1 = c0 + 1;
    t.rb = ty * WIDTH + c0;  // the thread's first column in a ring slot
    t.k = (int)blockIdx.x * OK + c0 - 1;
    t.j = (int)blockIdx.y * OJ + ty - 1;
    t.jv = t.j >= 0 && t.j < NY;
    t.v0 = t.k >= 0 && t.k < NZ;
    t.v1 = t.k + 1 < NZ;
    const bool rows = ty >= 1 && ty <= OJ && t.j < NY;
    t.w0 = rows && c0 >= 1 && t.k < NZ;
    t.w1 = rows && c1 <= OK && t.k + 1 < NZ;
    const bool jin = t.j >= 1 && t.j < NY - 1;
    t.in0 = jin && t.k >= 1 && t.k < NZ - 1;
    t.in1 = jin && t.k >= 0 && t.k + 1 < NZ - 1;
    t.o0 = t.j * SY + t.k;  // column 0's offset in a plane
    t.par0 = (t.j + t.k) & 1;
    t.i0 = (int)blockIdx.z * chunk;
    t.i1 = min(t.i0 + chunk, NX);
    return t;
}

// the rest of a plane step once plane q + 1's first colour is in n0, n1: those into the ring,
// the barrier, plane q into y (its second colour relaxed), the registers moved on a plane
__device__ __forceinline__ void finish_step(
        REAL *__restrict__ y, REAL *ring, const REAL *__restrict__ b,
        const REAL *__restrict__ cx, const REAL *__restrict__ cy, const REAL *__restrict__ cz,
        const REAL *__restrict__ d, const Tile &t, int q, bool first0, REAL n0, REAL n1,
        REAL omega, REAL &s0a, REAL &s1a, REAL &s0b, REAL &s1b, int &slot, int &mid) {
    const int i = q + 1;
    if (t.jv && i < NX && i >= 0) {
        if (t.v0) ring[slot + t.rb] = n0;
        if (t.v1) ring[slot + t.rb + 1] = n1;
    }
    const int pq = q * SX + t.o0 + (first0 ? 0 : 1);
    const bool relax_q = q >= t.i0 && (first0 ? t.w0 && t.in0 : t.w1 && t.in1) && q >= 1 &&
                         q < NX - 1;
    Coeffs cq;
    if (PREFETCH && relax_q) cq = coeffs_at(b, cx, cy, cz, d, pq);
    __syncthreads();
    if (q >= t.i0) {
        if (!PREFETCH && relax_q) cq = coeffs_at(b, cx, cy, cz, d, pq);
        const int y0 = q * SX + t.o0;
        store_plane(y, ring, mid + t.rb, first0, t.w0, t.w1, relax_q, cq, y0, y0 + 1, s0a, s1a,
                    s0b, s1b, n0, n1, omega);
    }
    s0b = s0a; s1b = s1a; s0a = n0; s1a = n1;
    mid = slot;
    slot = slot == 2 * PLANE ? 0 : slot + PLANE;
}

extern "C" __global__ void LAUNCH_BOUNDS rb_fused_dirichlet(SWEEP_ARGS) {
    __shared__ REAL ring[3 * PLANE];
    const Tile t = tile_of(chunk);
    const REAL zero = (REAL)0;
    REAL s0a = zero, s1a = zero, s0b = zero, s1b = zero;
    int slot = 0, mid = 2 * PLANE;
    for (int q = t.i0 - 2; q < t.i1; ++q) {  // the second colour's plane; the first colour's q + 1
        const int i = q + 1;
        const bool first0 = ((i + t.par0) & 1) == first;
        REAL n0 = zero, n1 = zero;
        if (t.jv && i < NX && i >= 0) {
            const int pc = i * SX + t.o0;
            if (t.v0) n0 = x[pc];
            if (t.v1) n1 = x[pc + 1];
            if ((first0 ? t.in0 : t.in1) && i >= 1 && i < NX - 1) {
                const int p = pc + (first0 ? 0 : 1);
                const REAL v = relax_with(coeffs_at(b, cx, cy, cz, d, p), x[p - SX], x[p + SX],
                                          x[p - SY], x[p + SY], x[p - 1], x[p + 1],
                                          first0 ? n0 : n1, omega);
                if (first0) n0 = v; else n1 = v;
            }
        }
        finish_step(y, ring, b, cx, cy, cz, d, t, q, first0, n0, n1, omega, s0a, s1a, s0b, s1b,
                    slot, mid);
    }
}
"""

SOURCE_DIRICHLET = HELPERS + DIRICHLET_KERNEL


def defines(dtype, bk, bj, periodic, dmode, min_blocks=0, prefetch=False):
    """The compile-time constants of :data:`SOURCE` as ``#define`` lines.

    ``min_blocks`` > 0: the blocks a multiprocessor must hold (caps the registers).
    """
    real = {np.dtype(np.float32): "float", np.dtype(np.float64): "double"}[np.dtype(dtype)]
    bounds = f"{int(bk) * int(bj)}" + (f", {int(min_blocks)}" if min_blocks else "")
    return (
        f"#define REAL {real}\n#define BK {int(bk)}\n#define BJ {int(bj)}\n"
        f"#define PERIODIC {int(bool(periodic))}\n#define DMODE {int(dmode)}\n"
        f"#define PREFETCH {int(bool(prefetch))}\n"
        f"#ifndef LAUNCH_BOUNDS\n#define LAUNCH_BOUNDS __launch_bounds__({bounds})\n#endif\n"
    )


def shape_defines(shape) -> str:
    """A grid's shape as :data:`DIRICHLET_KERNEL`'s compile-time constants."""
    nx, ny, nz = (int(n) for n in shape)
    return f"#define NX {nx}\n#define NY {ny}\n#define NZ {nz}\n"


@functools.cache
def kernel(dtype, periodic, dmode, block=BLOCK, min_blocks=MIN_BLOCKS, prefetch=True,
           shape=None):  # fmt: skip
    """The sweep as a ``cupy.RawKernel`` for these constants (NVRTC compiles it on first use).

    Arguments ``(x, y, b, cx, cy, cz, d, nx, ny, nz, first, omega, chunk)``: ``int32`` sizes,
    ``omega`` of ``dtype``; launch over :func:`launch_grid`. ``shape`` (a Dirichlet grid's):
    :data:`DIRICHLET_KERNEL` compiled for that shape, which then must be the sizes passed. So a
    level of a new shape costs one NVRTC compilation at its first sweep (CuPy keeps the binary
    on disk for later processes); problems of a shape already swept cost nothing more.
    """
    import cupy as cp

    src = defines(dtype, *block, periodic, dmode, min_blocks, prefetch)
    if shape is None:
        return cp.RawKernel(src + SOURCE, "rb_fused")
    if periodic:
        raise ValueError("the shape-specialised sweep is for Dirichlet grids")
    return cp.RawKernel(src + shape_defines(shape) + SOURCE_DIRICHLET, "rb_fused_dirichlet")


def applies(shape, dtype) -> bool:
    """Whether the smoother sweeps a level of ``shape`` and ``dtype`` with this kernel.

    float32 only, the storage of the solves on large grids (float64 refinement around it): the
    float64 kernel is checked by the CPU emulation but has not run on a GPU.
    """
    n = math.prod(int(s) for s in shape)
    return FUSED_MIN_NODES <= n <= MAX_NODES and np.dtype(dtype) == np.float32


def chunk_for(shape, multiprocessors, block=BLOCK, resident=MIN_BLOCKS, margin=1, extra=2):
    """Planes a block so that the blocks fill whole waves of resident blocks.

    Every block walks ``chunk + extra`` planes (``extra``: the planes its pipeline adds, 2 for
    this kernel) and the blocks run in waves of ``resident × multiprocessors``: the chunk with
    the fewest ``waves × (chunk + extra)``. ``margin``: the halo a block recomputes on each side
    in y and z (1 here).
    """
    nx, ny, nz = (int(s) for s in shape)
    bk, bj = block
    columns = -(-nz // (2 * bk - 2 * margin)) * -(-ny // (bj - 2 * margin))
    slots = max(1, int(resident) * int(multiprocessors))
    best = None
    for count in range(1, max(1, nx // 4) + 1):
        chunk = -(-nx // count)
        cost = -(-columns * -(-nx // chunk) // slots) * (chunk + extra)
        if best is None or cost < best[0]:
            best = (cost, chunk)
    return best[1]


def launch_grid(shape, chunk, block=BLOCK, margin=1):
    """Blocks of the sweep over a grid of ``shape``: (z, y, x); ``margin`` as :func:`chunk_for`."""
    nx, ny, nz = (int(s) for s in shape)
    bk, bj = block
    return (-(-nz // (2 * bk - 2 * margin)), -(-ny // (bj - 2 * margin)), -(-nx // chunk))


__all__ = [
    "BLOCK",
    "DIRICHLET_KERNEL",
    "FUSED_MIN_NODES",
    "MAX_NODES",
    "MIN_BLOCKS",
    "HELPERS",
    "KERNEL",
    "SOURCE",
    "SOURCE_DIRICHLET",
    "applies",
    "chunk_for",
    "defines",
    "kernel",
    "launch_grid",
    "shape_defines",
]
