"""Time of one red–black colour sweep on every level of a CPU multigrid hierarchy.

The hierarchy is the default one of the shipped peptide's problem (svdw surface, 0.15 M,
h 0.5 Å: 81×97×81 and its coarser levels). ``--one-thread-below N`` sets the backend's
threshold (``mg_kernels.SERIAL_BELOW``) below which a kernel runs on the calling thread alone;
a huge N times every level on one thread, 0 every level on all of numba's threads. Run in two
checkouts to compare kernels side by side:

    python benchmarks/mg_level_sweeps.py --one-thread-below 1000000000
    python benchmarks/mg_level_sweeps.py --one-thread-below 0
"""

from __future__ import annotations

import argparse
import time

import numba

import pbsolver as pb
from pbsolver.backends import get_backend
from pbsolver.backends.cpu import mg_kernels
from pbsolver.solving.system import LinearSystem


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--one-thread-below", type=int, default=None)
    p.add_argument("--repeat", type=int, default=200)
    args = p.parse_args(argv)
    if args.one_thread_below is not None:
        mg_kernels.SERIAL_BELOW = args.one_thread_below
    atoms = pb.read_pqr(pb.data.path("peptide.pqr"))
    problem = pb.Problem.from_atoms(atoms, spacing=0.5, margin=8.0, surface="svdw",
                                    ionic_strength=0.15)  # fmt: skip
    be = get_backend("cpu")
    solver = pb.Solver(backend="cpu", method="multigrid")
    method = solver.make_method("multigrid")
    method.setup(LinearSystem.for_problem(be, problem, solver.dtype, solver.refine))
    print(f"numba threads {numba.get_num_threads()}, one thread below "
          f"{mg_kernels.SERIAL_BELOW} points")  # fmt: skip
    print("| level | shape | points | µs a colour sweep |")
    print("|---:|---|---:|---:|")
    for i, lev in enumerate(method.hierarchy.levels):
        st = lev.stencil
        x = lev.x if lev.x is not None else be.zeros(st.shape, st.dtype)
        be.rb_sor_color(st, x, 0, 1.0)
        start = time.perf_counter()
        for _ in range(args.repeat):
            be.rb_sor_color(st, x, 0, 1.0)
        us = (time.perf_counter() - start) / args.repeat * 1e6
        print(f"| {i} | {st.shape} | {x.size:,} | {us:.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
