"""The exact forces' adjoint solve along a trajectory: its cycles and residuals, frame by frame.

Issue 19's CPU cost: the adjoint takes 4 V-cycles a frame where the forward solve takes 3
(its warm start, the previous frame's λ, leaves a residual of about 2e-2: the point sources
½ Iᵀq move every frame). Two things tried to cut a cycle, measured here and not kept:

* ``--jacobi N``: the warm start plus N Jacobi steps on A δ = (this frame's source − the last
  frame's), the float64 operator of :mod:`pbsolver.operator` (a local correction for the moved
  sources);
* ``--method mgcg``: the adjoint by multigrid-preconditioned CG instead of the forward solve's
  method.

    python benchmarks/adjoint_start.py                 # as the package does it
    python benchmarks/adjoint_start.py --jacobi 4
    python benchmarks/adjoint_start.py --method mgcg

Prints, per frame, the adjoint's method, cycles, seconds and relative residuals, then the
forward solve's cycles and residuals (peptide, surface mol, h 0.5 Å, 0.15 M, rtol 1e-6, as
``forces_cost.py``).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.append(str(Path(__file__).resolve().parents[1]))  # an installed or PYTHONPATH tree first
sys.path.insert(0, str(Path(__file__).resolve().parent))

from trajectory import frames_of  # noqa: E402

import pbsolver as pb  # noqa: E402
import pbsolver.forces.gradient as gradient  # noqa: E402
from pbsolver.operator import apply, coefficients  # noqa: E402


def _zero_outer(a):
    a[[0, -1]] = 0.0
    a[:, [0, -1]] = 0.0
    a[:, :, [0, -1]] = 0.0


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--frames", type=int, default=8)
    p.add_argument("--jacobi", type=int, default=0)
    p.add_argument("--method", default=None, help="the adjoint's method (default: the forward's)")
    args = p.parse_args(argv)
    atoms = pb.read_pqr(pb.data.path("peptide.pqr"))
    frames = frames_of(atoms, args.frames, drift=0.005, wiggle=0.01)
    calc = pb.ReactionFieldCalculator(
        atoms, forces="exact", engine="general", spacing=0.5, surface="mol", ionic_strength=0.15,
        backend="cpu", rtol=1e-6, margin=8.0, skin=2.0,
    )  # fmt: skip
    other = None if args.method is None else pb.Solver(method=args.method, backend="cpu",
                                                       rtol=1e-6)  # fmt: skip
    last = {}
    solve = gradient.adjoint_solve

    def adjoint(problem, source, solver, x0=None, system=None):
        if args.jacobi and x0 is not None and last.get("source", source).shape == source.shape:
            ds = source - last["source"]
            _zero_outer(ds)
            coef = coefficients(problem)
            diag = sum(c + np.roll(c, 1, a) for a, c in enumerate((coef.cx, coef.cy, coef.cz)))
            diag = diag + (0.0 if coef.kappa2 is None else coef.kappa2)
            d = np.zeros_like(ds)
            for _ in range(args.jacobi):
                r = ds - apply(coef, d)
                _zero_outer(r)
                d = d + r / diag
            x0 = x0 + d
        last["source"] = source.copy()
        start = time.perf_counter()
        if other is not None:
            system = None  # the forward's hierarchy is for its own method's options
        lam, res = solve(problem, source, other or solver, x0, system)
        print(f"adjoint {res.method} {res.iterations} cycles {time.perf_counter() - start:.4f} s "
              f"residuals {[f'{r:.1e}' for r in res.residual_norms]}", flush=True)  # fmt: skip
        return lam, res

    gradient.adjoint_solve = adjoint
    for pos in frames:
        frame = calc.compute(pos)
        print(f"forward {frame.solve.iterations} cycles residuals "
              f"{[f'{r:.1e}' for r in frame.solve.residual_norms]}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
