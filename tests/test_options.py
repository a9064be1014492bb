"""PhysicsOptions and the option checkers: defaults, validation, derived quantities, threading."""

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest

import pbsolver as pb
from pbsolver import options
from pbsolver.molecule import maps


def test_defaults_are_pbsolvers():
    ph = pb.PhysicsOptions()
    assert ph.asdict() == {
        "eps_in": 2.0,
        "eps_out": 78.54,
        "ionic_strength": 0.0,
        "surface": "mol",
        "probe_radius": 1.4,
        "ion_radius": 2.0,
        "temperature": 298.15,
        "boundary_kind": "mdh",
        "ions": (),
        "ion_valence": 1,
        "nonlinear": False,
    }
    assert options.FIELDS == tuple(ph.asdict())
    assert ph.kappa == 0.0 and ph.debye_length == math.inf and not ph.has_salt


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"eps_in": 0.0}, "eps_in must be finite and > 0, got 0.0"),
        ({"eps_in": "2"}, "eps_in must be a number"),
        ({"eps_out": float("inf")}, "eps_out"),
        ({"ionic_strength": -0.1}, "ionic_strength must be >= 0 mol/L, got -0.1"),
        ({"ionic_strength": None}, "ionic_strength must be a number"),
        ({"surface": "ses"}, "surface must be one of"),
        ({"probe_radius": -1.0}, "probe_radius"),
        ({"probe_radius": -0.1, "surface": "smol"}, "probe_radius must be finite and >= 0"),
        ({"ion_radius": float("nan")}, "ion_radius"),
        ({"temperature": 0.0}, "temperature"),
        ({"boundary_kind": "focus"}, "boundary_kind must be one of"),
        ({"eps_in": True}, "eps_in must be a number"),
        ({"ion_valence": 0}, "ion_valence must be a positive integer, got 0"),
        ({"ion_valence": 1.5}, "ion_valence must be a positive integer"),
        ({"ion_valence": True}, "ion_valence must be a positive integer"),
        ({"nonlinear": "yes"}, "nonlinear must be True or False"),
        ({"nonlinear": 2}, "nonlinear must be True or False"),
    ],
)
def test_every_field_is_validated(kwargs, match):
    with pytest.raises(pb.InputError, match=match):
        pb.PhysicsOptions(**kwargs)


def test_values_are_normalised_and_frozen():
    ph = pb.PhysicsOptions(eps_in=np.float32(4), ionic_strength=1, probe_radius=0.0,
                           surface="vdw")  # fmt: skip
    assert type(ph.eps_in) is float and ph.eps_in == 4.0 and type(ph.ionic_strength) is float
    with pytest.raises(dataclasses.FrozenInstanceError):
        ph.eps_in = 3.0
    assert hash(ph) == hash(pb.PhysicsOptions(eps_in=4.0, ionic_strength=1.0, probe_radius=0.0,
                                              surface="vdw"))  # fmt: skip


def test_build_merges_keywords_over_an_object():
    base = pb.PhysicsOptions(eps_in=4.0, ionic_strength=0.1)
    assert pb.PhysicsOptions.build() == pb.PhysicsOptions()
    assert pb.PhysicsOptions.build(base) is base
    assert pb.PhysicsOptions.build(base, eps_in=None) is base
    merged = pb.PhysicsOptions.build(base, eps_out=80.0, temperature=310.0)
    assert (merged.eps_in, merged.eps_out, merged.temperature) == (4.0, 80.0, 310.0)
    assert base.replace(eps_in=1.0).eps_in == 1.0
    with pytest.raises(TypeError, match="unknown physics option"):
        pb.PhysicsOptions.build(epsilon=3.0)
    with pytest.raises(pb.InputError, match="physics must be"):
        pb.PhysicsOptions.build({"eps_in": 2.0})
    with pytest.raises(pb.InputError, match="eps_in"):
        base.replace(eps_in=-1.0)


def test_derived_quantities():
    ph = pb.PhysicsOptions(ionic_strength=0.1)
    for ionic in (0.05, 0.15, 1.0):  # κ⁻¹ ≈ 3.04/√I Å in water at 298 K
        assert pb.PhysicsOptions(ionic_strength=ionic).debye_length * math.sqrt(
            ionic
        ) == pytest.approx(3.04, abs=0.01)
    assert ph.kappa2 == pytest.approx(ph.eps_out * ph.kappa**2, rel=1e-15)
    # κ² ∝ I/(ε_out T): four times the salt in twice ε_out at twice T gives the same κ
    same = pb.PhysicsOptions(ionic_strength=0.4, eps_out=2 * 78.54, temperature=2 * 298.15)
    assert same.kappa == pytest.approx(ph.kappa, rel=1e-14)
    assert maps.kappa_from_ionic_strength(0.1) == ph.kappa
    assert maps.debye_length(0.1, 78.54, 298.15) == ph.debye_length


def test_checkers():
    assert options.positive(2, "x") == 2.0
    with pytest.raises(pb.InputError, match="spacing must be finite and > 0"):
        options.positive(0.0, "spacing")
    assert options.nonnegative(0, "margin") == 0.0
    with pytest.raises(pb.InputError, match="margin"):
        options.nonnegative(-1e-3, "margin")
    np.testing.assert_array_equal(options.check_box([10, 20, 30]), [10.0, 20.0, 30.0])
    for bad in ((1.0, 2.0), (1.0, 0.0, 1.0), "abc", None):
        with pytest.raises(pb.InputError, match="box"):
            options.check_box(bad)
    assert options.unit_factor("kcal/mol") == pytest.approx(1 / 4.184)
    with pytest.raises(pb.InputError, match="units"):
        options.unit_factor("eV")


def test_water_appears_once_in_the_package():
    root = Path(pb.__file__).parent
    # the package's code (an installed copy also holds the example data's scripts, in _data)
    code = [p for p in root.rglob("*.py") if "_data" not in p.relative_to(root).parts]
    hits = [p for p in code if "78.54" in p.read_text(encoding="utf-8")]
    assert [p.name for p in hits] == ["options.py"]
    assert (root / "options.py").read_text(encoding="utf-8").count("78.54") == 1


def test_maps_do_not_import_the_problem():
    src = (Path(maps.__file__)).read_text(encoding="utf-8")
    assert "pbsolver.problem" not in src
    operator = (Path(pb.__file__).parent / "operator.py").read_text(encoding="utf-8")
    assert "pbsolver.problem" not in operator


def test_split_takes_the_physics_out_of_keywords():
    ph = pb.PhysicsOptions(eps_in=4.0)
    physics, rest = pb.PhysicsOptions.split({"eps_in": 1.0, "surface": None, "rtol": 1e-3})
    assert physics == pb.PhysicsOptions(eps_in=1.0) and rest == {"rtol": 1e-3}
    physics, first, second = pb.PhysicsOptions.split(
        {"temperature": 310.0, "maxiter": 5},
        {"temperature": 400.0, "ion_radius": 1.0, "physics": ph, "box": None},
    )
    assert physics == ph.replace(temperature=310.0, ion_radius=1.0)
    assert first == {"maxiter": 5} and second == {"box": None}
    with pytest.raises(pb.InputError, match="eps_out"):
        pb.PhysicsOptions.split({"eps_out": -1.0})


# ---------------------------------------------------------------------- threaded everywhere
def _ion():
    return pb.Atoms([[0.1, -0.2, 0.05]], [1.0], [2.0])


def test_problem_from_atoms_takes_the_object_or_the_keywords():
    ph = pb.PhysicsOptions(eps_in=4.0, ionic_strength=0.1, surface="vdw", temperature=310.0,
                           ion_radius=1.0)  # fmt: skip
    a = pb.Problem.from_atoms(_ion(), spacing=0.7, margin=2.0, physics=ph)
    b = pb.Problem.from_atoms(_ion(), spacing=0.7, margin=2.0, eps_in=4.0, ionic_strength=0.1,
                              surface="vdw", temperature=310.0, ion_radius=1.0)  # fmt: skip
    c = pb.Problem.from_atoms(_ion(), 0.7, 2.0, 4.0, 78.54, 0.1, "vdw", physics=ph)
    with pytest.raises(TypeError, match="multiple values"):
        pb.Problem.from_atoms(_ion(), 0.7, 2.0, 4.0, eps_in=4.0)
    with pytest.raises(TypeError, match="positional"):
        pb.Problem.from_atoms(_ion(), 0.7, 2.0, 4.0, 78.54, 0.1, "vdw", 1.4, "dirichlet", 0)
    for p in (b, c):
        for x, y in zip(a.epsilon_faces, p.epsilon_faces, strict=True):
            np.testing.assert_array_equal(x, y)
        np.testing.assert_array_equal(a.kappa2, p.kappa2)
        np.testing.assert_array_equal(a.boundary_values, p.boundary_values)
    assert a.eps_cavity == 4.0 and a.kappa2.max() == pytest.approx(ph.kappa2)
    with pytest.raises(pb.InputError, match="temperature"):
        pb.Problem.from_atoms(_ion(), spacing=0.7, margin=2.0, temperature=-1.0)


def test_build_maps_returns_the_arrays_of_the_problem():
    from pbsolver.molecule.build import build_problem

    m = maps.build_maps(_ion(), spacing=0.7, margin=2.0, surface="vdw", ionic_strength=0.1)
    p = build_problem(_ion(), spacing=0.7, margin=2.0, surface="vdw", ionic_strength=0.1)
    assert m.grid == p.grid and m.eps_cavity == p.eps_cavity and m.boundary == p.boundary
    np.testing.assert_array_equal(m.phi_coulomb, p.phi_coulomb)
    np.testing.assert_array_equal(m.kappa2, p.kappa2)


def test_solvation_energy_accepts_every_physics_option():
    """temperature= and ion_radius= are physics options (they once reached the solver)."""
    common = {"spacing": 0.7, "margin": 2.0, "surface": "vdw", "method": "sor",
              "backend": "cpu", "rtol": 1e-5, "ionic_strength": 0.15}  # fmt: skip
    hot = pb.solvation_energy(_ion(), temperature=400.0, ion_radius=1.0, **common)
    same = pb.solvation_energy(
        _ion(), physics=pb.PhysicsOptions(temperature=400.0, ion_radius=1.0), **common
    )
    old = pb.solvation_energy(_ion(), problem_options={"temperature": 400.0, "ion_radius": 1.0},
                              **common)  # fmt: skip
    assert hot == same == old
    assert hot != pb.solvation_energy(_ion(), **common)


def test_calculator_and_engine_hold_one_object():
    from pbsolver.md.engine import StackedFrames

    ph = pb.PhysicsOptions(eps_in=1.0, surface="vdw", ionic_strength=0.1, boundary_kind="zero")
    calc = pb.ReactionFieldCalculator(_ion(), physics=ph, backend="cpu", margin=2.0, skin=0.5)
    assert calc.physics == ph and calc.eps_in == 1.0 and calc.surface == "vdw"
    kw = pb.ReactionFieldCalculator(
        _ion(), eps_in=1.0, surface="vdw", ionic_strength=0.1,
        map_options={"boundary_kind": "zero"}, backend="cpu",
    )  # fmt: skip
    assert kw.physics == ph
    eng = StackedFrames([1.0], [2.0], (9, 9, 9), 0.5, pb.Solver(backend="cpu"), physics=ph)
    assert eng.kappa == ph.kappa and eng.boundary_kind == "zero" and eng.eps_in == 1.0
    assert StackedFrames([1.0], [2.0], (9, 9, 9), 0.5, pb.Solver(backend="cpu"),
                         kappa=0.3).kappa == 0.3  # fmt: skip
    with pytest.raises(pb.InputError, match="ion_radius"):
        pb.ReactionFieldCalculator(_ion(), ion_radius=-1.0, backend="cpu")


def test_molecule_options_keep_their_resume_key_fields():
    from pbsolver.jobs.batch import MoleculeOptions

    old = {"spacing": 0.5, "margin": 8.0, "eps_in": 2.0, "eps_out": 78.54,
           "ionic_strength": 0.0, "surface": "mol", "probe_radius": 1.4}  # fmt: skip
    mol = MoleculeOptions()
    assert json.dumps(mol.key_fields(), sort_keys=True) == json.dumps(old, sort_keys=True)
    # the later fields enter the key only when set, so linear runs keep their keys
    assert MoleculeOptions(nonlinear=True).key_fields() == {**old, "nonlinear": True}
    assert MoleculeOptions(nonlinear=True).physics.nonlinear
    assert mol.physics == pb.PhysicsOptions()
    with pytest.raises(pb.InputError, match="eps_out"):
        MoleculeOptions(eps_out=-1.0)
    with pytest.raises(pb.InputError, match="spacing"):
        MoleculeOptions(spacing=0.0)


def test_cli_refuses_bad_physics_before_solving(tmp_path):
    from click.testing import CliRunner

    from pbsolver import cli

    pqr = tmp_path / "ion.pqr"
    pqr.write_text("ATOM      1  NA  ION     1       0.000   0.000   0.000  1.0000 2.0000\nEND\n")
    out = CliRunner().invoke(
        cli.main, ["solve", str(pqr), "-o", str(tmp_path / "o.h5"), "--eps-out", "inf"]
    )
    assert out.exit_code == 2 and "eps_out" in out.output
    assert not (tmp_path / "o.h5").exists()
