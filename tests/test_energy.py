"""Interpolation, energies, potentials and forces at atoms."""

from __future__ import annotations

import numpy as np
import pytest
from analytic import kirkwood

import pbsolver as pb
from pbsolver.molecule import energy


def test_trilinear_interpolation_is_exact_for_trilinear_fields(rng):
    g = pb.Grid((7, 9, 6), spacing=(0.5, 0.7, 0.4), origin=(-1.0, 2.0, 0.5))
    c = rng.normal(size=8)
    x, y, z = g.coordinates()

    def f(x, y, z):
        return c[0] + c[1] * x + c[2] * y + c[3] * z + c[4] * x * y + c[5] * y * z
        # (trilinear: products of distinct coordinates only)

    field = f(x, y, z) + c[6] * x * y * z
    lo = np.asarray(g.origin)
    hi = lo + np.asarray(g.lengths)
    pts = rng.uniform(lo, hi, (50, 3))
    got = energy.interpolate(g, field, pts)
    ref = f(pts[:, 0], pts[:, 1], pts[:, 2]) + c[6] * pts.prod(axis=1)
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)
    # nodes give node values; the last node is inside
    np.testing.assert_allclose(
        energy.interpolate(g, field, [lo, hi]), [field[0, 0, 0], field[-1, -1, -1]]
    )
    with pytest.raises(pb.InputError, match="outside the grid"):
        energy.interpolate(g, field, [hi + 0.1])
    with pytest.raises(pb.InputError, match="shape"):
        energy.interpolate(g, field[:-1], pts)


def test_periodic_interpolation_wraps(rng):
    g = pb.Grid((8, 6, 10), spacing=0.5)
    field = rng.normal(size=g.shape)
    pts = rng.uniform(0, 3, (20, 3))
    box = np.asarray(g.shape) * 0.5
    a = energy.interpolate(g, field, pts, periodic=True)
    b = energy.interpolate(g, field, pts + box * rng.integers(-2, 3, (20, 3)), periodic=True)
    np.testing.assert_allclose(a, b, rtol=1e-10)
    # between the last node and the first image: halfway is the mean
    p = np.array([[7.5 * 0.5, 0.0, 0.0]])
    assert energy.interpolate(g, field, p, periodic=True)[0] == pytest.approx(
        0.5 * (field[-1, 0, 0] + field[0, 0, 0])
    )


def test_an_infinite_node_does_not_leak_into_its_neighbours(rng):
    """A charge on a node (φ_c = ±inf there) must not turn a point on a nearby node into NaN."""
    g = pb.Grid((6, 6, 6), spacing=0.5)
    field = rng.normal(size=g.shape)
    field[2, 3, 3] = np.inf
    on_nodes = np.array([[1.5, 1.5, 1.5], [1.0, 1.5, 1.5], [2.5, 2.0, 1.0]])
    values, grads = energy.sample_field(g, field, on_nodes)
    np.testing.assert_array_equal(values, [field[3, 3, 3], np.inf, field[5, 4, 2]])
    assert np.all(np.isfinite(grads[2]))


def test_gradient_of_quadratic_field(rng):
    g = pb.Grid((11, 12, 13), spacing=(0.3, 0.4, 0.5), origin=(-1.5, -2.0, -3.0))
    x, y, z = g.coordinates()
    field = 2 * x**2 - 3 * y * z + z + 0.5 * x * y
    pts = rng.uniform([-1.0, -1.5, -2.5], [1.2, 2.0, 2.5], (30, 3))
    grad = energy.interpolate_gradient(g, field, pts)
    px, py, pz = pts.T
    ref = np.stack([4 * px + 0.5 * py, -3 * pz + 0.5 * px, -3 * py + 1], axis=1)
    # central differences are exact for quadratics at nodes; trilinear interpolation of the
    # (linear) gradient of x² is exact too, so the only error is interpolation of y z terms
    np.testing.assert_allclose(grad, ref, atol=0.1)


def test_energy_potential_force_units(rng):
    g = pb.Grid((9, 9, 9), spacing=0.5, origin=(-2.0, -2.0, -2.0))
    x, y, z = g.coordinates()
    phi = 10.0 * x - 4.0 * y + 0.0 * z + 3.0
    atoms = pb.Atoms(rng.uniform(-1.5, 1.5, (4, 3)), rng.normal(0, 1, 4), np.ones(4))
    pot = energy.reaction_field_potentials(atoms, g, phi)
    np.testing.assert_allclose(pot, 10 * atoms.positions[:, 0] - 4 * atoms.positions[:, 1] + 3)
    G = energy.reaction_field_energy(atoms, g, phi)
    assert G == pytest.approx(0.5 * atoms.charges @ pot)
    assert energy.reaction_field_energy(atoms, g, phi, units="kcal/mol") == pytest.approx(G / 4.184)
    F = energy.reaction_field_forces(atoms, g, phi)
    np.testing.assert_allclose(F, -atoms.charges[:, None] * np.array([10.0, -4.0, 0.0]), atol=1e-9)
    with pytest.raises(pb.InputError, match="units"):
        energy.reaction_field_energy(atoms, g, phi, units="eV")


def test_born_one_call():
    ion = pb.read_pqr(
        pytest.importorskip("pathlib").Path(__file__).parents[1] / "data" / "born_ion.pqr"
    )
    exact = -0.5 * pb.COULOMB_KJ / 3.0 * (1 - 1 / 78.54)
    g = pb.solvation_energy(ion, spacing=0.5, margin=1.0, eps_in=1.0, method="sor", backend="cpu")
    assert g == pytest.approx(exact, rel=2.5e-3)
    gk = pb.solvation_energy(
        ion, spacing=0.5, margin=1.0, eps_in=1.0, method="sor", backend="cpu", units="kcal/mol"
    )
    assert gk == pytest.approx(g / 4.184, rel=1e-6)


def _kirkwood_atoms(pos, q, radius=5.0):
    pos = np.asarray(pos, dtype=float)
    return pb.Atoms(
        np.vstack([[0.0, 0.0, 0.0], pos]), np.r_[0.0, q], np.r_[radius, np.zeros(len(q))]
    )


def test_forces_match_kirkwood_gradient():
    """F_i = −q_i ∇φ_rf(r_i) equals −∂G/∂r_i of the analytic Kirkwood energy (sphere fixed)."""
    pos = np.array([[1.1, 0.4, -2.0], [-1.3, 2.2, 1.5]])
    q = np.array([1.0, -0.6])
    atoms = _kirkwood_atoms(pos, q)
    s = energy.solvate(
        atoms, spacing=0.4, margin=3.0, eps_in=1.0, surface="vdw", method="sor", backend="cpu",
        dtype=np.float64,
    )  # fmt: skip
    d = 1e-4
    ref = np.zeros((2, 3))
    for i in range(2):
        for k in range(3):
            p1, p2 = pos.copy(), pos.copy()
            p1[i, k] += d
            p2[i, k] -= d
            ref[i, k] = -(kirkwood(p1, q, 5.0, 1.0, 78.54) - kirkwood(p2, q, 5.0, 1.0, 78.54)) / (
                2 * d
            )
    got = s.forces[1:]
    assert np.abs(s.forces[0]).max() == 0.0  # the uncharged sphere feels no force
    scale = np.abs(ref).max()
    np.testing.assert_allclose(got, ref, atol=0.01 * scale)
    np.testing.assert_allclose(s.potentials[0], 0.0, atol=1e3)  # finite at the sphere centre
    assert s.energy == pytest.approx(kirkwood(pos, q, 5.0, 1.0, 78.54), rel=5e-3)


def test_periodic_energy_invariant_under_grid_shifts():
    """Moving the solute by whole grid steps across the periodic boundary changes nothing."""
    pos = np.array([[0.0, 0.0, 0.0], [0.9, 0.3, -0.8], [-1.0, 0.6, 0.7]])
    base = pb.Atoms(pos + [1.2, 7.1, 0.4], [0.0, 0.8, -0.8], [3.0, 0.0, 0.0])
    box = (16.0, 16.0, 14.0)
    energies = []
    for shift in ((0, 0, 0), (3, -5, 7)):
        atoms = base.translated(np.asarray(shift) * 0.5)
        s = energy.solvate(
            atoms, spacing=0.5, eps_in=1.0, surface="vdw", method="sor", backend="cpu",
            dtype=np.float64, rtol=1e-10, problem_options={"boundary": "periodic", "box": box},
        )  # fmt: skip
        assert s.problem.boundary == "periodic" and s.problem.grid.spacing == (0.5, 0.5, 0.5)
        energies.append(s.energy)
    assert energies[0] < 0
    assert energies[1] == pytest.approx(energies[0], rel=1e-7)


def test_coulomb_forces_are_the_gradient_of_the_coulomb_energy(rng):
    n = 9
    pos = rng.normal(0.0, 2.0, (n, 3))
    q = rng.uniform(-1.0, 1.0, n)
    q[3] = 0.0  # uncharged: no force, and it may sit anywhere
    pos[3] = pos[5]
    atoms = pb.Atoms(pos, q, np.full(n, 1.5))
    forces = energy.coulomb_forces(atoms, 4.0)
    delta = 1e-6
    fd = np.zeros((n, 3))
    for i in range(n):
        for a in range(3):
            moved = []
            for sign in (1, -1):
                p = pos.copy()
                p[i, a] += sign * delta
                moved.append(energy.coulomb_energy(pb.Atoms(p, q, atoms.radii), 4.0))
            fd[i, a] = -(moved[0] - moved[1]) / (2 * delta)
    np.testing.assert_allclose(forces, fd, rtol=1e-6, atol=1e-6 * np.abs(fd).max())
    assert not forces[3].any()
    np.testing.assert_allclose(forces.sum(axis=0), 0.0, atol=1e-10 * np.abs(forces).max())
    kcal = energy.coulomb_forces(atoms, 4.0, units="kcal/mol")
    np.testing.assert_allclose(kcal * 4.184, forces, rtol=1e-12)
    twins = pb.Atoms([[0, 0, 0], [0, 0, 0]], [1.0, 1.0], [1.0, 1.0])
    with pytest.raises(pb.InputError, match="same position"):
        energy.coulomb_forces(twins, 1.0)
