"""The fused red–black sweep in CUDA C (:mod:`pbsolver.backends.cuda.fused_sweep`): a CPU check.

Why CUDA C: the numba "pair" kernel of :mod:`sweep_variants` moves half the bytes of the
package's two-pass sweep but is bound by instruction issue (BENCHMARKS.md, twentieth session):
61 % of its instructions are integer arithmetic, because numba types every index in 64 bits.
The package's kernel is the same algorithm, line for line (see :func:`sweep_variants.rb_pair`),
compiled by NVRTC through ``cupy.RawKernel``, with 32-bit indices ("pair32" in
:mod:`sweep_variants`, with its block shape and launch bounds as options).

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
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.append(str(Path(__file__).resolve().parents[1]))  # after an installed or PYTHONPATH tree

from benchmarks import double_sweep  # noqa: E402
from pbsolver.backends.cuda import fused_sweep  # noqa: E402
from pbsolver.backends.cuda.fused_sweep import defines  # noqa: E402

# The CPU emulation: CUDA's names for one block's threads as std::threads at a std::barrier.
_EMULATION_PRELUDE = r"""
#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
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
// a warp as one row of the block (x-threads): shuffles through an exchange row and the row's own
// barrier; a source lane outside the row gives the caller's own value, as CUDA's do
static std::barrier<> *row_barriers[256];
static double shuffle_rows[256][64];
static int row_lanes;
template <typename T> static T emulated_shuffle(T v, int delta) {
    const int tx = threadIdx.x, ty = threadIdx.y, src = tx + delta;
    shuffle_rows[ty][tx] = (double)v;
    row_barriers[ty]->arrive_and_wait();
    const T r = (src >= 0 && src < row_lanes) ? (T)shuffle_rows[ty][src] : v;
    row_barriers[ty]->arrive_and_wait();
    return r;
}
#define SHFL_UP(v) emulated_shuffle(v, -1)
#define SHFL_DOWN(v) emulated_shuffle(v, 1)
"""

_EMULATION_MAIN = r"""
// the plain two-pass red-black sweep in place, the reference
static void reference(std::vector<REAL> &x, const std::vector<REAL> &b, const std::vector<REAL> &cx,
                      const std::vector<REAL> &cy, const std::vector<REAL> &cz,
                      const std::vector<REAL> &d, int nx, int ny, int nz, REAL omega,
                      unsigned first) {
    const unsigned sx = (unsigned)ny * nz;
    for (unsigned c = 0; c < 2 * SWEEPS; ++c) {
        const unsigned colour = (c & 1u) ^ first;
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
}

int main(int argc, char **argv) {
    const int nx = atoi(argv[1]), ny = atoi(argv[2]), nz = atoi(argv[3]), chunk = atoi(argv[4]);
    const int first = atoi(argv[5]);
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
    reference(want, b, cx, cy, cz, d, nx, ny, nz, omega, (unsigned)first);
    const int gx = (nz + OK - 1) / OK, gy = (ny + OJ - 1) / OJ, gz = (nx + chunk - 1) / chunk;
    for (int bz = 0; bz < gz; ++bz)
        for (int by = 0; by < gy; ++by)
            for (int bx = 0; bx < gx; ++bx) {
                blockIdx = {bx, by, bz};
                std::barrier<> bar(BK * BJ);
                block_barrier = &bar;
                std::vector<std::unique_ptr<std::barrier<>>> rows;
                row_lanes = BK;
                for (int ty = 0; ty < BJ; ++ty) {
                    rows.emplace_back(new std::barrier<>(BK));
                    row_barriers[ty] = rows.back().get();
                }
                std::vector<std::thread> threads;
                for (int ty = 0; ty < BJ; ++ty)
                    for (int tx = 0; tx < BK; ++tx)
                        threads.emplace_back([&, tx, ty] {
                            threadIdx = {tx, ty, 0};
                            KERNEL_NAME(x.data(), y.data(), b.data(), cx.data(), cy.data(),
                                      cz.data(), d.data(), nx, ny, nz, first, omega, chunk);
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
    printf("%d %d %d chunk %d first %d: max |kernel - reference| / max |reference| = %.3g, "
           "%u nodes unwritten\n", nx, ny, nz, chunk, first, worst / scale, unwritten);
    return (worst / scale > TOLERANCE || unwritten) ? 1 : 0;
}
"""


#: The checked cases: (dtype, bk, bj, periodic, dmode, shape, chunk); periodic shapes even.
CASES = [
    (np.float64, 4, 4, False, 0, (11, 9, 13), 3),
    (np.float64, 4, 5, False, 1, (10, 12, 7), 4),
    (np.float64, 3, 4, False, 2, (9, 8, 10), 20),
    (np.float64, 4, 4, True, 0, (10, 8, 12), 3),
    (np.float64, 4, 6, True, 1, (8, 10, 6), 5),
    (np.float64, 2, 4, True, 2, (6, 6, 8), 2),
    (np.float32, 4, 4, False, 0, (12, 11, 15), 5),
    (np.float32, 4, 4, True, 1, (8, 10, 14), 3),
]

#: The cases of :mod:`benchmarks.double_sweep` (its three-node halo needs
#: ``bk ≥ 4``, ``bj ≥ 7``); periodic shapes even.
DOUBLE_CASES = [
    (np.float64, 4, 8, False, 0, (13, 11, 15), 3),
    (np.float64, 5, 9, False, 1, (12, 14, 9), 5),
    (np.float64, 4, 7, False, 2, (11, 10, 12), 40),
    (np.float64, 4, 8, True, 0, (10, 12, 14), 3),
    (np.float64, 4, 8, True, 1, (8, 10, 8), 2),
    (np.float64, 6, 10, True, 2, (12, 8, 16), 4),
    (np.float32, 4, 8, False, 0, (14, 13, 17), 5),
    (np.float32, 4, 9, True, 1, (10, 12, 16), 3),
]


def rb_pair32(dtype, bk, bj, periodic, dmode, min_blocks=0, prefetch=False):
    """The package's fused sweep compiled with these constants (a ``cupy.RawKernel``).

    Launch with ``block=(bk, bj, 1)``, ``grid=(ceil(nz/(2bk−2)), ceil(ny/(bj−2)),
    ceil(nx/chunk))`` and arguments ``(x, y, b, cx, cy, cz, d, nx, ny, nz, first, omega,
    chunk)`` (``int32`` sizes, ``omega`` of ``dtype``); grids of fewer than 2³¹ nodes.
    """
    return fused_sweep.kernel(dtype, periodic, dmode, (bk, bj), min_blocks, prefetch)


def emulate(cases, compiler="g++", source=None, kernel_name="rb_fused", sweeps=1,
            shape_constants=False):  # fmt: skip
    """Compile the kernel as C++ and check it against the reference sweep for each case.

    ``cases``: tuples ``(dtype, bk, bj, periodic, dmode, (nx, ny, nz), chunk, prefetch)``;
    ``source``: another kernel source than the package's (a test's mutation);
    ``kernel_name``, ``sweeps``: the kernel in ``source`` and the red–black sweeps one launch
    does (``double_sweep``'s ``rb_fused_twice``: 2); ``shape_constants``: the case's shape as
    compile-time constants too (``fused_sweep.DIRICHLET_KERNEL``). Returns the list of the
    programs' output lines; raises ``AssertionError`` on the first failure.
    """
    source = fused_sweep.SOURCE if source is None else source
    lines = []
    with tempfile.TemporaryDirectory() as tmp:
        for dtype, bk, bj, periodic, dmode, shape, chunk, prefetch in cases:
            tol = 0.0 if np.dtype(dtype) == np.float64 else 1e-6
            src = Path(tmp) / "pair.cpp"
            src.write_text(
                _EMULATION_PRELUDE + defines(dtype, bk, bj, periodic, dmode, 0, prefetch)
                + f"#define TOLERANCE {tol!r}\n#define KERNEL_NAME {kernel_name}\n"
                + f"#define SWEEPS {int(sweeps)}\n"
                + (fused_sweep.shape_defines(shape) if shape_constants else "")
                + source + _EMULATION_MAIN
            )  # fmt: skip
            exe = Path(tmp) / "pair"
            subprocess.run([compiler, "-std=c++20", "-O1", "-ffp-contract=off", "-pthread",
                            str(src), "-o", str(exe)], check=True)  # fmt: skip
            label = (f"{kernel_name} {np.dtype(dtype).name} {bk}x{bj} periodic={periodic} "
                     f"dmode={dmode} prefetch={prefetch}: ")  # fmt: skip
            for first in (0, 1):  # the colour relaxed first
                run = subprocess.run([str(exe), *map(str, shape), str(chunk), str(first)],
                                     capture_output=True, text=True)  # fmt: skip
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
    emulate([(*case, prefetch) for prefetch in (False, True) for case in CASES])
    emulate([(*case, prefetch) for prefetch in (False, True) for case in CASES if not case[3]],
            source=fused_sweep.SOURCE_DIRICHLET, kernel_name="rb_fused_dirichlet",
            shape_constants=True)  # fmt: skip
    emulate([(*case, False) for case in DOUBLE_CASES], source=double_sweep.SOURCE,
            kernel_name="rb_fused_twice", sweeps=2)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
