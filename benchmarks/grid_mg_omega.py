"""Cycles and time of one grid's multigrid against the smoother's ω, on the CPU.

One grid's cycle (the "multigrid" method's F(2,2), smoothed by red–black SOR;
:data:`pbsolver.multigrid.builders.GRID_CYCLE`) with several ω on the problems solved most:
the three species of the shipped FKBP–DSS complex (frame 0, SES, 161×129×129 at 0.5 Å, ε 2/78.54, as
``benchmarks/mmpbsa_apbs.py``), colipase, the peptide and the Born ion (SES, 0.5 Å, 0.15 M)
and a random high-contrast problem (:func:`pbsolver.bench.random_problem`, 97³). Each solve
(rtol 1e-6, float32 with float64 refinement) runs twice; the second is timed. Cycle counts do
not depend on the machine, times do (all measured in the same run).

    python benchmarks/grid_mg_omega.py > benchmarks/grid_mg_omega.log
    python benchmarks/grid_mg_omega.py --cycles F:2:2:1.2 V:3:3:1.2 F:3:3:1.2 V:2:2:1.2 \
        V:4:4:1.2 > benchmarks/grid_mg_cycles.log
"""

from __future__ import annotations

import argparse
import time

import pbsolver as pb
from pbsolver.bench import random_problem
from pbsolver.jobs import mmpbsa as job
from pbsolver.molecule.maps import build_maps, grid_for_atoms
from pbsolver.solving.solver import Solver

OMEGAS = (1.0, 1.15, 1.2, 1.25, 1.3)


def problems() -> dict:
    """The benchmarked problems by name."""
    out = {}
    system = job.load(job.Inputs(pb.data.path("fkbp_dss.pqr"), (pb.data.path("fkbp_dss.dcd"),),
                                 ligand="resname DSS"))  # fmt: skip
    atoms = system.atoms.with_positions(system.positions([0])[0])
    grid = grid_for_atoms(atoms[system.union], 0.5, shape=(161, 129, 129))
    for name, idx in (("complex", system.union), ("receptor", system.receptor),
                      ("ligand", system.ligand)):  # fmt: skip
        maps = build_maps(atoms[idx], grid, eps_in=2.0, eps_out=78.54, surface="mol")
        out[f"FKBP–DSS {name}"] = pb.Problem.from_maps(maps)
    for name in ("1lpb_chainA", "peptide", "born_ion"):
        mol = pb.read_pqr(pb.data.path(f"{name}.pqr"))
        out[f"{name} 0.15 M"] = pb.Problem.from_atoms(mol, spacing=0.5, ionic_strength=0.15,
                                                      surface="mol")  # fmt: skip
    out["random 97³"] = random_problem(97)
    return out


def cycle_option(text: str) -> dict:
    """``"V:3:3:1.2"`` → the Solver options of that cycle, sweeps before and after, and ω."""
    cycle, pre, post, omega = text.split(":")
    return {"cycle": cycle, "presmooth": int(pre), "postsmooth": int(post), "omega": float(omega)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--omegas", type=float, nargs="*", default=list(OMEGAS))
    ap.add_argument("--cycles", type=cycle_option, nargs="*", default=None,
                    help="compare cycles CYCLE:PRE:POST:OMEGA (e.g. V:3:3:1.2) instead of "
                         "ω alone")  # fmt: skip
    args = ap.parse_args(argv)
    columns = args.cycles or [{"omega": w} for w in args.omegas]
    labels = [
        f"{c['cycle']}({c['presmooth']},{c['postsmooth']}) ω{c['omega']}" if "cycle" in c
        else f"ω {c['omega']}"
        for c in columns
    ]  # fmt: skip
    print(f"{'problem':<22} {'shape':<16} " + " ".join(f"{t:>14}" for t in labels))
    print(f"{'':<22} {'':<16} " + " ".join(f"{'cycles, s':>14}" for _ in columns))
    totals = [0.0] * len(columns)
    for name, problem in problems().items():
        cells = []
        for n, options in enumerate(columns):
            solver = Solver(method="multigrid", rtol=1e-6, strict=True, **options)
            solver.solve(problem)
            start = time.perf_counter()
            result = solver.solve(problem)
            seconds = time.perf_counter() - start
            totals[n] += seconds
            cells.append(f"{result.iterations:>5d}, {seconds:6.3f}")
        shape = "×".join(map(str, problem.grid.shape))
        print(f"{name:<22} {shape:<16} " + " ".join(f"{c:>14}" for c in cells), flush=True)
    print(f"{'total':<22} {'':<16} " + " ".join(f"{t:>14.3f}" for t in totals))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
