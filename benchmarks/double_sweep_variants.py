"""Two red–black sweeps a launch against one: the smoother's sweep kernels side by side.

For each size n³ (the package's random high-contrast problem, float32, no salt), GPU time from
CUDA events around repeated launches on the backend's stream of:

* ``one``: two launches of :mod:`pbsolver.backends.cuda.fused_sweep`'s general kernel
  (x → y → x), and ``one, shape constants``: of its Dirichlet kernel compiled for the shape
  (``…, 4 blocks/SM``: with launch bounds of 4 blocks a multiprocessor; ``…, registers and
  shuffles``: :data:`REUSE_KERNEL`; a variant whose plane steps went two a turn was measured in
  s30d, at 5109d97, and was slower);
* ``pair BKxBJ/MIN``: one launch of :mod:`benchmarks.double_sweep` (x → y, two
  sweeps) with that block and ``__launch_bounds__`` minimum of blocks (the package's first);
* ``copy``: a float32 copy of the grid (8 B a node), from which the 16 B/node floor of one
  sweep is ``2 ×`` copy.

Every row is two sweeps; ``per_sweep_us`` is half of it and ``x_floor`` that over the floor.
Each kernel's result is compared with the two-pass sweeps bit for bit (``same_bits``)::

    python benchmarks/double_sweep_variants.py --sizes 256 384 512 --json pairs.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.append(str(Path(__file__).resolve().parents[1]))  # after an installed or PYTHONPATH tree

from benchmarks import double_sweep  # noqa: E402
from benchmarks.fused_threshold import gpu_ms  # noqa: E402
from pbsolver.backends.cuda import CUDABackend, fused_sweep  # noqa: E402
from pbsolver.bench import environment, random_problem  # noqa: E402

#: The Dirichlet one-sweep kernel with the first colour's neighbours from registers where the
#: thread already holds them (measurement only): x on planes q, q + 1 and q + 2 of its two
#: columns, each plane loaded one or two steps ahead of its use; the z-neighbour in the next
#: thread's column by a warp shuffle (a warp is one row of the block: BK = 32), loaded on the
#: tile's edge lanes. Every value is the one the package's kernel loads, so the bits are equal.
REUSE_KERNEL = r"""
#ifndef SHFL_UP  // a warp is one row of the block (BK = 32)
#define SHFL_UP(v) __shfl_up_sync(0xffffffffu, v, 1)
#define SHFL_DOWN(v) __shfl_down_sync(0xffffffffu, v, 1)
#endif

extern "C" __global__ void LAUNCH_BOUNDS rb_fused_reuse(SWEEP_ARGS) {
    __shared__ REAL ring[3 * PLANE];
    const Tile t = tile_of(chunk);
    const REAL zero = (REAL)0;
    // x of this thread's two columns on plane i (zero off the grid)
    auto plane_x = [&](int i, REAL &u0, REAL &u1) {
        u0 = zero; u1 = zero;
        if (t.jv && i >= 0 && i < NX) {
            if (t.v0) u0 = x[i * SX + t.o0];
            if (t.v1) u1 = x[i * SX + t.o0 + 1];
        }
    };
    // the columns' x on planes q (s·a: the first colour's x-neighbour below), q + 1 (p·: the
    // plane it relaxes) and q + 2 (f·: above it), each loaded a plane step or two ahead
    REAL s0a, s1a, p0, p1, f0, f1;
    plane_x(t.i0 - 2, s0a, s1a);
    plane_x(t.i0 - 1, p0, p1);
    plane_x(t.i0, f0, f1);
    REAL s0b = zero, s1b = zero;
    int slot = 0, mid = 2 * PLANE;
    for (int q = t.i0 - 2; q < t.i1; ++q) {  // the second colour's plane; the first colour's q + 1
        const int i = q + 1;
        const bool first0 = ((i + t.par0) & 1) == first;
        REAL g0, g1;
        plane_x(q + 3, g0, g1);  // the next step's f·
        // the first colour's z-neighbour in the next thread's columns (old x: the other colour)
        const REAL across = first0 ? SHFL_UP(p1) : SHFL_DOWN(p0);
        REAL n0 = p0, n1 = p1;
        if (t.jv && i < NX && i >= 0 && (first0 ? t.in0 : t.in1) && i >= 1 && i < NX - 1) {
            const int p = i * SX + t.o0 + (first0 ? 0 : 1);
            const REAL xkm = first0 ? (t.tx == 0 ? x[p - 1] : across) : p0;
            const REAL xkp = first0 ? p1 : (t.tx == BK - 1 ? x[p + 1] : across);
            const REAL v = relax_with(coeffs_at(b, cx, cy, cz, d, p), first0 ? s0a : s1a,
                                      first0 ? f0 : f1, x[p - SY], x[p + SY], xkm, xkp,
                                      first0 ? p0 : p1, omega);
            if (first0) n0 = v; else n1 = v;
        }
        finish_step(y, ring, b, cx, cy, cz, d, t, q, first0, n0, n1, omega, s0a, s1a, s0b, s1b,
                    slot, mid);
        p0 = f0; p1 = f1; f0 = g0; f1 = g1;
    }
}
"""


def reuse_source():
    """:data:`REUSE_KERNEL` after the package's helpers and the Dirichlet kernel's definitions.

    Compile it with :func:`fused_sweep.defines` and :func:`fused_sweep.shape_defines` before it.
    """
    dirichlet = fused_sweep.DIRICHLET_KERNEL
    return fused_sweep.HELPERS + dirichlet[: dirichlet.index('extern "C"')] + REUSE_KERNEL


#: (block, min_blocks) of the pair kernel tried; the package's first.
VARIANTS = [
    (double_sweep.BLOCK, double_sweep.MIN_BLOCKS),
    ((32, 16), 3),
    ((32, 24), 2),
]


def launch(cp, gpu, module, kernel, block, st, src, dst, d, chunk):
    nx, ny, nz = (np.int32(n) for n in st.shape)
    args = (src, dst, st.b, st.cx, st.cy, st.cz, d, nx, ny, nz, np.int32(0), np.float32(1.9),
            np.int32(chunk))  # fmt: skip
    kernel(module.launch_grid(st.shape, chunk, block), (*block, 1), args, stream=gpu.dev.stream)


def rows_at(n):
    import cupy as cp

    gpu = CUDABackend()
    with gpu.dev.stream:  # CuPy's copies on the stream the kernels use
        return _rows(cp, gpu, n)


def _rows(cp, gpu, n):
    sms = int(cp.cuda.Device().attributes["MultiProcessorCount"])
    st = gpu.stencil(random_problem(n, xp=cp, seed=n), np.float32)
    d, dmode = gpu._diagonal_of(st)
    x0 = cp.random.standard_normal((n, n, n), dtype=cp.float32)
    want = x0.copy()
    gpu.sor_sweeps(st, want, 1.9, 2)  # the two-pass kernels, two sweeps
    a, b = x0.copy(), cp.empty_like(x0)
    stream = gpu.dev.stream

    def copy():
        b[...] = a

    copy_ms = gpu_ms(cp, stream, copy)
    floor_us = 2 * copy_ms * 1e3  # one sweep: 16 B a node
    out = [{"n": n, "kernel": "copy", "two_sweeps_us": copy_ms * 1e3}]

    one = fused_sweep.kernel(np.float32, False, dmode)
    chunk1 = fused_sweep.chunk_for(st.shape, sms)

    def two_single():
        launch(cp, gpu, fused_sweep, one, fused_sweep.BLOCK, st, a, b, d, chunk1)
        launch(cp, gpu, fused_sweep, one, fused_sweep.BLOCK, st, b, a, d, chunk1)

    def reset():
        a[...] = x0

    reset()
    two_single()
    same = bool(cp.array_equal(a, want))
    ms = gpu_ms(cp, stream, two_single)
    out.append({"n": n, "kernel": "one", "two_sweeps_us": ms * 1e3, "same_bits": same})
    fixed = fused_sweep.kernel(np.float32, False, dmode, shape=st.shape)

    fixed4 = fused_sweep.kernel(np.float32, False, dmode, min_blocks=4, shape=st.shape)
    chunk4 = fused_sweep.chunk_for(st.shape, sms, resident=4)
    reuse = cp.RawKernel(
        fused_sweep.defines(np.float32, *fused_sweep.BLOCK, False, dmode, fused_sweep.MIN_BLOCKS,
                            True) + fused_sweep.shape_defines(st.shape) + reuse_source(),
        "rb_fused_reuse", options=("-std=c++17",))  # fmt: skip
    for label, kern, chunk in (("one, shape constants", fixed, chunk1),
                               ("one, shape constants, registers and shuffles", reuse, chunk1),
                               ("one, shape constants, 4 blocks/SM", fixed4, chunk4)):  # fmt: skip

        def two(kern=kern, chunk=chunk):
            launch(cp, gpu, fused_sweep, kern, fused_sweep.BLOCK, st, a, b, d, chunk)
            launch(cp, gpu, fused_sweep, kern, fused_sweep.BLOCK, st, b, a, d, chunk)

        reset()
        two()
        same = bool(cp.array_equal(a, want))
        ms = gpu_ms(cp, stream, two)
        out.append({"n": n, "kernel": label, "two_sweeps_us": ms * 1e3, "same_bits": same,
                    "registers": int(kern.attributes["num_regs"])})  # fmt: skip
    for block, min_blocks in VARIANTS:
        kern = double_sweep.kernel(np.float32, False, dmode, block, min_blocks)
        chunk = fused_sweep.chunk_for(st.shape, sms, block, max(min_blocks, 1),
                                      double_sweep.MARGIN, double_sweep.EXTRA_PLANES)  # fmt: skip

        def pair(kern=kern, block=block, chunk=chunk):
            launch(cp, gpu, double_sweep, kern, block, st, a, b, d, chunk)

        reset()
        pair()
        same = bool(cp.array_equal(b, want))
        ms = gpu_ms(cp, stream, pair)
        out.append({"n": n, "kernel": f"pair {block[0]}x{block[1]}/{min_blocks}",
                    "two_sweeps_us": ms * 1e3, "same_bits": same, "chunk": chunk,
                    "registers": int(kern.attributes["num_regs"])})  # fmt: skip
    for row in out[1:]:
        row["per_sweep_us"] = row["two_sweeps_us"] / 2
        row["x_floor"] = row["per_sweep_us"] / floor_us
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="*", default=[256, 384, 512])
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    import cupy as cp

    res = {"environment": environment(True), "rows": []}
    for n in args.sizes:
        for row in rows_at(n):
            res["rows"].append(row)
            print(row, flush=True)
        cp.get_default_memory_pool().free_all_blocks()
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1, default=float))


if __name__ == "__main__":
    main()
