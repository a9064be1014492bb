"""The multilevel φ_c of pbsolver.backends.cpu.coulomb_fast against the float64 direct sum.

Random molecules (odd shapes, anisotropic spacings, atoms on, near and off nodes, inside and
outside the grid, large and tiny charges) with the hierarchy forced to 2–4 grids; a protein's
polar solvation energy with either φ_c; the single-charge interpolation error against its
estimate; the choice of "auto" and the refusals.
"""

from __future__ import annotations

import dataclasses
import itertools

import numba
import numpy as np
import pytest
from scipy.spatial import cKDTree

import pbsolver as pb
from pbsolver.backends import get_backend
from pbsolver.backends.bodies import multilevel as ML
from pbsolver.backends.cpu import coulomb_fast as CF
from pbsolver.backends.cpu import maps as CM
from pbsolver.backends.cpu.backend import CPUBackend
from pbsolver.molecule import maps
from pbsolver.molecule.energy import reaction_field_energy

#: The accuracy promised on the nodes farther than a spacing from every charged atom,
#: relative to the largest |φ_c| there.
FAR_RTOL = 1e-6


def direct(shape, origin, spacing, pos, q):
    return CM.coulomb_sum(shape, origin, spacing, pos, q, 1.0, method="direct")


def far_nodes(shape, origin, spacing, charged):
    """Nodes farther than the largest spacing from every charged atom."""
    axes = [o + h * np.arange(n) for n, o, h in zip(shape, origin, spacing, strict=True)]
    pts = np.stack(np.meshgrid(*axes, indexing="ij"), -1).reshape(-1, 3)
    dist, _ = cKDTree(charged).query(pts)
    return dist.reshape(shape) > max(spacing)


def compare(shape, origin, spacing, pos, q, **options):
    """Fast vs direct: the far-node error (relative) and the near-node check."""
    ref = direct(shape, origin, spacing, pos, q)
    fast = CF.coulomb_multilevel(shape, origin, spacing, pos, q, 1.0, **options)
    far = far_nodes(shape, origin, spacing, pos[q != 0])
    # the condition Σ|q|/r of each node's sum (inf on an atom) bounds its rounding
    cond = direct(shape, origin, spacing, pos, np.abs(q))
    scale = np.abs(ref[far]).max()
    far_err = np.abs(fast[far] - ref[far]).max() / scale
    near = ~far
    # infinities and NaNs where the direct sum has them (the nodes on an atom) ...
    assert np.array_equal(np.isnan(fast), np.isnan(ref))
    assert np.array_equal(fast[np.isinf(ref)], ref[np.isinf(ref)])
    # ... and near an atom the far nodes' accuracy (plus the sum's own rounding, which grows
    # with Σ|q|/r there)
    fin = near & np.isfinite(ref)
    assert np.all(np.abs(fast[fin] - ref[fin]) <= FAR_RTOL * scale + 1e-13 * cond[fin])
    assert np.all(np.isfinite(fast[far]))
    return far_err, fast, ref


def random_molecule(rng, shape, origin, spacing, n_in=60):
    """Atoms inside, on, next to and outside the grid, with large and tiny charges."""
    lo = np.asarray(origin)
    hi = lo + (np.asarray(shape) - 1) * np.asarray(spacing)
    h = np.asarray(spacing)
    inside = rng.uniform(lo + 0.2 * (hi - lo), hi - 0.2 * (hi - lo), (n_in, 3))
    idx = [rng.integers(1, n - 1, 3) for n in shape]
    on = lo + np.stack(idx, axis=1) * h  # exactly on three nodes
    hair = on[:1] + 1e-9 * h  # within the on-node tolerance of the first
    nudged = on[:1] + np.array([0.3, -0.2, 0.1]) * h
    centre = 0.5 * (lo + hi)
    outside = np.array([
        [lo[0] - 1.5, centre[1], centre[2]],  # just beyond a face
        [centre[0], hi[1] + 4.0, centre[2]],
        [hi[0] + 25.0, hi[1] + 3.0, lo[2] - 9.0],  # far away
        [lo[0] - 0.4 * h[0], lo[1] + 2 * h[1], lo[2] + 3 * h[2]],  # just off the first layer
        [centre[0], centre[1], 1e7],  # out of all reach
    ])  # fmt: skip
    pos = np.vstack([inside, on, hair, nudged, outside])
    q = rng.normal(0.0, 0.5, len(pos))
    q[3] = 25.0  # large
    q[4] = -17.0
    q[5] = 1e-9  # tiny
    q[6] = 0.0  # uncharged (ignored)
    return pos, q


@pytest.mark.parametrize(
    ("shape", "spacing", "levels"),
    [
        ((37, 44, 29), (0.43, 0.5, 0.61), 2),
        ((37, 44, 29), (0.43, 0.5, 0.61), 3),
        ((33, 30, 52), (0.3, 0.3, 0.55), 4),
        ((41, 41, 41), (0.35, 0.35, 0.35), 3),
    ],
)
def test_random_molecules_match_direct_sum(shape, spacing, levels):
    rng = np.random.default_rng(sum(shape) + levels)
    origin = tuple(rng.uniform(-5.0, 5.0, 3))
    pos, q = random_molecule(rng, shape, origin, spacing)
    err, _, _ = compare(shape, origin, spacing, pos, q, levels=levels)
    assert err <= FAR_RTOL


def test_dense_cluster_and_large_reach():
    """A protein-dense cluster; a larger reach is more accurate (the estimate's trend)."""
    rng = np.random.default_rng(7)
    shape, spacing = (49, 49, 49), (0.4, 0.4, 0.4)
    origin = (0.0, 0.0, 0.0)
    pos = rng.uniform(6.0, 13.0, (400, 3))  # about one atom per 1 Å³
    q = rng.normal(0.0, 0.4, len(pos))
    errs = [compare(shape, origin, spacing, pos, q, levels=3, reach=u)[0] for u in (8.5, 11.0)]
    assert errs[0] <= FAR_RTOL
    assert errs[1] < errs[0]


def test_opposite_charges_on_one_node_give_nan_like_direct_sum():
    shape, spacing, origin = (30, 31, 32), (0.5, 0.5, 0.5), (0.0, 0.0, 0.0)
    rng = np.random.default_rng(3)
    pos = np.vstack([rng.uniform(3.0, 12.0, (30, 3)), [[5.0, 5.0, 5.0], [5.0, 5.0, 5.0]]])
    q = np.concatenate([rng.normal(0.0, 0.5, 30), [1.0, -0.5]])
    err, fast, _ = compare(shape, origin, spacing, pos, q, levels=3)
    assert np.isnan(fast[10, 10, 10])
    assert err <= FAR_RTOL


def test_same_result_on_any_number_of_threads():
    rng = np.random.default_rng(11)
    shape, spacing, origin = (45, 38, 41), (0.45, 0.5, 0.4), (1.0, -2.0, 0.5)
    pos, q = random_molecule(rng, shape, origin, spacing)
    threads = numba.get_num_threads()
    outs = []
    try:
        for n in sorted({1, threads}):
            numba.set_num_threads(n)
            outs.append(CF.coulomb_multilevel(shape, origin, spacing, pos, q, 1.0, levels=3))
    finally:
        numba.set_num_threads(threads)
    outs.append(CF.coulomb_multilevel(shape, origin, spacing, pos, q, 1.0, levels=3))
    for a, b in itertools.pairwise(outs):
        np.testing.assert_array_equal(a, b)


def test_single_charge_error_below_estimate():
    """1/r of one charge interpolated at fine nodes (NumPy, independent of the kernels)."""
    rng = np.random.default_rng(5)
    p = CF.ORDER
    w = ML.midpoint_weights(p)
    offsets = np.arange(1 - p // 2, p // 2 + 1)  # stencil of the midpoint between 0 and 1
    for reach in (CF.REACH, CF.REACH + 2.0):
        worst = 0.0
        for _ in range(400):
            parity = rng.integers(0, 2, 3)
            parity[rng.integers(0, 3)] = 1  # at least one axis interpolated
            x = 0.5 * parity  # the fine node, in coarse spacings (H = 1)
            d = rng.normal(size=3)
            atom = x + reach * rng.uniform(1.0, 1.3) * d / np.linalg.norm(d)
            axes = [offsets if par else np.array([0]) for par in parity]
            weights = [w if par else np.array([1.0]) for par in parity]
            grid = np.stack(np.meshgrid(*axes, indexing="ij"), -1)
            k = 1.0 / np.linalg.norm(grid - atom, axis=-1)
            interp = np.einsum("i,j,k,ijk->", *weights, k)
            worst = max(worst, abs(interp - 1.0 / np.linalg.norm(x - atom)))
        assert worst <= ML.pair_error_estimate(p, reach)


def test_prolongation_reproduces_polynomials():
    shape, spacing, origin = (13, 20, 17), (0.5, 0.6, 0.7), (-1.0, 0.5, 2.0)
    org, sp, shp = ML.coarse_level(origin, spacing, shape, CF.PAD)

    def poly(x, y, z):  # degree ORDER − 1 along each axis
        d = CF.ORDER - 1
        return (x - 1.3) ** d * (y + 0.2) ** 2 - 0.5 * z**d + x * y * z

    def values(org, sp, shp):
        axes = [o + h * np.arange(n) for o, h, n in zip(org, sp, shp, strict=True)]
        return poly(*np.meshgrid(*axes, indexing="ij"))

    fine = CF.prolong(values(org, sp, shp), shape)
    exact = values(origin, spacing, shape)
    np.testing.assert_allclose(fine, exact, rtol=0, atol=1e-9 * np.abs(exact).max())


def test_midpoint_weights():
    np.testing.assert_allclose(ML.midpoint_weights(4), np.array([-1, 9, 9, -1]) / 16, rtol=0)
    for p in ML.ORDERS:
        w = ML.midpoint_weights(p)
        x = np.arange(1 - p // 2, p // 2 + 1)
        for deg in range(p):  # exact for polynomials below degree p
            assert abs(w @ x.astype(float) ** deg - 0.5**deg) < 1e-12
        assert ML.lebesgue_midpoint(p) == pytest.approx(np.abs(w).sum())
    with pytest.raises(ValueError, match="order"):
        ML.midpoint_weights(5)


def test_protein_energy_and_map_unchanged():
    """1LPB chain A: φ_c by the fast sum moves the polar solvation energy < 1e-6 relative."""
    atoms = pb.read_pqr(pb.data.path("1lpb_chainA.pqr"))
    grid = maps.grid_for_atoms(atoms, 0.7, margin=5.0)
    m = maps.build_maps(atoms, grid, maps_backend=CPUBackend(coulomb="direct"))
    fast = maps.coulomb_potential(atoms, grid, m.eps_cavity, backend=CPUBackend(coulomb="fast"))
    assert CF.plan_levels(grid.shape, grid.origin, grid.spacing, len(atoms))[0][0].reach > 0
    far = far_nodes(grid.shape, grid.origin, grid.spacing, atoms.positions[atoms.charges != 0])
    ref = m.phi_coulomb
    assert np.abs(fast[far] - ref[far]).max() <= FAR_RTOL * np.abs(ref[far]).max()
    # float32 sweeps refined in float64 far below the change looked for
    solver = pb.Solver(method="multigrid", backend="cpu", rtol=1e-9)
    energies = []
    for phi_c in (ref, fast):
        problem = pb.Problem.from_maps(dataclasses.replace(m, phi_coulomb=phi_c))
        res = solver.solve(problem)
        assert res.converged
        energies.append(reaction_field_energy(atoms, grid, res.phi_rf))
    assert abs(energies[1] / energies[0] - 1.0) <= 1e-6


def test_auto_choice_and_refusals():
    big, small = (161, 161, 161), (33, 33, 33)
    assert CF.use_fast("auto", big, (0.5,) * 3, 2000)
    assert not CF.use_fast("auto", big, (0.5,) * 3, 2000, periodic=True)
    assert not CF.use_fast("auto", small, (0.5,) * 3, 50)  # below AUTO_MIN_PAIRS
    # a one-level plan ties with the direct sum's estimate: the fast sum's finite kernel
    assert len(CF.plan_levels((41,) * 3, (0.0,) * 3, (0.5,) * 3, 1250)[0]) == 1
    assert CF.use_fast("auto", (41,) * 3, (0.5,) * 3, 1250)
    assert not CF.use_fast("direct", big, (0.5,) * 3, 2000)
    assert CF.use_fast("fast", small, (0.5,) * 3, 50)
    with pytest.raises(pb.InputError, match="periodic"):
        CF.use_fast("fast", small, (0.5,) * 3, 50, periodic=True)
    with pytest.raises(pb.InputError, match="coulomb method"):
        CPUBackend(coulomb="multipole")
    with pytest.raises(pb.InputError, match="finite"):
        CF.coulomb_multilevel(small, (0.0,) * 3, (0.5,) * 3, [[np.nan, 1.0, 1.0]], [1.0], 1.0)
    # the backend option reaches the map kernels; a periodic box keeps the direct sum
    atoms = pb.Atoms([[1.0, 2.0, 1.5], [3.0, 2.5, 2.0]], [0.5, -0.5], [1.5, 1.5])
    grid = pb.Grid((16, 16, 16), spacing=0.5)
    box = (8.0, 8.0, 8.0)
    auto = maps.coulomb_potential(atoms, grid, 2.0, box=box, backend=CPUBackend())
    ref = maps.coulomb_potential(atoms, grid, 2.0, box=box, backend=CPUBackend(coulomb="direct"))
    np.testing.assert_array_equal(auto, ref)
    with pytest.raises(pb.InputError, match="periodic"):
        maps.coulomb_potential(atoms, grid, 2.0, box=box, backend=CPUBackend(coulomb="fast"))
    assert get_backend("cpu").map_kernels() is CM.KERNELS


def test_a_focused_grid_counts_only_the_atoms_its_levels_correct():
    """A grid inside a large cluster (APBS's fine focusing grids): most atoms' reach misses the
    levels' boxes, so the plan with positions costs less and may go deeper; its map still
    equals the direct sum to the far nodes' accuracy."""
    rng = np.random.default_rng(11)
    pos = rng.uniform(-30.0, 30.0, (3000, 3))
    q = rng.normal(0.0, 0.4, len(pos))
    shape, spacing = (41, 45, 39), (0.3, 0.3, 0.3)
    origin = (-6.0, -6.6, -5.7)
    plain, ns_plain = CF.plan_levels(shape, origin, spacing, len(pos))
    focused, ns_focused = CF.plan_levels(shape, origin, spacing, len(pos), pos=pos)
    assert ns_focused < ns_plain
    assert len(focused) > len(plain)  # here: the direct sum, against two levels
    # with no atom near the box, only the top's direct sum and the prolongations are left
    far = pos + 500.0
    _, ns_far = CF.plan_levels(shape, origin, spacing, len(pos), levels=2, pos=far)
    top = CF.plan_levels(shape, origin, spacing, len(pos), levels=2)[0][-1]
    assert ns_far == pytest.approx(CF.COST_PAIR * len(pos) * top.size
                                   + CF.COST_PROLONG * int(np.prod(shape)))  # fmt: skip
    err, _, _ = compare(shape, origin, spacing, pos, q)
    assert err <= FAR_RTOL
