"""ReactionFieldCalculator: energies (Born, Kirkwood), forces (finite differences of the energy in
a fixed cavity, the Kirkwood series), warm starts, a grid that follows the solute, periodic boxes,
batched frames, bad input."""

from __future__ import annotations

import numpy as np
import pytest
from analytic import born, kirkwood

import pbsolver as pb
from pbsolver.md.calculator import sample_field
from pbsolver.molecule import energy as E


def _cavity_atoms(z, a=5.0):
    """A neutral sphere of radius a holding a bare +1 e charge (radius 0) at (0.3, -0.2, z)."""
    return pb.Atoms([[0.0, 0.0, 0.0], [0.3, -0.2, z]], [0.0, 1.0], [a, 0.0])


def _fragment():
    return pb.read_pqr(pb.data.path("1lpb_chainA.pqr"))[:40]


def _calc(atoms, **options):
    base = {"spacing": 0.5, "surface": "vdw", "backend": "cpu", "margin": 2.0, "skin": 0.5}
    base.update(options)
    return pb.ReactionFieldCalculator(atoms, **base)


# ---------------------------------------------------------------------- values at atoms
def _numpy_sample(grid, phi, points, periodic):
    """Reference: node gradients by np.gradient (np.roll when periodic), trilinear weights."""
    h, shape = np.asarray(grid.spacing), np.asarray(grid.shape)
    s = (points - np.asarray(grid.origin)) / h
    if periodic:
        s = np.mod(s, shape)
        i0 = np.minimum(np.floor(s).astype(int), shape - 1)
        grads = [(np.roll(phi, -1, a) - np.roll(phi, 1, a)) / (2 * h[a]) for a in range(3)]
    else:
        i0 = np.minimum(np.floor(s).astype(int), shape - 2)
        grads = [np.gradient(phi, h[a], axis=a) for a in range(3)]
    t = s - i0
    out = np.zeros((len(points), 4))
    for corner in np.ndindex(2, 2, 2):
        w = np.prod(np.where(np.array(corner) == 1, t, 1 - t), axis=1)
        idx = tuple(np.mod(i0 + corner, shape).T)
        for c, f in enumerate([phi, *grads]):
            out[:, c] += w * f[idx]
    return out[:, 0], out[:, 1:]


@pytest.mark.parametrize("periodic", [False, True])
def test_sample_field_against_numpy(rng, periodic):
    grid = pb.Grid((9, 11, 10), spacing=(0.5, 0.4, 0.6), origin=(-1.0, 2.0, 0.5))
    phi = rng.normal(size=grid.shape)
    lo = np.asarray(grid.origin)
    hi = lo + np.asarray(grid.lengths)
    if periodic:
        points = rng.uniform(lo - 3.0, hi + 3.0, size=(25, 3))
    else:  # include points in the outermost cells and exactly on nodes
        points = rng.uniform(lo, hi, size=(25, 3))
        points[0] = lo
        points[1] = hi
        points[2] = lo + np.asarray(grid.spacing) * (2, 3, 4)
    values, grad = sample_field(grid, phi, points, periodic=periodic)
    want_v, want_g = _numpy_sample(grid, phi, points, periodic)
    np.testing.assert_allclose(values, want_v, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(grad, want_g, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(values, E.interpolate(grid, phi, points, periodic=periodic))
    np.testing.assert_array_equal(
        grad, E.interpolate_gradient(grid, phi, points, periodic=periodic)
    )


def test_born_ion_energy_and_zero_force():
    ion = pb.Atoms([[0.1, -0.2, 0.05]], [1.0], [3.0])
    calc = _calc(ion, eps_in=1.0)
    res = calc.compute()
    assert res.converged and not res.warm_start and res.regridded
    assert res.energy == pytest.approx(born(1.0, 3.0, 1.0, 78.54), rel=0.01)
    assert np.abs(res.forces).max() < 0.5  # a centred ion feels (almost) no reaction force
    assert res.potentials.shape == (1,) and res.forces.shape == (1, 3)
    assert res.energy == pytest.approx(0.5 * res.potentials[0])
    # kcal/mol: every output scaled by 1/4.184
    kcal = _calc(ion, eps_in=1.0, units="kcal/mol").compute()
    assert kcal.energy == pytest.approx(res.energy / 4.184, rel=1e-6)


def test_outputs_are_those_of_the_energy_module():
    atoms = _fragment()
    calc = _calc(atoms, spacing=0.6)
    res = calc.compute()
    phi = res.solve.phi_rf
    np.testing.assert_allclose(
        res.forces, E.reaction_field_forces(atoms, res.grid, phi), rtol=1e-10, atol=1e-10
    )
    np.testing.assert_allclose(
        res.potentials, E.reaction_field_potentials(atoms, res.grid, phi), rtol=1e-10, atol=1e-10
    )
    assert res.energy == pytest.approx(E.reaction_field_energy(atoms, res.grid, phi), rel=1e-10)
    assert set(res.timings) == {"maps", "solve", "evaluate"}
    assert res.seconds == pytest.approx(sum(res.timings.values()))


def test_forces_are_minus_energy_gradient_in_a_fixed_cavity():
    """−q∇φ_rf = −∂G/∂r for a charge moving inside a rigid cavity (the API's promise)."""
    z, d = 2.0, 0.05
    calc = _calc(_cavity_atoms(z), eps_in=1.0, rtol=1e-8)
    res = calc.compute()
    pos = _cavity_atoms(z).positions
    step = np.array([[0.0, 0.0, 0.0], [0.0, 0.0, d]])
    e_plus = calc.compute(pos + step)
    e_minus = calc.compute(pos - step)
    assert not e_plus.regridded and not e_minus.regridded  # the grid stayed put
    fd = -(e_plus.energy - e_minus.energy) / (2 * d)
    assert res.forces[1, 2] == pytest.approx(fd, rel=0.01)
    # and both agree with the Kirkwood series (analytic derivative by central differences)
    q = [1.0]
    analytic = -(kirkwood(pos[1:] + step[1:], q, 5.0, 1.0, 78.54)
                 - kirkwood(pos[1:] - step[1:], q, 5.0, 1.0, 78.54)) / (2 * d)  # fmt: skip
    assert res.forces[1, 2] == pytest.approx(analytic, rel=0.02)
    assert res.energy == pytest.approx(kirkwood(pos[1:], q, 5.0, 1.0, 78.54), rel=0.01)
    # the neutral sphere carries no charge, hence no reaction-field force
    np.testing.assert_array_equal(res.forces[0], 0.0)


@pytest.mark.parametrize(
    ("method", "drift", "options"),
    [("multigrid", 0.002, {}), ("sor", 0.001, {"check_every": 5})],
)
def test_warm_start_halves_the_work_on_a_slowly_moving_solute(method, drift, options):
    """Warm starts at least halve the iterations when a frame moves the atoms by ~0.001 Å.

    The gain shrinks with the motion per frame (the initial residual grows with it): measured
    on this 40-atom fragment, multigrid 7 → 3 cycles at 0.002 Å a frame, 7 → 5 at 0.03 Å.
    """
    atoms = _fragment()
    calc = _calc(atoms, spacing=0.6, method=method, **options)
    cold = _calc(atoms, spacing=0.6, method=method, warm_start=False, **options)
    v = np.array([1.0, 0.6, -0.4]) / np.linalg.norm([1.0, 0.6, -0.4])
    wiggle = np.sin(np.arange(len(atoms))[:, None] * np.array([1.0, 2.0, 3.0]))
    warm_its, cold_its = [], []
    for k in range(4):
        # a steady drift plus a smooth wiggle of 30 % of it per atom
        pos = atoms.positions + k * drift * v + 0.3 * drift * np.sin(0.7 * k) * wiggle
        w = calc.compute(pos)
        c = cold.compute(pos)
        assert w.converged and c.converged
        assert w.energy == pytest.approx(c.energy, rel=1e-5)
        np.testing.assert_allclose(w.forces, c.forces, atol=1e-3 * np.abs(c.forces).max())
        if k:
            assert w.warm_start and not w.regridded
            warm_its.append(w.iterations)
            cold_its.append(c.iterations)
    assert max(warm_its) * 2 <= min(cold_its), (warm_its, cold_its)


def test_grid_follows_the_solute_by_whole_nodes():
    atoms = _fragment()
    calc = _calc(atoms, spacing=0.6, margin=2.0, skin=1.0)
    first = calc.compute()
    shape, origin = first.grid.shape, np.asarray(first.grid.origin)
    shift = np.array([0.35, -0.2, 0.1])
    regridded_at = None
    for k in range(1, 6):
        res = calc.compute(atoms.positions + k * shift)
        assert res.converged and res.warm_start
        if res.regridded:
            regridded_at = k
            break
    assert regridded_at is not None  # 0.42 Å a frame leaves a 1 Å skin within 5 frames
    assert res.grid.shape == shape  # same buffers: shifted, not grown
    nodes = (np.asarray(res.grid.origin) - origin) / 0.6
    np.testing.assert_allclose(nodes, np.rint(nodes), atol=1e-9)
    assert np.any(np.rint(nodes) != 0)
    # the carried solution is a good start and the answer is the cold one on the same grid
    assert res.solve.residual_norms[0] < 0.2
    cold = pb.Solver(method="multigrid", backend="cpu").solve(calc.problem)
    ref = E.reaction_field_energy(calc.atoms_at(atoms.positions + regridded_at * shift),
                                  res.grid, cold.phi_rf)  # fmt: skip
    assert res.energy == pytest.approx(ref, rel=1e-5)


def test_grid_grows_when_the_solute_unfolds():
    atoms = pb.Atoms([[0.0, 0.0, 0.0], [2.0, 0.0, 0.0]], [0.5, -0.5], [1.5, 1.5])
    calc = _calc(atoms, spacing=0.5, margin=1.5, skin=0.5)
    first = calc.compute()
    res = calc.compute(np.array([[0.0, 0.0, 0.0], [5.0, 0.0, 0.0]]))
    assert res.regridded and res.grid.shape[0] > first.grid.shape[0]
    assert res.grid.shape[1:] == first.grid.shape[1:]
    assert res.converged and res.warm_start
    ref = pb.solvation_energy(calc.atoms_at(np.array([[0.0, 0.0, 0.0], [5.0, 0.0, 0.0]])),
                              spacing=0.5, margin=2.0, surface="vdw", backend="cpu",
                              method="multigrid")  # fmt: skip
    assert res.energy == pytest.approx(ref, rel=0.02)


def test_fixed_shape_that_cannot_hold_the_solute_is_refused():
    atoms = _fragment()
    with pytest.raises(pb.InputError, match="does not fit"):
        _calc(atoms, shape=(17, 17, 17)).compute()


def test_periodic_box_wraps_and_warm_starts():
    atoms = pb.Atoms([[1.0, 2.0, 3.0], [2.2, 2.0, 3.0]], [0.6, -0.6], [1.6, 1.6])
    box = (12.0, 12.0, 12.0)
    calc = _calc(atoms, box=box, spacing=0.75, method="multigrid")
    first = calc.compute()
    assert first.grid.shape == (16, 16, 16) and first.converged
    # the same configuration one box length away: wrapped, the same energy
    moved = calc.compute(atoms.positions + np.array([12.0, -12.0, 0.0]))
    assert moved.warm_start and not moved.regridded
    assert moved.energy == pytest.approx(first.energy, rel=1e-5)
    assert moved.iterations < first.iterations
    np.testing.assert_allclose(moved.forces, first.forces, atol=1e-3 * np.abs(first.forces).max())
    np.testing.assert_allclose(
        first.forces,
        E.reaction_field_forces(atoms, first.grid, first.solve.phi_rf, periodic=True),
        rtol=1e-10,
        atol=1e-10,
    )
    # a new box (NPT): same node count, so the previous solution is still the initial guess
    resized = calc.compute(box=(11.8, 11.8, 11.8))
    assert resized.regridded and resized.warm_start and resized.converged
    with pytest.raises(pb.InputError, match="box"):
        _calc(atoms).compute(box=box)


@pytest.mark.parametrize("mode", ["loop", "stacked"])
def test_compute_batch_equals_frame_by_frame(mode):
    atoms = _fragment()
    method = "sor" if mode == "stacked" else "multigrid"
    frames = [atoms.positions + k * np.array([0.01, -0.02, 0.015]) for k in range(3)]
    one = _calc(atoms, spacing=0.6, method=method, rtol=1e-7)
    expected = [one.compute(f) for f in frames]
    batch = _calc(atoms, spacing=0.6, method=method, rtol=1e-7)
    got = batch.compute_batch(frames, mode=mode)
    assert len(got) == 3 and batch.frames == 3
    for g, e in zip(got, expected, strict=True):
        assert g.converged
        assert g.energy == pytest.approx(e.energy, rel=1e-5)
        np.testing.assert_allclose(g.forces, e.forces, atol=1e-3 * np.abs(e.forces).max())
    if mode == "stacked":
        assert got[0].solve.extra["batch_size"] == 3
    # the last frame's solution is the next warm start
    nxt = batch.compute(frames[-1])
    assert nxt.warm_start and nxt.iterations < got[0].iterations


def test_bad_input():
    atoms = _fragment()
    calc = _calc(atoms, spacing=0.6)
    with pytest.raises(pb.InputError, match="shape \\(40, 3\\)"):
        calc.compute(np.zeros((39, 3)))
    bad = atoms.positions.copy()
    bad[3, 1] = np.nan
    with pytest.raises(pb.InputError, match="atom 3 is not finite"):
        calc.compute(bad)
    with pytest.raises(pb.InputError, match="map_options"):
        _calc(atoms, map_options={"probe": 1.0})
    with pytest.raises(pb.InputError, match="spacing"):
        _calc(atoms, spacing=0.0)
    with pytest.raises(pb.InputError, match="margin"):
        _calc(atoms, margin=-1.0)
    with pytest.raises(pb.InputError, match="atoms must be"):
        pb.ReactionFieldCalculator(np.zeros((3, 3)))
    with pytest.raises(pb.InputError, match="surface"):
        _calc(atoms, surface="sas")
    assert calc.frames == 0 and calc.phi_rf is None  # nothing half-done was kept


def test_failed_frame_does_not_corrupt_the_warm_start():
    """A frame whose maps fail may move the grid; the next frame still carries the solution."""
    atoms = pb.Atoms([[0.0, 0.0, 0.0], [2.0, 0.0, 0.0]], [0.5, -0.5], [1.5, 1.5])
    calc = _calc(atoms, spacing=0.5, margin=1.5, skin=0.5)
    first = calc.compute()
    with pytest.raises(pb.InputError):  # opposite charges on one node: ∞ − ∞ in φ_c
        calc.compute(np.array([[0.0, 0.0, 6.0], [0.0, 0.0, 6.0]]) + calc.grid.origin)
    res = calc.compute(atoms.positions + 0.01)
    assert res.converged and res.warm_start
    assert res.energy == pytest.approx(first.energy, rel=0.02)


@pytest.mark.gpu
def test_cupy_positions_give_cupy_results():
    import cupy as cp

    atoms = _fragment()
    cpu = _calc(atoms, spacing=0.6).compute()
    gpu_calc = _calc(atoms, spacing=0.6, backend="cuda")
    res = gpu_calc.compute(cp.asarray(atoms.positions))
    assert isinstance(res.forces, cp.ndarray) and isinstance(res.potentials, cp.ndarray)
    assert isinstance(gpu_calc.phi_rf, cp.ndarray)  # the warm start stays on the device
    assert res.energy == pytest.approx(cpu.energy, rel=1e-4)
    scale = np.abs(cpu.forces).max()
    np.testing.assert_allclose(cp.asnumpy(res.forces), cpu.forces, atol=1e-3 * scale)
    warm = gpu_calc.compute(cp.asarray(atoms.positions + 0.002))
    assert warm.warm_start and warm.iterations < res.iterations
