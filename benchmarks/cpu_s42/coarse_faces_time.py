"""Time of the CPU kernels that build a multigrid hierarchy's coarse operators, one tree.

The peptide (``data/peptide.pqr``) at 0.5 Å, "mol", 0.15 M: the forward solve's stencil as the
solver builds it, then ``grid_hierarchy`` (every coarse level's faces, κ̄² and diagonal, by
:mod:`pbsolver.backends.cpu.coarse_kernels`) ``--repeat`` times; the median, and each coarse
level's face sums (to compare trees: the same arithmetic to rounding).

    PYTHONPATH=<tree> python benchmarks/cpu_s42/coarse_faces_time.py
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import pbsolver as pb
from pbsolver.backends import get_backend
from pbsolver.backends.cpu import coarse_kernels
from pbsolver.multigrid.builders import grid_hierarchy


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=30)
    args = p.parse_args(argv)
    atoms = pb.read_pqr(pb.data.path("peptide.pqr"))
    problem = pb.Problem.from_atoms(atoms, spacing=0.5, surface="mol", ionic_strength=0.15)
    solver = pb.Solver(method="multigrid", rtol=1e-6)
    st = solver.solve(problem, keep_system=True).system.st
    be = get_backend("cpu")
    kernel = coarse_kernels.coarse_faces
    in_kernel = [0.0]

    def timed(*a):  # the faces kernel's own time, summed over the levels of one build
        t0 = time.perf_counter()
        kernel(*a)
        in_kernel[0] += time.perf_counter() - t0

    coarse_kernels.coarse_faces = timed
    seconds, faces = [], []
    for _ in range(args.repeat + 1):
        in_kernel[0] = 0.0
        t0 = time.perf_counter()
        h = grid_hierarchy(be, st, problem.grid.spacing, problem.kappa2)
        seconds.append(time.perf_counter() - t0)
        faces.append(in_kernel[0])
    coarse_kernels.coarse_faces = kernel
    print(f"{pb.__file__}: grid {problem.grid.shape}, {len(h.levels)} levels, medians of "
          f"{args.repeat} builds: hierarchy {1e3 * statistics.median(seconds[1:]):.2f} ms, of "
          f"which coarse_faces {1e3 * statistics.median(faces[1:]):.2f} ms")  # fmt: skip
    for i, lv in enumerate(h.levels[1:], start=1):
        sums = [float(np.sum(np.asarray(getattr(lv.stencil, a), dtype=np.float64)))
                for a in ("cx", "cy", "cz", "diag")]  # fmt: skip
        print(
            f"  level {i} {lv.stencil.shape}: Σcx Σcy Σcz Σdiag = "
            + " ".join(f"{s:.10e}" for s in sums)
        )


if __name__ == "__main__":
    main()
