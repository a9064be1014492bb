"""The frame engine's φ_c kernel, side by side: nodes a thread, and the kernel it replaced.

The direct Coulomb sum of B frames on a 65³ grid (colipase, 1,252 atoms) is the largest cost
of the frame engine's maps. Each variant is timed with CUDA events over ``--reps`` launches
in one process; the table gives ms a frame, pair terms a second and the fraction of the
H200's rsqrt throughput bound (16 MUFU results a clock a multiprocessor). Every variant's
values are checked against a float64 sum on the host.

    python benchmarks/coulomb_kernel.py --frames 1 64
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

sys.path.append(str(Path(__file__).resolve().parents[1]))  # after an installed or PYTHONPATH tree

import pbsolver as pb  # noqa: E402
from pbsolver.backends.frame_kernels import THREADS, blocks, cuda_kernels  # noqa: E402


def previous_kernel():
    """The φ_c kernel before the branch-free rewrite (4 nodes a thread, a branch a pair)."""
    from numba import cuda
    from numba.cuda import libdevice

    rsqrt = libdevice.rsqrtf

    @cuda.jit(device=True)
    def pair(x, y, z, px, py, pz, qa, zero):
        dx, dy, dz = x - px, y - py, z - pz
        r2 = dx * dx + dy * dy + dz * dz
        if r2 == zero:
            if qa != zero:
                return zero, (math.inf if qa > 0 else -math.inf)
            return zero, zero
        return qa * rsqrt(r2), zero

    @cuda.jit(device=True)
    def node_xyz(c, nn, ny, nz, h):
        a = c if c < nn else 0
        i, j, k = a // (ny * nz), (a // nz) % ny, a % nz
        return i, j, k, np.float32(i * h[0]), np.float32(j * h[1]), np.float32(k * h[2])

    @cuda.jit(fastmath=True)
    def coulomb(out, rel, q, scale, nx, ny, nz, stride, h):
        f = cuda.blockIdx.y
        tid = cuda.threadIdx.x
        c0 = cuda.blockIdx.x * 4 * THREADS + tid
        c1, c2, c3 = c0 + THREADS, c0 + 2 * THREADS, c0 + 3 * THREADS
        nn = nx * ny * nz
        i0, j0, k0, x0, y0, z0 = node_xyz(c0, nn, ny, nz, h)
        i1, j1, k1, x1, y1, z1 = node_xyz(c1, nn, ny, nz, h)
        i2, j2, k2, x2, y2, z2 = node_xyz(c2, nn, ny, nz, h)
        i3, j3, k3, x3, y3, z3 = node_xyz(c3, nn, ny, nz, h)
        tile = cuda.shared.array((THREADS, 4), dtype=np.float32)
        na = q.shape[0]
        acc0, acc1, acc2, acc3 = 0.0, 0.0, 0.0, 0.0
        inf0, inf1, inf2, inf3 = 0.0, 0.0, 0.0, 0.0
        zero = np.float32(0.0)
        for base in range(0, na, THREADS):
            a = base + tid
            if a < na:
                tile[tid, 0] = rel[f, a, 0]
                tile[tid, 1] = rel[f, a, 1]
                tile[tid, 2] = rel[f, a, 2]
                tile[tid, 3] = q[a]
            cuda.syncthreads()
            part0, part1, part2, part3 = zero, zero, zero, zero
            for t in range(min(THREADS, na - base)):
                px, py, pz, qa = tile[t, 0], tile[t, 1], tile[t, 2], tile[t, 3]
                v, w = pair(x0, y0, z0, px, py, pz, qa, zero)
                part0 += v
                inf0 += w
                v, w = pair(x1, y1, z1, px, py, pz, qa, zero)
                part1 += v
                inf1 += w
                v, w = pair(x2, y2, z2, px, py, pz, qa, zero)
                part2 += v
                inf2 += w
                v, w = pair(x3, y3, z3, px, py, pz, qa, zero)
                part3 += v
                inf3 += w
            acc0 += part0
            acc1 += part1
            acc2 += part2
            acc3 += part3
            cuda.syncthreads()
        if c0 < nn:
            out[f * stride + i0, j0, k0] = scale * (acc0 + inf0)
        if c1 < nn:
            out[f * stride + i1, j1, k1] = scale * (acc1 + inf1)
        if c2 < nn:
            out[f * stride + i2, j2, k2] = scale * (acc2 + inf2)
        if c3 < nn:
            out[f * stride + i3, j3, k3] = scale * (acc3 + inf3)

    return coulomb


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, nargs="+", default=[1, 64])
    ap.add_argument("--nodes", type=int, nargs="+", default=[2, 4, 8])
    ap.add_argument("--n", type=int, default=65)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    import cupy as cp
    from numba import cuda

    atoms = pb.read_pqr(pb.data.path("1lpb_chainA.pqr"))
    n = args.n
    h = np.full(3, 0.8)
    lo = atoms.positions.min(axis=0) - 0.5 * (n - 1) * 0.8 + 0.5 * np.ptp(atoms.positions, 0)
    rel1 = (atoms.positions - lo).astype(np.float32)
    q = cp.asarray(atoms.charges.astype(np.float32))
    stride = n + n % 2
    dev = cp.cuda.Device()
    sms = dev.attributes["MultiProcessorCount"]
    clock_khz = dev.attributes["ClockRate"]
    bound = 16 * sms * clock_khz * 1e3  # rsqrt results a second
    K = cuda_kernels()
    variants = {"previous (4 nodes, branch)": (previous_kernel(), 4)}
    for nodes in args.nodes:
        variants[f"branch-free, {nodes} nodes"] = (K.coulomb_kernel(nodes), nodes)
    # float64 reference at a few hundred nodes of frame 0
    rng = np.random.default_rng(0)
    sample = rng.integers(0, n, (300, 3))
    d = sample[:, None, :] * 0.8 - rel1[None].astype(np.float64)
    ref = 694.0 * (atoms.charges[None] / np.sqrt((d * d).sum(-1))).sum(-1)
    print(f"{cp.cuda.runtime.getDeviceProperties(0)['name'].decode()}, {sms} SMs, "
          f"{clock_khz / 1e3:.0f} MHz; {len(atoms)} atoms, {n}³; rsqrt bound "
          f"{bound / 1e12:.2f} T/s")  # fmt: skip
    rows = []
    stream = cp.cuda.Stream(non_blocking=True)
    nb = cuda.external_stream(stream.ptr)
    for nf in args.frames:
        rel = cp.asarray(np.repeat(rel1[None], nf, axis=0))
        out = cp.zeros((nf * stride, n, n))
        pairs = nf * n**3 * len(atoms)
        for label, (kernel, nodes) in variants.items():
            grid = (blocks(n**3, nodes * THREADS), nf)
            views = [cuda.as_cuda_array(a) for a in (out, rel, q)]
            hv = cuda.to_device(h)

            def launch(kernel=kernel, grid=grid, views=views, hv=hv):
                kernel[grid, THREADS, nb](views[0], views[1], views[2], 694.0, n, n, n,
                                          stride, hv)  # fmt: skip

            with stream:
                launch()
                stream.synchronize()
                start, stop = cp.cuda.Event(), cp.cuda.Event()
                start.record(stream)
                for _ in range(args.reps):
                    launch()
                stop.record(stream)
                stop.synchronize()
            ms = cp.cuda.get_elapsed_time(start, stop) / args.reps
            got = cp.asnumpy(out[:n])[sample[:, 0], sample[:, 1], sample[:, 2]]
            err = float(np.abs(got - ref).max() / np.abs(ref).max())
            row = {
                "variant": label,
                "frames": nf,
                "ms_per_launch": ms,
                "ms_per_frame": ms / nf,
                "pairs_per_s": pairs / (ms * 1e-3),
                "fraction_of_rsqrt_bound": pairs / (ms * 1e-3) / bound,
                "max_rel_error": err,
            }
            rows.append(row)
            print(f"  B={nf:3d}  {label:<28} {ms / nf:8.4f} ms/frame  "
                  f"{row['pairs_per_s'] / 1e12:6.3f} T pairs/s  "
                  f"{100 * row['fraction_of_rsqrt_bound']:5.1f}% of bound  err {err:.1e}",
                  flush=True)  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
