"""APBS input files through pbsolver (pbsolver.apbs): parsing, refusals, energies, output.

The APBS example inputs in tests/data/apbs are copies of APBS' own (see its README); their
molecules are made up here. Energies are checked against closed forms (Born, Born in a salt of
two species, Kirkwood, Coulomb pairs) and, where APBS is installed, against APBS run on the same
file.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from analytic import K, born, born_salt, kirkwood
from click.testing import CliRunner

import pbsolver as pb
from pbsolver.apbs import model, parser
from pbsolver.io.units import kT_kj_per_mol
from pbsolver.molecule import focusing
from pbsolver.molecule.focusing import finest_level

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "apbs"
sys.path.insert(0, str(ROOT / "benchmarks"))
from apbs import apbs_executable  # noqa: E402

needs_apbs = pytest.mark.skipif(apbs_executable() is None, reason="APBS not installed")

#: APBS' summary lines (routines.c): what scripts parse.
GLOBAL = re.compile(r"^  Global net ELEC energy = (-?\d\.\d{12}E[+-]\d{2}) kJ/mol$", re.M)
TOTAL = re.compile(r"^  Total electrostatic energy = (-?\d\.\d{12}E[+-]\d{2}) kJ/mol$", re.M)


def elec(
    name, *, mol=1, pdie=1.0, sdie=78.54, dime=41, glen=20.0, srfm="mol", srad=0.0, bcfl="mdh",
    ions="", energy="total", extra="", method="mg-manual", center="mol 1",
):  # fmt: skip
    """One ELEC block (mg-manual unless told)."""
    grid = (
        f"    dime {dime} {dime} {dime}\n    glen {glen} {glen} {glen}\n    gcent {center}\n"
        if method == "mg-manual"
        else f"    dime {dime} {dime} {dime}\n    cglen {2 * glen} {2 * glen} {2 * glen}\n"
        f"    fglen {glen} {glen} {glen}\n    cgcent {center}\n    fgcent {center}\n"
    )
    return (
        f"elec name {name}\n    {method}\n{grid}    mol {mol}\n    lpbe\n    bcfl {bcfl}\n"
        f"{ions}    pdie {pdie}\n    sdie {sdie}\n    chgm spl2\n    srfm {srfm}\n"
        f"    srad {srad}\n    swin 0.3\n    sdens 10.0\n    temp 298.15\n"
        f"    calcenergy {energy}\n    calcforce no\n{extra}end\n"
    )


def write_case(folder, text, pqrs):
    """An input file and its PQR files (name → list of (x, y, z, q, r))."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, atoms in pqrs.items():
        lines = [  # whitespace-separated PQR, every digit of the numbers kept
            f"ATOM {i + 1} X MOL 1 {x!r} {y!r} {z!r} {q!r} {r!r}"
            for i, (x, y, z, q, r) in enumerate(np.asarray(atoms, dtype=float).tolist())
        ]
        (folder / name).write_text("\n".join(lines) + "\n")
    path = folder / "case.in"
    path.write_text(text)
    return path


def read_section(*names):
    return "read\n" + "".join(f"    mol pqr {n}\n" for n in names) + "end\n"


def run(path, **kw):
    kw.setdefault("backend", "cpu")
    kw.setdefault("dtype", np.float64)
    return pb.apbs.run(path, **kw)


# ---------------------------------------------------------------------- tokens and grammar
def test_tokens_follow_apbs_lexical_rules():
    text = 'read # comment\n  mol pqr "my ion.pqr"; mol=pqr,b.pqr % another\nEND\n'
    toks = parser.tokenize(text)
    assert [(t.text, t.line) for t in toks] == [
        ("read", 1), ("mol", 2), ("pqr", 2), ("my ion.pqr", 2), ("mol", 2), ("pqr", 2),
        ("b.pqr", 2), ("END", 3),
    ]  # fmt: skip


def test_parses_the_apbs_examples():
    solv = parser.parse_file(DATA / "solv-mol.in")
    assert [m.path for m in solv.molecules] == ["methanol.pqr", "methoxide.pqr"]
    assert [e.name for e in solv.elecs] == [
        "methanol-solv", "methanol-ref", "methoxide-solv", "methoxide-ref",
    ]  # fmt: skip
    e = solv.elecs[2]
    assert (e.method, e.dime, e.grid, e.gcent.mol, e.mol) == ("mg-manual", (65,) * 3,
                                                               (0.25,) * 3, 2, 2)  # fmt: skip
    assert (e.equation, e.bcfl, e.pdie, e.sdie, e.srfm, e.srad, e.temp) == (
        "lpbe", "mdh", 2.0, 78.0, "mol", 0.0, 300.0,
    )  # fmt: skip
    assert [(i.charge, i.conc, i.radius) for i in e.ions] == [(1, 0, 2), (-1, 0, 2)]
    last = solv.prints[2]
    assert [(t.sign, t.calc) for t in last.terms] == [(1, 3), (-1, 4), (-1, 1), (1, 2)]
    assert solv.elecs[0].lines["sdens"] == 27  # the tab-indented line of the file
    ionize = parser.parse_file(DATA / "ionize-smol.in")
    a = ionize.elecs[0]
    assert (a.method, a.cglen, a.fglen, a.cgcent.mol, a.fgcent.mol, a.srfm) == (
        "mg-auto", (12.0,) * 3, (6.0,) * 3, 1, 1, "smol",
    )  # fmt: skip
    assert len(ionize.elecs) == 6 and len(ionize.prints) == 4
    pmf = parser.parse_file(DATA / "point-pmf.in")
    assert pmf.elecs[0].gcent.point == (0.0, 0.0, 0.0)
    assert pmf.elecs[0].calcenergy == "comps" and pmf.elecs[0].srfm == "spl2"
    born_auto = parser.parse_file(DATA / "born-mol-auto.in")
    assert [(w.kind, w.format, w.stem) for w in born_auto.elecs[0].writes] == [
        ("pot", "gz", "potential")
    ]
    for name in ("pka-lig-mol-vdw.in", "fkbp-1d7h-dmso-mol.in", "hca-bind-mol.in"):
        inp = parser.parse_file(DATA / name)
        assert inp.elecs and inp.prints
    pmf_ions = parser.parse_file(DATA / "ion-pmf.in")
    assert pmf_ions.parm.format == "flat" and len(pmf_ions.apolars) == 1
    assert [p.what for p in pmf_ions.prints] == [
        "elecEnergy", "elecForce", "apolEnergy", "apolForce",
    ]  # fmt: skip


def test_ionic_strength_and_ion_radius_of_several_species():
    inp = parser.parse_text(
        read_section("a.pqr")
        + elec("s", ions="    ion charge 2 conc 0.05 radius 1.0\n    ion -1 0.1 2.5\n")
    )
    atoms = pb.Atoms([[0.0, 0, 0]], [1.0], [2.0])
    calc = model.plan_input(inp, [atoms]).calculations[0]
    assert calc.physics.ionic_strength == pytest.approx(0.5 * (0.05 * 4 + 0.1 * 1))
    assert calc.physics.ion_radius == 2.5  # the largest, as APBS
    bad = parser.parse_text(
        read_section("a.pqr")
        + elec(
            "s", ions="    ion charge 2 conc 0.1 radius 1\n    ion charge -1 conc 0.1 radius 1\n"
        )
    )
    with pytest.raises(pb.InputError, match="electroneutral"):
        model.plan_input(bad, [atoms])


def test_grids_and_surfaces_map_as_apbs_places_them(rng):
    atoms = pb.Atoms(rng.uniform(-3, 3, (5, 3)), rng.uniform(-1, 1, 5), rng.uniform(1, 2, 5))
    center = 0.5 * np.add(*atoms.bounds(with_radii=False))
    text = read_section("a.pqr") + elec("m", dime=33, glen=24.0, srfm="smol", srad=0) + elec(
        "a", method="mg-auto", dime=33, glen=16.0, srfm="mol", srad=1.4
    ) + elec("d", dime=100, glen=24.0, srfm="spl2").replace("glen 24.0 24.0 24.0",
                                                            "grid 0.3 0.3 0.3")  # fmt: skip
    calcs = model.plan_input(parser.parse_text(text), [atoms]).calculations
    g = calcs[0].grid.grid
    assert g.shape == (33,) * 3 and g.spacing == pytest.approx((0.75,) * 3)
    assert np.allclose(g.center, center)
    # smol with srad 0: the smoothed vdW surface, as PhysicsOptions spells it
    assert (calcs[0].physics.surface, calcs[0].physics.probe_radius) == ("smol", 0.0)
    # mg-auto: APBS' levels (cglen 32 → fglen 16: one reduction), bcfl on the coarsest only
    coarse, fine = calcs[1].grids
    assert coarse.grid.spacing == pytest.approx((1.0,) * 3) and coarse.boundary == "mdh"
    assert fine.grid.spacing == pytest.approx((0.5,) * 3) and fine.boundary == "focus"
    assert calcs[1].physics.surface == "mol" and calcs[1].physics.probe_radius == 1.4
    assert calcs[2].grid.grid.shape == (97,) * 3  # APBS resets dime 100 to 97
    assert calcs[2].grid.grid.spacing == pytest.approx((0.3,) * 3)
    assert calcs[2].physics.surface == "vdw" and any("spl2" in n for n in calcs[2].notes)
    # APBS' born example: 50 → 24.5 → 12 Å, three solves
    born_auto = parser.parse_file(DATA / "born-mol-auto.in")
    ion = pb.Atoms([[0.0, 0, 0]], [1.0], [2.0])
    plan = model.plan_input(born_auto, [ion], skip_unsupported=True)
    assert [p.grid.lengths[0] for p in plan.calculations[0].grids] == pytest.approx(
        [50.0, np.sqrt(50.0 * 12.0), 12.0]
    )
    assert plan.solves == 6


# ---------------------------------------------------------------------- bad files
@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ("read\n mol pqr a.pqr\nend\nelec\n mg-manual\n dime 33 33 33\n frobnicate 3\nend\n", 7,
         "unknown ELEC keyword 'frobnicate'"),
        ("read\n mol pqr a.pqr\nend\nelec name x\n mg-manual\n dime 33 33 33\n", 4,
         "END of the ELEC section opened on line 4"),
        ("read\n mol pqr a.pqr\n", 1, "END of the READ section"),
        ("read\n mol pqr a.pqr\nend\nelec\n mg-manual\n pdie two\nend\n", 6,
         "pdie needs a number, got 'two'"),
        ("read\n mol pqr a.pqr\nend\nelec\n mg-manual\n dime 33 33.5 33\nend\n", 6,
         "dime needs 3 integers"),
        ("read\nend\nprint elecEnergy solv - ref end\n", 3, "named 'solv'"),
        ("hello\n", 1, "unknown keyword 'hello'"),
        ("read\nend\nelec\n fe-manual\nend\n", 4, "'fe-manual' is not supported"),
    ],
)  # fmt: skip
def test_bad_files_give_line_numbered_errors(tmp_path, text, line, words):
    path = tmp_path / "bad.in"
    path.write_text(text)
    with pytest.raises(pb.InputError) as err:
        pb.apbs.run(path)
    assert f"{path}:{line}:" in str(err.value)
    assert words in str(err.value)


def test_missing_and_escaping_files_are_refused(tmp_path):
    body = elec("s", dime=9, glen=12.0)
    case = tmp_path / "case"
    path = write_case(case, read_section("nothere.pqr") + body, {})
    with pytest.raises(pb.InputError, match=r"case\.in:2: molecule file 'nothere\.pqr' does not"):
        pb.apbs.run(path)
    outside = tmp_path / "secret.pqr"
    outside.write_text("ATOM      1  X   MOL     1       0.000   0.000   0.000  1.0000 2.0000\n")
    for name in ("../secret.pqr", str(outside)):
        path.write_text(read_section(name) + body)
        with pytest.raises(pb.InputError, match=r"case\.in:2: .*--allow-outside"):
            pb.apbs.run(path)
    (case / "link.pqr").symlink_to(outside)
    path.write_text(read_section("link.pqr") + body)
    with pytest.raises(pb.InputError, match="leads outside"):
        pb.apbs.run(path)
    # the user's permission: the same files are read
    res = run(path, allow_outside=True)
    assert res.calculations[0].energy < 0
    # writes are held to the output folder the same way
    (case / "ion.pqr").write_text(outside.read_text())
    evil = elec("s", dime=9, glen=12.0, extra="    write pot dx ../../evil\n")
    path.write_text(read_section("ion.pqr") + evil)
    with pytest.raises(pb.InputError, match="output file '../../evil.dx' leads outside"):
        pb.apbs.run(path, output_dir=tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_unsupported_statements_name_their_line(tmp_path):
    atoms = {"a.pqr": [(0, 0, 0, 1.0, 2.0), (0, 0, 4, -1.0, 2.0)]}
    cases = [
        (elec("s").replace("lpbe", "nrpbe"), 10, "nrpbe (the regularised nonlinear"),
        (elec("s").replace("mg-manual", "mg-para"), 5, "mg-para"),
        (elec("s", extra="    usemap diel 1\n"), 22, "usemap diel"),
        (elec("s", ions="    ion charge 1 conc 0.1 radius 2.0\n    ion charge -1 conc 0.1 "
              "radius 2.0\n").replace("lpbe", "npbe").replace("calcforce no", "calcforce comps"),
         23, "npbe with salt has none"),
        (elec("s", extra="    write charge dx q\n"), 22, "write charge dx"),
        (elec("s").replace("calcenergy total", "calcenergy no")
         + "print elecEnergy s end\n", 23, "calcenergy no"),
        (elec("s") + "print elecForce s end\n", 23, "calcforce no"),
        (elec("s").replace("    lpbe\n", ""), 4, "missing lpbe"),
        (elec("s", glen=3.0, center="0 0 0"), 9,
         "1 of the 2 atoms of molecule 1 lie on or outside"),
    ]  # fmt: skip
    for body, line, words in cases:
        path = write_case(tmp_path, read_section("a.pqr") + body, atoms)
        with pytest.raises(pb.InputError) as err:
            pb.apbs.run(path)
        assert f"case.in:{line}:" in str(err.value), (words, str(err.value))
        assert words in str(err.value)
    # skip_unsupported runs what can be run and says what it skipped
    body = elec("s", dime=21, glen=14.0, extra="    write charge dx q\n    writemat poisson m\n")
    path = write_case(tmp_path, read_section("a.pqr") + body, atoms)
    res = run(path, skip_unsupported=True)
    assert len(res.skipped) == 2 and "writemat" in res.skipped[0]
    assert "warning: skipped" in res.text and res.calculations[0].energy < 0


# ---------------------------------------------------------------------- energies
def test_born_ion_matches_the_analytic_energy_in_apbs_format(tmp_path):
    text = (
        read_section("ion.pqr") + elec("solvated") + elec("reference", sdie=1.0)
        + "print elecEnergy solvated - reference end\nquit\n"
    )  # fmt: skip
    path = write_case(tmp_path, text, {"ion.pqr": [(0.3, -0.2, 0.1, 1.0, 3.0)]})
    res = run(path)
    exact = born(1.0, 3.0, 1.0, 78.54)
    assert res.prints[0].value == pytest.approx(exact, rel=0.005)
    assert res.energy("reference") == 0.0  # one ion: no pairs, no reaction field
    assert res.calculations[0].solve.converged and res.calculations[1].solve is None
    printed = GLOBAL.findall(res.text)
    assert printed == [f"{res.prints[0].value:1.12E}"]
    assert "\nprint energy 1 (solvated) - 2 (reference) end\n" in res.text
    assert f"  Local net energy (PE 0) = {printed[0]} kJ/mol" in res.text
    assert TOTAL.findall(res.text) == [f"{c.energy:1.12E}" for c in res.calculations]
    assert res.text.count("exclude self energies") == 1


def test_salt_of_two_species_matches_born_in_salt(tmp_path):
    # a 2:1 and a 1:1 species: ionic strength ½ Σ c z² = 0.15 M, exclusion by the larger radius
    ions = "    ion charge 2 conc 0.05 radius 1.0\n    ion charge -1 conc 0.1 radius 2.0\n"
    text = read_section("ion.pqr") + elec("salty", ions=ions, glen=24.0, dime=49) + elec(
        "plain", glen=24.0, dime=49) + elec("ref", sdie=1.0, glen=24.0, dime=49) + (
        "print elecEnergy salty - ref end\nprint elecEnergy salty - plain end\n")  # fmt: skip
    path = write_case(tmp_path, text, {"ion.pqr": [(0.0, 0.0, 0.0, 1.0, 3.0)]})
    res = run(path)
    kappa = pb.PhysicsOptions(eps_out=78.54, ionic_strength=0.15).kappa
    exact = born_salt(1.0, 3.0, 1.0, 78.54, kappa, 3.0 + 2.0)
    assert res.prints[0].value == pytest.approx(exact, rel=0.005)
    # the salt's own part, where the two solves' discretisation errors cancel: 8 % apart for
    # the smaller ion radius (1 Å), so this tells which radius excludes the ions
    salt = exact - born(1.0, 3.0, 1.0, 78.54)
    assert res.prints[1].value == pytest.approx(salt, rel=0.03)
    smaller = born_salt(1.0, 3.0, 1.0, 78.54, kappa, 3.0 + 1.0) - born(1.0, 3.0, 1.0, 78.54)
    assert abs(smaller / salt - 1) > 0.07


def test_kirkwood_sphere_solvation_and_coulomb_comps(tmp_path, rng):
    pos = rng.uniform(-1.5, 1.5, (2, 3))
    q = np.array([0.7, -0.4])
    atoms = [(0.0, 0.0, 0.0, 0.0, 4.0)] + [(*p, c, 0.0) for p, c in zip(pos, q, strict=True)]
    text = read_section("k.pqr") + elec("solv", pdie=2.0, glen=16.0, energy="comps") + elec(
        "ref", pdie=2.0, sdie=2.0, glen=16.0) + "print elecEnergy solv - ref end\n"  # fmt: skip
    path = write_case(tmp_path, text, {"k.pqr": atoms})
    res = run(path)
    exact = kirkwood(pos, q, 4.0, 2.0, 78.54)
    assert res.prints[0].value == pytest.approx(exact, rel=0.01)
    r12 = np.linalg.norm(pos[0] - pos[1])
    coulomb = K * q[0] * q[1] / (2.0 * r12)
    assert res.energy("ref") == pytest.approx(coulomb, rel=1e-12)  # no self energy, no solve
    solv = res.calculations[0]
    assert solv.coulomb == pytest.approx(coulomb, rel=1e-12)
    assert solv.atom_energies.sum() == pytest.approx(solv.energy, rel=1e-12)
    lines = re.findall(r"^      Atom (\d+):  (\S+) kJ/mol$", res.text, re.M)
    assert [int(i) for i, _ in lines] == [0, 1, 2]
    assert [float(v) for _, v in lines] == pytest.approx(solv.atom_energies, rel=1e-11)


def test_point_charges_in_a_homogeneous_medium_give_coulomb_exactly(tmp_path, rng):
    # APBS' point-pmf: complex - point1 - point2 is the interaction k q1 q2 / (ε r)
    p1, p2 = rng.uniform(-2, 2, (2, 3))
    q1, q2 = rng.uniform(0.5, 1.5, 2) * np.array([1, -1])
    pqrs = {"a.pqr": [(*p1, q1, 0.0)], "b.pqr": [(*p2, q2, 0.0)],
            "ab.pqr": [(*p1, q1, 0.0), (*p2, q2, 0.0)]}  # fmt: skip
    text = read_section("a.pqr", "b.pqr", "ab.pqr") + "".join(
        elec(n, mol=m, pdie=78.54, sdie=78.54, srfm="spl2", center="0 0 0", glen=12.0,
             dime=25, energy="comps")
        for n, m in (("point1", 1), ("point2", 2), ("complex", 3))
    ) + "print elecEnergy complex - point1 - point2 end\n"  # fmt: skip
    res = run(write_case(tmp_path, text, pqrs))
    exact = K * q1 * q2 / (78.54 * np.linalg.norm(p1 - p2))
    assert res.prints[0].value == pytest.approx(exact, rel=1e-12)
    assert all(c.solve is None for c in res.calculations)


def test_charged_twins_are_refused_naming_the_calculation(tmp_path):
    text = read_section("t.pqr") + elec("twins", pdie=2.0, sdie=2.0, glen=12.0, dime=9)
    path = write_case(tmp_path, text, {"t.pqr": [(0, 0, 0.1, 1.0, 1.0), (0, 0, 0.1, 1.0, 1.0)]})
    with pytest.raises(pb.InputError, match=r"case\.in:4: ELEC #1 \(twins\): .*same position"):
        run(path)


def test_bcfl_zero_is_a_zero_total_potential(tmp_path):
    text = read_section("ion.pqr") + elec("z", sdie=1.0, bcfl="zero", glen=12.0, dime=25)
    path = write_case(tmp_path, text, {"ion.pqr": [(0.0, 0.0, 0.0, 1.0, 2.0)]})
    inp = parser.parse_file(path)
    calc = model.plan_input(inp, [pb.read_pqr(tmp_path / "ion.pqr")]).calculations[0]
    problem, maps = model.build_problem(calc)
    outer = model.outer_layer(problem.grid.shape)
    assert np.array_equal(maps.boundary_values[outer], -maps.phi_coulomb[outer])
    # grounded box: the image charges lower the energy, by less than a grounded sphere of the
    # box's inscribed radius and more than one of its circumscribed radius would
    g = run(path).calculations[0].energy
    assert -0.5 * K / 6.0 < g < -0.5 * K / (6.0 * np.sqrt(3))
    # mg-auto: APBS' bcfl applies to its coarsest grid, which is the mg-manual grid above;
    # the finer level sees the grounded box through the coarse solution
    path.write_text(text + elec("f", sdie=1.0, bcfl="zero", glen=6.0, dime=25,
                                method="mg-auto", center="0 0 0"))  # fmt: skip
    res = run(path)
    auto = res.calculations[1]
    assert auto.grids[0] == res.calculations[0].grid
    assert auto.level_energies[0] == pytest.approx(g, rel=1e-10)
    assert auto.energy == pytest.approx(g, rel=0.01)
    assert res.text.count("Zero boundary conditions") == 2


# ---------------------------------------------------------------------- focusing
def small_molecule(rng, n=12, spread=1.6):
    pos = rng.normal(0.0, spread, (n, 3))
    return [(*p, q, r) for p, q, r in zip(pos, rng.normal(0, 0.5, n), rng.uniform(1.0, 1.8, n),
                                          strict=True)]  # fmt: skip


def test_mg_auto_focusing_matches_one_fine_grid_of_the_same_spacing(tmp_path, rng):
    # APBS' mg-auto (coarse 1 Å over 28 Å, then 0.5 Å over 14 Å around the molecule, about
    # 2 Å from its spheres) against mg-manual with the fine spacing over the whole coarse box:
    # the same equations inside the fine box, whose edge values carry the coarse solve's error
    # (measured 3e-4…5e-4 relative on 6 random molecules; 0.1 % bounds it)
    salt = "    ion charge 1 conc 0.1 radius 2.0\n    ion charge -1 conc 0.1 radius 2.0\n"
    kw = {"pdie": 2.0, "srad": 1.4, "ions": salt}
    text = read_section("m.pqr") + elec("focused", method="mg-auto", dime=29, glen=14.0, **kw)
    text += elec("single", dime=57, glen=28.0, **kw) + "print elecEnergy focused - single end\n"
    res = run(write_case(tmp_path, text, {"m.pqr": small_molecule(rng, spread=1.2)}))
    focused, single = res.calculations
    assert [g.spacing[0] for g in focused.grids] == pytest.approx([1.0, 0.5])
    assert focused.grid.spacing == single.grid.spacing
    assert all(s.converged for s in focused.solves)
    assert abs(focused.reaction_field / single.reaction_field - 1) < 1e-3
    assert focused.coulomb == single.coulomb  # the same exact pair sum
    assert res.prints[0].value == pytest.approx(focused.energy - single.energy, rel=1e-12)
    # APBS' output: every level is a calculation, with its own energy line
    heads = re.findall(r"^CALCULATION #(\d+) \((\w+)\): MULTIGRID$", res.text, re.M)
    assert heads == [("1", "focused"), ("2", "focused"), ("3", "single")]
    assert TOTAL.findall(res.text)[1:] == [f"{focused.energy:1.12E}", f"{single.energy:1.12E}"]
    assert res.text.count("Boundary conditions from focusing") == 1
    assert "Preparing to run 3 PBE calculations." in res.text


def test_manual_focusing_continues_the_calculation_before(tmp_path, rng):
    # mg-manual + bcfl focus (APBS' FKBP and pka-lig examples) is mg-auto spelled out: the same
    # grids and solves give the same energies; a fine box around one atom leaves atoms outside,
    # whose terms come from the coarse grid, as APBS' total energy takes them
    rows = small_molecule(rng)
    site = "{} {} {}".format(*rows[0][:3])
    kw = {"pdie": 2.0, "srad": 1.4, "energy": "comps", "center": site}
    text = read_section("m.pqr") + elec("coarse", dime=25, glen=24.0, **kw) + elec(
        "fine", dime=25, glen=6.0, bcfl="focus", **kw) + elec(
        "auto", method="mg-auto", dime=25, glen=6.0, **kw).replace(
        "cglen 12.0 12.0 12.0", "cglen 24 24 24")  # fmt: skip
    res = run(write_case(tmp_path, text, {"m.pqr": rows}))
    coarse, fine, auto = res.calculations
    assert auto.grids == [coarse.grid, fine.grid]
    assert auto.level_energies == pytest.approx([coarse.energy, fine.energy], rel=1e-10)
    atoms = pb.read_pqr(tmp_path / "m.pqr")
    outside = finest_level([fine.grid], atoms.positions) < 0
    assert 0 < outside.sum() < len(atoms)
    np.testing.assert_array_equal(fine.atom_energies[outside], coarse.atom_energies[outside])
    assert fine.atom_energies.sum() == pytest.approx(fine.energy, rel=1e-12)
    heads = re.findall(r"^  (Boundary conditions from focusing|Multiple Debye)", res.text, re.M)
    assert heads == ["Multiple Debye", "Boundary conditions from focusing", "Multiple Debye",
                     "Boundary conditions from focusing"]  # fmt: skip


def test_bcfl_focus_needs_a_matching_calculation_before(tmp_path):
    rows = {"a.pqr": [(0, 0, 0, 1.0, 2.0)], "b.pqr": [(0.5, 0, 0, -1.0, 2.0)]}
    coarse = elec("c", dime=9, glen=16.0)
    cases = [
        (elec("f", dime=9, glen=8.0, bcfl="focus"), "needs a calculation before"),
        (coarse + elec("f", mol=2, dime=9, glen=8.0, bcfl="focus"), "is of molecule 1"),
        (coarse + elec("f", dime=9, glen=32.0, bcfl="focus"), "not inside the grid of #1"),
        (coarse + elec("f", dime=9, glen=8.0, bcfl="focus", pdie=4.0), "other physics"),
    ]
    for body, words in cases:
        text = read_section("a.pqr", "b.pqr") + body
        path = write_case(tmp_path, text, rows)
        line = text.splitlines().index("    bcfl focus") + 1
        with pytest.raises(pb.InputError) as err:
            pb.apbs.run(path)
        assert f"case.in:{line}:" in str(err.value) and words in str(err.value), str(err.value)


def written_and_exact_potential(folder, q, eps):
    """pot.dx of ``folder``; a lone charge q's exact potential in ε (kT/e); nodes off it; grid."""
    values, grid = pb.read_dx(folder / "pot.dx", potential=False)
    x, y, z = np.meshgrid(*grid.axes(), indexing="ij")
    r = np.sqrt(x**2 + y**2 + z**2)
    with np.errstate(divide="ignore"):
        exact = K * q / (eps * r) / kT_kj_per_mol(298.15)
    return values, exact, r > 0, grid


def test_write_pot_is_the_total_potential_in_kT_per_e(tmp_path, rng):
    q = 0.8
    text = read_section("ion.pqr") + elec(
        "w", pdie=3.0, sdie=3.0, glen=8.0, dime=17, center="0 0 0",
        extra="    write pot dx pot\n    write dielx gz ex\n    write kappa dx kap\n")  # fmt: skip
    path = write_case(tmp_path, text, {"ion.pqr": [(0.0, 0.0, 0.0, q, 1.0)]})
    res = run(path, output_dir=tmp_path / "out")
    assert sorted(p.name for p in res.written) == ["ex.dx.gz", "kap.dx", "pot.dx"]
    values, exact, off, grid = written_and_exact_potential(tmp_path / "out", q, 3.0)
    assert np.allclose(values[off], exact[off], rtol=1e-9)
    centre = tuple(s // 2 for s in grid.shape)  # the charge's node: its neighbours' mean
    assert values[centre] == pytest.approx(exact[centre[0] + 1, centre[1], centre[2]])
    ex, _ = pb.read_dx(tmp_path / "out" / "ex.dx.gz", potential=False)
    assert np.all(ex == 3.0)
    assert not [p for p in (tmp_path / "out").iterdir() if p.name.startswith(".")]


def test_nothing_is_written_when_a_later_calculation_fails(tmp_path, monkeypatch):
    text = read_section("ion.pqr") + elec("a", sdie=1.0, glen=8.0, dime=9,
                                          extra="    write pot dx pot\n") + elec(
        "b", glen=8.0, dime=9)  # fmt: skip
    path = write_case(tmp_path, text, {"ion.pqr": [(0.0, 0.0, 0.0, 1.0, 2.0)]})

    def broken(calc, *a, **k):
        raise pb.ConvergenceError("no")

    monkeypatch.setattr(focusing, "solve_focused", broken)
    with pytest.raises(pb.ConvergenceError):
        run(path, output_dir=tmp_path / "out")
    assert list((tmp_path / "out").iterdir()) == []


def test_pdb_with_flat_parameters(tmp_path):
    (tmp_path / "ions.pdb").write_text(
        "ATOM      1  ION   ION     1      -3.000   0.000   0.000  1.00 2.00\n"
        "ATOM      2  ION   ION     1       1.000   0.000   0.000  1.00 2.00\n"
    )
    (tmp_path / "parm.dat").write_text("# RES ATOM Q R EPS\nION\tION\t1.00\t2.00\t0.500\n")
    text = ("read\n mol pdb ions.pdb\n parm flat parm.dat\nend\n"
            + elec("c", pdie=2.0, sdie=2.0, glen=14.0, dime=15, center="0 0 0"))  # fmt: skip
    path = tmp_path / "case.in"
    path.write_text(text)
    res = run(path)
    assert res.calculations[0].energy == pytest.approx(K / (2.0 * 4.0), rel=1e-12)
    path.write_text(text.replace(" parm flat parm.dat\n", ""))
    with pytest.raises(pb.InputError, match="case.in:2: mol pdb needs charges and radii"):
        pb.apbs.run(path)


def test_command_line(tmp_path):
    from pbsolver.cli import main

    text = read_section("ion.pqr") + elec("solv", glen=12.0, dime=25) + elec(
        "ref", sdie=1.0, glen=12.0, dime=25) + "print elecEnergy solv - ref end\n"  # fmt: skip
    path = write_case(tmp_path, text, {"ion.pqr": [(0.0, 0.0, 0.0, -1.0, 2.5)]})
    res = CliRunner().invoke(main, ["apbs", str(path), "--backend", "cpu"])
    assert res.exit_code == 0, res.output
    (value,) = GLOBAL.findall(res.stdout)
    assert float(value) == pytest.approx(born(-1.0, 2.5, 1.0, 78.54), rel=0.01)
    path.write_text(text.replace("pdie 1.0", "pdie one", 1))
    res = CliRunner().invoke(main, ["apbs", str(path)])
    assert res.exit_code == 1 and f"{path}:12: pdie needs a number" in res.stderr


# ---------------------------------------------------------------------- APBS side by side
@needs_apbs
def test_side_by_side_with_apbs_on_a_born_ion(tmp_path):
    text = read_section("ion.pqr") + elec("solvated", srad=1.4, dime=49, glen=12.0) + elec(
        "reference", sdie=1.0, srad=1.4, dime=49, glen=12.0
    ) + "print elecEnergy solvated - reference end\nquit\n"  # fmt: skip
    path = write_case(tmp_path, text, {"ion.pqr": [(0.0, 0.0, 0.0, 1.0, 3.0)]})
    proc = subprocess.run([apbs_executable(), path.name], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:]
    (apbs_value,) = GLOBAL.findall(proc.stdout)
    ours = run(path)
    (our_value,) = GLOBAL.findall(ours.text)
    exact = born(1.0, 3.0, 1.0, 78.54)
    # APBS 3.4.1 at h = 0.25 Å: about +0.5 % (spread charge); pbsolver's exact faces: < 0.1 %
    assert float(apbs_value) == pytest.approx(exact, rel=0.01)
    assert float(our_value) == pytest.approx(float(apbs_value), rel=0.01)
    assert abs(float(our_value) / exact - 1) < abs(float(apbs_value) / exact - 1)
    # the lines a script parses have the same shape in both outputs
    for pattern in (r"^print energy 1 \(solvated\) - 2 \(reference\) end$",
                    r"^  Local net energy \(PE 0\) = \S+ kJ/mol$", GLOBAL.pattern):  # fmt: skip
        assert re.search(pattern, proc.stdout, re.M) and re.search(pattern, ours.text, re.M)


def _peptide_input(tmp_path, dime=33):
    """The peptide (SES, 0.15 M, mdh) solvated and reference, and its PRINT difference."""
    salt = "".join(f"    ion charge {z} conc 0.15 radius 2.0\n" for z in (1, -1))
    kw = {"pdie": 2.0, "dime": dime, "glen": 30.0, "srad": 1.4}
    text = (read_section("peptide.pqr") + elec("solv", ions=salt, **kw)
            + elec("ref", sdie=2.0, **kw) + "print elecEnergy solv - ref end\nquit\n")  # fmt: skip
    path = tmp_path / "pep.in"
    path.write_text(text)
    shutil.copy(ROOT / "data" / "peptide.pqr", tmp_path / "peptide.pqr")
    return path


@needs_apbs
def test_apbs_surfaces_give_apbs_numbers_on_a_peptide(tmp_path):
    """surfaces="apbs": APBS's own ε maps; only the charge discretisations then differ.

    The peptide (149 atoms, SES, 0.15 M) at h = 0.47 Å: pbsolver's exact surface is about 2 %
    from APBS (APBS's first-order error at this spacing), APBS's maps about 0.2 %.
    """
    path = _peptide_input(tmp_path, dime=65)
    text = path.read_text()
    proc = subprocess.run([apbs_executable(), path.name], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:]
    (apbs_value,) = map(float, GLOBAL.findall(proc.stdout))
    exact = run(path).prints[0].value
    same_maps = run(path, surfaces="apbs")
    assert "APBS's own point-switched" in same_maps.text
    gap_exact = abs(exact / apbs_value - 1)
    gap_maps = abs(same_maps.prints[0].value / apbs_value - 1)
    assert gap_maps < 0.005 and gap_maps < gap_exact / 5, (gap_maps, gap_exact)
    path.write_text(text.replace("sdens 10.0", "sdens 5.0", 1))
    with pytest.raises(pb.InputError, match=r"pep.in:\d+: .*sdens 5"):
        run(path, surfaces="apbs")


@needs_apbs
def test_apbs_differences_are_coulomb_pairs_in_a_homogeneous_medium(tmp_path, rng):
    # APBS' totals hold grid self energies; on one grid they cancel in complex - a - b, which
    # is then the Coulomb interaction pbsolver computes exactly (without self energies)
    n = 12
    pos = rng.uniform(-4, 4, (n, 3))
    pos[n // 2 :, 0] += 9.0  # two groups, apart
    q = rng.uniform(-1, 1, n)
    rows = [(*p, c, 1.5) for p, c in zip(pos, q, strict=True)]
    pqrs = {"a.pqr": rows[: n // 2], "b.pqr": rows[n // 2 :], "ab.pqr": rows}
    text = read_section("a.pqr", "b.pqr", "ab.pqr") + "".join(
        elec(name, mol=m, pdie=2.0, sdie=2.0, center="mol 3", glen=28.0, dime=97)
        for name, m in (("a", 1), ("b", 2), ("ab", 3))
    ) + "print elecEnergy ab - a - b end\n"  # fmt: skip
    path = write_case(tmp_path, text, pqrs)
    proc = subprocess.run([apbs_executable(), path.name], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:]
    (apbs_value,) = GLOBAL.findall(proc.stdout)
    ours = run(path)
    d = np.linalg.norm(pos[: n // 2, None] - pos[None, n // 2 :], axis=2)
    exact = K / 2.0 * np.sum(q[: n // 2, None] * q[None, n // 2 :] / d)
    assert ours.prints[0].value == pytest.approx(exact, rel=1e-10)
    assert float(apbs_value) == pytest.approx(exact, rel=1e-3)  # APBS: ~3e-5 here
    apbs_totals = [float(v) for v in TOTAL.findall(proc.stdout)]
    assert min(apbs_totals) > 10 * abs(exact)  # APBS' totals are mostly self energy


# ---------------------------------------------------------------------- npbe
SALT = "    ion charge {z} conc {c} radius 2.0\n    ion charge -{z} conc {c} radius 2.0\n"


def charged_molecule(rng, n=10, spread=1.3):
    """A compact molecule with a large net charge: |φ| of several kT in the salt."""
    pos = rng.normal(0.0, spread, (n, 3))
    q = rng.uniform(0.6, 1.0, n)
    return [(*p, c, r) for p, c, r in zip(pos, q, rng.uniform(1.2, 1.8, n), strict=True)]


def test_npbe_matches_solvate_nonlinear_on_the_same_grid(tmp_path, rng):
    rows = charged_molecule(rng)
    salt = SALT.format(z=1, c=0.15)
    kw = {"pdie": 2.0, "srad": 1.4, "dime": 33, "glen": 19.2}
    text = read_section("m.pqr") + elec("npbe", ions=salt, **kw).replace("lpbe", "npbe")
    text += elec("lpbe", ions=salt, **kw) + elec("ref", **{**kw, "sdie": 2.0}) + elec("plain", **kw)
    text += "print elecEnergy npbe - ref end\nprint elecEnergy lpbe - ref end\n"
    text += "print elecEnergy npbe - lpbe end\nprint elecEnergy lpbe - plain end\n"
    res = run(write_case(tmp_path, text, {"m.pqr": rows}))
    nl = res.calculations[0]
    assert "Nonlinear traditional PBE" in res.text and nl.solve.newton_steps >= 2
    # the same grid and physics through the Python API
    atoms = pb.read_pqr(tmp_path / "m.pqr")
    sol = pb.solvate(
        atoms, eps_in=2.0, eps_out=78.54, surface="mol", probe_radius=1.4, nonlinear=True,
        ions=[(1, 0.15, 2.0), (-1, 0.15, 2.0)], backend="cpu", dtype=np.float64,
        problem_options={"grid": nl.grid},
    )  # fmt: skip
    assert sol.terms is not None and sol.problem.grid == nl.grid
    assert res.prints[0].value == pytest.approx(sol.energy, rel=1e-5)
    assert nl.reaction_field == pytest.approx(sol.terms.fixed, rel=1e-5)
    assert nl.mobile == pytest.approx(sol.terms.mobile, rel=1e-4)
    assert nl.osmotic == pytest.approx(sol.terms.osmotic, rel=1e-4)
    assert nl.energy == pytest.approx(nl.coulomb + sol.energy, rel=1e-5)
    # the ion terms are reported, and the molecule is charged enough that the nonlinear
    # equation changes the salt's part of the energy by more than 10 %
    assert f"mobile ions {nl.mobile:1.12E} kJ/mol" in res.text
    assert abs(res.prints[2].value) > 0.1 * abs(res.prints[3].value)


def test_npbe_focusing_matches_one_fine_grid(tmp_path, rng):
    # mg-auto npbe (1 Å over 24 Å, then 0.5 Å over 12 Å) against mg-manual npbe at the fine
    # spacing over the coarse box. The ion terms add the coarse level outside the fine box, as
    # APBS composes them (17 % and 21 % of mobile and osmotic here); the fine box's salt
    # boundary comes from the coarse total potential (interpolating φ_rf ≈ −φ_c put it a kT
    # off and the ion terms 20 % off). Measured on 4 molecules: ion terms 0.8–1.6 % apart (the
    # coarse level's 1 Å discretisation), reaction field 2e-5, total 2e-4.
    kw = {"pdie": 2.0, "srad": 1.4, "ions": SALT.format(z=1, c=0.5)}
    text = read_section("m.pqr")
    text += elec("focused", method="mg-auto", dime=25, glen=12.0, **kw).replace("lpbe", "npbe")
    text += elec("single", dime=49, glen=24.0, **kw).replace("lpbe", "npbe")
    res = run(write_case(tmp_path, text, {"m.pqr": charged_molecule(rng, n=6, spread=0.8)}))
    focused, single = res.calculations
    assert [g.spacing[0] for g in focused.grids] == pytest.approx([1.0, 0.5])
    assert all(s.converged and s.newton_steps for s in focused.solves)
    assert focused.reaction_field == pytest.approx(single.reaction_field, rel=1e-3)
    for attr in ("mobile", "osmotic"):
        assert getattr(focused, attr) == pytest.approx(getattr(single, attr), rel=0.025), attr
    assert focused.energy == pytest.approx(single.energy, rel=1e-3)


def test_outside_volumes_complete_the_finer_box(rng):
    from pbsolver.apbs.energy import outside_volumes
    from pbsolver.nonlinear.energy import node_volumes

    coarse = pb.Grid((17, 13, 15), spacing=(1.0, 1.3, 0.9), origin=(-8.0, -7.0, -6.0))
    fine = pb.Grid((11, 9, 12), spacing=(0.7, 0.6, 0.45), origin=tuple(rng.uniform(-4, -2, 3)))
    out = outside_volumes(coarse, fine)
    assert out.min() >= -1e-12
    total = out.sum() + node_volumes(fine, False).sum()
    assert total == pytest.approx(np.prod(coarse.lengths), rel=1e-12)


def test_npbe_refuses_mixed_salts_and_comps_with_their_lines(tmp_path):
    atoms = {"a.pqr": [(0, 0, 0, 1.0, 2.0), (0, 0, 4, -1.0, 2.0)]}
    mixed = "    ion charge 2 conc 0.05 radius 2.0\n    ion charge -1 conc 0.1 radius 2.0\n"
    cases = [
        (elec("s", ions=mixed).replace("lpbe", "npbe"), 13, "mix valences 2 and 1"),
        (elec("s", ions=SALT.format(z=1, c=0.1), energy="comps").replace("lpbe", "npbe"), 22,
         "calcenergy comps with npbe"),
    ]  # fmt: skip
    for body, line, words in cases:
        path = write_case(tmp_path, read_section("a.pqr") + body, atoms)
        with pytest.raises(pb.InputError) as err:
            pb.apbs.run(path)
        assert f"case.in:{line}:" in str(err.value), (words, str(err.value))
        assert words in str(err.value) and "npbe" in str(err.value)
    # the same mixed salt runs with lpbe, and comps runs with npbe without salt
    run(write_case(tmp_path, read_section("a.pqr") + elec("s", ions=mixed, dime=21), atoms))
    body = elec("s", energy="comps", dime=21).replace("lpbe", "npbe")
    res = run(write_case(tmp_path, read_section("a.pqr") + body, atoms))
    assert res.calculations[0].atom_energies.sum() == pytest.approx(res.calculations[0].energy)


def test_a_dime_apbs_lowers_is_lowered_with_a_warning_naming_the_line():
    # APBS lowers 113 to 97 without a word and keeps glen: the y spacing grows 0.5 → 0.583 Å
    ion = pb.Atoms([[0.0, 0.0, 0.0]], [1.0], [2.0])
    body = elec("s", dime=129, glen=64.0).replace("dime 129 129 129", "dime 129 113 129")
    body = body.replace("glen 64.0 64.0 64.0", "glen 64.0 56.0 64.0")
    inp = parser.parse_text(read_section("ion.pqr") + body, source="case.in")
    plan = model.plan_input(inp, [ion])
    grid = plan.calculations[0].grid.grid
    assert grid.shape == (129, 97, 129)
    assert grid.spacing == pytest.approx((0.5, 56.0 / 96, 0.5))
    (warning,) = plan.warnings
    assert warning.line == 6  # the dime line
    assert "dime 129 113 129 is not an APBS multigrid size" in warning.message
    assert "y spacing 0.500 → 0.583 Å" in warning.message
    assert "dime 129 129 129 keeps the spacing" in warning.message
    # valid sizes give no warning; model.valid_dime is the smallest size APBS keeps
    good = parser.parse_text(read_section("ion.pqr") + elec("s", dime=97), source="case.in")
    assert model.plan_input(good, [ion]).warnings == []
    sizes = [n for n in range(3, 300) if model.apbs_dime(n) == n]
    assert all(model.valid_dime(n) == min(m for m in sizes if m >= n) for n in range(3, 290))
    assert [n for n in sizes if n > 65] == list(range(97, 300, 32))


def test_an_error_while_running_names_the_calculation(tmp_path):
    # a bare charge exactly on a node, in the solvent: its Coulomb potential is infinite there
    text = read_section("ion.pqr") + elec("bare", glen=8.0, dime=9, center="0 0 0")
    path = write_case(tmp_path, text, {"ion.pqr": [(0.0, 0.0, 0.0, 1.0, 0.0)]})
    with pytest.raises(pb.InputError, match=r"case\.in:4: ELEC #1 \(bare\): atom 0 .* sits"):
        run(path)


def test_maps_backend_defaults_to_the_solves_backend(tmp_path):
    path = _peptide_input(tmp_path)
    default = run(path)
    for where in ("cpu", "auto"):  # on a CPU-only machine both are where the solves run
        assert run(path, maps_backend=where).prints[0].value == default.prints[0].value
    with pytest.raises(pb.InputError, match="backend"):
        run(path, maps_backend="gpu")


@pytest.mark.gpu
def test_cuda_maps_and_solves_match_the_cpu(tmp_path):
    """backend="cuda" builds the maps on the GPU too: the same energies as the CPU's maps."""
    path = _peptide_input(tmp_path)
    cpu = run(path).prints[0].value
    gpu_maps = run(path, backend="cuda")
    host_maps = run(path, backend="cuda", maps_backend="cpu").prints[0].value
    assert gpu_maps.prints[0].value == pytest.approx(cpu, rel=1e-5)
    assert host_maps == pytest.approx(cpu, rel=1e-5)


def test_write_pot_of_a_solved_homogeneous_calculation_is_the_total_potential(tmp_path):
    """pdie = sdie, no salt, "sdh": solved with φ_c on the outer layer only; the written
    potential is still φ_c + φ_rf on every node (a lone charge at the centre: φ_rf = 0)."""
    q = -0.6
    text = read_section("ion.pqr") + elec(
        "w", pdie=3.0, sdie=3.0, glen=8.0, dime=17, center="0 0 0", bcfl="sdh",
        extra="    write pot dx pot\n")  # fmt: skip
    path = write_case(tmp_path, text, {"ion.pqr": [(0.0, 0.0, 0.0, q, 1.0)]})
    res = run(path, output_dir=tmp_path / "out")
    assert res.calculations[0].solves  # not the no-solve "mdh" shortcut
    values, exact, off, _ = written_and_exact_potential(tmp_path / "out", q, 3.0)
    assert np.allclose(values[off], exact[off], rtol=1e-8)
