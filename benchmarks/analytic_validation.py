"""Born, Kirkwood and Born-in-salt errors against their analytic energies, by spacing.

    python benchmarks/analytic_validation.py [--spacings 1.0 0.5 0.25] [--apbs]

Exact-geometry faces (vdW; "mol" is identical for one sphere), multiple Debye–Hückel
boundary values, float64 SOR to a relative residual of 1e-9. With ``--apbs``, APBS 3.4.1 runs
the Born ion on the same grid for comparison.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from analytic import born, born_salt, kirkwood  # noqa: E402

import pbsolver as pb  # noqa: E402
from pbsolver.molecule import energy, maps  # noqa: E402

SOLVER = {"method": "sor", "backend": "cpu", "dtype": np.float64, "rtol": 1e-9}

KIRKWOOD = {
    "z=2.5": ([[0.0, 0.0, 2.5]], [1.0]),
    "three": ([[0.5, -3.1, 0.8], [2.0, 1.0, -1.7], [-2.4, 0.3, 2.9]], [0.7, -0.4, 1.0]),
    "pair": ([[1.1, 0.4, -2.0], [-1.3, 2.2, 1.5]], [1.0, -1.0]),
}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spacings", type=float, nargs="+", default=[1.0, 0.5, 0.25])
    ap.add_argument("--apbs", action="store_true")
    args = ap.parse_args(argv)
    print("| case | h (Å) | grid | G (kJ/mol) | analytic | error |")
    print("|---|---|---|---|---|---|")

    def row(name, h, s, exact):
        shape = "×".join(map(str, s.problem.grid.shape))
        print(
            f"| {name} | {h} | {shape} | {s.energy:.3f} | {exact:.3f} | "
            f"{100 * (s.energy / exact - 1):+.3f} % |",
            flush=True,
        )

    ion = pb.Atoms([[0.0, 0.0, 0.0]], [1.0], [3.0])
    for h in args.spacings:
        s = energy.solvate(ion, spacing=h, margin=1.0, eps_in=1.0, surface="vdw", **SOLVER)
        row("Born +1 e, 3 Å, ε 1/78.54", h, s, born(1.0, 3.0, 1.0, 78.54))
    for name, (pos, q) in KIRKWOOD.items():
        atoms = pb.Atoms(
            np.vstack([[0.0, 0.0, 0.0], pos]), np.r_[0.0, q], np.r_[5.0, np.zeros(len(q))]
        )
        for h in args.spacings:
            if h > 0.5:
                continue
            s = energy.solvate(atoms, spacing=h, margin=4.0, eps_in=1.0, surface="vdw", **SOLVER)
            row(f"Kirkwood A = 5 Å, {name}", h, s, kirkwood(pos, q, 5.0, 1.0, 78.54))
    kappa = maps.kappa_from_ionic_strength(0.15)
    for h in args.spacings:
        kw = {"spacing": h, "margin": 3.0, "eps_in": 1.0, "surface": "vdw", **SOLVER}
        s = energy.solvate(ion, ionic_strength=0.15, **kw)
        s0 = energy.solvate(ion, **kw)
        exact = born_salt(1.0, 3.0, 1.0, 78.54, kappa, 5.0)
        row("Born in 0.15 M salt, Stern 2 Å", h, s, exact)
        d, d_exact = s.energy - s0.energy, exact - born(1.0, 3.0, 1.0, 78.54)
        print(
            f"| salt part only | {h} | | {d:.4f} | {d_exact:.4f} | "
            f"{100 * (d / d_exact - 1):+.2f} % |"
        )
    if args.apbs:
        from apbs import apbs_solvation_energy

        for dime, h in ((65, 0.25), (97, 0.19)):
            e, _ = apbs_solvation_energy(
                ROOT / "data" / "born_ion.pqr", spacing=h, dime=dime, center=(0, 0, 0),
                eps_in=1.0, surface="mol",
            )  # fmt: skip
            exact = born(1.0, 3.0, 1.0, 78.54)
            print(
                f"| APBS 3.4.1 Born | {h} | {dime}³ | {e:.3f} | {exact:.3f} | "
                f"{100 * (e / exact - 1):+.3f} % |"
            )


if __name__ == "__main__":
    main()
