"""The multigrid transfers on one GPU: the numba kernels against the CUDA C ones.

For each fine size n³ (a Dirichlet level planned by the package's coarsening, float32), GPU time
from CUDA events around repeated launches on the backend's stream of:

* ``restrict`` and ``prolong_add`` as numba compiled them (``kernels.restrict``/``prolong_add``:
  64-bit indices, one thread a node);
* the CUDA C kernels of :mod:`pbsolver.backends.cuda.transfers` (32-bit indices; restriction
  marching ``chunk`` coarse planes a thread, for several chunks; prolongation one thread a
  fine node);
* a prolongation that marches ``chunk`` fine planes a thread too, keeping the corners of the
  coarse planes that neighbouring fine planes share (:data:`PROLONG_MARCH`, measurement only:
  it was slower than one thread a node on the H200, so the package does not use it);
* a copy of the fine level (8 B a node: read and write), the bandwidth floor measured in the
  same run. Restriction must read the fine level (4 B a node) and write the coarse one;
  prolongation reads and writes the fine level and reads the coarse one.

Also the largest difference of each kernel from the CPU kernels (the CUDA C ones should show
0: they are the CPU's sums in the CPU's order)::

    python benchmarks/transfer_kernels.py --sizes 257 513 --json transfers.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.append(str(Path(__file__).resolve().parents[1]))  # after an installed or PYTHONPATH tree

from benchmarks.fused_threshold import gpu_ms  # noqa: E402
from pbsolver.backends import Transfer  # noqa: E402
from pbsolver.backends.cuda import CUDABackend, transfers  # noqa: E402
from pbsolver.bench import environment, transfer_level  # noqa: E402

PROLONG_MARCH = r"""
// the four corner values of one coarse plane that a fine (y, z) column interpolates from
struct Corners { REAL v00, v01, v10, v11; };

__device__ __forceinline__ Corners corners(const REAL *coarse, unsigned plane, unsigned r00,
                                           unsigned r01, unsigned r10, unsigned r11) {
    Corners c;
    c.v00 = coarse[plane + r00]; c.v01 = coarse[plane + r01];
    c.v10 = coarse[plane + r10]; c.v11 = coarse[plane + r11];
    return c;
}

// prolong_add's sums, one thread a fine (y, z) column and `chunk` fine planes along x
extern "C" __global__ void prolong_march(
    const REAL *__restrict__ coarse, REAL *__restrict__ fine,
    const int *__restrict__ lo_x, const int *__restrict__ hi_x,
    const int *__restrict__ lo_y, const int *__restrict__ hi_y,
    const int *__restrict__ lo_z, const int *__restrict__ hi_z,
    int nx, int ny, int nz, int my, int mz, int chunk) {
    int k = blockIdx.x * blockDim.x + threadIdx.x;
    int j = blockIdx.y * blockDim.y + threadIdx.y;
    int i0 = blockIdx.z * chunk;
    if (k >= nz || j >= ny || i0 >= nx) return;
    if (!unknown(j, ny) || !unknown(k, nz)) return;
    int i1 = i0 + chunk < nx ? i0 + chunk : nx;
    unsigned umz = (unsigned)mz, plane = (unsigned)my * umz;
    unsigned b0 = (unsigned)lo_y[j] * umz, b1 = (unsigned)hi_y[j] * umz;
    unsigned c0 = (unsigned)lo_z[k], c1 = (unsigned)hi_z[k];
    unsigned r00 = b0 + c0, r01 = b0 + c1, r10 = b1 + c0, r11 = b1 + c1;
    unsigned step = (unsigned)ny * (unsigned)nz;
    unsigned p = ((unsigned)i0 * (unsigned)ny + (unsigned)j) * (unsigned)nz + (unsigned)k;
    unsigned held_lo = 0xffffffffu, held_hi = 0xffffffffu;  // the coarse planes of lo, hi
    Corners lo = {}, hi = {};
    for (int i = i0; i < i1; ++i, p += step) {
        if (!unknown(i, nx)) continue;
        unsigned a0 = (unsigned)lo_x[i], a1 = (unsigned)hi_x[i];
        if (a0 != held_lo) {
            lo = a0 == held_hi ? hi : corners(coarse, a0 * plane, r00, r01, r10, r11);
            held_lo = a0;
        }
        if (a1 != held_hi) {
            hi = a1 == held_lo ? lo : corners(coarse, a1 * plane, r00, r01, r10, r11);
            held_hi = a1;
        }
        REAL s = lo.v00 + lo.v01 + lo.v10 + lo.v11 + hi.v00 + hi.v01 + hi.v10 + hi.v11;
        fine[p] = (REAL)((double)fine[p] + 0.125 * (double)s);
    }
}
"""


def gpu_us(cp, stream, fn):
    """Median GPU microseconds of ``fn`` (CUDA events on ``stream``, 10 calls a trial)."""
    return gpu_ms(cp, stream, fn, reps=10) * 1e3


def row(n, chunks, check_cpu):
    import cupy as cp

    gpu = CUDABackend()
    stream = gpu.dev.stream
    tr = transfer_level(gpu, n)
    rng = np.random.default_rng(n)
    fine_h = rng.normal(size=tr.fine_shape).astype(np.float32)
    coarse_h = rng.normal(size=tr.coarse_shape).astype(np.float32)
    fine, coarse = gpu.asarray(fine_h, np.float32), gpu.asarray(coarse_h, np.float32)
    out_c, out_f = gpu.zeros(tr.coarse_shape, np.float32), gpu.zeros(tr.fine_shape, np.float32)
    march = cp.RawKernel(transfers.defines(np.float32, False) + transfers.SOURCE + PROLONG_MARCH,
                         "prolong_march")  # fmt: skip
    maps_p = [m for a in range(3) for m in (tr.lo[a], tr.hi[a])]
    _, _, sizes_p = transfers.prolong_launch(tr.fine_shape, tr.coarse_shape)
    nx, ny, nz = tr.fine_shape

    def c_restrict(chunk):
        return lambda: transfers.restrict(tr, fine, out_c, stream, chunk=chunk)

    def c_prolong():
        transfers.prolong_add(tr, coarse, out_f, stream)

    def march_prolong(chunk):
        grid = (-(-nz // 32), -(-ny // 8), -(-nx // chunk))
        args = (coarse, out_f, *maps_p, *sizes_p, np.int32(chunk))
        return lambda: march(grid, (32, 8, 1), args, stream=stream)

    res = {"n": n, "coarse": list(tr.coarse_shape)}
    copy_dst = cp.empty_like(fine)

    def copy():
        with stream:
            copy_dst[...] = fine

    res["copy_us"] = gpu_us(cp, stream, copy)
    res["restrict_numba_us"] = gpu_us(cp, stream, lambda: gpu._restrict_numba(tr, fine, out_c))
    want_r = None
    if check_cpu:
        from pbsolver.backends.cpu.backend import CPUBackend

        tc = Transfer(*(tuple(gpu.dev.to_numpy(a) for a in m) for m in (tr.pos, tr.lo, tr.hi)),
                      False, tr.fine_shape, tr.coarse_shape)  # fmt: skip
        want_r = np.empty(tr.coarse_shape, np.float32)
        CPUBackend().restrict(tc, fine_h, want_r)
        want_p = fine_h.copy()
        CPUBackend().prolong_add(tc, coarse_h, want_p)
        res["restrict_numba_max_abs_diff_vs_cpu"] = float(
            np.abs(gpu.dev.to_numpy(out_c) - want_r).max()
        )
    for chunk in chunks:
        res[f"restrict_c_chunk{chunk}_us"] = gpu_us(cp, stream, c_restrict(chunk))
        if want_r is not None:
            res[f"restrict_c_chunk{chunk}_max_abs_diff_vs_cpu"] = float(
                np.abs(gpu.dev.to_numpy(out_c) - want_r).max()
            )
    res["prolong_numba_us"] = gpu_us(cp, stream, lambda: gpu._prolong_numba(tr, coarse, out_f))
    res["prolong_c_us"] = gpu_us(cp, stream, c_prolong)
    paths = {"numba": lambda: gpu._prolong_numba(tr, coarse, out_f), "c": c_prolong}
    for chunk in chunks:
        res[f"prolong_march_chunk{chunk}_us"] = gpu_us(cp, stream, march_prolong(chunk))
        paths[f"march_chunk{chunk}"] = march_prolong(chunk)
    if want_r is not None:  # one prolongation from the same start on each path
        for name, fn in paths.items():
            with stream:
                out_f[...] = fine
            fn()
            res[f"prolong_{name}_max_abs_diff_vs_cpu"] = float(
                np.abs(gpu.dev.to_numpy(out_f) - want_p).max()
            )
    nodes = n**3
    res["copy_TBps"] = 8 * nodes / res["copy_us"] / 1e6
    for key in [k for k in res if k.endswith("_us") and k != "copy_us"]:
        res[key.replace("_us", "_over_copy")] = res[key] / res["copy_us"]
    return res


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="*", default=[257, 513])
    ap.add_argument("--chunks", type=int, nargs="*", default=[1, 4, 8, 16])
    ap.add_argument("--no-cpu-check", action="store_true", help="skip the CPU comparison")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    res = {"environment": environment(True), "rows": []}
    for n in args.sizes:
        res["rows"].append(row(n, args.chunks, not args.no_cpu_check))
        print(json.dumps(res["rows"][-1], default=float), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1, default=float))


if __name__ == "__main__":
    main()
