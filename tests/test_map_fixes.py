"""Silent wrong answers of the maps, fixed: the "sdh" boundary, charges on nodes, small boxes."""

from __future__ import annotations

import numpy as np
import pytest

import pbsolver as pb
from pbsolver.molecule import energy, maps

DIPOLE = pb.Atoms([[-0.8, 0.1, 0.05], [0.8, -0.1, -0.05]], [0.7, -0.7], [1.6, 1.6])


def _energy(atoms, spacing, margin=8.0, **problem_options):
    s = energy.solvate(
        atoms, spacing=spacing, margin=margin, eps_in=1.0, surface="vdw", backend="cpu",
        method="multigrid", dtype=np.float64, rtol=1e-9, problem_options=problem_options,
    )  # fmt: skip
    return s.energy


@pytest.mark.parametrize("kind", ["mdh", "sdh"])
def test_a_neutral_dipole_does_not_feel_the_margin(kind):
    """sdh subtracts the same exact φ_c as the interior: no multipoles left on the boundary."""
    e = [_energy(DIPOLE, 0.5, margin=m, boundary_kind=kind) for m in (8.0, 12.0, 16.0)]
    assert max(e) - min(e) < 1e-3 * abs(e[-1])


@pytest.mark.slow  # three margins of a 0.5 Å grid (CI time); the mdh/sdh margin tests stay
def test_zero_boundary_converges_with_the_margin():
    """φ_rf = 0 on the boundary is an approximation: its error shrinks as the margin grows."""
    e = [_energy(DIPOLE, 0.5, margin=m, boundary_kind="zero") for m in (8.0, 12.0, 16.0)]
    ref = _energy(DIPOLE, 0.5, margin=16.0, boundary_kind="mdh")
    errors = [abs(x / ref - 1) for x in e]
    assert errors[0] > errors[1] > errors[2] and errors[0] < 1e-2


def test_sdh_boundary_is_the_screened_sphere_minus_the_exact_coulomb_sum():
    atoms = pb.Atoms([[0.0, 0.0, 0.0], [1.5, 0.5, 0.0]], [1.0, -0.4], [1.5, 1.2])
    grid = maps.grid_for_atoms(atoms, 1.0, 3.0)
    kappa = maps.kappa_from_ionic_strength(0.1)
    got = maps.boundary_values(atoms, grid, 2.0, 78.54, 0.1, kind="sdh")
    lo, hi = atoms.bounds(with_radii=False)
    c = 0.5 * (lo + hi)
    a = (np.linalg.norm(atoms.positions - c, axis=1) + atoms.radii).max()
    pts = np.stack(np.meshgrid(*grid.axes(), indexing="ij"), axis=-1)
    r = np.linalg.norm(pts - c, axis=-1)
    want = maps.COULOMB_KJ * 0.6 * np.exp(-kappa * (r - a)) / (78.54 * (1 + kappa * a) * r)
    for p, q in zip(atoms.positions, atoms.charges, strict=True):
        want -= maps.COULOMB_KJ * q / (2.0 * np.linalg.norm(pts - p, axis=-1))
    outer = np.ones(grid.shape, dtype=bool)
    outer[1:-1, 1:-1, 1:-1] = False
    np.testing.assert_allclose(got[outer], want[outer], rtol=1e-12)
    assert not got[~outer].any()


@pytest.mark.parametrize("h", [0.2, 0.3, 0.5])
def test_born_energy_is_continuous_across_a_node(h):
    """A charge a rounding error off a node: φ_c ±inf there and faces ε_in exactly."""
    grid = maps.grid_for_atoms(pb.Atoms([[1.0, 0.0, 0.0]], [1.0], [2.0]), h, shape=(33, 33, 33))
    node = grid.origin[0] + round((1.0 - grid.origin[0]) / h) * h
    e = []
    for d in (-1e-6, -1e-9, 0.0, 1e-9, 1e-6):
        e.append(_energy(pb.Atoms([[node + d, 0.0, 0.0]], [1.0], [2.0]), h, grid=grid))
    assert max(e) - min(e) < 1e-4 * abs(e[2])
    assert -400 < e[2] < -300  # Born: −k (1 − 1/ε_out) / (2a) = −343 kJ/mol at a = 2 Å


def test_a_node_near_a_charge_is_on_it():
    h = 0.2
    grid = pb.Grid((9, 9, 9), spacing=h, origin=(0.0, 0.0, 0.0))
    for d in (0.0, 1e-12, 1e-9 * h):
        a = pb.Atoms([[0.8 + d, 0.8, 0.8]], [1.0], [1.5])
        phi = maps.coulomb_potential(a, grid, 1.0)
        assert phi[4, 4, 4] == np.inf and np.isfinite(np.delete(phi, 4 * 81 + 4 * 9 + 4)).all()
    fr = maps.face_fractions(pb.Atoms([[0.8, 0.8, 0.8]], [1.0], [1.5]), grid, "vdw")
    faces = maps.faces_from_fractions(fr, 1.0, 78.54)
    assert all(f[3:5, 4, 4].tolist() == [1.0, 1.0] for f in (faces[0],))
    assert faces[1][4, 3:5, 4].tolist() == [1.0, 1.0] and faces[2][4, 4, 3:5].tolist() == [1.0, 1.0]


def test_a_periodic_box_smaller_than_the_solute_is_refused():
    peptide = pb.read_pqr(pb.data.path("peptide.pqr"))
    ext = maps.periodic_extent(peptide, (100.0, 100.0, 100.0))
    lo, hi = peptide.bounds()
    np.testing.assert_allclose(ext, hi - lo)
    with pytest.raises(pb.InputError, match=r"periodic box \(5\.0, 5\.0, 5\.0\).*at least"):
        pb.Problem.from_atoms(peptide, spacing=0.5, boundary="periodic", box=(5.0, 5.0, 5.0))
    calc = pb.ReactionFieldCalculator(
        peptide, box=(5.0, 5.0, 5.0), spacing=0.5, surface="vdw", backend="cpu"
    )
    with pytest.raises(pb.InputError, match="periodic box"):
        calc.compute()
    # a box that holds it plus two probe radii is accepted, and so are atoms wrapped one by one
    box = tuple(ext + 2 * 1.4 + 0.5)
    wrapped = pb.Atoms(np.mod(peptide.positions, box), peptide.charges, peptide.radii)
    np.testing.assert_allclose(maps.periodic_extent(wrapped, box), ext, atol=1e-9)
    maps.check_periodic_box(wrapped, box, 2 * 1.4)
    with pytest.raises(pb.InputError, match="periodic box"):
        maps.check_periodic_box(wrapped, tuple(ext + 1.0), 2 * 1.4)
