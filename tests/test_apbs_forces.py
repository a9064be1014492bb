"""``calcforce`` and PRINT elecForce of APBS inputs through pbsolver (pbsolver.apbs).

The forces the runner prints must be the gradient of the energy it prints: central differences
of PRINT elecEnergy over moved atoms (the grid held still: a fixed ``gcent``) against PRINT
elecForce; the reference calculation's (pdie = sdie) against the analytic Coulomb forces; and
APBS's output format. The force library itself is checked in tests/test_forces.py.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from test_apbs_input import read_section, run, write_case

import pbsolver as pb
from pbsolver.molecule.energy import coulomb_forces

#: A small molecule: (x, y, z, q, r), charges of both signs, spheres that overlap.
ATOMS = [
    (0.31, -0.22, 0.13, 0.8, 1.6),
    (1.52, 0.41, -0.37, -0.5, 1.4),
    (-0.93, 1.07, 0.58, -0.6, 1.5),
    (0.12, -1.24, -1.02, 0.3, 1.2),
]
SALT = "    ion charge 1 conc 0.15 radius 2.0\n    ion charge -1 conc 0.15 radius 2.0\n"


def block(name, sdie, *, force="comps", srfm="mol", ions=SALT, method="mg-manual"):
    """An ELEC block on a grid that does not move with the atoms (gcent a point)."""
    grid = (
        "    dime 41 41 41\n    glen 14 14 14\n    gcent 0.05 -0.03 0.02\n"
        if method == "mg-manual"
        else "    dime 33 33 33\n    cglen 24 24 24\n    fglen 12 12 12\n"
        "    cgcent 0.05 -0.03 0.02\n    fgcent 0.05 -0.03 0.02\n"
    )
    return (
        f"elec name {name}\n    {method}\n{grid}    mol 1\n    lpbe\n    bcfl mdh\n{ions}"
        f"    pdie 2.0\n    sdie {sdie}\n    chgm spl2\n    srfm {srfm}\n    srad 1.4\n"
        f"    swin 0.3\n    sdens 10.0\n    temp 298.15\n    etol 1e-12\n"
        f"    calcenergy total\n    calcforce {force}\nend\n"
    )


def case(tmp_path, atoms, **kw):
    text = (
        read_section("m.pqr")
        + block("solv", 78.54, **kw)
        + block("ref", 2.0, **kw)
        + "print elecEnergy solv - ref end\nprint elecForce solv - ref end\n"
    )
    return write_case(tmp_path, text, {"m.pqr": atoms})


def test_printed_forces_are_the_gradient_of_the_printed_energy(tmp_path):
    """On the vdW surface (``srfm spl2``) with salt: between its kinks the energy is smooth.

    (The SES energy is a staircase on the 1e-5 Å scale at the maps' default bisection, which an
    input file cannot change; tests/test_forces.py checks SES forces with finer bisection.)
    """
    base = np.array(ATOMS)
    res = run(case(tmp_path / "0", base, srfm="spl2"))
    energy_print, force_print = res.prints
    assert force_print.what == "elecForce" and force_print.value is None
    forces = force_print.forces
    total = forces["qf"] + forces["ib"] + forces["db"]
    # every term is there: the dielectric and ionic boundaries move with the atoms
    assert np.abs(forces["db"]).max() > 1e-2 and np.abs(forces["ib"]).max() > 1e-4
    delta = 1e-5
    fd = np.zeros((2, 3))
    for i in range(2):
        for a in range(3):
            e = []
            for sign in (1, -1):
                moved = base.copy()
                moved[i, a] += sign * delta
                moved_case = case(tmp_path / f"{i}{a}{sign}", moved, srfm="spl2")
                e.append(run(moved_case).prints[0].value)
            fd[i, a] = -(e[0] - e[1]) / (2 * delta)
    err = np.linalg.norm(total[:2] - fd) / np.linalg.norm(fd)
    assert err < 1e-5, (total[:2], fd)
    assert energy_print.value < 0


def test_reference_forces_are_coulombs_and_the_output_is_apbs(tmp_path):
    res = run(case(tmp_path, np.array(ATOMS), ions=""))
    ref = res.calculations[1]
    atoms = pb.Atoms(np.array(ATOMS)[:, :3], np.array(ATOMS)[:, 3], np.array(ATOMS)[:, 4])
    # pdie = sdie, no salt: φ_rf ≡ 0 (no solve), only the Coulomb pairs in pdie
    np.testing.assert_allclose(ref.forces["qf"], coulomb_forces(atoms, 2.0), rtol=1e-13)
    assert not ref.forces["db"].any() and not ref.forces["ib"].any()
    lines = res.text.splitlines()
    mgf = [line for line in lines if line.startswith("mgF")]
    assert len(mgf) == 2 * 4 * len(ATOMS)  # tot, qf, ib, db per atom, both calculations
    assert re.fullmatch(r"mgF  qf  0  (-?\d\.\d{3}e[+-]\d{2}  ){2}-?\d\.\d{3}e[+-]\d{2}", mgf[1])
    start = lines.index("print force 1 (solv) - 2 (ref) end")
    assert lines[start + 7] == "    tot all -- Total force for system"
    q0 = [float(v) for v in lines[start + 8].split()[2:]]
    np.testing.assert_allclose(q0, res.prints[1].forces["qf"][0], rtol=1e-11)
    assert lines[start + 8 + 4 * len(ATOMS)].startswith("  tot all ")


def test_calcforce_total_prints_the_net_forces(tmp_path):
    res = run(case(tmp_path, np.array(ATOMS), force="total", srfm="spl2"))
    net = res.prints[1].forces
    text = res.text
    assert "  Printing net forces for molecule 1 (kJ/mol/A)" in text
    row = re.search(r"^  db  (\S+)  (\S+)  (\S+)$", text, re.M)
    np.testing.assert_allclose([float(v) for v in row.groups()],
                               res.calculations[0].forces["db"].sum(axis=0), rtol=2e-3,
                               atol=1e-3)  # fmt: skip
    assert "  Printing net forces (kJ/mol/A)." in text and net["qf"].shape == (len(ATOMS), 3)


def test_focusing_forces_hold_the_boundary_values_and_say_so(tmp_path):
    res = run(case(tmp_path, np.array(ATOMS), method="mg-auto"))
    assert "boundary values held fixed" in res.text
    single = run(case(tmp_path / "single", np.array(ATOMS)))
    # the fine grids differ (12 Å of 33 nodes against 14 Å of 41): close, not equal
    a, b = res.prints[1].forces, single.prints[1].forces
    total_a, total_b = a["qf"] + a["db"] + a["ib"], b["qf"] + b["db"] + b["ib"]
    assert np.linalg.norm(total_a - total_b) < 0.1 * np.linalg.norm(total_b)


def test_forces_refused_where_they_are_not_the_gradient(tmp_path):
    atoms = np.array(ATOMS)
    text = read_section("m.pqr") + block("s", 78.54).replace("lpbe", "npbe")
    with pytest.raises(pb.InputError, match="npbe with salt has none"):
        run(write_case(tmp_path / "npbe", text, {"m.pqr": atoms}))
    text = read_section("m.pqr") + block("s", 78.54)
    with pytest.raises(pb.InputError, match="point-switched"):
        run(write_case(tmp_path / "apbs", text, {"m.pqr": atoms}), surfaces="apbs")
    outside = block("s", 78.54, method="mg-auto").replace("fglen 12 12 12", "fglen 2 2 2")
    with pytest.raises(pb.InputError, match="must hold every atom"):
        run(write_case(tmp_path / "out", read_section("m.pqr") + outside, {"m.pqr": atoms}))
    mixed = (read_section("m.pqr") + block("a", 78.54) + block("b", 2.0, force="total")
             + "print elecForce a - b end\n")  # fmt: skip
    with pytest.raises(pb.InputError, match="different calcforce"):
        run(write_case(tmp_path / "mixed", mixed, {"m.pqr": atoms}))


def test_a_finest_grid_without_ion_accessible_nodes_has_no_ionic_force(tmp_path):
    """Salt, but the finest grid lies inside the solute: κ̄² ≡ 0 there, so ib is zero."""
    inside = block("s", 78.54, method="mg-auto").replace("fglen 12 12 12", "fglen 3 3 3")
    res = run(write_case(tmp_path, read_section("m.pqr") + inside, {"m.pqr": np.array(ATOMS)}))
    forces = res.calculations[0].forces
    assert not forces["ib"].any() and np.abs(forces["db"]).max() > 0
