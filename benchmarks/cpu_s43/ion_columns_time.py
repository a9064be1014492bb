"""The frame engine's ion-accessible column kernel on the CPU: seconds and a digest of its coverage.

Colipase (``data/1lpb_chainA.pqr``) at h 0.5 Å with 8 Å margins, two frames (positions moved by
0.05 Å normal noise, seed 1), spheres of radius R + 2 Å, 4 × 4 lines a cell. The kernel runs once
to compile, then ``--repeat`` times; the median seconds and a SHA-256 of the coverage are printed,
so two library trees (PYTHONPATH) can be compared bit for bit and in time:

    python benchmarks/cpu_s43/ion_columns_time.py
    PYTHONPATH=.gpu/base python benchmarks/cpu_s43/ion_columns_time.py
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import time
from pathlib import Path

import numpy as np

import pbsolver as pb
from pbsolver.backends.frame_kernels import cpu_kernels


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args(argv)
    kernels = cpu_kernels()
    atoms = pb.read_pqr(Path(__file__).resolve().parents[2] / "data" / "1lpb_chainA.pqr")
    rng = np.random.default_rng(1)
    nf, h = 2, np.array([0.5, 0.5, 0.5])
    lo = atoms.positions.min(axis=0) - 8.0
    nx, ny, nz = ((atoms.positions.max(axis=0) + 8.0 - lo) / h).astype(int) + 1
    stride = nx + 1
    pos = np.stack([atoms.positions + rng.normal(0.0, 0.05, atoms.positions.shape)
                    for _ in range(nf)])  # fmt: skip
    origin = np.tile(lo, (nf, 1))
    rad = atoms.radii + 2.0
    cov = np.zeros((nf * stride, ny, nz))
    kernels.ion(cov, pos, rad, nx, ny, nz, stride, origin, h, 4)  # compile (or load)
    times = []
    for _ in range(args.repeat):
        cov[:] = 0.0
        t0 = time.perf_counter()
        kernels.ion(cov, pos, rad, nx, ny, nz, stride, origin, h, 4)
        times.append(time.perf_counter() - t0)
    tree = pb.__file__.rsplit("/pbsolver/", 1)[0].rsplit("/", 1)[-1] or "."
    digest = hashlib.sha256(cov.tobytes()).hexdigest()[:16]
    print(f"{tree}: grid {nx}x{ny}x{nz}, {nf} frames: median {statistics.median(times):.4f} s "
          f"(min {min(times):.4f}), coverage sha256 {digest}")  # fmt: skip


if __name__ == "__main__":
    main()
