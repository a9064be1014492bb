"""The multigrid transfers in CUDA C: restriction ``Pᵀ`` and prolongation ``P`` on a GPU.

The same sums as the CPU kernels (:mod:`pbsolver.backends.cpu.mg_kernels`), in the same order,
so a GPU level equals a CPU level bit for bit:

* restriction: each coarse node takes the fine nodes ``pos − 1, pos, pos + 1`` along each axis,
  the outer two with weight ½ where they are midpoints and 0 where they are coarse nodes; along
  z a line ``wm f₋ + f₀ + wp f₊``, along y a plane of three lines, along x three planes, in
  float64, rounded once to the level's type;
* prolongation: each fine unknown adds ⅛ of the sum of its eight coarse corners (summed in the
  level's type, added in float64, as the CPU kernel does).

Every product in those sums is a value times ½, 1 or 0, so it is exact and a fused multiply-add
rounds as the separate multiply and add do: the compiler's contraction cannot change a bit.

Restriction marches along x (:data:`RESTRICT_CHUNK` coarse planes a thread): the fine plane
``pos + 1`` of one coarse plane is the plane ``pos − 1`` of the next, so its partial sum is
carried over instead of being read again (the same value, so the same bits). Prolongation is
one thread a fine node: a version that marched along x too, keeping the corners of the coarse
planes that neighbouring fine planes share, was slower on the H200 (BENCHMARKS.md).

Both are written in CUDA C and compiled by NVRTC through ``cupy.RawKernel`` with 32-bit
indices, as :mod:`~pbsolver.backends.cuda.fused_sweep` is: numba types every index in 64 bits.
numba's simulator cannot run them, so ``tests/test_transfer_emulation.py`` compiles the same
source as C++ and compares it with the CPU kernels; on a GPU ``tests/test_cuda_backend.py``
does.
"""

from __future__ import annotations

import functools
import math

import numpy as np

#: Threads a block: (z, y) coarse columns for restriction, (z, y, x) fine nodes for prolongation.
RESTRICT_BLOCK = (32, 8, 1)
PROLONG_BLOCK = (32, 4, 2)
#: Coarse planes one restriction thread walks along x.
RESTRICT_CHUNK = 4
#: 32-bit flat indices.
MAX_NODES = 2**31 - 1

#: Compile-time constants: REAL (the level's type) and PERIODIC (0/1).
SOURCE = r"""
// off the outer layer (always, on a periodic grid)
__device__ __forceinline__ bool unknown(int c, int m) {
    return PERIODIC || (c >= 1 && c + 1 < m);
}

// the fine nodes pos - 1, pos, pos + 1 of coarse node c along one axis of n fine nodes
// (wrapped), and the outer two's restriction weights (1/2 at a midpoint, 0 at a coarse node)
struct Axis { unsigned m, c, p; double wm, wp; };

__device__ __forceinline__ Axis axis_of(const int *pos, const int *lo, const int *hi, int c,
                                        int n) {
    Axis a;
    int i = pos[c];
    int im = i - 1 < 0 ? i - 1 + n : i - 1;
    int ip = i + 1 >= n ? i + 1 - n : i + 1;
    a.m = (unsigned)im; a.c = (unsigned)i; a.p = (unsigned)ip;
    a.wm = lo[im] != hi[im] ? 0.5 : 0.0;
    a.wp = lo[ip] != hi[ip] ? 0.5 : 0.0;
    return a;
}

__device__ __forceinline__ double line(const REAL *f, unsigned row, const Axis &z) {
    return z.wm * (double)f[row + z.m] + (double)f[row + z.c] + z.wp * (double)f[row + z.p];
}

__device__ __forceinline__ double plane(const REAL *f, unsigned i, const Axis &y,
                                        const Axis &z, unsigned ny, unsigned nz) {
    return y.wm * line(f, (i * ny + y.m) * nz, z) + line(f, (i * ny + y.c) * nz, z)
        + y.wp * line(f, (i * ny + y.p) * nz, z);
}

// coarse = P^T fine on the coarse unknowns, 0 on the fixed coarse nodes. One thread a coarse
// (y, z) column and `chunk` coarse planes along x.
extern "C" __global__ void restrict_march(
    const REAL *__restrict__ fine, REAL *__restrict__ coarse,
    const int *__restrict__ pos_x, const int *__restrict__ lo_x, const int *__restrict__ hi_x,
    const int *__restrict__ pos_y, const int *__restrict__ lo_y, const int *__restrict__ hi_y,
    const int *__restrict__ pos_z, const int *__restrict__ lo_z, const int *__restrict__ hi_z,
    int nx, int ny, int nz, int mx, int my, int mz, int chunk) {
    int ck = blockIdx.x * blockDim.x + threadIdx.x;
    int cj = blockIdx.y * blockDim.y + threadIdx.y;
    int c0 = blockIdx.z * chunk;
    if (ck >= mz || cj >= my || c0 >= mx) return;
    int c1 = c0 + chunk < mx ? c0 + chunk : mx;
    unsigned step = (unsigned)my * (unsigned)mz;
    unsigned q = ((unsigned)c0 * (unsigned)my + (unsigned)cj) * (unsigned)mz + (unsigned)ck;
    if (!unknown(cj, my) || !unknown(ck, mz)) {
        for (int ci = c0; ci < c1; ++ci, q += step) coarse[q] = (REAL)0;
        return;
    }
    Axis y = axis_of(pos_y, lo_y, hi_y, cj, ny);
    Axis z = axis_of(pos_z, lo_z, hi_z, ck, nz);
    unsigned uny = (unsigned)ny, unz = (unsigned)nz;
    unsigned carried = 0xffffffffu;  // the fine plane whose sum `held` is
    double held = 0.0;
    for (int ci = c0; ci < c1; ++ci, q += step) {
        if (!unknown(ci, mx)) { coarse[q] = (REAL)0; continue; }
        Axis x = axis_of(pos_x, lo_x, hi_x, ci, nx);
        double sm = x.m == carried ? held : plane(fine, x.m, y, z, uny, unz);
        double sc = plane(fine, x.c, y, z, uny, unz);
        double sp = plane(fine, x.p, y, z, uny, unz);
        coarse[q] = (REAL)(x.wm * sm + sc + x.wp * sp);
        carried = x.p;
        held = sp;
    }
}

// fine += P coarse (trilinear) on the fine unknowns; the fixed nodes are left alone. One thread a
// fine node.
extern "C" __global__ void prolong_add(
    const REAL *__restrict__ coarse, REAL *__restrict__ fine,
    const int *__restrict__ lo_x, const int *__restrict__ hi_x,
    const int *__restrict__ lo_y, const int *__restrict__ hi_y,
    const int *__restrict__ lo_z, const int *__restrict__ hi_z,
    int nx, int ny, int nz, int my, int mz) {
    int k = blockIdx.x * blockDim.x + threadIdx.x;
    int j = blockIdx.y * blockDim.y + threadIdx.y;
    int i = blockIdx.z * blockDim.z + threadIdx.z;
    if (i >= nx || j >= ny || k >= nz) return;
    if (!unknown(i, nx) || !unknown(j, ny) || !unknown(k, nz)) return;
    unsigned umy = (unsigned)my, umz = (unsigned)mz;
    unsigned a0 = (unsigned)lo_x[i] * umy, a1 = (unsigned)hi_x[i] * umy;
    unsigned b0 = (unsigned)lo_y[j], b1 = (unsigned)hi_y[j];
    unsigned c0 = (unsigned)lo_z[k], c1 = (unsigned)hi_z[k];
    REAL s = coarse[(a0 + b0) * umz + c0] + coarse[(a0 + b0) * umz + c1]
        + coarse[(a0 + b1) * umz + c0] + coarse[(a0 + b1) * umz + c1]
        + coarse[(a1 + b0) * umz + c0] + coarse[(a1 + b0) * umz + c1]
        + coarse[(a1 + b1) * umz + c0] + coarse[(a1 + b1) * umz + c1];
    unsigned p = ((unsigned)i * (unsigned)ny + (unsigned)j) * (unsigned)nz + (unsigned)k;
    fine[p] = (REAL)((double)fine[p] + 0.125 * (double)s);
}
"""


def defines(dtype, periodic) -> str:
    """The compile-time constants of :data:`SOURCE` as ``#define`` lines."""
    real = {np.dtype(np.float32): "float", np.dtype(np.float64): "double"}[np.dtype(dtype)]
    return f"#define REAL {real}\n#define PERIODIC {int(bool(periodic))}\n"


@functools.cache
def kernel(name, dtype, periodic):
    """Kernel ``name`` of :data:`SOURCE` for these constants, as a ``cupy.RawKernel``.

    Made once per (name, dtype, periodicity); CuPy compiles the source once (NVRTC) and loads
    it once a device.
    """
    import cupy as cp

    return cp.RawKernel(defines(dtype, periodic) + SOURCE, name)


def _maps(tr, names):
    return [m for axis in range(3) for m in (getattr(tr, n)[axis] for n in names)]


def restrict(tr, fine, coarse, stream, chunk=RESTRICT_CHUNK):
    """Enqueue ``coarse = Pᵀ fine`` of the transfer ``tr`` (CuPy arrays) on ``stream``."""
    grid, block, sizes = restrict_launch(tr.fine_shape, tr.coarse_shape, chunk)
    launch = kernel("restrict_march", np.dtype(fine.dtype), bool(tr.periodic))
    launch(grid, block, (fine, coarse, *_maps(tr, ("pos", "lo", "hi")), *sizes), stream=stream)


def prolong_add(tr, coarse, fine, stream):
    """Enqueue ``fine += P coarse`` of the transfer ``tr`` (CuPy arrays) on ``stream``."""
    grid, block, sizes = prolong_launch(tr.fine_shape, tr.coarse_shape)
    launch = kernel("prolong_add", np.dtype(fine.dtype), bool(tr.periodic))
    launch(grid, block, (coarse, fine, *_maps(tr, ("lo", "hi")), *sizes), stream=stream)


def applies(fine_shape) -> bool:
    """Whether a transfer from a level of ``fine_shape`` fits the kernels' 32-bit indices."""
    return math.prod(int(s) for s in fine_shape) <= MAX_NODES


def _blocks(counts, block):
    return tuple(-(-int(c) // int(b)) for c, b in zip(counts, block, strict=True))


def restrict_launch(fine_shape, coarse_shape, chunk=RESTRICT_CHUNK):
    """(grid, block, sizes) of ``restrict_march``: ``sizes`` are its trailing int32s."""
    nx, ny, nz = (int(n) for n in fine_shape)
    mx, my, mz = (int(n) for n in coarse_shape)
    grid = _blocks((mz, my, -(-mx // chunk)), (*RESTRICT_BLOCK[:2], 1))
    sizes = tuple(np.int32(n) for n in (nx, ny, nz, mx, my, mz, chunk))
    return grid, RESTRICT_BLOCK, sizes


def prolong_launch(fine_shape, coarse_shape):
    """(grid, block, sizes) of ``prolong_add``: ``sizes`` are its trailing int32s."""
    nx, ny, nz = (int(n) for n in fine_shape)
    _, my, mz = (int(n) for n in coarse_shape)
    grid = _blocks((nz, ny, nx), PROLONG_BLOCK)
    sizes = tuple(np.int32(n) for n in (nx, ny, nz, my, mz))
    return grid, PROLONG_BLOCK, sizes


__all__ = [
    "MAX_NODES",
    "PROLONG_BLOCK",
    "RESTRICT_BLOCK",
    "RESTRICT_CHUNK",
    "SOURCE",
    "applies",
    "defines",
    "kernel",
    "prolong_add",
    "prolong_launch",
    "restrict",
    "restrict_launch",
]
