"""Focusing (APBS mg-auto): the grids, the interpolated boundary values, the focused energy.

The reference of a focused calculation is the single fine grid that focusing approximates: the
spacing of the finest level over the whole coarsest box, with the coarsest box's boundary
values, on nodes that coincide with the finest level's. Its solution, given as the finest
level's Dirichlet values, must come back on the finest level (every interior equation is the
same); a coarse solve's values instead carry that coarse solution's error in φ_rf at the fine
box's edge, which is what the energy tolerances below bound.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import pbsolver as pb
from pbsolver.molecule import focusing
from pbsolver.molecule.energy import interpolate, solvate
from pbsolver.molecule.focusing import apbs_focus_grids, focus_grids, focus_values
from pbsolver.molecule.maps import build_maps


def random_molecule(rng, n=25, spread=3.0, dipolar=False):
    pos = rng.normal(0.0, spread, (n, 3))
    radii = rng.uniform(1.0, 2.0, n)
    radii[:3] = 0.0  # bare charges inside other atoms, as a PQR's hydrogens
    q = rng.normal(0.0, 0.5, n)
    if dipolar:
        # a neutral molecule with a large dipole: the far field that a Debye–Hückel sum over
        # atoms in pure solvent misses (the low-ε cavity raises the dipole's field by up to 1.5×)
        axis = rng.normal(size=3)
        q = np.sign(pos @ axis) * rng.uniform(0.2, 0.8, n)
        q -= q.mean()
    return pb.Atoms(pos, q, radii)


def big_grid(grids, spacing):
    """The finest level's spacing over the whole coarsest box, on the finest level's nodes.

    It is the coarsest box itself where the finest level's nodes fall on its corner (the grids
    of :func:`focus_grids` with the default centres), else it sticks out by less than a spacing.
    """
    clo, flo = np.asarray(grids[0].origin), np.asarray(grids[-1].origin)
    chi = clo + np.asarray(grids[0].lengths)
    lo = flo - np.ceil((flo - clo) / spacing - 1e-9) * spacing
    shape = tuple(np.ceil((chi - lo) / spacing - 1e-9).astype(int) + 1)
    return pb.Grid(shape, spacing=spacing, origin=tuple(lo))


# ---------------------------------------------------------------------- the grids
@pytest.mark.parametrize(
    ("ratio", "levels"), [(1.0, 2), (0.5, 2), (0.25, 2), (0.2, 3), (1 / 16, 3), (0.06, 4)]
)
def test_levels_reduce_the_spacing_by_at_most_4(ratio, levels):
    # APBS: never more than 4× finer per level; the reduction is the same at every level
    fc = np.array([1.0, 2.0, 3.0]) + np.array([3.0, 0.0, -2.0]) * (1.0 - ratio)
    grids = apbs_focus_grids((33, 41, 25), (80.0, 90.0, 70.0), np.multiply(ratio, (80, 90, 70)),
                             (1.0, 2.0, 3.0), fc)  # fmt: skip
    assert len(grids) == levels == max(2, math.ceil(math.log(ratio) / math.log(0.25) - 1e-12) + 1)
    assert all(g.shape == (33, 41, 25) for g in grids)
    h = np.array([g.spacing for g in grids])
    np.testing.assert_allclose(h[0], np.array([80.0, 90.0, 70.0]) / np.array([32, 40, 24]))
    np.testing.assert_allclose(h[-1], h[0] * ratio, rtol=1e-12)
    steps = h[1:] / h[:-1]
    np.testing.assert_allclose(steps, np.broadcast_to(steps[0], steps.shape), rtol=1e-12)
    assert np.all(steps >= 0.25 - 1e-12)
    assert grids[0].center == pytest.approx((1.0, 2.0, 3.0))
    assert grids[-1].center == pytest.approx(tuple(fc))
    focusing.check_nested(grids)


def test_intermediate_levels_move_back_inside_and_a_finest_outside_is_refused(rng):
    for _ in range(20):
        cglen = rng.uniform(50.0, 120.0, 3)
        fglen = cglen * rng.uniform(0.02, 0.2, 3)
        cc = rng.uniform(-5.0, 5.0, 3)
        # the fine centre anywhere the fine box still fits in the coarse one
        fc = cc + rng.uniform(-1.0, 1.0, 3) * 0.5 * (cglen - fglen)
        grids = apbs_focus_grids(rng.integers(9, 40, 3), cglen, fglen, cc, fc)
        assert len(grids) >= 3
        focusing.check_nested(grids)  # every level inside the one before it
        np.testing.assert_allclose(grids[-1].center, fc, atol=1e-9)
        np.testing.assert_allclose(grids[-1].lengths, fglen, rtol=1e-12)
    with pytest.raises(pb.InputError, match="finest focusing grid .* sticks out .* along y"):
        apbs_focus_grids(33, 50.0, 10.0, (0, 0, 0), (0, 21.0, 0))
    with pytest.raises(pb.InputError, match="fglen .* must not exceed cglen"):
        apbs_focus_grids(33, (50.0, 50.0, 50.0), (10.0, 60.0, 10.0), (0, 0, 0), (0, 0, 0))
    with pytest.raises(pb.InputError, match="dime"):
        apbs_focus_grids((33, 2, 33), 50.0, 10.0, (0, 0, 0), (0, 0, 0))
    with pytest.raises(pb.InputError, match="cglen"):
        apbs_focus_grids(33, -50.0, 10.0, (0, 0, 0), (0, 0, 0))
    with pytest.raises(pb.InputError, match="fgcent"):
        apbs_focus_grids(33, 50.0, 10.0, (0, 0, 0), (0, float("nan"), 0))


def test_focus_grids_keep_the_fine_grid_of_from_atoms(rng):
    a = random_molecule(rng)
    grids = focus_grids(a, (0.5, 0.45, 0.55), margin=3.0)
    fine = pb.molecule.maps.grid_for_atoms(a, (0.5, 0.45, 0.55), 3.0)
    assert grids[-1] == fine and len(grids) == 2
    np.testing.assert_allclose(grids[0].lengths, 2 * np.asarray(fine.lengths), rtol=1e-12)
    site = a.positions[0]
    on_site = focus_grids(a, 0.5, length=6.0, center=site, coarse_length=40.0)
    assert on_site[-1].center == pytest.approx(tuple(site)) and on_site[-1].shape == (13, 13, 13)
    assert on_site[0].lengths == pytest.approx((40.0, 40.0, 40.0))
    assert len(on_site) == 3  # 40/12 Å to 0.5 Å: more than 4× needs two reductions
    with pytest.raises(pb.InputError, match="coarse_length .* shorter"):
        focus_grids(a, 0.5, margin=3.0, coarse_length=5.0)
    with pytest.raises(pb.InputError, match="shape or length"):
        focus_grids(a, 0.5, shape=(17, 17, 17), length=6.0)


def test_check_nested_names_the_level_and_the_overhang():
    coarse = pb.Grid((11, 11, 11), spacing=1.0)
    inside = pb.Grid((11, 11, 11), spacing=0.5, origin=(5.0, 0.0, 2.5))
    assert focusing.check_nested([coarse, inside]) == [coarse, inside]
    out = pb.Grid((11, 11, 11), spacing=0.5, origin=(0.0, 0.0, 5.25))
    with pytest.raises(pb.InputError, match="focus grid 1 sticks out of focus grid 0 by 0.25 Å "
                                            "along z"):  # fmt: skip
        focusing.check_nested([coarse, out])
    for bad in ([], coarse, [coarse, "grid"]):
        with pytest.raises(pb.InputError, match="focus"):
            focusing.check_nested(bad)


# ---------------------------------------------------------------------- the values
def test_focus_values_interpolate_the_coarse_field(rng):
    coarse = pb.Grid((13, 11, 9), spacing=(0.9, 1.1, 1.3), origin=tuple(rng.normal(0, 2, 3)))
    lo = np.asarray(coarse.origin) + rng.uniform(0.0, 2.0, 3)
    fine = pb.Grid((15, 9, 11), spacing=(0.4, 0.6, 0.35), origin=tuple(lo))
    x, y, z = coarse.coordinates()
    linear = 3.0 * x - 2.0 * y + 0.5 * z + 7.0  # trilinear interpolation is exact on it
    got = focus_values(fine, coarse, linear)
    fx, fy, fz = fine.coordinates()
    np.testing.assert_allclose(got, 3.0 * fx - 2.0 * fy + 0.5 * fz + 7.0, rtol=1e-12, atol=1e-9)
    # any field: the same values as the sampling of energies, node by node
    field = rng.normal(size=coarse.shape)
    pts = np.stack(np.broadcast_arrays(fx, fy, fz), axis=-1).reshape(-1, 3)
    want = interpolate(coarse, field, pts).reshape(fine.shape)
    np.testing.assert_allclose(focus_values(fine, coarse, field), want, rtol=1e-12, atol=1e-12)
    # on a grid's own nodes (binary spacings: exact cell positions; the last node clamped
    # into the last cell): the field itself
    exact = pb.Grid(coarse.shape, spacing=(0.5, 0.25, 1.0), origin=(0.0, 0.0, 0.0))
    np.testing.assert_array_equal(focus_values(exact, exact, field), field)
    with pytest.raises(pb.InputError, match="sticks out"):
        focus_values(coarse, fine, field)
    with pytest.raises(pb.InputError, match="coarse field has shape"):
        focus_values(fine, coarse, field[1:])


def test_exact_boundary_values_give_back_the_big_solution(rng):
    # a fine box that cuts through the molecule, with the big grid's own solution on its outer
    # layer: its maps (atoms outside included) and solution are the big grid's on its nodes.
    # vdW surface: exact geometry on any grid (the SES samples its reentrant zone along each
    # grid line from where the line enters it, so a shorter line may sample it elsewhere)
    a = random_molecule(rng, n=20)
    h = 0.5
    big = pb.molecule.maps.grid_for_atoms(a, h, 5.0)
    i0 = np.array(big.shape) // 2 - 6
    fine = pb.Grid((15, 13, 17), spacing=h, origin=tuple(np.asarray(big.origin) + i0 * h))
    assert np.any(focusing.finest_level([big, fine], a.positions) == 0)  # atoms outside it
    assert np.any(focusing.finest_level([big, fine], a.positions) == 1)
    physics = pb.PhysicsOptions(ionic_strength=0.15, surface="vdw")
    solver = pb.Solver(backend="cpu", method="multigrid", rtol=1e-10)
    m_big = build_maps(a, big, physics=physics)
    r_big = solver.solve(pb.Problem.from_maps(m_big))
    values = focus_values(fine, big, r_big.phi_rf)
    m_fine = build_maps(a, fine, physics=physics, dirichlet_values=values)
    sl = tuple(slice(i, i + n) for i, n in zip(i0, fine.shape, strict=True))
    for axis in range(3):  # the faces inside the fine box (the last layer leaves it)
        inner = tuple(slice(0, -1) if k == axis else slice(None) for k in range(3))
        np.testing.assert_allclose(m_fine.epsilon_faces[axis][inner],
                                   m_big.epsilon_faces[axis][sl][inner], rtol=1e-12)  # fmt: skip
    np.testing.assert_allclose(m_fine.phi_coulomb, m_big.phi_coulomb[sl], rtol=1e-13)
    np.testing.assert_allclose(m_fine.kappa2, m_big.kappa2[sl], rtol=1e-13, atol=1e-15)
    r_fine = solver.solve(pb.Problem.from_maps(m_fine))
    scale = float(np.abs(r_big.phi_rf).max())
    np.testing.assert_allclose(r_fine.phi_rf, r_big.phi_rf[sl], rtol=0, atol=1e-7 * scale)


# ---------------------------------------------------------------------- the energy
def focus_and_references(a, grids, **kw):
    """Energies: focused, the big single grid, and the finest grid alone with mdh values."""
    h = grids[-1].spacing[0]
    big = solvate(a, problem_options={"grid": big_grid(grids, h)}, **kw).energy
    focused = solvate(a, focus=grids, **kw)
    alone = solvate(a, problem_options={"grid": grids[-1]}, **kw).energy
    return focused, big, alone


@pytest.mark.parametrize("salt", [0.0, 0.15])
def test_focusing_is_closer_to_the_big_grid_than_mdh_on_the_fine_box(rng, salt):
    # A neutral dipolar molecule (SES) in a box 2 Å from its spheres: the fine box's
    # Debye–Hückel values miss the cavity's boost of the dipole field (measured 4e-4…1.3e-3
    # relative on 6 molecules), the coarse solve (2× the spacing, boundary 4× as far) much
    # less (2.4e-4…5.2e-4, the coarse φ_rf's own error at the fine edge): 0.1 % bounds it
    a = random_molecule(rng, n=30, dipolar=True)
    grids = focus_grids(a, 0.5, margin=2.0)
    focused, big, alone = focus_and_references(a, grids, backend="cpu", surface="mol",
                                               ionic_strength=salt)  # fmt: skip
    assert abs(focused.energy / big - 1) < 1e-3
    assert abs(focused.energy - big) < abs(alone - big)
    assert [lv.grid for lv in focused.levels] == grids
    assert np.all(focused.atom_levels == 1)
    assert focused.problem is focused.levels[-1].problem


def test_focusing_random_molecules_within_tolerance(rng):
    # random charges, SES: the focused energy within 0.1 % of the big grid's (measured
    # 0.6…2.1 × 1e-4 on 6 molecules with a 2× coarser level: the coarse φ_rf's error at the fine
    # edge). The fine box alone with mdh values is as good here (1e-4…3e-4): a small molecule's
    # far field is mostly its charge, which a Debye–Hückel sum gets right
    a = random_molecule(rng, n=20, spread=2.5)
    grids = focus_grids(a, 0.5, margin=3.0)
    focused, big, _ = focus_and_references(a, grids, backend="cpu", surface="mol",
                                           ionic_strength=0.1)  # fmt: skip
    assert abs(focused.energy / big - 1) < 1e-3
    assert focused.rf_terms.sum() == pytest.approx(focused.energy, rel=1e-12)


def test_three_levels_within_tolerance(rng):
    # a coarse box 4.5× the fine one: two reductions (2.7 → 1.27 → 0.6 Å); each level's edge
    # carries the coarser solve's error, the coarsest's at 2.7 Å the largest (measured
    # 3.3e-4…9.3e-4 relative on 4 small SES molecules in salt): 0.2 % bounds it
    a = random_molecule(rng, n=12, spread=2.0, dipolar=True)
    fine = focus_grids(a, 0.6, margin=2.0)[-1]
    grids = focus_grids(a, 0.6, margin=2.0, coarse_length=4.5 * np.asarray(fine.lengths))
    assert len(grids) == 3 and grids[-1] == fine
    focused, big, _ = focus_and_references(a, grids, backend="cpu", surface="mol",
                                           ionic_strength=0.1)  # fmt: skip
    assert abs(focused.energy / big - 1) < 2e-3
    assert [lv.result.converged for lv in focused.levels] == [True] * 3


def test_focusing_a_protein(rng):
    # colipase (1252 atoms, net −2 e, SES): focusing at 1 Å in a box 3 Å from the spheres,
    # inside a coarse box twice as long, against the single 1 Å grid over the coarse box
    # (measured: focused 2.6e-4 off, the fine box alone with mdh values 5.8e-4 off)
    a = pb.read_pqr(pb.data.path("1lpb_chainA.pqr"))
    grids = focus_grids(a, 1.0, margin=3.0)
    focused, big, alone = focus_and_references(a, grids, backend="cpu", method="multigrid")
    assert abs(focused.energy / big - 1) < 1e-3
    assert abs(focused.energy - big) < abs(alone - big)


def test_atoms_outside_the_finest_grid_use_the_coarser_levels(rng):
    # a binding-site box around one atom: APBS' total adds the atoms outside the fine box on
    # the coarser level's potential; pbsolver's per-atom terms do the same, so they add up
    a = random_molecule(rng, n=20)
    site = a.positions[np.argmax(a.radii)]
    grids = focus_grids(a, 0.5, length=6.0, center=site, coarse_length=30.0)
    sol = solvate(a, focus=grids, backend="cpu", surface="vdw")
    which = focusing.finest_level(grids, a.positions)
    np.testing.assert_array_equal(sol.atom_levels, which)
    assert set(which) >= {0, len(grids) - 1}
    for k, level in enumerate(sol.levels):
        sel = which == k
        want = interpolate(level.grid, level.result.phi_rf, a.positions[sel])
        np.testing.assert_allclose(sol.potentials[sel], want, rtol=1e-12)
    assert sol.rf_terms.sum() == pytest.approx(sol.energy, rel=1e-12)
    # the site's own terms agree with the single fine grid over the coarse box
    big = solvate(a, backend="cpu", surface="vdw",
                  problem_options={"grid": big_grid(grids, 0.5)})  # fmt: skip
    inner = which == len(grids) - 1
    np.testing.assert_allclose(sol.rf_terms[inner], big.rf_terms[inner], rtol=0.01, atol=0.05)


def test_focus_true_is_focus_grids_with_spacing_and_margin(rng):
    a = random_molecule(rng, n=8, spread=1.5)
    kw = {"backend": "cpu", "surface": "vdw", "spacing": 0.6, "margin": 2.5}
    auto = solvate(a, focus=True, **kw)
    explicit = solvate(a, focus=focus_grids(a, 0.6, margin=2.5), **kw)
    assert auto.energy == explicit.energy
    assert [lv.grid for lv in auto.levels] == [lv.grid for lv in explicit.levels]


def test_bad_focusing_input_is_refused(rng):
    a = random_molecule(rng, n=8, spread=1.5)
    grids = focus_grids(a, 0.6, margin=2.5)
    kw = {"backend": "cpu", "surface": "vdw"}
    with pytest.raises(pb.InputError, match=r"places its grids itself; drop \['shape'\]"):
        solvate(a, focus=grids, problem_options={"shape": (9, 9, 9)}, **kw)
    with pytest.raises(pb.InputError, match="Dirichlet"):
        solvate(a, focus=grids, problem_options={"boundary": "periodic"}, **kw)
    with pytest.raises(pb.InputError, match="sticks out"):
        solvate(a, focus=grids[::-1], **kw)
    tiny = pb.Grid((9, 9, 9), spacing=0.2, origin=tuple(a.positions[0]))
    with pytest.raises(pb.InputError, match="outside the grid's outer layer"):
        solvate(a, focus=[tiny], **kw)  # the coarsest grid must hold every atom
    with pytest.raises(pb.InputError, match="dirichlet_values only apply"):
        build_maps(a, physics=pb.PhysicsOptions(surface="vdw"), boundary="periodic",
                   box=(20.0, 20.0, 20.0), dirichlet_values=np.zeros((4, 4, 4)))  # fmt: skip


@pytest.mark.gpu
def test_focusing_on_the_gpu_matches_the_cpu(rng):
    a = random_molecule(rng, n=20)
    grids = focus_grids(a, 0.5, margin=3.0)
    cpu = solvate(a, focus=grids, backend="cpu", surface="mol", rtol=1e-7)
    gpu = solvate(a, focus=grids, backend="cuda", surface="mol", rtol=1e-7)
    assert gpu.levels[-1].result.backend == "cuda"
    assert gpu.energy == pytest.approx(cpu.energy, rel=1e-5)
    np.testing.assert_allclose(gpu.potentials, cpu.potentials, rtol=1e-4, atol=1e-3)


@pytest.mark.gpu
def test_focused_solves_on_maps_left_on_the_gpu_equal_those_on_host_maps(rng):
    """``on_device=True``: every level's maps are CuPy arrays with the host maps' values, and
    the solves the same (SES smoothed, salt: every map kernel, the screened focus values).

    The finer levels' Dirichlet values are interpolated on the GPU from the coarser solution
    (the CPU's bodies; the GPU compiler may fuse a multiply and an add): equal to rounding."""
    cp = pytest.importorskip("cupy")
    from pbsolver.arrays import to_numpy

    a = random_molecule(rng, n=20)
    grids = focus_grids(a, 0.5, margin=3.0)
    opts = dict(physics=pb.PhysicsOptions(surface="smol", ionic_strength=0.1),
                solver=pb.Solver(backend="cuda", rtol=1e-8), maps_backend="cuda")  # fmt: skip
    host = focusing.solve_focused(a, grids, **opts)
    dev = focusing.solve_focused(a, grids, **opts, on_device=True)
    for k, (h, d) in enumerate(zip(host, dev, strict=True)):
        p, q = h.problem, d.problem
        mine = (*p.epsilon_faces, p.kappa2, p.phi_coulomb)
        theirs = (*q.epsilon_faces, q.kappa2, q.phi_coulomb)
        for x, y in zip(mine, theirs, strict=True):
            assert isinstance(x, np.ndarray) and isinstance(y, cp.ndarray)
            np.testing.assert_array_equal(cp.asnumpy(y), x)
        assert isinstance(q.boundary_values, cp.ndarray)
        if k == 0:  # the Debye–Hückel kernels' values
            np.testing.assert_array_equal(cp.asnumpy(q.boundary_values), p.boundary_values)
        else:
            np.testing.assert_allclose(cp.asnumpy(q.boundary_values), p.boundary_values,
                                       rtol=1e-13, atol=1e-14)  # fmt: skip
        ref = to_numpy(h.result.phi_rf)
        np.testing.assert_allclose(to_numpy(d.result.phi_rf), ref, rtol=0,
                                   atol=1e-12 * np.abs(ref).max())  # fmt: skip


@pytest.mark.gpu
def test_fields_on_the_gpu_are_sampled_there(rng):
    """A CuPy potential is sampled on its device (atoms' values and gradients; a finer grid's
    focus values, left on the device): the host loops' values to rounding."""
    cp = pytest.importorskip("cupy")
    from pbsolver.molecule.energy import sample_field

    coarse = pb.Grid((23, 19, 26), spacing=(0.9, 1.1, 0.8), origin=(-9.0, -8.0, -10.0))
    fine = pb.Grid((31, 29, 33), spacing=0.45, origin=(-6.3, -5.0, -6.6))
    field = rng.normal(0.0, 1.0, coarse.shape) * np.exp(rng.uniform(-3, 3, coarse.shape))
    points = rng.uniform(coarse.origin, np.asarray(coarse.origin) + coarse.lengths, (200, 3))
    for interpolation in ("linear", "cubic"):
        want = sample_field(coarse, field, points, interpolation=interpolation)
        got = sample_field(coarse, cp.asarray(field), points, interpolation=interpolation)
        for w, g in zip(want, got, strict=True):
            assert isinstance(g, np.ndarray)
            np.testing.assert_allclose(g, w, rtol=1e-13, atol=1e-13 * np.abs(w).max())
    want = focus_values(fine, coarse, field)
    got = focus_values(fine, coarse, cp.asarray(field))
    assert isinstance(got, cp.ndarray)
    np.testing.assert_allclose(cp.asnumpy(got), want, rtol=1e-13, atol=1e-13)
