"""Make the short peptide trajectory shipped in data/ (peptide.pdb, peptide.pqr, peptide.dcd).

Procedure (see data/README.md):

1. heavy atoms of residues 6–15 of ``1lpb_chainA.pqr`` (GLY ILE ILE ILE ASN LEU ASP GLU GLY GLU,
   the chain's N terminus) and a C-terminal OXT placed in the plane of CA, C, O;
2. hydrogens added by OpenMM's ``Modeller.addHydrogens`` (pH 7, Amber14 templates);
3. Amber14 (``amber14-all.xml``) with the OBC2 implicit solvent (``implicit/obc2.xml``), no cutoff,
   bonds to hydrogen constrained; energy minimisation, 2 ps of Langevin dynamics at 300 K
   (friction 1/ps, 2 fs steps, ``LangevinMiddleIntegrator``, seed 2024) to equilibrate, then
   200 frames saved every 5 steps (10 fs apart, 2 ps), on OpenMM's Reference platform;
4. written with MDAnalysis: ``peptide.pdb`` (topology, first frame), ``peptide.dcd`` (all frames,
   Å) and ``peptide.pqr`` (first frame with the force field's partial charges and Bondi radii, as
   ``pb.Atoms.from_openmm(..., radii="bondi")`` gives them).

Run from anywhere: ``python data/make_trajectory.py`` (needs ``pip install openmm MDAnalysis``).
"""

from __future__ import annotations

import io
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
RESIDUES = range(6, 16)
FRAMES, STRIDE, EQUILIBRATION_STEPS = 200, 5, 1000
SEED = 2024


def heavy_atoms_pdb() -> str:
    """PDB text of the residues' heavy atoms plus a C-terminal OXT."""
    rows = []
    for line in (HERE / "1lpb_chainA.pqr").read_text().splitlines():
        if not line.startswith("ATOM"):
            continue
        f = line.split()
        name, resname, resid = f[2], f[3], int(f[4])
        if resid in RESIDUES and not name.startswith("H"):
            rows.append((name, resname, resid, np.array(f[5:8], dtype=float)))
    last = max(RESIDUES)
    pos = {r[0]: r[3] for r in rows if r[2] == last}
    c, o, ca = pos["C"], pos["O"], pos["CA"]
    u = (o - c) / np.linalg.norm(o - c)
    v = (ca - c) / np.linalg.norm(ca - c)
    d = -(u + v) / np.linalg.norm(u + v)  # trigonal carbon: the third direction
    resname = next(r[1] for r in rows if r[2] == last)
    rows.append(("OXT", resname, last, c + 1.25 * d))
    out = io.StringIO()
    for serial, (name, resname, resid, xyz) in enumerate(rows, start=1):
        label = name if len(name) == 4 else f" {name:<3}"
        out.write(
            f"ATOM  {serial:5d} {label} {resname:>3} A{resid:4d}    "
            f"{xyz[0]:8.3f}{xyz[1]:8.3f}{xyz[2]:8.3f}  1.00  0.00           {name[0]}\n"
        )
    out.write("END\n")
    return out.getvalue()


def simulate():
    """Positions (frames, n, 3) in Å, the hydrogenated topology, and the OpenMM System."""
    import openmm
    from openmm import app, unit

    pdb = app.PDBFile(io.StringIO(heavy_atoms_pdb()))
    ff = app.ForceField("amber14-all.xml", "implicit/obc2.xml")
    modeller = app.Modeller(pdb.topology, pdb.positions)
    modeller.addHydrogens(ff, pH=7.0)
    system = ff.createSystem(
        modeller.topology, nonbondedMethod=app.NoCutoff, constraints=app.HBonds
    )
    integrator = openmm.LangevinMiddleIntegrator(
        300 * unit.kelvin, 1.0 / unit.picosecond, 2.0 * unit.femtoseconds
    )
    integrator.setRandomNumberSeed(SEED)
    platform = openmm.Platform.getPlatformByName("Reference")
    sim = app.Simulation(modeller.topology, system, integrator, platform)
    sim.context.setPositions(modeller.positions)
    sim.minimizeEnergy()
    sim.context.setVelocitiesToTemperature(300 * unit.kelvin, SEED)
    sim.step(EQUILIBRATION_STEPS)
    frames = []
    for _ in range(FRAMES):
        sim.step(STRIDE)
        state = sim.context.getState(getPositions=True)
        frames.append(state.getPositions(asNumpy=True).value_in_unit(unit.angstrom))
    return np.asarray(frames), modeller.topology, system


def write(frames, topology, system):
    """peptide.pdb, peptide.dcd (MDAnalysis) and peptide.pqr (charges, Bondi radii)."""
    import MDAnalysis as mda
    from openmm import app

    sys.path.insert(0, str(HERE.parent))
    import pbsolver as pb

    pdb_path = HERE / "peptide.pdb"
    with open(pdb_path, "w") as fh:
        app.PDBFile.writeFile(topology, frames[0] / 10.0 * _nm(), fh)
    u = mda.Universe(str(pdb_path))
    u.load_new(frames.astype(np.float32), format=mda.coordinates.memory.MemoryReader)
    with mda.Writer(str(HERE / "peptide.dcd"), u.atoms.n_atoms) as w:
        for _ in u.trajectory:
            w.write(u.atoms)
    atoms = pb.Atoms.from_openmm(system, frames[0] / 10.0, topology, radii="bondi")
    u.trajectory[0]
    u.add_TopologyAttr("charges", atoms.charges)
    u.add_TopologyAttr("radii", atoms.radii)
    u.atoms.write(str(HERE / "peptide.pqr"))
    u.atoms.write(str(pdb_path))  # MDAnalysis' PDB (element columns, CRYST1 placeholder)
    print(
        f"{len(frames)} frames, {u.atoms.n_atoms} atoms, net charge {atoms.charges.sum():+.3f} e, "
        f"largest step between frames {np.abs(np.diff(frames, axis=0)).max():.3f} Å"
    )


def _nm():
    from openmm import unit

    return unit.nanometer


if __name__ == "__main__":
    write(*simulate())
