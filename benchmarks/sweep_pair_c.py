"""The fused red–black sweep "pair" written in CUDA C with 32-bit indices (measurement only).

Why: the numba "pair" kernel of :mod:`sweep_variants` moves half the bytes of the package's
two-pass sweep but is bound by instruction issue (BENCHMARKS.md, twentieth session): 61 % of
its instructions are integer arithmetic, because numba types every index in 64 bits. This is
the same algorithm, line for line (see :func:`sweep_variants.rb_pair`), as CUDA C compiled
by NVRTC through ``cupy.RawKernel``, with 32-bit indices (grids below 2³¹ nodes).

The same source compiles as C++ on a CPU (``--emulate``): each block's threads run as
``std::thread``s meeting at a ``std::barrier``, one block at a time, and the result is compared
with a plain two-pass red–black sweep over random faces, b and x (odd shapes, several blocks
and chunks, Dirichlet and periodic, each diagonal form). On a GPU machine
:mod:`sweep_variants` times it beside the other shapes and compares it with the package's
sweep (``max_rel_diff_vs_point``)::

    python benchmarks/sweep_pair_c.py --emulate        # any machine with g++ ≥ 11
"""

from __future__ import annotations

import argparse
import functools
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

#: The kernel. Compile-time constants: REAL, BK, BJ (threads over z pairs and y rows, a
#: one-node halo included), PERIODIC (0/1), DMODE (0 faces, 1 faces + d, 2 d stored).
SOURCE = r"""
#define OK (2 * BK - 2)
#define OJ (BJ - 2)
#define WIDTH (2 * BK)
#define PLANE (BJ * WIDTH)

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

__device__ __forceinline__ Coeffs load_coeffs(
        const REAL *__restrict__ b, const REAL *__restrict__ cx, const REAL *__restrict__ cy,
        const REAL *__restrict__ cz, const REAL *__restrict__ d, unsigned p, unsigned im,
        unsigned jm, unsigned km) {
    Coeffs c;
    c.b = b[p];
    c.a0 = cx[im]; c.a1 = cx[p]; c.a2 = cy[jm]; c.a3 = cy[p]; c.a4 = cz[km]; c.a5 = cz[p];
    if (DMODE == 2) {
        c.diag = d[p];
    } else {
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

extern "C" __global__ void LAUNCH_BOUNDS rb_pair32(
        const REAL *__restrict__ x, REAL *__restrict__ y, const REAL *__restrict__ b,
        const REAL *__restrict__ cx, const REAL *__restrict__ cy, const REAL *__restrict__ cz,
        const REAL *__restrict__ d, int nx, int ny, int nz, int first, REAL omega, int chunk) {
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
    bool first0 = false;
    for (int t = 0; t < i1 - i0 + 2; ++t) {
        // the first colour at plane q + 1 on both columns (reads x only)
        unsigned i;
        const bool iv = wrap_axis(q + 1, nx, &i);
        first0 = ((i + par0) & 1u) == colour;
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
            if (first0) {  // column 0 holds the second colour on plane q, column 1 the first
                if (w1) y[iq * sx + o1] = s1a;
                if (w0)
                    y[pq] = relax_q ? relax_with(cq, s0b, n0, ring[mid + rb - WIDTH],
                                                 ring[mid + rb + WIDTH], ring[mid + rb - 1], s1a,
                                                 s0a, omega)
                                    : s0a;
            } else {
                if (w0) y[iq * sx + o0] = s0a;
                if (w1)
                    y[pq] = relax_q ? relax_with(cq, s1b, n1, ring[mid + rb + 1 - WIDTH],
                                                 ring[mid + rb + 1 + WIDTH], s0a,
                                                 ring[mid + rb + 2], s1a, omega)
                                    : s1a;
            }
        }
        s0b = s0a; s1b = s1a; s0a = n0; s1a = n1;
        mid = slot;
        slot = slot == 2 * PLANE ? 0 : slot + PLANE;
        ++q;
    }
}
"""

# The CPU emulation: CUDA's names for one block's threads as std::threads at a std::barrier.
_EMULATION_PRELUDE = r"""
#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <thread>
#include <vector>
using std::min;
struct dim3e { int x, y, z; };
static thread_local dim3e threadIdx;
static dim3e blockIdx;
static std::barrier<> *block_barrier;
#define __device__
#define __forceinline__ inline
#define __global__
#define LAUNCH_BOUNDS
#define __shared__ static
#define __syncthreads() block_barrier->arrive_and_wait()
"""

_EMULATION_MAIN = r"""
// the plain two-pass red-black sweep in place, the reference
static void reference(std::vector<REAL> &x, const std::vector<REAL> &b, const std::vector<REAL> &cx,
                      const std::vector<REAL> &cy, const std::vector<REAL> &cz,
                      const std::vector<REAL> &d, int nx, int ny, int nz, REAL omega) {
    const unsigned sx = (unsigned)ny * nz;
    for (unsigned colour = 0; colour < 2; ++colour)
        for (unsigned i = 0; i < (unsigned)nx; ++i)
            for (unsigned j = 0; j < (unsigned)ny; ++j)
                for (unsigned k = 0; k < (unsigned)nz; ++k) {
                    if (((i + j + k) & 1u) != colour) continue;
                    if (!(inner(i, nx) && inner(j, ny) && inner(k, nz))) continue;
                    const unsigned p = i * sx + j * nz + k;
                    const unsigned im = minus_of(i, nx, sx, p), ip = plus_of(i, nx, sx, p);
                    const unsigned jm = minus_of(j, ny, nz, p), jp = plus_of(j, ny, nz, p);
                    const unsigned km = minus_of(k, nz, 1u, p), kp = plus_of(k, nz, 1u, p);
                    x[p] = relax_node(b.data(), cx.data(), cy.data(), cz.data(), d.data(), p, im,
                                      jm, km, x[im], x[ip], x[jm], x[jp], x[km], x[kp], x[p],
                                      omega);
                }
}

int main(int argc, char **argv) {
    const int nx = atoi(argv[1]), ny = atoi(argv[2]), nz = atoi(argv[3]), chunk = atoi(argv[4]);
    const unsigned n = (unsigned)nx * ny * nz;
    std::mt19937_64 rng(12345);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    std::vector<REAL> x(n), b(n), cx(n), cy(n), cz(n), d(n), y(n, (REAL)-99);
    for (unsigned p = 0; p < n; ++p) {
        x[p] = (REAL)(2 * u(rng) - 1);
        b[p] = (REAL)(2 * u(rng) - 1);
        cx[p] = (REAL)(u(rng) < 0.5 ? 80 * u(rng) + 1 : 2 * u(rng) + 0.5);  // high contrast
        cy[p] = (REAL)(u(rng) < 0.5 ? 80 * u(rng) + 1 : 2 * u(rng) + 0.5);
        cz[p] = (REAL)(u(rng) < 0.5 ? 80 * u(rng) + 1 : 2 * u(rng) + 0.5);
        d[p] = (REAL)(DMODE == 2 ? 100 * u(rng) + 6 : u(rng));
    }
    const REAL omega = (REAL)1.7;
    std::vector<REAL> want = x;
    reference(want, b, cx, cy, cz, d, nx, ny, nz, omega);
    const int gx = (nz + OK - 1) / OK, gy = (ny + OJ - 1) / OJ, gz = (nx + chunk - 1) / chunk;
    for (int bz = 0; bz < gz; ++bz)
        for (int by = 0; by < gy; ++by)
            for (int bx = 0; bx < gx; ++bx) {
                blockIdx = {bx, by, bz};
                std::barrier<> bar(BK * BJ);
                block_barrier = &bar;
                std::vector<std::thread> threads;
                for (int ty = 0; ty < BJ; ++ty)
                    for (int tx = 0; tx < BK; ++tx)
                        threads.emplace_back([&, tx, ty] {
                            threadIdx = {tx, ty, 0};
                            rb_pair32(x.data(), y.data(), b.data(), cx.data(), cy.data(),
                                      cz.data(), d.data(), nx, ny, nz, 0, omega, chunk);
                        });
                for (auto &th : threads) th.join();
            }
    double worst = 0.0, scale = 0.0;
    unsigned unwritten = 0;
    for (unsigned p = 0; p < n; ++p) {
        if (y[p] == (REAL)-99) ++unwritten;
        worst = std::max(worst, std::fabs((double)y[p] - (double)want[p]));
        scale = std::max(scale, std::fabs((double)want[p]));
    }
    printf("%d %d %d chunk %d: max |pair32 - reference| / max |reference| = %.3g, "
           "%u nodes unwritten\n", nx, ny, nz, chunk, worst / scale, unwritten);
    return (worst / scale > TOLERANCE || unwritten) ? 1 : 0;
}
"""


def defines(dtype, bk, bj, periodic, dmode, min_blocks=0, prefetch=False):
    """The compile-time constants of :data:`SOURCE` as ``#define`` lines.

    ``min_blocks`` > 0: the blocks a multiprocessor must hold (caps the registers).
    ``prefetch``: the second colour's coefficients are loaded before the plane's barrier, so
    that their loads overlap the first colour's.
    """
    bounds = f"{int(bk) * int(bj)}" + (f", {int(min_blocks)}" if min_blocks else "")
    real = {np.dtype(np.float32): "float", np.dtype(np.float64): "double"}[np.dtype(dtype)]
    return (
        f"#define REAL {real}\n#define BK {int(bk)}\n#define BJ {int(bj)}\n"
        f"#define PERIODIC {int(bool(periodic))}\n#define DMODE {int(dmode)}\n"
        f"#define PREFETCH {int(bool(prefetch))}\n"
        f"#ifndef LAUNCH_BOUNDS\n#define LAUNCH_BOUNDS __launch_bounds__({bounds})\n#endif\n"
    )


@functools.cache
def rb_pair32(dtype, bk, bj, periodic, dmode, min_blocks=0, prefetch=False):
    """The kernel as a ``cupy.RawKernel`` for these constants (compiled on first launch).

    Launch with ``block=(bk, bj, 1)``, ``grid=(ceil(nz/(2bk−2)), ceil(ny/(bj−2)),
    ceil(nx/chunk))`` and arguments ``(x, y, b, cx, cy, cz, d, nx, ny, nz, first, omega,
    chunk)`` (``int32`` sizes, ``omega`` of ``dtype``); grids of fewer than 2³¹ nodes.
    """
    import cupy as cp

    src = defines(dtype, bk, bj, periodic, dmode, min_blocks, prefetch) + SOURCE
    return cp.RawKernel(src, "rb_pair32")


def emulate(cases, compiler="g++"):
    """Compile the kernel as C++ and check it against the reference sweep for each case.

    ``cases``: tuples ``(dtype, bk, bj, periodic, dmode, (nx, ny, nz), chunk, prefetch)``.
    Returns the list of the programs' output lines; raises ``AssertionError`` on the first
    failure.
    """
    lines = []
    with tempfile.TemporaryDirectory() as tmp:
        for dtype, bk, bj, periodic, dmode, shape, chunk, prefetch in cases:
            tol = 0.0 if np.dtype(dtype) == np.float64 else 1e-6
            src = Path(tmp) / "pair.cpp"
            src.write_text(
                _EMULATION_PRELUDE + defines(dtype, bk, bj, periodic, dmode, 0, prefetch)
                + f"#define TOLERANCE {tol!r}\n" + SOURCE + _EMULATION_MAIN
            )  # fmt: skip
            exe = Path(tmp) / "pair"
            subprocess.run([compiler, "-std=c++20", "-O1", "-ffp-contract=off", "-pthread",
                            str(src), "-o", str(exe)], check=True)  # fmt: skip
            run = subprocess.run([str(exe), *map(str, shape), str(chunk)], capture_output=True,
                                 text=True)  # fmt: skip
            label = (f"{np.dtype(dtype).name} {bk}x{bj} periodic={periodic} dmode={dmode} "
                     f"prefetch={prefetch}: ")  # fmt: skip
            lines.append(label + run.stdout.strip())
            print(lines[-1], flush=True)
            assert run.returncode == 0, lines[-1] + run.stderr
    return lines


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--emulate", action="store_true", help="check the kernel as C++ on the CPU")
    args = ap.parse_args(argv)
    if not args.emulate:
        ap.error("nothing to do: the GPU timing is sweep_variants.py's (kernel 'pair32')")
    cases = [
        (np.float64, 4, 4, False, 0, (11, 9, 13), 3),
        (np.float64, 4, 5, False, 1, (10, 12, 7), 4),
        (np.float64, 3, 4, False, 2, (9, 8, 10), 20),
        (np.float64, 4, 4, True, 0, (10, 8, 12), 3),
        (np.float64, 4, 6, True, 1, (8, 10, 6), 5),
        (np.float64, 2, 4, True, 2, (6, 6, 8), 2),
        (np.float32, 4, 4, False, 0, (12, 11, 15), 5),
        (np.float32, 4, 4, True, 1, (8, 10, 14), 3),
    ]
    emulate([(*case, prefetch) for prefetch in (False, True) for case in cases])
    return 0


if __name__ == "__main__":
    sys.exit(main())
