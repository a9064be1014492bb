"""How many cycles the exact forces' adjoint solve takes from three starts (CPU, one frame).

The adjoint equation A λ = ½ Iᵀq (:mod:`pbsolver.forces.adjoint`) of the colipase frame
``--lag`` frames along the benchmarks' trajectory, on the first frame's grid, solved from:
zero; the first frame's λ (what a batch's frames start from); and c·(φ_rf + φ_c) with
c = ½ hx·hy·hz / (4π k), the guess that A(φ_rf + φ_c) = A_c φ_c ≈ 4πk Iᵀq / (hx·hy·hz) suggests
(A_c: the homogeneous ε_c operator; the outer layer zero, a node on a charge zero). Prints each
start's iterations and its distance from λ.

    python benchmarks/adjoint_guess.py --spacing 0.7 --lag 31
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from pathlib import Path

import numpy as np

sys.path.append(str(Path(__file__).resolve().parents[1]))  # an installed or PYTHONPATH tree first
sys.path.insert(0, str(Path(__file__).resolve().parent))

from trajectory import frames_of  # noqa: E402

import pbsolver as pb  # noqa: E402
from pbsolver.forces import adjoint_source  # noqa: E402
from pbsolver.forces.adjoint import adjoint_solve  # noqa: E402

#: The maps of both frames.
OPTIONS = {"surface": "mol", "ionic_strength": 0.15}


def frame_pair(pqr, lag, spacing):
    """Frames 0 and ``lag`` of ``pqr``'s atoms along the benchmarks' trajectory, frame 0's grid.

    Returns ``(first, last, grid)``: two copies of the atoms at those frames' positions and the
    grid :meth:`pbsolver.Problem.from_atoms` places around the first (:data:`OPTIONS`).
    """
    atoms = pb.read_pqr(pqr)
    frames = frames_of(atoms, lag + 1, drift=0.005, wiggle=0.01)
    first, last = copy.copy(atoms), copy.copy(atoms)
    first.positions, last.positions = frames[0], frames[lag]
    grid = pb.Problem.from_atoms(first, spacing=spacing, **OPTIONS).grid
    return first, last, grid


def zero_outer_layer(x):
    """``x`` with its six outer planes set to 0, in place (λ's values there)."""
    for axis in range(3):
        for end in (0, -1):
            x[(slice(None),) * axis + (end,)] = 0.0
    return x


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    here = Path(__file__).resolve().parents[1]
    p.add_argument("--pqr", default=str(here / "data" / "1lpb_chainA.pqr"))
    p.add_argument("--spacing", type=float, default=0.7)
    p.add_argument("--method", default="multigrid")
    p.add_argument("--lag", type=int, default=31)
    args = p.parse_args(argv)

    first, last, grid = frame_pair(args.pqr, args.lag, args.spacing)
    problem_first = pb.Problem.from_atoms(first, grid=grid, **OPTIONS)
    problem = pb.Problem.from_atoms(last, grid=grid, **OPTIONS)
    solver = pb.Solver(method=args.method, rtol=1e-6)
    lam_first, _ = adjoint_solve(problem_first, adjoint_source(first, grid), solver)
    forward = solver.solve(problem)
    source = adjoint_source(last, grid)
    c = 0.5 * float(np.prod(grid.spacing)) / (4 * np.pi * pb.COULOMB_KJ)
    phic = np.where(np.isfinite(problem.phi_coulomb), problem.phi_coulomb, 0.0)
    guess = zero_outer_layer(c * (np.asarray(forward.phi_rf) + phic))
    print(f"{Path(args.pqr).name}: grid {grid.shape}, h {args.spacing} Å, {args.method}, frame "
          f"{args.lag} of the trajectory; forward solve from zero: {forward.iterations} "
          "iterations")  # fmt: skip
    lam, _ = adjoint_solve(problem, source, solver)
    scale = float(np.linalg.norm(lam))
    for name, x0 in (("zero", None), ("frame 0's λ", lam_first), ("c·(φ_rf + φ_c)", guess)):
        t0 = time.perf_counter()
        _, result = adjoint_solve(problem, source, solver, x0=x0)
        dist = 1.0 if x0 is None else float(np.linalg.norm(x0 - lam)) / scale
        print(f"  from {name:16s} {result.iterations:3d} iterations, {time.perf_counter() - t0:.2f}"
              f" s; ‖start − λ‖/‖λ‖ = {dist:.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
