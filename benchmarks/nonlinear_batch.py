"""Nonlinear problems in a batch: one Newton iteration on the stack against one solve each.

B copies of a protein's problem (1lpb chain A by default, SES, ε 2/78.54, nonlinear, n³ grid)
at B ionic strengths spread over ``--salts`` (so every block is its own problem), solved by
``pb.solve_batch(mode="stacked")`` (:func:`pbsolver.nonlinear.newton.solve_newton_stack`) and
by ``mode="loop"`` (one :meth:`Solver.solve` each), with the same method, rtol and backend.
Each time is the best of ``--repeat`` calls after one warm-up call (compilation, captures);
the maps are built once, on the CPU, and not timed. Printed: seconds a problem, the stacked
solve's Newton steps and cycles, and the largest relative difference of the blocks' φ_rf
between the two modes.

    python benchmarks/nonlinear_batch.py --backend cpu --n 33 --batch 4
    python benchmarks/nonlinear_batch.py --backend cuda --n 65 97 --batch 16 --json out.json
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np

import pbsolver as pb
from pbsolver.arrays import to_numpy

sys.path.insert(0, str(Path(__file__).resolve().parent))
from nonlinear_cost import problem  # noqa: E402  (the same grid placement)


def problems_for(atoms, n, batch, salts):
    """``batch`` problems of ``atoms`` on one n³ grid (8 Å margin), one ionic strength each."""
    return [problem(atoms, n, 8.0, float(I)) for I in np.geomspace(salts[0], salts[1], batch)]


def timed(problems, mode, options, repeat):
    """(best seconds, the last results) of ``repeat`` solve_batch calls after one warm-up."""
    pb.solve_batch(problems, mode=mode, **options)
    best, out = np.inf, None
    for _ in range(repeat):
        start = time.perf_counter()
        out = pb.solve_batch(problems, mode=mode, **options)
        best = min(best, time.perf_counter() - start)
    return best, out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--n", type=int, nargs="+", default=[65])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--salts", type=float, nargs=2, default=[0.02, 1.0], help="mol/L, range")
    ap.add_argument("--method", default="multigrid", choices=("multigrid", "sor"))
    ap.add_argument("--rtol", type=float, default=1e-6)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    atoms = pb.read_pqr(pb.data.path("1lpb_chainA.pqr"))
    print(f"1lpb chain A, {len(atoms)} atoms, batch {args.batch}, salts {args.salts} M, "
          f"{args.method}, rtol {args.rtol:g}, {args.backend}, {platform.node()}")  # fmt: skip
    print("| n | stacked s/problem (Newton, cycles) | loop s/problem | loop / stacked "
          "| max rel Δφ |")  # fmt: skip
    print("|---|---|---|---|---|")
    rows = []
    for n in args.n:
        probs = problems_for(atoms, n, args.batch, args.salts)
        if args.backend == "cuda":
            probs = [p.to("cupy") for p in probs]
        opts = {"backend": args.backend, "method": args.method, "rtol": args.rtol}
        t_stack, stacked = timed(probs, "stacked", opts, args.repeat)
        t_loop, loop = timed(probs, "loop", opts, args.repeat)
        diff = max(float(np.abs(to_numpy(a.phi_rf) - to_numpy(b.phi_rf)).max()
                         / np.abs(to_numpy(b.phi_rf)).max())
                   for a, b in zip(stacked, loop, strict=True))  # fmt: skip
        assert all(r.converged for r in stacked + loop)
        row = {"n": n, "batch": args.batch, "backend": args.backend, "method": args.method,
               "stacked_s": t_stack, "loop_s": t_loop, "speedup": t_loop / t_stack,
               "newton_steps": stacked[0].newton_steps, "cycles": stacked[0].iterations,
               "loop_newton_steps": [r.newton_steps for r in loop],
               "max_rel_diff": diff}  # fmt: skip
        rows.append(row)
        print(
            f"| {n} | {t_stack / args.batch:.4f} ({row['newton_steps']}, {row['cycles']}) | "
            f"{t_loop / args.batch:.4f} | {row['speedup']:.2f} | {diff:.1e} |",
            flush=True,
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
