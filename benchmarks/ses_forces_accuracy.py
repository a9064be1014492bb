"""Exact SES forces against central differences of the energy, by step and bisection depth.

For a molecule, a surface ("mol" or "smol", probe 1.4 Å) and salt, the exact forces
(:func:`pbsolver.forces.solvation_forces`) of the outermost atoms are compared with central
differences of the reaction-field energy at a fixed grid, for each difference step δ and each
``nbisect`` (the maps' bisection depth: 14 is the default, 45 locates crossings to ~1e-14 Å).
Prints ‖F − F_fd‖ / ‖F_fd‖ per case (float64 multigrid, rtol 1e-12).

    python benchmarks/ses_forces_accuracy.py --json benchmarks/forces/ses_forces_accuracy.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

import pbsolver as pb
from pbsolver.forces import central_difference_forces, solvation_forces
from pbsolver.molecule import maps as M
from pbsolver.molecule.energy import reaction_field_energy


def random_molecule(seed, n):
    """Random overlapping atoms (radii 1.2–2.0 Å, charges ±1 e), most near the surface."""
    rng = np.random.default_rng(seed)
    return pb.Atoms(rng.normal(0.0, 1.8, (n, 3)), rng.uniform(-1, 1, n), rng.uniform(1.2, 2.0, n))


def energy(atoms, grid, physics, solver, nbisect, x0=None):
    maps = M.build_maps(atoms, grid, physics=physics, kappa_subsamples=2, nbisect=nbisect)
    problem = pb.Problem.from_maps(maps)
    res = solver.solve(problem, x0=x0)
    return reaction_field_energy(atoms, grid, res.phi_rf), problem, res


def case(atoms, grid, physics, idx, deltas, nbisect, solver):
    """Relative error of the exact forces of ``idx`` for each δ."""
    _, problem, res = energy(atoms, grid, physics, solver, nbisect)
    start = time.perf_counter()
    exact = solvation_forces(atoms, problem, res.phi_rf, physics=physics, solver=solver,
                             kappa_subsamples=2, nbisect=nbisect)  # fmt: skip
    seconds = time.perf_counter() - start
    f = np.asarray(exact.forces)[idx]
    out = {}

    def moved(pos):
        return energy(atoms.with_positions(pos), grid, physics, solver, nbisect, res.phi_rf)[0]

    for delta in deltas:
        fd = central_difference_forces(moved, atoms.positions, idx, delta)
        out[f"{delta:g}"] = float(np.linalg.norm(f - fd) / np.linalg.norm(fd))
    return out, seconds


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--deltas", type=float, nargs="+", default=[1e-3, 1e-4, 1e-5])
    p.add_argument("--nbisect", type=int, nargs="+", default=[14, 45])
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    solver = pb.Solver(method="multigrid", backend="cpu", rtol=1e-12, dtype=np.float64)
    contrast = {"eps_in": 2.0, "eps_out": 78.54}
    peptide = pb.read_pqr(pb.data.path("peptide.pqr"))
    molecule = random_molecule(7, 14)
    cases = [
        ("random 14 atoms", molecule, 0.5, "mol", 0.0),
        ("random 14 atoms", molecule, 0.5, "smol", 0.15),
        ("peptide 149 atoms", peptide, 0.7, "mol", 0.15),
        ("peptide 149 atoms", peptide, 0.7, "smol", 0.0),
    ]
    rows = []
    print("| molecule | surface | salt (M) | h (Å) | nbisect | " + " | ".join(
        f"δ {d:g} Å" for d in args.deltas) + " |")  # fmt: skip
    print("|---|---|---:|---:|---:|" + "---:|" * len(args.deltas))
    for name, atoms, h, surface, salt in cases:
        physics = pb.PhysicsOptions(surface=surface, ionic_strength=salt, **contrast)
        grid = M.grid_for_atoms(atoms, h, 3.0)
        d = np.linalg.norm(atoms.positions - atoms.positions.mean(axis=0), axis=1)
        charged = np.flatnonzero(np.abs(atoms.charges) > 0.3)
        idx = charged[np.argsort(d[charged])[::-1][:3]]
        for nb in args.nbisect:
            errors, seconds = case(atoms, grid, physics, idx, args.deltas, nb, solver)
            rows.append({"molecule": name, "surface": surface, "salt": salt, "spacing": h,
                         "grid": list(grid.shape), "atoms": [int(i) for i in idx],
                         "nbisect": nb, "relative_error": errors,
                         "forces_seconds": seconds})  # fmt: skip
            print(f"| {name} | {surface} | {salt:g} | {h:g} | {nb} | "
                  + " | ".join(f"{errors[f'{x:g}']:.1e}" for x in args.deltas) + " |")  # fmt: skip
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"rows": rows, "args": vars(args)}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
