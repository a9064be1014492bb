"""Two red–black sweeps a launch against one: the smoother's sweep kernels side by side.

For each size n³ (the package's random high-contrast problem, float32, no salt), GPU time from
CUDA events around repeated launches on the backend's stream of:

* ``one``: two launches of :mod:`pbsolver.backends.cuda.fused_sweep`'s general kernel
  (x → y → x), and ``one, shape constants``: of its Dirichlet kernel compiled for the shape;
* ``pair BKxBJ/MIN``: one launch of :mod:`benchmarks.double_sweep` (x → y, two
  sweeps) with that block and ``__launch_bounds__`` minimum of blocks (the package's first);
* ``copy``: a float32 copy of the grid (8 B a node), from which the 16 B/node floor of one
  sweep is ``2 ×`` copy.

Every row is two sweeps; ``per_sweep_us`` is half of it and ``x_floor`` that over the floor.
Each pair variant's result is compared with the two-pass sweeps bit for bit
(``same_bits``)::

    python benchmarks/double_sweep_variants.py --sizes 256 384 512 --json pairs.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import double_sweep  # noqa: E402
from benchmarks.fused_threshold import gpu_ms  # noqa: E402
from pbsolver.backends.cuda import CUDABackend, fused_sweep  # noqa: E402
from pbsolver.bench import environment, random_problem  # noqa: E402

#: The Dirichlet kernel with its plane steps taken two a turn, so that which column holds the
#: first colour is a compile-time constant in each (measurement only).
PARITY_KERNEL = r"""
#define OK (2 * BK - 2)
#define OJ (BJ - 2)
#define WIDTH (2 * BK)
#define PLANE (BJ * WIDTH)
#define SY NZ
#define SX (NY * NZ)

__device__ __forceinline__ Coeffs coeffs_at(
        const REAL *__restrict__ b, const REAL *__restrict__ cx, const REAL *__restrict__ cy,
        const REAL *__restrict__ cz, const REAL *__restrict__ d, int p) {
    Coeffs c;
    c.b = b[p];
    c.a0 = cx[p - SX]; c.a1 = cx[p]; c.a2 = cy[p - SY]; c.a3 = cy[p]; c.a4 = cz[p - 1];
    c.a5 = cz[p];
    if (DMODE == 2) {
        c.diag = d[p];
    } else {  // the two-pass kernel's order: +x, -x, +y, -y, +z, -z
        c.diag = c.a1 + c.a0 + c.a3 + c.a2 + c.a5 + c.a4;
        if (DMODE == 1) c.diag += d[p];
    }
    return c;
}

template <bool B> struct Flag { static constexpr bool value = B; };

extern "C" __global__ void LAUNCH_BOUNDS rb_fused_dirichlet(
        const REAL *__restrict__ x, REAL *__restrict__ y, const REAL *__restrict__ b,
        const REAL *__restrict__ cx, const REAL *__restrict__ cy, const REAL *__restrict__ cz,
        const REAL *__restrict__ d, int nx, int ny, int nz, int first, REAL omega, int chunk) {
    __shared__ REAL ring[3 * PLANE];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int c0 = 2 * tx, c1 = c0 + 1;
    const int rb = ty * WIDTH + c0;  // this thread's first column in a ring slot
    const int k = (int)blockIdx.x * OK + c0 - 1;  // column 0's z index (column 1's: k + 1)
    const int j = (int)blockIdx.y * OJ + ty - 1;
    const bool jv = j >= 0 && j < NY;
    const bool v0 = k >= 0 && k < NZ, v1 = k + 1 < NZ;
    const bool rows = ty >= 1 && ty <= OJ && j < NY;
    const bool w0 = rows && c0 >= 1 && k < NZ;
    const bool w1 = rows && c1 <= OK && k + 1 < NZ;
    const bool jin = j >= 1 && j < NY - 1;
    const bool in0 = jin && k >= 1 && k < NZ - 1;
    const bool in1 = jin && k >= 0 && k + 1 < NZ - 1;
    const int o0 = j * SY + k;  // column 0's offset in a plane
    const REAL zero = (REAL)0;
    const int i0 = (int)blockIdx.z * chunk;
    const int i1 = min(i0 + chunk, NX);
    REAL s0a = zero, s1a = zero, s0b = zero, s1b = zero;
    int slot = 0, mid = 2 * PLANE;
    int q = i0 - 2;  // the second colour's plane; the first colour's is q + 1
    // one plane step; A0: column 0 holds the first colour on plane q + 1 (it alternates, so the
    // loop below takes two steps a turn with A0 known at compile time)
    auto step = [&](auto flag) {
        constexpr bool A0 = decltype(flag)::value;
        const int i = q + 1;
        REAL n0 = zero, n1 = zero;
        if (jv && i < NX && i >= 0) {
            const int pc = i * SX + o0;
            if (v0) n0 = x[pc];
            if (v1) n1 = x[pc + 1];
            if ((A0 ? in0 : in1) && i >= 1 && i < NX - 1) {
                const int p = pc + (A0 ? 0 : 1);
                const REAL v = relax_with(coeffs_at(b, cx, cy, cz, d, p), x[p - SX], x[p + SX],
                                          x[p - SY], x[p + SY], x[p - 1], x[p + 1],
                                          A0 ? n0 : n1, omega);
                if (A0) n0 = v; else n1 = v;
            }
            if (v0) ring[slot + rb] = n0;
            if (v1) ring[slot + rb + 1] = n1;
        }
        const int pq = q * SX + o0 + (A0 ? 0 : 1);
        const bool relax_q = q >= i0 && (A0 ? w0 && in0 : w1 && in1) && q >= 1 && q < NX - 1;
        Coeffs cq;
        if (PREFETCH && relax_q) cq = coeffs_at(b, cx, cy, cz, d, pq);
        __syncthreads();
        if (q >= i0) {
            if (!PREFETCH && relax_q) cq = coeffs_at(b, cx, cy, cz, d, pq);
            if (A0) {  // column 0 holds the second colour on plane q, column 1 the first
                if (w1) y[pq + 1] = s1a;
                if (w0)
                    y[pq] = relax_q ? relax_with(cq, s0b, n0, ring[mid + rb - WIDTH],
                                                 ring[mid + rb + WIDTH], ring[mid + rb - 1], s1a,
                                                 s0a, omega)
                                    : s0a;
            } else {
                if (w0) y[pq - 1] = s0a;
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
    };
    if ((((i0 - 1 + j + k) & 1) == first)) {
        while (q < i1) { step(Flag<true>()); if (q < i1) step(Flag<false>()); }
    } else {
        while (q < i1) { step(Flag<false>()); if (q < i1) step(Flag<true>()); }
    }
}
"""

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

    parity = cp.RawKernel(
        fused_sweep.defines(np.float32, *fused_sweep.BLOCK, False, dmode, fused_sweep.MIN_BLOCKS,
                            True) + fused_sweep.shape_defines(st.shape) + fused_sweep.HELPERS
        + PARITY_KERNEL, "rb_fused_dirichlet", options=("-std=c++17",))  # fmt: skip
    fixed4 = fused_sweep.kernel(np.float32, False, dmode, min_blocks=4, shape=st.shape)
    chunk4 = fused_sweep.chunk_for(st.shape, sms, resident=4)
    for label, kern, chunk in (("one, shape constants", fixed, chunk1),
                               ("one, shape constants, parity unrolled", parity, chunk1),
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
