"""Several ion species: PhysicsOptions(ions=[(charge, conc, radius), ...]).

The linearised equation sees an electrolyte through I = ½ Σ cᵢ zᵢ² and one exclusion radius,
the largest of the species' (APBS' ``Vpbe_getMaxIonRadius``); APBS refuses species that are not
electroneutral. The references are those formulas written out here, and the maps of the
equivalent 1:1 options.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import pbsolver as pb
from pbsolver import options
from pbsolver.molecule import maps


def random_electrolyte(rng):
    """Random species with Σ cz = 0: cations and anions of valence 1–3, one neutral species."""
    cations = [(float(z), rng.uniform(0.01, 0.2), rng.uniform(0.5, 3.0)) for z in (1, 2)]
    anion_z = -float(rng.integers(1, 4))
    plus = sum(c * z for z, c, _ in cations)
    anions = [(anion_z, plus / -anion_z, rng.uniform(0.5, 3.0))]
    return [*cations, *anions, (0.0, rng.uniform(0.0, 0.1), rng.uniform(0.5, 3.0))]


def test_ions_give_the_ionic_strength_and_the_largest_radius(rng):
    for _ in range(5):
        ions = random_electrolyte(rng)
        ph = pb.PhysicsOptions(ions=ions)
        strength = 0.5 * sum(c * z * z for z, c, _ in ions)
        assert ph.ionic_strength == pytest.approx(strength, rel=1e-15)
        assert ph.ion_radius == max(r for _, _, r in ions)
        assert ph.ions == tuple(tuple(float(v) for v in s) for s in ions)
        same = pb.PhysicsOptions(ionic_strength=strength, ion_radius=ph.ion_radius)
        assert ph.kappa == pytest.approx(same.kappa, rel=1e-14)
        assert ph.has_salt


def test_a_1to1_salt_as_ions_is_the_ionic_strength():
    ph = pb.PhysicsOptions(ions=[(1, 0.15, 2.0), (-1, 0.15, 2.0)])
    assert ph.ionic_strength == 0.15 and ph.ion_radius == 2.0
    assert ph.kappa == pb.PhysicsOptions(ionic_strength=0.15).kappa
    # a 2:1 salt MgCl₂ at c: I = ½ (4c + 2c) = 3c
    mg = pb.PhysicsOptions(ions=[(2, 0.1, 2.0), (-1, 0.2, 1.5)])
    assert mg.ionic_strength == pytest.approx(0.3, rel=1e-15)


def test_ions_and_the_ionic_strength_are_one_source_of_truth():
    ph = pb.PhysicsOptions(ions=[(1, 0.1, 1.0), (-1, 0.1, 1.5)])
    # a value beside ions must agree with them (the defaults count as not given)
    assert pb.PhysicsOptions(ions=ph.ions, ionic_strength=0.1, ion_radius=1.5) == ph
    with pytest.raises(pb.InputError, match="ionic_strength=0.2 conflicts with ions"):
        pb.PhysicsOptions(ions=ph.ions, ionic_strength=0.2)
    with pytest.raises(pb.InputError, match="ion_radius=1 conflicts with ions"):
        pb.PhysicsOptions(ions=ph.ions, ion_radius=1.0)
    with pytest.raises(pb.InputError, match="conflicts with ions"):
        ph.replace(ionic_strength=0.3)
    # other changes keep the ions; new ions derive both fields again
    assert ph.replace(eps_in=4.0).ions == ph.ions
    new = ph.replace(ions=[(2, 0.05, 3.0), (-2, 0.05, 3.0)])
    assert (new.ionic_strength, new.ion_radius) == (pytest.approx(0.2), 3.0)
    gone = ph.replace(ions=())
    assert (gone.ionic_strength, gone.ion_radius, gone.ions) == (0.0, 2.0, ())
    built = pb.PhysicsOptions.build(ph, temperature=310.0)
    assert built.ions == ph.ions and built.ionic_strength == ph.ionic_strength
    physics, rest = pb.PhysicsOptions.split({"ions": ph.ions, "maxiter": 3})
    assert physics == ph and rest == {"maxiter": 3}
    assert dataclasses.asdict(ph)["ions"] == ph.ions and hash(ph) == hash(ph.replace())
    assert pb.PhysicsOptions(ions=None) == pb.PhysicsOptions()


def test_conc_zero_species_count_for_the_radius_only():
    ph = pb.PhysicsOptions(ions=[(1, 0.0, 2.5), (-1, 0.0, 2.0)])
    assert ph.ionic_strength == 0.0 and not ph.has_salt and ph.ion_radius == 2.5


@pytest.mark.parametrize(
    ("ions", "match"),
    [
        ([(1, -0.1, 2.0), (-1, -0.1, 2.0)], r"ions\[0\] concentration must be >= 0"),
        ([(1, 0.1, 2.0), (-1, 0.2, 2.0)], "electroneutral.*-0.1 M"),
        ([(2, 0.1, 2.0), (-1, 0.1, 2.0)], "electroneutral"),
        ([(1, 0.1, 2.0)], "electroneutral"),
        ([(1, 0.1, -2.0), (-1, 0.1, 2.0)], r"ions\[0\] radius must be finite and >= 0"),
        ([(1, 0.1, 2.0), (-1, float("nan"), 2.0)], r"ions\[1\] concentration"),
        ([(float("inf"), 0.1, 2.0)], r"ions\[0\] charge must be finite"),
        ([(1, 0.1), (-1, 0.1)], r"ions\[0\] must be \(charge e, concentration mol/L"),
        ([(1, 0.1, 2.0, 4), (-1, 0.1, 2.0)], r"ions\[0\] must be"),
        (["1 0.1 2"], r"ions\[0\] must be"),
        ([("one", 0.1, 2.0)], r"ions\[0\] charge must be a number"),
        ("1 0.15 2.0", "ions must be a sequence"),
        (0.15, "ions must be a sequence"),
    ],
)
def test_bad_ions_are_refused(ions, match):
    with pytest.raises(pb.InputError, match=match):
        pb.PhysicsOptions(ions=ions)


def test_decimal_electroneutrality_passes():
    # 0.1 + 0.2 != 0.3 in binary: the check is relative, not exact
    ph = pb.PhysicsOptions(ions=[(1, 0.1, 2.0), (1, 0.2, 2.0), (-1, 0.3, 2.0)])
    assert ph.ionic_strength == pytest.approx(0.3)
    assert options.check_ions([]) == ()
    assert options.ionic_strength_of([(3, 0.1, 1.0), (-1, 0.3, 1.0)]) == pytest.approx(0.6)


def test_maps_from_ions_are_those_of_the_equivalent_1to1_options(rng):
    a = pb.Atoms(rng.normal(0.0, 2.0, (6, 3)), rng.normal(0.0, 0.5, 6), rng.uniform(1.0, 2.0, 6))
    ions = random_electrolyte(rng)
    ph = pb.PhysicsOptions(ions=ions, surface="vdw")
    one = pb.PhysicsOptions(
        ionic_strength=0.5 * sum(c * z * z for z, c, _ in ions),
        ion_radius=max(r for _, _, r in ions),
        surface="vdw",
    )
    grid = maps.grid_for_atoms(a, 0.6, 6.0)
    m_ions = maps.build_maps(a, grid, physics=ph)
    m_one = maps.build_maps(a, grid, physics=one)
    np.testing.assert_array_equal(m_ions.kappa2, m_one.kappa2)
    np.testing.assert_array_equal(m_ions.boundary_values, m_one.boundary_values)
    assert np.count_nonzero(m_ions.kappa2) > 0


def test_nonlinear_takes_one_symmetric_salt_from_ions():
    """nonlinear=True with ions: their valence is the salt's; mixed valences are refused."""
    two = pb.PhysicsOptions(ions=[(2, 0.05, 2.0), (-2, 0.05, 1.5)], nonlinear=True)
    assert two.ion_valence == 2 and two.ionic_strength == pytest.approx(0.2)
    assert two.replace(ions=[(1, 0.1, 2.0), (-1, 0.1, 2.0)]).ion_valence == 1
    assert pb.PhysicsOptions(ions=[(2, 0.05, 2.0), (-1, 0.1, 1.8)]).ion_valence == 1  # linear
    with pytest.raises(pb.InputError, match="symmetric z:z"):
        pb.PhysicsOptions(ions=[(2, 0.05, 2.0), (-1, 0.1, 1.8)], nonlinear=True)
    with pytest.raises(pb.InputError, match="ion_valence=3 conflicts"):
        pb.PhysicsOptions(ions=[(2, 0.05, 2.0), (-2, 0.05, 1.5)], nonlinear=True, ion_valence=3)
