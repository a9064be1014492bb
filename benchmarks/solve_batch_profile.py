"""Where the time of a stacked ``pb.solve_batch`` call goes (cProfile, one GPU call).

The problems of ``benchmarks/md_pipeline.py`` part 2 (colipase maps at ``--batch`` positions on
an ``--n``³ grid, on the device): one untimed call, then ``--calls`` calls under cProfile;
prints the wall time a solve and the functions with the most own and cumulative time.

    python benchmarks/solve_batch_profile.py --n 97 --batch 16 --method multigrid
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import time
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[1]))  # after an installed or PYTHONPATH tree
sys.path.insert(0, str(Path(__file__).resolve().parent))

import md_pipeline  # noqa: E402

import pbsolver as pb  # noqa: E402
from pbsolver.molecule import maps  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=97)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--calls", type=int, default=2)
    ap.add_argument("--method", default="multigrid")
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args(argv)
    atoms = pb.read_pqr(pb.data.path("1lpb_chainA.pqr"))
    n = args.n
    grid = maps.grid_for_atoms(atoms, (41.0 + 2 * 4.0) / (n - 1), shape=(n, n, n))
    problems = []
    for f in md_pipeline.frames_of(atoms, args.batch, drift=0.05, wiggle=0.05, seed=1):
        moved = pb.Atoms(f, atoms.charges, atoms.radii)
        problems.append(pb.Problem.from_atoms(moved, grid=grid, surface="vdw"))
    if args.backend == "cuda":
        problems = [p.to("cupy") for p in problems]
    opts = {"mode": "stacked", "method": args.method, "backend": args.backend, "rtol": 1e-6}
    pb.solve_batch(problems, **opts)
    prof = cProfile.Profile()
    start = time.perf_counter()
    prof.enable()
    for _ in range(args.calls):
        res = pb.solve_batch(problems, **opts)
    prof.disable()
    wall = time.perf_counter() - start
    print(f"{n}³ × {args.batch}, {args.method}: {1e3 * wall / (args.calls * args.batch):.2f} ms "
          f"a solve (under cProfile), {res[0].iterations} iterations")  # fmt: skip
    stats = pstats.Stats(prof)
    stats.sort_stats("tottime").print_stats(args.top)
    stats.sort_stats("cumtime").print_stats(args.top)


if __name__ == "__main__":
    main()
