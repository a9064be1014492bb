"""Time to rtol 1e-6 of the nonlinear solve against the linearised solve of the same problem.

A charged protein of ``pbsolver.data`` (1lpb chain A by default) on an n³ grid that holds it
with a margin, SES surface, ε 2/78.54, 0.15 M 1:1 salt, Debye–Hückel boundary values; both
equations solved by the same method on the same backend, in float32 with float64 refinement
(pbsolver's default). Each time is the best of ``--repeat`` runs after one untimed warm-up
(compilation, CUDA graph capture); the maps are built once, on the CPU, and not timed.
Columns: seconds and linear iterations (sweeps or cycles) of each solve, the nonlinear solve's
Newton steps, the ratio of the times, the polar solvation energies (linear ½ Σ q φ_rf and the
nonlinear ΔG of :mod:`pbsolver.nonlinear.energy`) and the largest |φ|/kT in the
ion-accessible region.

    python benchmarks/nonlinear_cost.py --backend cpu --n 65 97
    python benchmarks/nonlinear_cost.py --backend cuda --n 129 257 --json out.json
"""

from __future__ import annotations

import argparse
import json
import platform
import time

import numpy as np

import pbsolver as pb
from pbsolver.arrays import to_numpy
from pbsolver.io.units import kT_kj_per_mol
from pbsolver.molecule.energy import solvation_terms

#: What each Newton step reports (``SolveResult.extra["newton"]``).
STEP_KEYS = ("seconds", "linear_seconds", "iterations", "eta", "alpha", "line_search_evaluations")


def problem(atoms, n, margin, ionic_strength):
    """The n³ problem of ``atoms`` (spacing chosen so that the atoms and margin fit)."""
    lo, hi = atoms.bounds(with_radii=True)
    extent = float(np.max(hi - lo)) + 2.0 * margin
    spacing = extent / (n - 1)
    center = tuple(0.5 * (lo + hi) + 0.37 * spacing)  # off the nodes: no charge on a node
    return pb.Problem.from_atoms(atoms, spacing=spacing, shape=(n, n, n), center=center,
                                 ionic_strength=ionic_strength, nonlinear=True)  # fmt: skip


def timed(solver, prob, nonlinear, repeat):
    """(best seconds, the last result) of ``repeat`` solves after one warm-up."""
    solver.solve(prob, nonlinear=nonlinear)
    best, result = np.inf, None
    for _ in range(repeat):
        start = time.perf_counter()
        result = solver.solve(prob, nonlinear=nonlinear)
        best = min(best, time.perf_counter() - start)
    return best, result


def row(atoms, n, args):
    prob = problem(atoms, n, args.margin, args.ionic_strength)
    solver = pb.Solver(method=args.method, backend=args.backend, rtol=args.rtol)
    if args.backend == "cuda":
        prob = prob.to("cupy")
    t_lin, lin = timed(solver, prob, False, args.repeat)
    t_nl, nl = timed(solver, prob, True, args.repeat)
    host = prob.to("numpy")
    g_lin = pb.molecule.energy.reaction_field_energy(atoms, host.grid, to_numpy(lin.phi_rf))
    terms = solvation_terms(atoms, host, to_numpy(nl.phi_rf))
    salty = host.kappa2 > 0
    phi = np.where(salty, host.phi_coulomb + to_numpy(nl.phi_rf), 0.0)
    return {
        "n": n,
        "spacing": host.grid.spacing[0],
        "backend": args.backend,
        "method": lin.method,
        "linear_s": t_lin,
        "linear_iterations": lin.iterations,
        "linear_reason": lin.reason,
        "nonlinear_s": t_nl,
        "nonlinear_iterations": nl.iterations,
        "newton_steps": nl.newton_steps,
        "nonlinear_reason": nl.reason,
        "ratio": t_nl / t_lin,
        "G_linear": g_lin,
        "G_nonlinear": terms.total,
        "G_terms": {"fixed": terms.fixed, "mobile": terms.mobile, "osmotic": terms.osmotic},
        "max_phi_kT": float(np.abs(phi).max() / kT_kj_per_mol(host.temperature)),
        # where the nonlinear solve's time goes (the last timed run): the start, then per step
        "newton_start_s": nl.extra["newton_start_seconds"],
        "newton_steps_detail": [{k: s.get(k) for k in STEP_KEYS} for s in nl.extra["newton"]],
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--n", type=int, nargs="+", default=[129])
    ap.add_argument("--pqr", default="1lpb_chainA.pqr", help="a file of pbsolver.data, or a path")
    ap.add_argument("--method", default="auto")
    ap.add_argument("--rtol", type=float, default=1e-6)
    ap.add_argument("--ionic-strength", type=float, default=0.15)
    ap.add_argument("--margin", type=float, default=10.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", default=None, help="also write the rows here")
    ap.add_argument("--profile", type=int, default=0, metavar="N",
                    help="then profile one nonlinear solve of the last size: the N functions of "
                         "largest cumulative time (cProfile)")  # fmt: skip
    args = ap.parse_args(argv)
    try:
        path = pb.data.path(args.pqr)
    except pb.InputError:
        path = args.pqr
    atoms = pb.read_pqr(path)
    print(f"{path}: {len(atoms)} atoms, charge {atoms.charges.sum():+.2f} e, "
          f"{args.ionic_strength} M, rtol {args.rtol:g}, {platform.node()}")  # fmt: skip
    print("| n | h (Å) | backend | method | linear s (it) | nonlinear s (it, Newton) | ratio "
          "| G lin | G nonlin (kJ/mol) | max |φ|/kT |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|")
    rows = []
    for n in args.n:
        r = row(atoms, n, args)
        rows.append(r)
        print(
            f"| {n} | {r['spacing']:.3f} | {r['backend']} | {r['method']} | "
            f"{r['linear_s']:.3f} ({r['linear_iterations']}) | "
            f"{r['nonlinear_s']:.3f} ({r['nonlinear_iterations']}, {r['newton_steps']}) | "
            f"{r['ratio']:.2f} | {r['G_linear']:.2f} | {r['G_nonlinear']:.2f} | "
            f"{r['max_phi_kT']:.1f} |",
            flush=True,
        )
    print(json.dumps(rows, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    if args.profile:
        profile(atoms, args.n[-1], args)


def profile(atoms, n, args):
    """cProfile of one linear and one nonlinear solve of the n³ problem (after a warm-up each)."""
    import cProfile
    import pstats

    prob = problem(atoms, n, args.margin, args.ionic_strength)
    solver = pb.Solver(method=args.method, backend=args.backend, rtol=args.rtol)
    if args.backend == "cuda":
        prob = prob.to("cupy")
    for nonlinear in (False, True):
        solver.solve(prob, nonlinear=nonlinear)
        prof = cProfile.Profile()
        prof.enable()
        solver.solve(prob, nonlinear=nonlinear)
        prof.disable()
        print(f"--- {n}³ {'nonlinear' if nonlinear else 'linear'} solve, by cumulative time")
        pstats.Stats(prof).sort_stats("cumulative").print_stats(args.profile)


if __name__ == "__main__":
    main()
