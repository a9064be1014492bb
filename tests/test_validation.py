"""Validation against analytic energies (Born, Kirkwood, Debye–Hückel) and APBS side by side.

Targets (issue 5): Born and Kirkwood within 0.25 % of analytic at h = 0.5 Å and within 0.1 % at
h = 0.25 Å, errors shrinking with h. Grids here are small: for one ion the multiple
Debye–Hückel boundary values are exact, so a 1 Å margin suffices.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from analytic import born, born_salt, kirkwood

import pbsolver as pb
from pbsolver.molecule import energy, maps

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from apbs import apbs_executable, apbs_solvation_energy  # noqa: E402

needs_apbs = pytest.mark.skipif(apbs_executable() is None, reason="APBS not installed")

SOLVER = {"method": "sor", "backend": "cpu", "dtype": np.float64, "rtol": 1e-9}


def solve_energy(atoms, **kw):
    opts = dict(SOLVER)
    opts.update(kw.pop("solver", {}))
    return energy.solvate(atoms, **kw, **opts).energy


def kirkwood_atoms(pos, q, radius=5.0):
    """A dielectric sphere (an uncharged atom of radius A) with bare charges inside."""
    pos = np.asarray(pos, dtype=float)
    return pb.Atoms(
        np.vstack([[0.0, 0.0, 0.0], pos]), np.r_[0.0, q], np.r_[radius, np.zeros(len(q))]
    )


# ---------------------------------------------------------------------- Born
@pytest.mark.parametrize("surface", ["vdw", "mol"])
def test_born_error_shrinks_with_h(surface):
    ion = pb.Atoms([[0.0, 0.0, 0.0]], [1.0], [3.0])
    exact = born(1.0, 3.0, 1.0, 78.54)
    assert exact == pytest.approx(-228.611, abs=1e-3)
    errors = {}
    for h in (1.0, 0.5, 0.25):
        g = solve_energy(ion, spacing=h, margin=1.0, eps_in=1.0, surface=surface)
        errors[h] = abs(g / exact - 1)
    assert errors[0.25] < errors[0.5] < errors[1.0]
    assert errors[0.5] < 2.5e-3
    assert errors[0.25] < 1.0e-3


@pytest.mark.parametrize("offset", [(0.13, -0.21, 0.07), (0.25, 0.25, 0.25)])
def test_born_off_node(offset):
    """The ion between nodes (trilinear interpolation) and with the grid off-centre."""
    ion = pb.Atoms([offset], [-1.0], [2.5])
    exact = born(-1.0, 2.5, 2.0, 80.0)
    g = solve_energy(ion, spacing=0.25, margin=1.0, eps_in=2.0, eps_out=80.0, surface="vdw")
    assert abs(g / exact - 1) < 1.0e-3


def test_born_smol_is_close():
    """Smoothing blurs the surface (APBS' smol): same energy within a few tenths of a percent."""
    ion = pb.Atoms([[0.0, 0.0, 0.0]], [1.0], [3.0])
    g = solve_energy(ion, spacing=0.25, margin=1.0, eps_in=1.0, surface="smol")
    assert abs(g / born(1.0, 3.0, 1.0, 78.54) - 1) < 1e-2


# ---------------------------------------------------------------------- Kirkwood
KIRKWOOD = {
    "z2.5": ([[0.0, 0.0, 2.5]], [1.0]),
    "three": ([[0.5, -3.1, 0.8], [2.0, 1.0, -1.7], [-2.4, 0.3, 2.9]], [0.7, -0.4, 1.0]),
}


def test_kirkwood_series_reference_value():
    assert kirkwood([[0.0, 0.0, 2.5]], [1.0], 5.0, 1.0, 78.54) == pytest.approx(-182.572, abs=1e-3)
    # a centred charge is the Born ion
    assert kirkwood([[0.0, 0.0, 0.0]], [1.0], 5.0, 2.0, 80.0) == pytest.approx(
        born(1.0, 5.0, 2.0, 80.0)
    )


@pytest.mark.parametrize("case", sorted(KIRKWOOD))
def test_kirkwood_h05(case):
    pos, q = KIRKWOOD[case]
    exact = kirkwood(pos, q, 5.0, 1.0, 78.54)
    g = solve_energy(kirkwood_atoms(pos, q), spacing=0.5, margin=4.0, eps_in=1.0, surface="vdw")
    assert abs(g / exact - 1) < 2.5e-3


def test_kirkwood_h025_single():
    pos, q = KIRKWOOD["z2.5"]
    exact = kirkwood(pos, q, 5.0, 1.0, 78.54)
    g = solve_energy(kirkwood_atoms(pos, q), spacing=0.25, margin=4.0, eps_in=1.0, surface="vdw")
    assert abs(g / exact - 1) < 1.0e-3


@pytest.mark.slow
@pytest.mark.parametrize(
    "case",
    ["three", "pair"],
)
def test_kirkwood_h025_slow(case):
    cases = dict(KIRKWOOD, pair=([[1.1, 0.4, -2.0], [-1.3, 2.2, 1.5]], [1.0, -1.0]))
    pos, q = cases[case]
    exact = kirkwood(pos, q, 5.0, 1.0, 78.54)
    g = solve_energy(kirkwood_atoms(pos, q), spacing=0.25, margin=4.0, eps_in=1.0, surface="vdw")
    # the pair's charges sit 1.9 Å from the surface: 0.10 % measured
    assert abs(g / exact - 1) < (1.0e-3 if case == "three" else 1.2e-3)


# ---------------------------------------------------------------------- salt
def test_born_in_salt_with_stern_layer():
    """Charge in a sphere (a = 3 Å), ions excluded within b = a + 2 Å: Debye–Hückel analytic."""
    ion = pb.Atoms([[0.0, 0.0, 0.0]], [1.0], [3.0])
    ionic = 0.15
    kappa = maps.kappa_from_ionic_strength(ionic)
    b = 3.0 + 2.0
    exact = born_salt(1.0, 3.0, 1.0, 78.54, kappa, b)
    exact0 = born(1.0, 3.0, 1.0, 78.54)
    kw = {"spacing": 0.25, "margin": 3.0, "eps_in": 1.0, "surface": "vdw"}
    g = solve_energy(ion, ionic_strength=ionic, **kw)
    g0 = solve_energy(ion, **kw)
    assert abs(g / exact - 1) < 1e-3
    # the salt contribution alone (0.35 % of the total here) within 2 %
    assert (g - g0) == pytest.approx(exact - exact0, rel=0.02)


def test_salt_contribution_converges():
    ion = pb.Atoms([[0.0, 0.0, 0.0]], [1.0], [2.0])
    ionic = 0.5
    kappa = maps.kappa_from_ionic_strength(ionic)
    d_exact = born_salt(1.0, 2.0, 2.0, 78.54, kappa, 4.0) - born(1.0, 2.0, 2.0, 78.54)
    errs = []
    for h in (0.5, 0.25):
        kw = {"spacing": h, "margin": 3.0, "eps_in": 2.0, "surface": "vdw"}
        dg = solve_energy(ion, ionic_strength=ionic, **kw) - solve_energy(ion, **kw)
        errs.append(abs(dg / d_exact - 1))
    assert errs[1] < 0.01 and errs[0] < 0.03


# ---------------------------------------------------------------------- APBS side by side
@needs_apbs
def test_apbs_born_side_by_side():
    """Same ion, radii, dielectrics and surface as APBS 3.4 (mg-manual, 65³, h = 0.25 Å)."""
    pqr = ROOT / "data" / "born_ion.pqr"
    exact = born(1.0, 3.0, 1.0, 78.54)
    e_apbs, _ = apbs_solvation_energy(
        pqr, spacing=0.25, dime=65, center=(0, 0, 0), eps_in=1.0, surface="mol"
    )
    ion = pb.read_pqr(pqr)
    g = solve_energy(
        ion, spacing=0.25, eps_in=1.0, surface="mol", problem_options={"shape": (65, 65, 65)}
    )
    assert abs(e_apbs / exact - 1) < 0.01  # APBS: about +0.6 % here
    assert abs(g / exact - 1) < abs(e_apbs / exact - 1)  # exact-geometry faces do better
    assert g == pytest.approx(e_apbs, rel=0.01)


@needs_apbs
@pytest.mark.slow
def test_apbs_protein_side_by_side():
    """1LPB chain A (pdb2pqr PARSE), SES, ε 2/78.54: pbsolver at 0.5 Å within 3 % of APBS at 0.25 Å.

    APBS' own energy still moves by 4 % between 0.5 and 0.25 Å on this protein (pbsolver's by
    0.5 %), so APBS is run on the fine grid (same box and centre), as issue 5 asks.
    """
    pqr = ROOT / "data" / "1lpb_chainA.pqr"
    atoms = pb.read_pqr(pqr)
    grid = maps.grid_for_atoms(atoms, 0.5, 8.0)
    fine = tuple(2 * (n - 1) + 1 for n in grid.shape)
    e_apbs, _ = apbs_solvation_energy(
        pqr, spacing=0.25, dime=fine, center=grid.center, eps_in=2.0, surface="mol"
    )
    g = energy.solvate(
        atoms, spacing=0.5, eps_in=2.0, surface="mol", method="auto", backend="cpu",
        problem_options={"shape": grid.shape, "center": grid.center},
    ).energy  # fmt: skip
    assert g == pytest.approx(e_apbs, rel=0.03)
