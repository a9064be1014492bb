"""Energy conservation of NVE dynamics with the PB reaction field as the implicit solvent.

The shipped peptide (``data/peptide.pdb``, 149 atoms) with Amber14 (``amber14-all.xml``, no
cutoff, no constraints) and either OpenMM's OBC2 generalized Born (``implicit/obc2.xml``) or
pbsolver's reaction field (:class:`pbsolver.openmm.ReactionFieldForce`, grid held still by a
skin that covers the run) as the solvent; the same start (minimised, velocities at 300 K from one
seed: both start from the structure minimised with OBC2), ``VerletIntegrator`` with
``--step-fs`` steps, ``--steps`` steps. The total energy is
recorded every ``--every`` steps; the drift is the slope of a least-squares line through it
(kJ/mol/ps), beside the RMS fluctuation about that line.

    python benchmarks/nve_drift.py --steps 2000 --json nve.json     # both runs
    python benchmarks/nve_drift.py --solvent pb --surface vdw --backend cuda
    python benchmarks/nve_drift.py --solvent pb --interpolation linear   # trilinear sampling
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.append(str(Path(__file__).resolve().parents[1]))  # after an installed or PYTHONPATH tree

import pbsolver as pb  # noqa: E402


def build(solvent, args):
    """Simulation of the peptide in vacuum plus ``solvent`` ("obc2" or "pb")."""
    import openmm
    import openmm.app as app

    pdb = app.PDBFile(str(pb.data.path("peptide.pdb")))
    files = ["amber14-all.xml"] + (["implicit/obc2.xml"] if solvent == "obc2" else [])
    system = app.ForceField(*files).createSystem(
        pdb.topology, nonbondedMethod=app.NoCutoff, constraints=None
    )
    force = None
    if solvent == "pb":
        from pbsolver.openmm import ReactionFieldForce

        force = ReactionFieldForce.from_system(
            system, pdb.topology, pdb.positions, spacing=args.spacing, surface=args.surface,
            eps_in=1.0, eps_out=78.5, margin=args.margin, skin=args.skin, backend=args.backend,
            rtol=args.rtol, interpolation=args.interpolation,
        )  # fmt: skip
        system.addForce(force.openmm_force())
    integrator = openmm.VerletIntegrator(args.step_fs * 1e-3)  # ps
    sim = app.Simulation(pdb.topology, system, integrator,
                         openmm.Platform.getPlatformByName(args.platform))  # fmt: skip
    sim.context.setPositions(pdb.positions)
    return sim, force


def minimised_positions(args):
    """The peptide minimised with Amber14 + OBC2: the start of both runs."""
    sim, _ = build("obc2", args)
    sim.minimizeEnergy(maxIterations=args.minimise)
    return sim.context.getState(getPositions=True).getPositions()


def summary(solvent, args, times, totals, potentials, wall, force, complete=True) -> dict:
    """A run's record: drift (slope of a line through the total energy), RMS about it, series."""
    t, e = np.asarray(times), np.asarray(totals)
    slope, offset = np.polyfit(t, e, 1)
    out = {
        "solvent": solvent,
        "steps": args.steps if complete else int(round(times[-1] / (args.step_fs * 1e-3))),
        "complete": complete,
        "step_fs": args.step_fs,
        "drift_kj_per_mol_per_ps": float(slope),
        "rms_about_line_kj_per_mol": float(np.sqrt(np.mean((e - (slope * t + offset)) ** 2))),
        "total_first_last": [float(e[0]), float(e[-1])],
        "wall_s": wall,
        "times_ps": list(times),
        "total_kj_per_mol": list(totals),
        "potential_kj_per_mol": list(potentials),
    }
    if force is not None:
        out["pb"] = {
            "evaluations": force.evaluations,
            "regrids": force.regrids,
            "surface": args.surface,
            "spacing": args.spacing,
            "rtol": args.rtol,
            "interpolation": args.interpolation,
        }
    return out


def run(solvent, args, start_positions, checkpoint=None) -> dict:
    """One NVE run: from ``start_positions``, velocities drawn, integrate, record the energy.

    ``checkpoint(record)`` receives the run so far (``complete`` False) with every progress
    line, so that a run cut short by a time limit keeps what it did.
    """
    import openmm.unit as u

    sim, force = build(solvent, args)
    sim.context.setPositions(start_positions)
    sim.context.setVelocitiesToTemperature(300 * u.kelvin, args.seed)
    times, totals, potentials = [], [], []
    start = time.perf_counter()
    for k in range(0, args.steps + 1, args.every):
        if k:
            sim.step(args.every)
        s = sim.context.getState(getEnergy=True)
        pot = s.getPotentialEnergy().value_in_unit(u.kilojoule_per_mole)
        kin = s.getKineticEnergy().value_in_unit(u.kilojoule_per_mole)
        times.append(k * args.step_fs * 1e-3)
        totals.append(pot + kin)
        potentials.append(pot)
        if k and k % (20 * args.every) == 0:
            wall = time.perf_counter() - start
            print(f"  {solvent}: step {k}, {wall:.1f} s", flush=True)
            if checkpoint is not None and k < args.steps:
                checkpoint(summary(solvent, args, times, totals, potentials, wall, force, False))
    wall = time.perf_counter() - start
    out = summary(solvent, args, times, totals, potentials, wall, force)
    print(f"{solvent:5s} drift {out['drift_kj_per_mol_per_ps']:+.4f} kJ/mol/ps, rms "
          f"{out['rms_about_line_kj_per_mol']:.4f} kJ/mol, {args.steps} steps in {wall:.1f} s",
          flush=True)  # fmt: skip
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--solvent", choices=["obc2", "pb", "both"], default="both")
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--step-fs", type=float, default=1.0)
    ap.add_argument("--every", type=int, default=10)
    ap.add_argument("--surface", default="svdw")
    ap.add_argument("--spacing", type=float, default=0.5)
    ap.add_argument("--margin", type=float, default=3.0)
    ap.add_argument("--skin", type=float, default=4.0)
    ap.add_argument("--rtol", type=float, default=1e-8)
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--platform", default="Reference")
    ap.add_argument("--minimise", type=int, default=200)
    ap.add_argument("--seed", type=int, default=2024)
    ap.add_argument(
        "--interpolation",
        choices=["linear", "cubic"],
        default="cubic",
        help="of φ_rf at the atoms (the OpenMM force's default: cubic)",
    )
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    import openmm

    start = minimised_positions(args)
    record = {
        "command": " ".join(sys.argv),
        "openmm": openmm.__version__,
        "pbsolver": pb.__version__,
        "machine": platform.platform(),
        "runs": [],
    }

    def checkpoint(partial):  # the finished runs and the one under way
        if args.json is not None:
            args.json.write_text(json.dumps({**record, "runs": [*record["runs"], partial]},
                                            indent=1))  # fmt: skip

    for solvent in ["obc2", "pb"] if args.solvent == "both" else [args.solvent]:
        record["runs"].append(run(solvent, args, start, checkpoint))
        if args.json is not None:  # after each run: a run cut short keeps the ones before
            args.json.write_text(json.dumps(record, indent=1))
    runs = record["runs"]
    if len(runs) == 2:
        ratio = abs(runs[1]["drift_kj_per_mol_per_ps"]) / abs(runs[0]["drift_kj_per_mol_per_ps"])
        record["pb_over_obc2_drift"] = ratio
        print(f"|drift PB| / |drift OBC2| = {ratio:.2f}")
        if args.json is not None:
            args.json.write_text(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
