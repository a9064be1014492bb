"""APOLAR sections of APBS inputs through pbsolver (pbsolver.apbs.apolar): parsing, refusals,
the run's numbers against pbsolver.molecule.apolar, and APBS's output lines.

The model's numbers against APBS itself are in tests/test_apolar.py.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from test_apbs_input import elec, run

import pbsolver as pb
from pbsolver.apbs import parser
from pbsolver.molecule.apolar import ApolarParameters, apolar_terms

PDB = """\
ATOM      1  C1  LIG     1       0.100   0.200  -0.300  1.00  0.00
ATOM      2  O1  LIG     1       1.450   0.300   0.100  1.00  0.00
ATOM      3  H1  LIG     1      -0.700   1.000   0.200  1.00  0.00
END
"""
PARM = """\
# RESIDUE ATOM CHARGE RADIUS EPSILON
LIG C1 0.3 1.9 0.36
LIG O1 -0.5 1.6 0.88
LIG H1 0.2 0.0 0.0
WAT OW 0.0 1.7683 0.6364
"""


def apolar_block(name="np", *, extra="", drop=None, energy="total", force="comps"):
    keys = {
        "grid": "0.5 0.5 0.5", "mol": "1", "srfm": "sacc", "swin": "0.3", "srad": "1.4",
        "press": "0.0226", "gamma": "0.00072", "bconc": "0.033", "sdens": "10.0",
        "dpos": "0.2", "temp": "298.15", "calcenergy": energy, "calcforce": force,
    }  # fmt: skip
    body = "".join(f"    {k} {v}\n" for k, v in keys.items() if k != drop)
    return f"apolar name {name}\n{body}{extra}end\n"


def write(folder, body, parm=PARM):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "lig.pdb").write_text(PDB)
    read = "read\n    mol pdb lig.pdb\n"
    if parm is not None:
        (folder / "parm.dat").write_text(parm)
        read += "    parm flat parm.dat\n"
    path = folder / "case.in"
    path.write_text(read + "end\n" + body)
    return path


def expected(forces=True):
    atoms = pb.Atoms(
        [[0.1, 0.2, -0.3], [1.45, 0.3, 0.1], [-0.7, 1.0, 0.2]], [0.3, -0.5, 0.2], [1.9, 1.6, 0.0]
    )
    params = ApolarParameters(gamma=0.00072, press=0.0226, bconc=0.033, srad=1.4, sdens=10.0,
                              dpos=0.2, grid=(0.5, 0.5, 0.5), water_radius=1.7683,
                              water_epsilon=0.6364)  # fmt: skip
    eps = np.array([0.36, 0.88, 0.0])
    return apolar_terms(atoms.positions, atoms.radii, eps, params, forces=forces)


def test_parses_every_apolar_keyword():
    inp = parser.parse_text("read\n mol pqr a.pqr\nend\n" + apolar_block())
    a = inp.apolars[0]
    assert (a.name, a.mol, a.grid, a.srfm, a.srad, a.press, a.gamma, a.bconc, a.sdens, a.dpos,
            a.calcenergy, a.calcforce) == ("np", 1, (0.5,) * 3, "sacc", 1.4, 0.0226, 0.00072,
                                           0.033, 10.0, 0.2, "total", "comps")  # fmt: skip
    assert a.lines["bconc"] == 12


def test_the_run_is_the_model_and_prints_apbs_lines(tmp_path):
    body = apolar_block() + "print apolEnergy np end\nprint apolForce np end\n"
    res = run(write(tmp_path, body))
    want = expected()
    got = res.apolars[0]
    np.testing.assert_array_equal(got.sasa, want.sasa)
    np.testing.assert_array_equal(got.wca, want.wca)
    assert got.energy == want.energy and got.sav == want.sav > 0
    assert res.prints[0].what == "apolEnergy" and res.prints[0].value == want.energy
    for k in ("sasa", "sav", "wca"):
        np.testing.assert_array_equal(res.prints[1].forces[k], want.forces[k])
    text = res.text
    assert "CALCULATION #1 (np): APOLAR" in text
    total = re.search(r"^Total non-polar energy = (\S+) kJ/mol$", text, re.M)
    assert float(total[1]) == pytest.approx(want.energy, rel=1e-12)
    glob = re.search(r"^  Global net APOL energy = (\S+) kJ/mol$", text, re.M)
    assert float(glob[1]) == pytest.approx(want.energy, rel=1e-12)
    # H1 (radius 0) has no area, as in APBS
    assert re.search(r"^  SASA for atom 2: 0\.000000000000E\+00$", text, re.M)
    lines = text.splitlines()
    start = lines.index("print APOL force 1 (np) end")
    assert lines[start + 8].startswith("  sasa  0  ") and lines[-3].startswith("  tot all  ")
    assert "note: APOLAR forces are F = -dW/dr" in text


def test_apolar_and_elec_run_in_input_order_numbered_as_apbs(tmp_path):
    body = (elec("solv", dime=33, glen=12.0, srfm="spl2") + apolar_block(force="no")
            + elec("ref", dime=33, glen=12.0, sdie=1.0, srfm="spl2")
            + "print elecEnergy solv - ref end\nprint apolEnergy np end\n")  # fmt: skip
    res = run(write(tmp_path, body))
    order = re.findall(r"^CALCULATION #(\d) \((\w+)\): (\w+)$", res.text, re.M)
    assert order == [("1", "solv", "MULTIGRID"), ("2", "np", "APOLAR"), ("3", "ref", "MULTIGRID")]
    assert res.prints[1].value == pytest.approx(expected(forces=False).energy, rel=1e-12)


@pytest.mark.parametrize(
    ("body", "parm", "line", "words"),
    [
        (apolar_block(drop="dpos"), PARM, 5, "missing dpos, which APBS requires"),
        (apolar_block(extra="    srfm mol\n"), PARM, 19, "srfm must be one of sacc"),
        (apolar_block(extra="    dime 33 33 33\n"), PARM, 19, "replaced by 'grid'"),
        (apolar_block(extra="    sdens 0\n"), PARM, 19, "sdens must be > 0"),
        (apolar_block(), None, 12, "add 'parm flat FILE'"),
        (apolar_block(), PARM.replace(" 0.88", ""), 13, "no EPSILON column"),
        (apolar_block(), PARM.replace("WAT OW", "WAT HW"), 13, "'WAT OW'"),
        (apolar_block(energy="comps") + "print apolEnergy 1 end\n", PARM, 20,
         "APOLAR energies are printed from calcenergy total"),
        (apolar_block(force="no") + "print apolForce np end\n", PARM, 20, "calcforce no"),
    ],
)  # fmt: skip
def test_bad_apolar_sections_name_their_line(tmp_path, body, parm, line, words):
    if parm is None:  # a PDB needs parameters for its charges: read a PQR instead
        folder = tmp_path
        folder.mkdir(exist_ok=True)
        (folder / "lig.pqr").write_text("ATOM 1 C1 LIG 1 0.1 0.2 -0.3 0.3 1.9\n")
        path = folder / "case.in"
        path.write_text("read\n    mol pqr lig.pqr\nend\n" + body)
    else:
        path = write(tmp_path, body, parm)
    with pytest.raises(pb.InputError) as err:
        run(path)
    assert f"case.in:{line}:" in str(err.value), str(err.value)
    assert words in str(err.value)


def test_calcforce_total_prints_net_apolar_forces(tmp_path):
    res = run(write(tmp_path, apolar_block(force="total") + "print apolForce np end\n"))
    want = expected()
    lines = res.text.splitlines()
    start = lines.index("print APOL force 1 (np) end")
    assert lines[start + 1 : start + 3] == ["  Printing net forces (kJ/mol/A)", "  Legend:"]
    net = {line.split()[0]: [float(v) for v in line.split()[1:]]
           for line in lines[start + 8 : start + 12]}  # fmt: skip
    assert list(net) == ["tot", "sasa", "sav", "wca"]
    for k in ("sasa", "sav", "wca"):
        np.testing.assert_allclose(net[k], want.forces[k].sum(axis=0), rtol=1e-11, atol=1e-14)
    np.testing.assert_allclose(net["tot"], want.forces["total"].sum(axis=0), rtol=1e-11,
                               atol=1e-14)  # fmt: skip
    # the calculation's own net lines, in APBS's %4.3e
    assert re.search(r"^  wca   -?\d\.\d{3}e[+-]\d{2} -?\d\.\d{3}e[+-]\d{2} -?\d\.\d{3}e", res.text,
                     re.M)  # fmt: skip
