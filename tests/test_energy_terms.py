"""Energy terms: the analytic Coulomb pair sum, per-atom reaction-field terms, totals.

References: a plain double loop over pairs in float64 (Coulomb), and the screened interaction of
two distant ions in water, k q₁q₂ / (ε_out d), for a binding energy assembled from the terms.
"""

from __future__ import annotations

import numpy as np
import pytest

import pbsolver as pb
from pbsolver.molecule import pair_sums
from pbsolver.molecule.energy import coulomb_energy, reaction_field_terms, solvate
from pbsolver.molecule.maps import grid_for_atoms


def brute_coulomb(pos, q, eps):
    """Σ_{i<j} k qᵢqⱼ/(ε rᵢⱼ) and the per-atom halves, by a double loop."""
    n = len(q)
    per = np.zeros(n)
    for i in range(n):
        for j in range(n):
            if i != j and q[i] != 0 and q[j] != 0:
                r = float(np.sqrt(np.sum((pos[i] - pos[j]) ** 2)))
                per[i] += 0.5 * pb.COULOMB_KJ * q[i] * q[j] / (eps * r)
    return per.sum(), per


def random_atoms(rng, n, spread=6.0, zero_charges=3):
    q = rng.normal(0.0, 0.6, n)
    q[rng.choice(n, zero_charges, replace=False)] = 0.0
    return pb.Atoms(rng.normal(0.0, spread, (n, 3)), q, rng.uniform(0.0, 2.0, n))


# the NumPy blocks (one, or many small ones) and the compiled kernel (no pairs left to NumPy)
PATHS = {"numpy": (pair_sums.NUMPY_PAIRS_MOST, pair_sums.PAIR_BLOCK),
         "numpy-blocks": (pair_sums.NUMPY_PAIRS_MOST, 37), "kernel": (-1, 1)}  # fmt: skip


@pytest.fixture(params=sorted(PATHS))
def pair_path(request, monkeypatch):
    most, block = PATHS[request.param]
    monkeypatch.setattr(pair_sums, "NUMPY_PAIRS_MOST", most)
    monkeypatch.setattr(pair_sums, "PAIR_BLOCK", block)
    return request.param


@pytest.mark.parametrize("n", [4, 53, 150])
def test_coulomb_matches_a_double_loop(rng, n, pair_path):
    a = random_atoms(rng, n)
    eps = rng.uniform(1.0, 20.0)
    total, per = brute_coulomb(a.positions, a.charges, eps)
    assert coulomb_energy(a, eps) == pytest.approx(total, rel=1e-12, abs=1e-10)
    terms = coulomb_energy(a, eps, per_atom=True)
    np.testing.assert_allclose(terms, per, rtol=1e-11, atol=1e-11)
    assert terms.sum() == pytest.approx(total, rel=1e-12, abs=1e-10)
    assert np.all(terms[a.charges == 0] == 0.0)
    kcal = coulomb_energy(a, eps, units="kcal/mol")
    assert kcal == pytest.approx(total / 4.184, rel=1e-12, abs=1e-10)


def test_pair_potentials_from_another_set(rng, pair_path):
    pos_a, pos_b, q = rng.normal(0, 5, (7, 3)), rng.normal(0, 5, (40, 3)), rng.normal(0, 1, 40)
    want = [sum(q[j] / np.linalg.norm(pos_a[i] - pos_b[j]) for j in range(40)) for i in range(7)]
    np.testing.assert_allclose(pair_sums.pair_potentials(pos_a, pos_b, q), want, rtol=1e-12)
    pos_b[5] = pos_a[2]
    phi = pair_sums.pair_potentials(pos_a, pos_b, q)
    assert pair_sums.first_coincident_pair(phi, pos_a, pos_b) == (2, 5)


def test_coulomb_of_a_pair_and_of_nothing():
    pair = pb.Atoms([[0.0, 0.0, 0.0], [3.0, 4.0, 0.0]], [0.5, -2.0], [1.0, 1.0])
    assert coulomb_energy(pair, 4.0) == pytest.approx(pb.COULOMB_KJ * -1.0 / (4.0 * 5.0))
    neutral = pb.Atoms([[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]], [0.0, 1.0], [1.0, 1.0])
    assert coulomb_energy(neutral, 2.0) == 0.0  # an uncharged atom may share a position
    assert coulomb_energy(pb.Atoms([[1.0, 2.0, 3.0]], [1.0], [1.0]), 2.0) == 0.0


def test_coulomb_refuses_coincident_charges_and_bad_eps(pair_path):
    a = pb.Atoms([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [1.0, 0.0, 0.0]], [1.0, 0.5, -0.5], [1, 1, 1])
    with pytest.raises(pb.InputError, match="charged atoms 1 and 2 sit at the same position"):
        coulomb_energy(a, 2.0)
    with pytest.raises(pb.InputError, match="eps_in"):
        coulomb_energy(a[:2], 0.0)
    with pytest.raises(pb.InputError, match="units"):
        coulomb_energy(a[:2], 2.0, units="eV")


def test_solvation_terms_add_up(rng):
    a = random_atoms(rng, 9, spread=1.8, zero_charges=2)
    a = pb.Atoms(a.positions, a.charges, np.maximum(a.radii, 1.0))
    sol = solvate(a, spacing=0.6, margin=4.0, backend="cpu", eps_in=3.0, surface="vdw")
    assert sol.atoms is a
    np.testing.assert_allclose(sol.rf_terms, 0.5 * a.charges * sol.potentials, rtol=1e-15)
    assert sol.rf_terms.sum() == pytest.approx(sol.energy, rel=1e-12)
    direct = reaction_field_terms(a, sol.problem.grid, sol.result.phi_rf)
    np.testing.assert_allclose(direct, sol.rf_terms, rtol=1e-12)
    # Coulomb in the solute's ε (ε_c of φ_c), from the same pair sum as above
    np.testing.assert_allclose(sol.coulomb_terms, coulomb_energy(a, 3.0, per_atom=True))
    assert sol.coulomb == pytest.approx(coulomb_energy(a, 3.0), rel=1e-12)
    assert sol.total == pytest.approx(sol.coulomb + sol.energy, rel=1e-12)
    np.testing.assert_allclose(sol.total_terms.sum(), sol.total, rtol=1e-12)
    kcal = solvate(a, spacing=0.6, margin=4.0, backend="cpu", eps_in=3.0, surface="vdw",
                   units="kcal/mol")  # fmt: skip
    assert kcal.total == pytest.approx(sol.total / 4.184, rel=1e-6)


def test_binding_energy_of_two_distant_ions_is_the_screened_coulomb():
    # ΔG = G(+−) − G(+) − G(−) on one grid: the Coulomb terms in ε_in = 1 (−115.8 kJ/mol) and
    # the reaction fields (+114.3) cancel to the interaction in water, k q₁q₂ / (ε_out d), up
    # to the grid and to each cavity's (a/d)³-small effect on the other's field (0.4 % here)
    d = 12.0
    pair = pb.Atoms([[0.0, 0.0, 0.0], [d, 0.0, 0.0]], [1.0, -1.0], [2.0, 2.0])
    grid = grid_for_atoms(pair, 0.5, 10.0)
    kw = {"backend": "cpu", "eps_in": 1.0, "surface": "vdw", "problem_options": {"grid": grid}}
    g = [solvate(x, **kw) for x in (pair, pair[[0]], pair[[1]])]
    assert g[1].coulomb == 0.0 and g[2].coulomb == 0.0
    assert g[0].coulomb == pytest.approx(-pb.COULOMB_KJ / d, rel=1e-14)
    binding = g[0].total - g[1].total - g[2].total
    assert binding == pytest.approx(-pb.COULOMB_KJ / (78.54 * d), rel=0.02)


def test_periodic_solvation_has_no_open_coulomb_sum():
    a = pb.Atoms([[2.0, 2.0, 2.0], [3.5, 2.0, 2.0]], [0.5, -0.5], [1.2, 1.2])
    sol = solvate(a, spacing=0.5, backend="cpu", surface="vdw", method="jacobi",
                  problem_options={"boundary": "periodic", "box": (8.0, 8.0, 8.0)})  # fmt: skip
    assert sol.rf_terms.sum() == pytest.approx(sol.energy)
    with pytest.raises(pb.InputError, match="Ewald"):
        sol.coulomb  # noqa: B018
