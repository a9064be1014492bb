"""Exact forces (pbsolver.forces): every derivative against the map it differentiates, and the
forces against central differences of the energy at a fixed grid."""

from __future__ import annotations

import dataclasses
import logging

import numpy as np
import pytest
from analytic import born, kirkwood

import pbsolver as pb
import pbsolver.forces
from pbsolver.forces import solvation_forces
from pbsolver.forces.coulomb import (
    boundary_sensitivity,
    coulomb_sensitivity,
    node_points,
    outer_layer_points,
)
from pbsolver.forces.dielectric import fraction_sensitivities, smoothing_transpose
from pbsolver.forces.differences import central_difference_forces
from pbsolver.forces.interpolation import (
    interpolation_gradient,
    interpolation_transpose,
    stack_offsets,
)
from pbsolver.forces.ionic import ionic_gradient
from pbsolver.forces.lines import periodic_owners, union_gradient
from pbsolver.forces.ses import ses_gradient
from pbsolver.forces.smooth import smooth_gradient
from pbsolver.molecule import maps as M
from pbsolver.molecule.energy import interpolate, reaction_field_energy, sample_field, solvate
from pbsolver.molecule.kept import recording_lines
from pbsolver.operator import coefficients, interior_mask, residual, rhs

#: Float64 multigrid well below the finite differences' resolution.
SOLVER = {"method": "multigrid", "backend": "cpu", "rtol": 1e-10, "dtype": np.float64}
DELTA = 1e-3  # Å
#: Bisections to ~1e-14 Å: the maps' SES crossings then move smoothly with the atoms (at the
#: default 14 the energy is a staircase on the 1e-5 Å scale; see pbsolver.forces.ses).
FINE_BISECTION = 45
#: Central differences between the energy's kinks of the exact surfaces "vdw", "mol", "smol"
#: (at 1e-3 Å they straddle some: ~2e-3 to 3e-2).
SES_DELTA = 1e-5
HIGH_CONTRAST = {"eps_in": 2.0, "eps_out": 78.54}


def _molecule(seed, n=16, spread=1.8):
    """Random overlapping atoms (radii 1.2–2.0 Å, charges ±1 e): most lie near the surface."""
    rng = np.random.default_rng(seed)
    pos = rng.normal(0.0, spread, (n, 3))
    return pb.Atoms(pos, rng.uniform(-1.0, 1.0, n), rng.uniform(1.2, 2.0, n))


def _outermost(atoms, k):
    """The k atoms farthest from the centroid (on the surface)."""
    d = np.linalg.norm(atoms.positions - atoms.positions.mean(axis=0), axis=1)
    return np.argsort(d)[::-1][:k]


def _energy(atoms, grid, physics, solver, x0=None, interpolation="linear", **options):
    problem = pb.Problem.from_maps(M.build_maps(atoms, grid, physics=physics, **options))
    res = solver.solve(problem, x0=x0)
    periodic = problem.boundary == "periodic"
    energy = reaction_field_energy(atoms, grid, res.phi_rf, periodic=periodic,
                                   interpolation=interpolation)  # fmt: skip
    return energy, problem, res


def _check_against_differences(atoms, grid, physics, idx, *, tol=1e-3, method="multigrid",
                               delta=DELTA, rtol=SOLVER["rtol"], interpolation="linear",
                               **options):  # fmt: skip
    """Exact forces of ``idx`` vs central differences; returns (relative error, exact, fd)."""
    solver = pb.Solver(**{**SOLVER, "method": method, "rtol": rtol})
    _, problem, res = _energy(atoms, grid, physics, solver, **options)
    exact = solvation_forces(atoms, problem, res.phi_rf, physics=physics, solver=solver,
                             box=options.get("box"),
                             kappa_subsamples=options.get("kappa_subsamples", 4),
                             nbisect=options.get("nbisect", 14),
                             interpolation=interpolation)  # fmt: skip
    assert exact.result.converged

    def energy(pos):
        return _energy(atoms.with_positions(pos), grid, physics, solver, res.phi_rf,
                       interpolation=interpolation, **options)[0]  # fmt: skip

    fd = central_difference_forces(energy, atoms.positions, idx, delta)
    f = exact.forces[idx]
    rel = np.linalg.norm(f - fd) / np.linalg.norm(fd)
    assert rel <= tol, (rel, f, fd)
    np.testing.assert_allclose(sum(exact.parts.values()), exact.forces, rtol=1e-12, atol=1e-12)
    return rel, exact, fd, res


# ---------------------------------------------------------------------- each derivative
def _moved(atoms, i, a, d):
    pos = atoms.positions.copy()
    pos[i, a] += d
    return atoms.with_positions(pos)


def _fraction_case(surface, probe, box, origin, margin):
    """A small molecule, its grid (filling ``box`` when given), random sensitivities, and its
    spheres with their owners, periodic images included as :func:`M.face_fractions` makes them.
    """
    atoms = _molecule(1, n=8, spread=1.2)
    rng = np.random.default_rng(2)
    if box is not None:
        grid = M.grid_for_box(box, 0.5, origin=origin)
    else:
        grid = M.grid_for_atoms(atoms, 0.5, margin)
    sens = tuple(rng.normal(size=grid.shape) for _ in range(3))
    spheres = atoms.positions, atoms.radii, np.arange(len(atoms))
    if box is not None:
        spheres = periodic_owners(*spheres[:2], box, grid.origin,
                                  M.image_cutoff(atoms.radii, surface, probe))  # fmt: skip
    return atoms, grid, sens, spheres


def _assert_slopes_match_the_maps(atoms, sens, grad, fractions):
    """``grad`` of Σ S·f against central differences (1e-6 Å) of ``fractions(atoms)``."""

    def total(at):
        return sum(float((s * fi).sum()) for s, fi in zip(sens, fractions(at), strict=True))

    d = 1e-6
    for i in (0, 3, 6):
        for a in range(3):
            fd = (total(_moved(atoms, i, a, d)) - total(_moved(atoms, i, a, -d))) / (2 * d)
            assert fd == pytest.approx(grad[i, a], rel=1e-4, abs=1e-4 * np.abs(grad).max())


@pytest.mark.parametrize("surface", ["vdw", "svdw", "smol"])
@pytest.mark.parametrize("periodic", [False, True])
def test_fraction_derivatives_match_the_map_kernels(surface, periodic):
    """d/dr of Σ S·f (random S) from the chord ends / smooth union vs the maps' own fractions.

    "smol" with a zero probe: the vdW fractions smoothed (the transpose of the smoothing).
    """
    box = (14.0, 13.0, 15.0) if periodic else None
    atoms, grid, sens, spheres = _fraction_case(surface, 0.0, box, (-7.1, -6.4, -7.3), 1.5)
    if surface == "svdw":
        grad = smooth_gradient(*spheres, grid, sens, len(atoms))
    else:
        axes = grid.axes()
        raw = smoothing_transpose(*sens) if surface == "smol" else sens
        grad = sum(
            union_gradient(*spheres, a, *[axes[b] for b in range(3) if b != a],
                           grid.origin[a], grid.spacing[a], grid.shape[a], raw[a], len(atoms))
            for a in range(3)
        )  # fmt: skip
    _assert_slopes_match_the_maps(
        atoms, sens, grad, lambda at: M.face_fractions(at, grid, surface, probe_radius=0.0, box=box)
    )


def test_ion_accessibility_derivative_matches_the_map():
    atoms = _molecule(3, n=8, spread=1.2)
    grid = M.grid_for_atoms(atoms, 0.5, 3.0)
    sens = np.random.default_rng(4).normal(size=grid.shape)
    physics = pb.PhysicsOptions(ionic_strength=0.15)
    grad = ionic_gradient(atoms, grid, sens, physics.kappa2, physics.ion_radius)

    def total(at):
        return float((sens * M.kappa2_map(at, grid, 0.15, ion_radius=physics.ion_radius)).sum())

    d = 1e-6
    for a in range(3):
        fd = (total(_moved(atoms, 5, a, d)) - total(_moved(atoms, 5, a, -d))) / (2 * d)
        assert fd == pytest.approx(grad[5, a], rel=1e-4, abs=1e-4 * np.abs(grad).max())


@pytest.mark.parametrize("interpolation", ["linear", "cubic"])
@pytest.mark.parametrize("periodic", [False, True])
def test_interpolation_transpose_and_slope(interpolation, periodic):
    """Iᵀ and ∂I/∂r of the array code against the sampling body that the energy uses."""
    rng = np.random.default_rng(5)
    atoms = _molecule(6, n=10)
    grid = M.grid_for_atoms(atoms, 0.5, 0.6 if periodic else 2.0)  # periodic: atoms near the edge
    if periodic:
        atoms = atoms.with_positions(atoms.positions + 0.5 * rng.normal(size=(len(atoms), 3)))
    opts = {"periodic": periodic, "interpolation": interpolation}
    phi = rng.normal(size=grid.shape)
    c = rng.normal(size=len(atoms))
    spread = interpolation_transpose(grid, c, atoms.positions, **opts)
    assert float((spread * phi).sum()) == pytest.approx(
        float(c @ interpolate(grid, phi, atoms.positions, **opts)), rel=1e-12
    )
    x, _, z = grid.coordinates()
    smooth = np.sin(x * 0.7) * np.cos(z * 0.4) + 0.01 * phi  # a rough part: slopes of weights
    slope = interpolation_gradient(grid, smooth, atoms.positions, **opts)
    for a in range(3):
        step = np.zeros(3)
        step[a] = 1e-6
        fd = (interpolate(grid, smooth, atoms.positions + step, **opts)
              - interpolate(grid, smooth, atoms.positions - step, **opts)) / 2e-6  # fmt: skip
        np.testing.assert_allclose(slope[:, a], fd, atol=1e-7)
    if interpolation == "cubic":  # the sampling body's gradient is the interpolant's slope
        _, body_slope = sample_field(grid, smooth, atoms.positions, **opts)
        np.testing.assert_allclose(body_slope, slope, rtol=1e-12, atol=1e-12)
    if periodic:
        return
    # three frames in a stack (a padding plane a frame where nx is odd): each frame's Iᵀ and
    # slopes in one pass, bit for bit those of the frame alone; one frame's atom on a node plane
    frames = np.stack([atoms.positions + rng.normal(0.0, 0.3, atoms.positions.shape)
                       for _ in range(3)])  # fmt: skip
    frames[1, 0, 0] = grid.origin[0] + 4 * grid.spacing[0]
    nx, ny, nz = grid.shape
    stride = nx + nx % 2
    fields = rng.normal(size=(3 * stride, ny, nz))
    offsets = stack_offsets(grid, 3, len(atoms), stride, np)
    flat = frames.reshape(-1, 3)
    stacked = interpolation_transpose(grid, np.tile(c, 3), flat, offsets=offsets,
                                      size=fields.size, **opts).reshape(fields.shape)  # fmt: skip
    slopes = interpolation_gradient(grid, fields, flat, offsets=offsets, **opts).reshape(3, -1, 3)
    for f in range(3):
        rows = slice(f * stride, f * stride + nx)
        alone = interpolation_transpose(grid, c, frames[f], **opts)
        np.testing.assert_array_equal(stacked[rows], alone)
        alone = interpolation_gradient(grid, fields[rows], frames[f], **opts)
        np.testing.assert_array_equal(slopes[f], alone)
    assert not stacked[nx:stride].any()  # nothing on a padding plane


def test_an_atom_on_a_node_plane_gets_the_central_slope():
    grid = pb.Grid((9, 9, 9), 0.5, origin=(-2.0, -2.0, -2.0))
    x, y, z = grid.axes()
    field = np.exp(x[:, None, None]) * (1 + y[None, :, None] ** 2) * np.cos(z)[None, None, :]
    on = np.array([[0.0, 0.5, -0.5]])  # node (4, 5, 3)
    slope = interpolation_gradient(grid, field, on)[0]
    i, j, k = 4, 5, 3
    central = [
        (field[i + 1, j, k] - field[i - 1, j, k]) / 1.0,
        (field[i, j + 1, k] - field[i, j - 1, k]) / 1.0,
        (field[i, j, k + 1] - field[i, j, k - 1]) / 1.0,
    ]
    np.testing.assert_allclose(slope, central, rtol=1e-14)
    # off the planes the slope is the cell's own, unchanged
    off = np.array([[0.1, 0.7, -0.3]])
    cell = interpolation_gradient(grid, field, off)[0]
    right = interpolation_gradient(grid, field, off + [[1e-9, 0, 0]])[0]
    assert cell[0] == pytest.approx(right[0], rel=1e-6)


def test_cubic_interpolation_is_c1_and_exact_for_quadratics():
    """Keys' kernel: slope continuous across a node plane (trilinear jumps), quadratics exact."""
    rng = np.random.default_rng(3)
    grid = pb.Grid((9, 10, 11), spacing=(0.5, 0.6, 0.45), origin=(1.0, 2.0, 3.0))
    phi = rng.normal(size=grid.shape)
    plane = np.asarray(grid.origin) + np.array([4.0, 5.3, 6.6]) * np.asarray(grid.spacing)
    for interpolation, continuous in (("linear", False), ("cubic", True)):
        below, above = (
            interpolation_gradient(grid, phi, [plane + [s, 0.0, 0.0]], interpolation=interpolation)
            for s in (-1e-9, 1e-9)
        )
        jump = abs(float(above[0, 0] - below[0, 0]))
        assert (jump < 1e-6) if continuous else (jump > 1e-2), (interpolation, jump)
    x, y, z = grid.coordinates()
    quadratic = 0.3 * x**2 - 0.2 * x * y + 0.1 * z**2 + y
    inside = np.asarray(grid.origin) + np.asarray(grid.spacing) * (
        1.0 + rng.uniform(0.0, 1.0, (12, 3)) * (np.asarray(grid.shape) - 3)
    )
    px, py, pz = inside.T
    exact = 0.3 * px**2 - 0.2 * px * py + 0.1 * pz**2 + py
    values, slopes = sample_field(grid, quadratic, inside, interpolation="cubic")
    np.testing.assert_allclose(values, exact, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(slopes[:, 2], 0.2 * pz, rtol=1e-12, atol=1e-12)
    with pytest.raises(pb.InputError, match="interpolation"):
        sample_field(grid, quadratic, inside, interpolation="spline")


def test_adjoint_pieces_are_transposes():
    rng = np.random.default_rng(5)
    atoms = _molecule(6, n=10)
    grid = M.grid_for_atoms(atoms, 0.5, 2.0)
    # μ = (∂b/∂φ_c)ᵀ λ: b is linear in φ_c
    problem = pb.Problem.from_maps(M.build_maps(atoms, grid, surface="svdw", ionic_strength=0.1))
    lam = rng.normal(size=grid.shape)
    lam[[0, -1]] = lam[:, [0, -1]] = lam[:, :, [0, -1]] = 0.0
    dphi = rng.normal(size=grid.shape)
    shifted = pb.Problem(grid, None, problem.phi_coulomb + dphi, problem.eps_cavity,
                         epsilon_faces=problem.epsilon_faces, kappa2=problem.kappa2)  # fmt: skip
    db = rhs(shifted) - rhs(problem)
    mu = coulomb_sensitivity(problem, lam)
    assert float((mu * dphi).sum()) == pytest.approx(float((lam * db).sum()), rel=1e-9)
    # the smol smoothing and its transpose (on edge fractions, its domain)
    f = [rng.uniform(0.0, 1.0, size=(5, 6, 7)) for _ in range(3)]
    g = [rng.normal(size=(5, 6, 7)) for _ in range(3)]
    lhs = sum(float((x * y).sum()) for x, y in zip(M.smooth_fractions(*f), g, strict=True))
    rhs_ = sum(float((x * y).sum()) for x, y in zip(f, smoothing_transpose(*g), strict=True))
    assert lhs == pytest.approx(rhs_, rel=1e-12)


@pytest.mark.parametrize(("dtype", "boundary"), [(np.float32, "dirichlet"),
                                                  (np.float64, "periodic")])  # fmt: skip
def test_adjoint_solve_reuses_the_forward_system(dtype, boundary, monkeypatch):
    """λ from the forward solve's stencils and hierarchy equals λ from a system of its own."""
    from pbsolver.forces.adjoint import adjoint_solve
    from pbsolver.solving import system as system_module

    atoms = _molecule(8, n=12, spread=1.4)
    options = {"ionic_strength": 0.0 if boundary == "periodic" else 0.1}  # periodic: singular
    if boundary == "periodic":
        box = (13.0, 13.0, 13.0)
        grid = M.grid_for_box(box, 0.65, origin=(-6.3, -6.6, -6.1))
        options.update(boundary="periodic", box=box)
    else:
        grid = M.grid_for_atoms(atoms, 0.5, 3.0)
    built = M.build_maps(atoms, grid, surface="svdw", **options)
    problem = pb.Problem.from_maps(built)
    solver = pb.Solver(method="multigrid", backend="cpu", rtol=1e-8, dtype=dtype)
    assert solver.solve(problem).system is None  # kept only when asked
    forward = solver.solve(problem, keep_system=True)
    source = np.random.default_rng(3).normal(size=grid.shape)
    want, _ = adjoint_solve(problem, source, solver, x0=forward.phi_rf)
    builds = []
    real = system_module.grid_hierarchy
    monkeypatch.setattr(
        system_module, "grid_hierarchy", lambda *a, **k: builds.append(1) or real(*a, **k)
    )
    got, result = adjoint_solve(problem, source, solver, x0=forward.phi_rf, system=forward.system)
    assert result.converged and not builds
    np.testing.assert_array_equal(got, want)
    b = source.copy()  # the adjoint's right-hand side: on the unknowns, of zero mean if singular
    if boundary == "dirichlet":
        b[~interior_mask(grid.shape, False)] = 0.0
    else:
        b -= b.mean()
    r = residual(coefficients(problem), b, got)[interior_mask(grid.shape, boundary == "periodic")]
    assert np.linalg.norm(r) <= 1e-7 * np.linalg.norm(b)
    phi_again = solver.solve(problem).phi_rf  # the forward solution was not overwritten
    np.testing.assert_allclose(
        forward.phi_rf, phi_again, rtol=0, atol=1e-6 * np.abs(phi_again).max()
    )
    other = pb.Problem.from_maps(M.build_maps(atoms, grid, surface="vdw", **options))
    with pytest.raises(pb.InputError, match="not this problem's"):
        adjoint_solve(other, source, solver, system=forward.system)


def test_sensitivity_kernels_match_the_array_formulas():
    """μ, ν, ∂G/∂f and the weighted nodes from the compiled loops equal their array formulas."""
    rng = np.random.default_rng(11)
    shape, spacing = (7, 6, 5), (0.5, 0.45, 0.6)
    grid = pb.Grid(shape, spacing=spacing, origin=(-1.0, 2.0, 0.5))
    faces = tuple(rng.uniform(2.0, 80.0, shape).astype(np.float32) for _ in range(3))
    kappa2 = np.where(rng.uniform(size=shape) < 0.6, 0.8, 0.0).astype(np.float32)
    phic = rng.normal(size=shape)
    phic[3, 2, 2] = np.inf  # a charge on a node: its six faces are ε_c, κ̄² zero there
    for axis, face in enumerate(faces):
        face[3, 2, 2] = 2.0
        face[tuple(np.subtract((3, 2, 2), np.eye(3, dtype=int)[axis]))] = 2.0
    kappa2[3, 2, 2] = 0.0
    lam = rng.normal(size=shape)
    lam[[0, -1]] = lam[:, [0, -1]] = lam[:, :, [0, -1]] = 0.0
    phi = rng.normal(size=shape)
    for k2 in (kappa2, None):
        problem = pb.Problem(grid, None, phic, 2.0, epsilon_faces=faces, kappa2=k2)
        want = np.zeros(shape)
        for axis, (face, h) in enumerate(zip(faces, spacing, strict=True)):
            term = (face.astype(np.float64) - 2.0) / (h * h) * (np.roll(lam, -1, axis) - lam)
            want += term - np.roll(term, 1, axis)
        if k2 is not None:
            want -= k2.astype(np.float64) * lam
        np.testing.assert_allclose(coulomb_sensitivity(problem, lam), want, rtol=1e-13,
                                   atol=1e-13 * np.abs(want).max())  # fmt: skip
        spread = rng.normal(size=shape)
        want_nu = np.zeros(shape)
        for axis, (face, h) in enumerate(zip(faces, spacing, strict=True)):
            c = face.astype(np.float64) / (h * h)
            want_nu += c * np.roll(lam, -1, axis) + np.roll(c * lam, 1, axis)
        want_nu += spread
        want_nu[1:-1, 1:-1, 1:-1] = 0.0
        np.testing.assert_allclose(boundary_sensitivity(problem, lam, spread), want_nu,
                                   rtol=1e-13, atol=1e-13)  # fmt: skip
    slope = 1.0 / 80.0 - 1.0 / 2.0
    total = phic + phi
    with np.errstate(invalid="ignore"):
        for axis, (got, face, h) in enumerate(zip(
            fraction_sensitivities(problem, phi, lam, 2.0, 80.0), faces, spacing, strict=True
        )):  # fmt: skip
            s = (lam - np.roll(lam, -1, axis)) * (np.roll(total, -1, axis) - total) / (h * h)
            want = np.where(np.isfinite(s), s, 0.0) * face.astype(np.float64) ** 2 * slope
            np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13 * np.abs(want).max())
            assert np.isfinite(got).all()
    field = np.where(rng.uniform(size=shape) < 0.3, rng.normal(size=shape), 0.0)
    pts, w = node_points(grid, field, np)
    idx = np.flatnonzero(field)
    ijk = np.stack(np.unravel_index(idx, shape))
    np.testing.assert_array_equal(pts, np.asarray(grid.origin)[:, None]
                                  + ijk * np.asarray(spacing)[:, None])  # fmt: skip
    np.testing.assert_array_equal(w, field.reshape(-1)[idx])
    # ν lives on the outer layer: searched there only, the same points in the same order
    field[1:-1, 1:-1, 1:-1] = 0.0
    for got, want in zip(outer_layer_points(grid, field, np), node_points(grid, field, np),
                         strict=True):  # fmt: skip
        np.testing.assert_array_equal(got, want)


def test_radial_sums_match_a_float64_reference():
    """The CPU φ_c and "mdh" sums (float32 terms, float64 totals) against float64 NumPy.

    Nodes past one tile and centres past one work item (neither a multiple), some nodes 0.3 Å
    from a centre, the grid 60 Å from the origin (the loops' float32 coordinates are relative).
    """
    from refgeom import radial_sums

    from pbsolver.backends.cpu import forces as loops

    rng = np.random.default_rng(5)
    m, n = 2 * loops.TILE_NODES + 37, loops.CENTRES_PER_ITEM + 5
    centres = 60.0 + rng.uniform(-4.0, 4.0, (n, 3))
    points = 60.0 + rng.uniform(-15.0, 15.0, (3, m))
    points[:, :n] = centres.T + 0.3 * rng.normal(size=(3, n)) / np.sqrt(3.0)
    weights = rng.normal(size=m)
    radii = rng.uniform(1.0, 2.0, n)
    box = (31.0, 30.5, 32.0)
    cases = {
        "Coulomb": (loops.coulomb_sums(points, weights, centres), {}),
        "nearest image": (loops.coulomb_sums(points, weights, centres, box), {"box": box}),
        "Debye-Huckel": (
            loops.debye_huckel_sums(points, weights, centres, radii, 0.12, 78.5, 2.0),
            {"radii": radii, "kappa": 0.12, "eps_out": 78.5, "inv_c": 0.5},
        ),
    }
    for what, (got, options) in cases.items():
        want = radial_sums(points, weights, centres, **options)
        err = np.abs(got - want).max(axis=1) / np.abs(want).max(axis=1)
        assert err.max() < 2e-5, (what, err.max())
    assert np.array_equal(loops.coulomb_sums(points[:, :0], weights[:0], centres), np.zeros((n, 3)))


def test_fraction_sensitivity_at_nodes_equals_the_whole_grids():
    """∂G/∂f computed at given nodes only (the line ends of "mol" and "vdw") is the whole-grid
    map's value there, bit for bit, on a charge's node (zero) and at the grid's last layers."""
    from pbsolver.forces.coulomb import face_maps, force_loops

    atoms = _molecule(12, n=10)
    grid = M.grid_for_atoms(atoms, 0.5, 2.0)
    problem = pb.Problem.from_maps(M.build_maps(atoms, grid, surface="mol", **HIGH_CONTRAST))
    rng = np.random.default_rng(12)
    lam, phi = rng.normal(size=grid.shape), rng.normal(size=grid.shape)
    phic = np.array(problem.phi_coulomb)
    phic[3, 4, 5] = np.inf
    problem.phi_coulomb = phic
    whole = fraction_sensitivities(problem, phi, lam, 2.0, 78.54)
    index = tuple(rng.integers(0, n, 400) for n in grid.shape)
    index = tuple(np.append(i, [c, n - 1])
                  for i, c, n in zip(index, (3, 4, 5), grid.shape, strict=True))  # fmt: skip
    faces = face_maps(problem, np)
    loops = force_loops(np)
    flat = np.ravel_multi_index(index, grid.shape)
    for axis in range(3):
        at = loops.fraction_sensitivity_at(lam, phic, phi, faces[axis], axis, grid.spacing,
                                           1 / 78.54 - 1 / 2.0, flat)  # fmt: skip
        np.testing.assert_array_equal(at, whole[axis][index])
        assert at[-2] == 0.0 and np.abs(at).max() > 0


def test_grid_coulomb_sums_match_a_float64_reference():
    """The φ_c sum over a whole grid from its axes: planes past one tile, a centre on a node
    (weight 0: it adds nothing, as a node list leaves it out), zero weights, a nearest-image
    box, the grid far from 0."""
    from refgeom import radial_sums

    from pbsolver.backends.cpu import forces as loops

    rng = np.random.default_rng(6)
    grid = pb.Grid((7, 50, 47), spacing=(0.5, 0.45, 0.55), origin=(57.0, 48.0, 51.0))
    n = loops.CENTRES_PER_ITEM + 3
    centres = np.array(grid.origin) + rng.uniform(0.5, 3.0, (n, 3)) * [1.0, 5.0, 5.0]
    field = rng.normal(size=grid.shape)
    field[rng.uniform(size=grid.shape) < 0.3] = 0.0
    node = (3, 20, 11)
    centres[0] = np.array(grid.origin) + np.array(node) * grid.spacing
    field[node] = 0.0
    points, weights = loops.grid_nodes(field, grid.origin, grid.spacing)
    box = (4.0, 23.0, 26.0)
    for options in ({}, {"box": box}):
        got = loops.coulomb_grid_sums(field, grid.origin, grid.spacing, centres, **options)
        want = radial_sums(points, weights, centres, **options)
        err = np.abs(got - want).max(axis=1) / np.abs(want).max(axis=1)
        assert err.max() < 2e-5, (options, err.max())
    assert not loops.coulomb_grid_sums(np.zeros(grid.shape), grid.origin, grid.spacing,
                                       centres).any()  # fmt: skip


# ---------------------------------------------------------------------- forces vs differences
@pytest.mark.parametrize("salt", [0.0, 0.15])
def test_forces_of_a_random_molecule_match_central_differences(salt):
    atoms = _molecule(7, n=20)
    physics = pb.PhysicsOptions(surface="svdw", ionic_strength=salt, **HIGH_CONTRAST)
    grid = M.grid_for_atoms(atoms, 0.5, 2.5)
    idx = _outermost(atoms, 3 if salt == 0 else 2)
    # two lines per cell side for κ̄² (the map's cost; the default four: test above)
    rel, exact, fd, res = _check_against_differences(atoms, grid, physics, idx,
                                                     kappa_subsamples=2)  # fmt: skip
    # the field force −q∇φ_rf alone is far from the gradient: the test can tell them apart
    _, grad = sample_field(grid, res.phi_rf, atoms.positions[idx])
    field = -atoms.charges[idx, None] * grad
    assert np.linalg.norm(field - fd) / np.linalg.norm(fd) > 50 * max(rel, 1e-4)
    assert np.abs(exact.parts["dielectric"]).max() > 0.05 * np.abs(exact.forces).max()
    if salt:
        assert np.abs(exact.parts["ionic"]).max() > 0.0


@pytest.mark.parametrize("salt", [0.0, 0.15])
def test_forces_of_a_peptide_match_central_differences(salt):
    atoms = pb.read_pqr(pb.data.path("peptide.pqr"))
    physics = pb.PhysicsOptions(surface="svdw", ionic_strength=salt, **HIGH_CONTRAST)
    grid = M.grid_for_atoms(atoms, 0.7, 2.5)
    charged = np.flatnonzero(np.abs(atoms.charges) > 0.3)
    idx = charged[_outermost(atoms[charged], 2)]
    _check_against_differences(atoms, grid, physics, idx, kappa_subsamples=2)


@pytest.mark.parametrize("salt", [0.0, 0.15])
def test_forces_in_a_periodic_box_match_central_differences(salt):
    """With salt and without (a singular system: b and λ of zero mean)."""
    atoms = _molecule(8, n=10, spread=1.4)
    box = (13.0, 13.0, 13.0)
    grid = M.grid_for_box(box, 0.65, origin=(-6.3, -6.6, -6.1))
    physics = pb.PhysicsOptions(surface="svdw", ionic_strength=salt, **HIGH_CONTRAST)
    # SOR: on this small grid faster than multigrid's dense coarsest (singular) level
    _check_against_differences(atoms, grid, physics, _outermost(atoms, 2), boundary="periodic",
                               box=box, kappa_subsamples=2, method="sor")  # fmt: skip


@pytest.mark.parametrize("periodic", [False, True])
def test_cubic_sampled_forces_match_central_differences(periodic):
    """The energy with φ_rf sampled by cubic convolution: its charge term and adjoint source."""
    atoms = _molecule(13, n=10, spread=1.4)
    physics = pb.PhysicsOptions(surface="svdw", ionic_strength=0.15, **HIGH_CONTRAST)
    options = {"kappa_subsamples": 2, "interpolation": "cubic"}
    if periodic:
        box = (13.0, 13.0, 13.0)
        grid = M.grid_for_box(box, 0.65, origin=(-6.3, -6.6, -6.1))
        options.update(boundary="periodic", box=box, method="sor")
    else:
        grid = M.grid_for_atoms(atoms, 0.5, 2.5)
    _check_against_differences(atoms, grid, physics, _outermost(atoms, 2), **options)


def test_sdh_boundary_forces_move_the_extreme_atoms():
    atoms = _molecule(9, n=12, spread=1.6)
    physics = pb.PhysicsOptions(surface="svdw", ionic_strength=0.15, boundary_kind="sdh",
                                **HIGH_CONTRAST)  # fmt: skip
    grid = M.grid_for_atoms(atoms, 0.6, 1.5)
    reach = np.linalg.norm(atoms.positions - atoms.center(), axis=1) + atoms.radii
    idx = np.unique([atoms.positions[:, 0].argmin(), int(np.argmax(reach))])
    _, exact, _, _ = _check_against_differences(atoms, grid, physics, idx, kappa_subsamples=2)
    assert np.abs(exact.parts["boundary"][idx]).max() > 1e-3


@pytest.mark.parametrize(("delta", "tol"), [(DELTA, 3e-2), (SES_DELTA, 1e-3)])
def test_vdw_forces_are_the_gradient_up_to_the_energys_kinks(delta, tol):
    """The exact-geometry surface: the gradient holds between kinks of the energy itself.

    Its fractions have kinks (chord ends crossing nodes, chords meeting) and slope
    singularities (lines grazing spheres) every ~10⁻³ Å, so central differences at 10⁻³ Å
    agree only to ~10⁻²; at 10⁻⁵ Å (between kinks, float64 solves to 1e-12) to 1e-3. The
    fraction derivatives themselves are exact
    (:func:`test_fraction_derivatives_match_the_map_kernels`).
    """
    atoms = _molecule(7, n=20)
    physics = pb.PhysicsOptions(surface="vdw", ionic_strength=0.15, **HIGH_CONTRAST)
    grid = M.grid_for_atoms(atoms, 0.5, 2.5)
    _check_against_differences(atoms, grid, physics, _outermost(atoms, 2), tol=tol, delta=delta,
                               rtol=1e-12, kappa_subsamples=2)  # fmt: skip


def test_lines_tangent_up_to_rounding_give_no_force():
    """A Born ion on a node with a radius of whole spacings: tangent lines, no spurious force.

    Not exactly zero: chord ends then sit exactly on nodes, where the "vdw" energy has kinks
    and rounding picks one side's slope.
    """
    ion = pb.Atoms([[0.1, -0.2, 0.05]], [1.0], [3.0])
    grid = M.grid_for_atoms(ion, 0.5, 2.0)
    assert np.allclose((ion.positions - grid.origin) / 0.5 % 1.0, 0.0)
    physics = pb.PhysicsOptions(surface="vdw", eps_in=1.0)
    solver = pb.Solver(**SOLVER)
    _, problem, res = _energy(ion, grid, physics, solver)
    f = solvation_forces(ion, problem, res.phi_rf, physics=physics, solver=solver).forces
    assert np.abs(f).max() < 0.5  # it was 3e5 with the rounding-level chords


# ---------------------------------------------------------------------- the SES: "mol", "smol"
@pytest.mark.parametrize(("surface", "periodic"), [("mol", False), ("smol", True)])
def test_ses_fraction_derivatives_match_the_map_kernels(surface, periodic, caplog):
    """d/dr of Σ S·f (random S) from the SES interval ends vs the SES maps (probe 1.4 Å)."""
    probe = 1.4
    box = (17.0, 16.0, 18.0) if periodic else None
    atoms, grid, sens, spheres = _fraction_case(surface, probe, box, (-8.6, -7.9, -8.8), 3.0)
    raw = smoothing_transpose(*sens) if surface == "smol" else sens
    with caplog.at_level(logging.WARNING, logger="pbsolver"):
        grad = ses_gradient(*spheres, probe, grid, raw, len(atoms), nbisect=FINE_BISECTION)
    assert "SES forces" not in caplog.text  # every interval end was classified
    _assert_slopes_match_the_maps(
        atoms, sens, grad,
        lambda at: M.face_fractions(at, grid, surface, probe, box=box, nbisect=FINE_BISECTION),
    )  # fmt: skip


@pytest.mark.parametrize(
    ("surface", "periodic", "capacity"),
    [("mol", False, None), ("smol", True, None), ("mol", False, 1)],
)
def test_recorded_ses_lines_give_the_same_fractions_and_slopes(surface, periodic, capacity,
                                                               monkeypatch):  # fmt: skip
    """Maps built under ``recording_lines``: the same fractions, and the forces' slopes from
    their records (no SES line run again) the same as from the line kernel, bit for bit.

    ``capacity`` 1: every line overflows the first record buffers and is redone.
    """
    import pbsolver.backends.cpu.line_ends as line_ends

    if capacity is not None:
        monkeypatch.setattr(line_ends, "FIRST_CAPACITY", capacity)
    probe = 1.4
    box = (17.0, 16.0, 18.0) if periodic else None
    atoms, grid, sens, spheres = _fraction_case(surface, probe, box, (-8.6, -7.9, -8.8), 3.0)
    M.clear_kept_maps()
    want = M.face_fractions(atoms, grid, surface, probe, box=box)
    want_grad = ses_gradient(*spheres, probe, grid, sens, len(atoms))
    with recording_lines():
        got = M.face_fractions(atoms, grid, surface, probe, box=box)
    for f, g in zip(want, got, strict=True):
        np.testing.assert_array_equal(g, f)
    runs = []
    real = line_ends._recorded_intervals
    monkeypatch.setattr(line_ends, "_recorded_intervals",
                        lambda *a, **k: runs.append(a[0]) or real(*a, **k))  # fmt: skip
    got_grad = ses_gradient(*spheres, probe, grid, sens, len(atoms))
    assert line_ends.ses_lines_kernel not in runs  # the records served every axis
    np.testing.assert_array_equal(got_grad, want_grad)
    M.clear_kept_maps()  # nothing kept: the kernel runs again
    ses_gradient(*spheres, probe, grid, sens, len(atoms))
    assert runs.count(line_ends.ses_lines_kernel) == 3


@pytest.mark.parametrize(("periodic", "capacity"), [(False, None), (True, None), (False, 1)])
def test_recorded_ion_lines_give_the_same_map_and_slopes(periodic, capacity, monkeypatch):
    """The ion-accessible map under ``recording_lines``: the same map, and the ionic term from
    its records (no line run again) the same as from the line kernel, bit for bit."""
    import pbsolver.backends.cpu.line_ends as line_ends

    if capacity is not None:
        monkeypatch.setattr(line_ends, "FIRST_UNION_CAPACITY", capacity)
    atoms = _molecule(4, n=14, spread=1.6)
    box = (17.0, 16.0, 18.0) if periodic else None
    if periodic:
        grid = M.grid_for_box(box, 0.5, origin=(-8.6, -7.9, -8.8))
    else:
        grid = M.grid_for_atoms(atoms, 0.5, 4.0)
    sens = np.random.default_rng(6).normal(size=grid.shape)
    M.clear_kept_maps()
    want = M.ion_accessibility(atoms, grid, 2.0, subsamples=3, box=box)
    want_grad = ionic_gradient(atoms, grid, sens, 0.6, 2.0, subsamples=3, box=box)
    M.clear_kept_maps()
    with recording_lines():
        got = M.ion_accessibility(atoms, grid, 2.0, subsamples=3, box=box)
    np.testing.assert_array_equal(got, want)
    runs = []
    real = line_ends._recorded_intervals
    monkeypatch.setattr(line_ends, "_recorded_intervals",
                        lambda *a, **k: runs.append(a[0]) or real(*a, **k))  # fmt: skip
    got_grad = ionic_gradient(atoms, grid, sens, 0.6, 2.0, subsamples=3, box=box)
    assert not runs  # the records served the lines
    np.testing.assert_array_equal(got_grad, want_grad)
    assert np.abs(want_grad).max() > 0


@pytest.mark.parametrize("periodic", [False, True])
def test_recorded_smooth_surface_pairs_give_the_same_fractions_and_slopes(periodic, monkeypatch):
    """ "svdw" maps under ``recording_lines``: the same fractions, and the dielectric slopes
    from the kept sample pairs (none sampled again) the same as from new ones, bit for bit."""
    import pbsolver.forces.smooth as smooth_module

    box = (14.0, 13.0, 15.0) if periodic else None
    atoms, grid, sens, spheres = _fraction_case("svdw", 0.0, box, (-7.1, -6.4, -7.3), 1.5)
    M.clear_kept_maps()
    want = M.face_fractions(atoms, grid, "svdw", box=box)
    want_grad = smooth_gradient(*spheres, grid, sens, len(atoms))
    with recording_lines():
        got = M.face_fractions(atoms, grid, "svdw", box=box)
    for f, g in zip(want, got, strict=True):
        np.testing.assert_array_equal(g, f)
    sampled = []
    real = smooth_module.sample_pairs
    monkeypatch.setattr(smooth_module, "sample_pairs",
                        lambda *a, **k: sampled.append(1) or real(*a, **k))  # fmt: skip
    np.testing.assert_array_equal(smooth_gradient(*spheres, grid, sens, len(atoms)), want_grad)
    assert not sampled
    M.clear_kept_maps()
    smooth_gradient(*spheres, grid, sens, len(atoms))
    assert len(sampled) == 3


def test_line_ends_are_the_same_when_lines_overflow_the_first_buffers(monkeypatch):
    """A line with more intervals than the first buffers hold is redone with room for all."""
    import pbsolver.backends.cpu.line_ends as line_ends

    atoms = _molecule(3, n=12)
    grid = M.grid_for_atoms(atoms, 0.5, 3.0)
    sens = tuple(np.random.default_rng(4).normal(size=grid.shape) for _ in range(3))
    own = np.arange(len(atoms))
    roomy = ses_gradient(atoms.positions, atoms.radii, own, 1.4, grid, sens, len(atoms))
    monkeypatch.setattr(line_ends, "FIRST_CAPACITY", 1)
    monkeypatch.setattr(line_ends, "FIRST_UNION_CAPACITY", 1)
    tight = ses_gradient(atoms.positions, atoms.radii, own, 1.4, grid, sens, len(atoms))
    np.testing.assert_array_equal(tight, roomy)
    assert np.abs(roomy).max() > 0


@pytest.mark.parametrize(("surface", "salt"), [("mol", 0.0), ("smol", 0.15)])
def test_ses_forces_of_a_random_molecule_match_central_differences(surface, salt):
    atoms = _molecule(7, n=14)
    physics = pb.PhysicsOptions(surface=surface, ionic_strength=salt, **HIGH_CONTRAST)
    grid = M.grid_for_atoms(atoms, 0.5, 3.0)
    _, exact, _, res = _check_against_differences(
        atoms, grid, physics, _outermost(atoms, 3), delta=SES_DELTA, rtol=1e-12,
        kappa_subsamples=2, nbisect=FINE_BISECTION,
    )  # fmt: skip
    assert np.abs(exact.parts["dielectric"]).max() > 0.05 * np.abs(exact.forces).max()
    # the reentrant surface matters: the same atoms' vdW-surface forces differ
    vdw = dataclasses.replace(physics, surface="vdw")
    _, problem, vres = _energy(atoms, grid, vdw, pb.Solver(**SOLVER))
    other = solvation_forces(atoms, problem, vres.phi_rf, physics=vdw, solver=pb.Solver(**SOLVER))
    idx = _outermost(atoms, 3)
    assert np.linalg.norm(other.forces[idx] - exact.forces[idx]) > 0.01 * np.linalg.norm(
        exact.forces[idx]
    )


def test_ses_forces_of_a_peptide_match_central_differences():
    atoms = pb.read_pqr(pb.data.path("peptide.pqr"))
    physics = pb.PhysicsOptions(surface="mol", ionic_strength=0.15, **HIGH_CONTRAST)
    grid = M.grid_for_atoms(atoms, 0.7, 3.0)
    charged = np.flatnonzero(np.abs(atoms.charges) > 0.3)
    idx = charged[_outermost(atoms[charged], 2)]
    _check_against_differences(atoms, grid, physics, idx, delta=SES_DELTA, rtol=1e-12,
                               kappa_subsamples=2, nbisect=FINE_BISECTION)  # fmt: skip


def test_ses_forces_in_a_periodic_box_match_central_differences():
    atoms = _molecule(8, n=10, spread=1.4)
    box = (16.0, 16.0, 16.0)
    grid = M.grid_for_box(box, 0.65, origin=(-7.8, -8.1, -7.6))
    physics = pb.PhysicsOptions(surface="mol", ionic_strength=0.15, **HIGH_CONTRAST)
    _check_against_differences(atoms, grid, physics, _outermost(atoms, 2), boundary="periodic",
                               box=box, kappa_subsamples=2, method="sor", delta=SES_DELTA,
                               rtol=1e-12, nbisect=FINE_BISECTION)  # fmt: skip


@pytest.mark.gpu
@pytest.mark.parametrize("surface", ["mol", "smol"])
def test_ses_forces_on_the_gpu_match_the_cpu(surface):
    """The calculator on CUDA (maps on the GPU, sensitivities gathered from CuPy) vs the CPU."""
    import cupy as cp

    atoms = _molecule(7, n=14)
    kw = {"spacing": 0.5, "margin": 3.0, "skin": 1.0, "method": "multigrid", "rtol": 1e-10,
          "dtype": np.float64, "surface": surface, "ionic_strength": 0.15, "forces": "exact",
          "engine": "general", **HIGH_CONTRAST}  # fmt: skip
    cpu = pb.ReactionFieldCalculator(atoms, backend="cpu", **kw).compute()
    gpu = pb.ReactionFieldCalculator(atoms, backend="cuda", map_options={"maps_backend": "cuda"},
                                     **kw).compute(cp.asarray(atoms.positions))  # fmt: skip
    assert gpu.forces_kind == "exact" and isinstance(gpu.forces, cp.ndarray)
    assert gpu.energy == pytest.approx(cpu.energy, rel=1e-8)
    scale = np.abs(cpu.forces).max()
    np.testing.assert_allclose(cp.asnumpy(gpu.forces), cpu.forces, atol=1e-6 * scale)


@pytest.mark.gpu
@pytest.mark.parametrize(("surface", "salt"), [("mol", 0.15), ("smol", 0.0)])
def test_stacked_engine_forces_on_the_gpu_match_the_general_engines(surface, salt):
    """A batch's exact forces through the CUDA stacked engine against the CUDA general engine.

    The stacked engine sums φ_c in float32 (the general engine in float64), so the two agree
    to that precision, not bit for bit.
    """
    import cupy as cp

    atoms = _molecule(7, n=14)
    kw = {"spacing": 0.5, "margin": 3.0, "skin": 0.5, "method": "multigrid", "rtol": 1e-10,
          "surface": surface, "ionic_strength": salt, "forces": "exact", "backend": "cuda",
          "map_options": {"maps_backend": "cuda"}, **HIGH_CONTRAST}  # fmt: skip
    stacked = pb.ReactionFieldCalculator(atoms, engine="stacked", **kw)
    frames = [
        atoms.positions,
        atoms.positions + np.random.default_rng(3).normal(0, 0.05, (len(atoms), 3)),
    ]
    batch = stacked.compute_batch([cp.asarray(f) for f in frames])
    for fr, pos in zip(batch, frames, strict=True):
        assert fr.forces_kind == "exact" and fr.converged and isinstance(fr.forces, cp.ndarray)
        general = pb.ReactionFieldCalculator(atoms, engine="general", shape=fr.grid.shape, **kw)
        general.grid = fr.grid
        ref = general.compute(pos)
        assert ref.grid == fr.grid
        assert fr.energy == pytest.approx(ref.energy, rel=1e-5)
        got, want = cp.asnumpy(fr.forces), np.asarray(ref.forces)
        err = np.abs(got - want).max() / np.abs(want).max()
        assert err < 1e-4, err


# ---------------------------------------------------------------------- the smooth surface
def test_smooth_surface_is_as_accurate_as_the_exact_fractions():
    solver = pb.Solver(**SOLVER)
    ion = pb.Atoms([[0.1, -0.05, 0.13]], [1.0], [3.0])
    grid = M.grid_for_atoms(ion, 0.5, 5.0)
    ref = born(1.0, 3.0, 1.0, 78.54)
    for surface in ("vdw", "svdw"):
        e, _, _ = _energy(ion, grid, pb.PhysicsOptions(surface=surface, eps_in=1.0), solver)
        assert abs(e / ref - 1) < 4e-3, surface
    sphere = pb.Atoms([[0.0, 0.0, 0.0], [0.3, -0.2, 2.5]], [0.0, 1.0], [5.0, 0.0])
    grid = M.grid_for_atoms(sphere, 0.5, 4.0)
    ref = kirkwood(sphere.positions[1:], [1.0], 5.0, 1.0, 78.54)
    e, _, _ = _energy(sphere, grid, pb.PhysicsOptions(surface="svdw", eps_in=1.0), solver)
    assert abs(e / ref - 1) < 2e-3
    # a molecule: the smooth union differs from the sharp one by less than the grid's error
    atoms = _molecule(7, n=20)
    grid = M.grid_for_atoms(atoms, 0.5, 2.5)
    sharp, smooth = (_energy(atoms, grid, pb.PhysicsOptions(surface=s, **HIGH_CONTRAST),
                             solver)[0] for s in ("vdw", "svdw"))  # fmt: skip
    assert abs(smooth / sharp - 1) < 5e-3


# ---------------------------------------------------------------------- entry points
def test_calculator_returns_exact_forces_and_says_so(caplog):
    atoms = _molecule(10, n=10)
    kw = {"spacing": 0.5, "margin": 2.0, "skin": 1.0, "backend": "cpu", "method": "multigrid",
          "rtol": 1e-10, "dtype": np.float64, **HIGH_CONTRAST}  # fmt: skip
    calc = pb.ReactionFieldCalculator(atoms, surface="svdw", **kw)
    assert calc.force_kind == "exact"
    first = calc.compute()
    assert first.forces_kind == "exact" and first.converged and "forces" in first.timings
    ref = solvation_forces(atoms, calc.problem, first.solve.phi_rf, physics=calc.physics,
                           solver=pb.Solver(**SOLVER))  # fmt: skip
    np.testing.assert_allclose(first.forces, ref.forces, atol=1e-6 * np.abs(ref.forces).max())
    i = int(_outermost(atoms, 1)[0])
    e = [calc.compute(_moved(atoms, i, 1, s * DELTA).positions) for s in (1, -1)]
    assert not any(fr.regridded for fr in e)
    fd = -(e[0].energy - e[1].energy) / (2 * DELTA)
    assert first.forces[i, 1] == pytest.approx(fd, rel=1e-3, abs=1e-3)
    assert e[1].warm_start
    # where exact forces are not smooth: field forces, said aloud, unless asked for
    with caplog.at_level(logging.WARNING, logger="pbsolver"):
        mol = pb.ReactionFieldCalculator(atoms, surface="mol", **kw)
    assert mol.force_kind == "field" and "force_kind='field'" in caplog.text
    ses_calc = pb.ReactionFieldCalculator(atoms, surface="mol", forces="exact", **kw)
    ses = ses_calc.compute()
    assert ses.forces_kind == "exact"
    ref = solvation_forces(atoms, ses_calc.problem, ses.solve.phi_rf, physics=ses_calc.physics,
                           solver=pb.Solver(**SOLVER))  # fmt: skip
    np.testing.assert_allclose(ses.forces, ref.forces, atol=1e-6 * np.abs(ref.forces).max())
    # a batch's frames get the same exact forces as frames computed one at a time
    batch = pb.ReactionFieldCalculator(atoms, surface="mol", forces="exact", **kw).compute_batch(
        [atoms.positions, atoms.positions + 0.003]
    )
    assert [fr.forces_kind for fr in batch] == ["exact", "exact"]
    np.testing.assert_allclose(batch[0].forces, ses.forces, atol=1e-6 * np.abs(ref.forces).max())
    with pytest.raises(pb.InputError, match="forces='exact'"):
        pb.ReactionFieldCalculator(atoms, surface="apbs-mol", forces="exact", **kw)
    vdw = pb.ReactionFieldCalculator(atoms, surface="vdw", **kw)
    assert vdw.force_kind == "field"  # exact but unbounded where lines graze spheres: asked for
    assert pb.ReactionFieldCalculator(atoms, surface="vdw", forces="exact", **kw).force_kind == (
        "exact"
    )
    field = pb.ReactionFieldCalculator(atoms, surface="svdw", forces="field", **kw).compute()
    assert field.forces_kind == "field"
    stacked = pb.ReactionFieldCalculator(atoms, surface="vdw", engine="stacked", **kw)
    assert stacked.force_kind == "field"
    with pytest.raises(pb.InputError, match="forces must be"):
        pb.ReactionFieldCalculator(atoms, surface="svdw", forces="yes", **kw)
    # cubic sampling: energy, potentials and forces all sample φ_rf the same way
    cubic_calc = pb.ReactionFieldCalculator(atoms, surface="svdw", interpolation="cubic", **kw)
    cubic = cubic_calc.compute()
    assert cubic_calc.engine == "general" and cubic.forces_kind == "exact"
    ref = solvation_forces(atoms, cubic_calc.problem, cubic.solve.phi_rf,
                           physics=cubic_calc.physics, solver=pb.Solver(**SOLVER),
                           interpolation="cubic")  # fmt: skip
    np.testing.assert_allclose(cubic.forces, ref.forces, atol=1e-6 * np.abs(ref.forces).max())
    np.testing.assert_allclose(cubic.energy, 0.5 * atoms.charges @ cubic.potentials, rtol=1e-12)
    assert abs(cubic.energy - first.energy) < 1e-2 * abs(first.energy)  # both O(h²) of φ_rf
    assert cubic.energy != first.energy
    # the stacked engine samples with the same body: its cubic energy is the general path's
    stacked_kw = {**kw, "skin": 0.5}  # both engines place the grid the same way for one frame
    stacked_cubic = pb.ReactionFieldCalculator(atoms, surface="vdw", engine="stacked",
                                               interpolation="cubic", **stacked_kw)  # fmt: skip
    general_cubic = pb.ReactionFieldCalculator(atoms, surface="vdw", engine="general",
                                               interpolation="cubic", **stacked_kw)  # fmt: skip
    a, b = stacked_cubic.compute(), general_cubic.compute()
    assert a.grid == b.grid and a.solve.extra["engine"] == "stacked"
    assert a.energy == pytest.approx(b.energy, rel=1e-6)
    np.testing.assert_allclose(a.potentials, b.potentials, rtol=1e-5,
                               atol=1e-5 * np.abs(b.potentials).max())  # fmt: skip
    linear = pb.ReactionFieldCalculator(atoms, surface="vdw", engine="stacked", **stacked_kw)
    assert linear.compute().energy != a.energy
    with pytest.raises(pb.InputError, match="interpolation"):
        pb.ReactionFieldCalculator(atoms, interpolation="quadratic", **kw)


@pytest.mark.parametrize(("surface", "salt", "dtype"), [
    ("mol", 0.15, np.float64), ("smol", 0.0, np.float64), ("vdw", 0.15, np.float64),
    ("mol", 0.15, np.float32),  # float32 sweeps with float64 refinement, the GPU's default
])  # fmt: skip
def test_stacked_engine_forces_equal_the_general_engines(surface, salt, dtype):
    """Exact forces through the stacked engine (one stacked adjoint solve for the batch, each
    frame's terms from the engine's own maps) equal the general engine's, frame by frame."""
    atoms = _molecule(7, n=14)
    kw = {"spacing": 0.5, "margin": 3.0, "skin": 0.5, "method": "multigrid", "rtol": 1e-10,
          "dtype": dtype, "surface": surface, "ionic_strength": salt, "forces": "exact",
          "backend": "cpu", "map_options": {"kappa_subsamples": 2}, **HIGH_CONTRAST}  # fmt: skip
    stacked = pb.ReactionFieldCalculator(atoms, engine="stacked", **kw)
    assert stacked.engine == "stacked" and stacked.force_kind == "exact"
    frames = [
        atoms.positions,
        atoms.positions + np.random.default_rng(3).normal(0, 0.05, (len(atoms), 3)),
    ]
    batch = stacked.compute_batch(frames)
    assert [fr.forces_kind for fr in batch] == ["exact", "exact"]
    assert all(fr.converged and "forces" in fr.timings for fr in batch)
    for fr, pos in zip(batch, frames, strict=True):
        general = pb.ReactionFieldCalculator(atoms, engine="general", shape=fr.grid.shape, **kw)
        general.grid = fr.grid  # the batch's grid, held
        ref = general.compute(pos)
        assert ref.grid == fr.grid and not ref.regridded
        assert fr.energy == pytest.approx(ref.energy, rel=1e-9)
        scale = np.abs(ref.forces).max()
        np.testing.assert_allclose(fr.forces, ref.forces, atol=1e-7 * scale)
    # the next batch starts its adjoint solve from the last λ: the same forces, fewer sweeps
    again = stacked.compute_batch(frames)
    np.testing.assert_allclose(again[1].forces, batch[1].forces,
                               atol=1e-7 * np.abs(batch[1].forces).max())  # fmt: skip


@pytest.mark.parametrize("engine", ["stacked", "general"])
def test_adjoint_rtol_is_the_adjoint_solves_tolerance(engine):
    """``adjoint_rtol`` (default 10 × rtol) stops the forces' adjoint solve: the forces move
    away from a tight adjoint's as it grows, and stay close at the default."""
    atoms = _molecule(7, n=14)
    kw = {"spacing": 0.5, "margin": 3.0, "skin": 0.5, "method": "multigrid", "rtol": 1e-8,
          "dtype": np.float64, "surface": "mol", "ionic_strength": 0.15, "forces": "exact",
          "backend": "cpu", "engine": engine, **HIGH_CONTRAST}  # fmt: skip
    frames = [
        atoms.positions,
        atoms.positions + np.random.default_rng(5).normal(0, 0.05, (len(atoms), 3)),
    ]

    def forces(**extra):
        calc = pb.ReactionFieldCalculator(atoms, **kw, **extra)
        return calc, np.array([fr.forces for fr in calc.compute_batch(frames)])

    default, f_default = forces()
    assert default.adjoint_rtol == pytest.approx(1e-7)
    _, f_tight = forces(adjoint_rtol=1e-11)
    _, f_loose = forces(adjoint_rtol=1e-2)
    scale = np.linalg.norm(f_tight)
    err_default = np.linalg.norm(f_default - f_tight) / scale
    err_loose = np.linalg.norm(f_loose - f_tight) / scale
    assert err_default < 1e-5, err_default
    assert err_loose > 10 * err_default and err_loose > 1e-6, (err_loose, err_default)
    for bad in (0.0, -1e-6):
        with pytest.raises(pb.InputError, match="adjoint_rtol"):
            pb.ReactionFieldCalculator(atoms, **kw, adjoint_rtol=bad)


def test_stacked_engine_forces_take_each_frames_recorded_ends(monkeypatch):
    """The calculator hands the forces every frame's line ends as one set on the engine's stack
    where the engine records them (CUDA: all frames at once; the ion-accessible ends as the
    engine's function that sums them); here each frame's CPU ends, moved to its block of the
    stack, stand in, and the forces are the same as those of the lines recorded frame by
    frame."""
    from pbsolver.backends.cpu import line_ends
    from pbsolver.forces.lines import end_gradient
    from pbsolver.md.engine import StackedFrames

    atoms = _molecule(7, n=14)
    kw = {"spacing": 0.5, "margin": 3.0, "skin": 0.5, "method": "multigrid", "rtol": 1e-10,
          "dtype": np.float64, "surface": "mol", "ionic_strength": 0.15, "forces": "exact",
          "backend": "cpu", "engine": "stacked", "map_options": {"kappa_subsamples": 2},
          **HIGH_CONTRAST}  # fmt: skip
    rng = np.random.default_rng(4)
    frames = [atoms.positions + rng.normal(0, 0.05, (len(atoms), 3)) for _ in range(3)]
    ref = pb.ReactionFieldCalculator(atoms, **kw).compute_batch(frames)
    grid = ref[0].grid
    probe, ion = 1.4, atoms.radii + 2.0

    def bins_for(pos, radii, axis, us, vs, **kwargs):
        return M.line_bins(pos, radii, axis, us, vs, **kwargs)

    def ses_ends(pos):
        nb, features, exposed = M.ses_geometry(M.map_backend("cpu"), pos, atoms.radii, probe)
        axes, acc, out = grid.axes(), atoms.radii + probe, []
        for axis in range(3):
            a1, a2 = [a for a in range(3) if a != axis]
            h = grid.spacing[axis]
            out.append(line_ends.interval_end_slopes(
                axis, axes[a1], axes[a2], grid.origin[axis], h, grid.shape[axis], pos,
                atoms.radii, acc, probe, M.ses_sampling_step(h, None), 14,
                bins_for(pos, acc, axis, axes[a1], axes[a2]),
                bins_for(pos, acc + probe, axis, axes[a1], axes[a2], subset=exposed), features,
                nb,
            ))  # fmt: skip
        return out

    def ion_ends(pos):
        us, vs, t0 = M.ion_lines(grid, 2)
        return line_ends.sphere_end_slopes(2, us, vs, t0, grid.spacing[2], grid.shape[2], pos,
                                           ion, bins_for(pos, ion, 2, us, vs))  # fmt: skip

    calls, n = [], len(atoms)

    def stacked_ses(engine):
        calls.append("ses")
        each = [ses_ends(p) for p in frames]
        return [_stacked_ends([e[axis] for e in each], axis, engine.stride, n)
                for axis in range(3)]  # fmt: skip

    def stacked_ions(engine, nf):
        # the engine's form: a function of the sensitivity that sums every frame's ends per row
        calls.append("ion")
        lines, bins, owner, slopes, _ = _stacked_ends([ion_ends(p) for p in frames], 2,
                                                      engine.stride, n, scale=2)  # fmt: skip
        rows = np.arange(nf * n)
        return lambda s: end_gradient(s, 2, grid.spacing[2], lines // 2, bins, owner, slopes, rows,
                                      nf * n)  # fmt: skip

    monkeypatch.setattr(StackedFrames, "ses_interval_ends", stacked_ses)
    monkeypatch.setattr(StackedFrames, "ion_end_sums", stacked_ions)
    got = pb.ReactionFieldCalculator(atoms, **kw).compute_batch(frames)
    assert calls == ["ses", "ion"]
    for a, b in zip(got, ref, strict=True):
        assert a.grid == b.grid
        np.testing.assert_allclose(a.forces, b.forces, rtol=0,
                                   atol=1e-12 * np.abs(b.forces).max())  # fmt: skip


def _stacked_ends(per_frame, axis, stride, n, scale=1):
    """Frames' own line ends as the engine gives them: one set on its stack.

    Frame k's x indices (the bins along x, else the lines' first index, ``scale`` lines a
    plane) move by k·stride, its atoms by k·n (the rows of all frames' atoms).
    """
    lines, bins, owners, slopes, unmatched = [], [], [], [], 0
    for k, (li, bi, at, sl, *rest) in enumerate(per_frame):
        li, bi = np.array(li, dtype=np.int64), np.array(bi, dtype=np.int64)
        if axis == 0:
            bi += k * stride
        else:
            li[:, 0] += k * stride * scale
        lines.append(li)
        bins.append(bi)
        owners.append(np.where(at >= 0, at + k * n, -1))
        slopes.append(sl)
        unmatched += int(rest[0]) if rest else 0
    return (np.concatenate(lines), np.concatenate(bins), np.concatenate(owners),
            np.concatenate(slopes), unmatched)  # fmt: skip


def test_end_forces_in_array_code_equal_the_compiled_loop():
    """The per-atom sums of line ends as array code (ends left on a GPU) and as the CPU loop:
    unused columns (−1), owners that map images to atoms, images past the atoms left out."""
    from pbsolver.backends.cpu.line_ends import end_forces
    from pbsolver.forces.lines import array_end_forces

    rng = np.random.default_rng(8)
    m, n = 500, 9
    atoms = rng.integers(-1, 14, (m, 3))
    owners = np.r_[np.arange(n), rng.integers(0, n, 3), n + 1, n + 2]  # images, then two past
    s, slopes = rng.normal(size=m), rng.normal(size=(m, 3, 3))
    want = end_forces(s, atoms, slopes, owners, n)
    got = array_end_forces(s, atoms, slopes, owners, n)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12 * np.abs(want).max())
    assert (atoms == -1).any() and (owners[np.maximum(atoms, 0)] >= n).any()


def test_stacked_engine_forces_match_central_differences():
    """The stacked engine's exact forces against central differences of its own energy."""
    atoms = _molecule(7, n=20)
    kw = {"spacing": 0.5, "margin": 2.5, "skin": 1.0, "method": "multigrid", "rtol": 1e-12,
          "dtype": np.float64, "surface": "vdw", "ionic_strength": 0.15, "forces": "exact",
          "backend": "cpu", "map_options": {"kappa_subsamples": 2}, "engine": "stacked",
          **HIGH_CONTRAST}  # fmt: skip
    calc = pb.ReactionFieldCalculator(atoms, **kw)
    first = calc.compute()
    idx = _outermost(atoms, 2)

    def energy(pos):
        fr = calc.compute(pos)
        assert not fr.regridded
        return fr.energy

    fd = central_difference_forces(energy, atoms.positions, idx, SES_DELTA)
    rel = np.linalg.norm(first.forces[idx] - fd) / np.linalg.norm(fd)
    assert rel <= 1e-3, (rel, first.forces[idx], fd)


def test_calculator_maps_each_ses_line_once_a_frame(monkeypatch):
    """An exact-forces frame runs the SES line kernel once an axis (the map's, recording) and
    its forces equal those computed from the lines mapped again."""
    import pbsolver.backends.cpu.line_ends as line_ends
    import pbsolver.backends.cpu.maps as cpu_maps

    atoms = _molecule(10, n=10)
    calls = []
    real = cpu_maps.ses_lines_kernel

    def counted(*args):
        calls.append(args[2])  # the record flag
        return real(*args)

    monkeypatch.setattr(cpu_maps, "ses_lines_kernel", counted)
    monkeypatch.setattr(line_ends, "ses_lines_kernel", counted)
    calc = pb.ReactionFieldCalculator(atoms, surface="mol", forces="exact", spacing=0.5,
                                      margin=2.0, backend="cpu", method="multigrid", rtol=1e-10,
                                      adjoint_rtol=1e-10, dtype=np.float64,
                                      **HIGH_CONTRAST)  # fmt: skip
    M.clear_kept_maps()
    frame = calc.compute()
    assert calls == [True, True, True]
    M.clear_kept_maps()
    ref = solvation_forces(atoms, calc.problem, frame.solve.phi_rf, physics=calc.physics,
                           solver=calc.solver)  # fmt: skip
    assert calls[3:] == [True, True, True]  # mapped again for the forces
    np.testing.assert_allclose(frame.forces, ref.forces, rtol=0,
                               atol=1e-9 * np.abs(ref.forces).max())  # fmt: skip


def test_solvate_returns_exact_forces():
    atoms = _molecule(11, n=8)
    opts = {"spacing": 0.6, "margin": 2.0, "surface": "svdw", "ionic_strength": 0.1,
            "backend": "cpu", "method": "multigrid", "rtol": 1e-9, "dtype": np.float64}  # fmt: skip
    s = solvate(atoms, forces="exact", **opts)
    assert s.forces_kind == "exact" and isinstance(s.forces, np.ndarray)
    ref = solvation_forces(atoms, s.problem, s.result.phi_rf, surface="svdw", ionic_strength=0.1,
                           solver=pb.Solver(**SOLVER))  # fmt: skip
    np.testing.assert_allclose(s.forces, ref.forces, atol=1e-5 * np.abs(ref.forces).max())
    kcal = solvate(atoms, forces="exact", units="kcal/mol", **opts)
    np.testing.assert_allclose(kcal.forces * 4.184, s.forces, rtol=1e-6, atol=1e-6)
    assert solvate(atoms, **opts).forces_kind == "field"
    with pytest.raises(pb.InputError, match="forces must be"):
        solvate(atoms, forces="all", **opts)


def test_bad_input():
    atoms = _molecule(12, n=6)
    grid = M.grid_for_atoms(atoms, 0.6, 2.0)
    mol = pb.Problem.from_maps(M.build_maps(atoms, grid, surface="vdw"))
    phi = np.zeros(grid.shape)
    with pytest.raises(pb.InputError, match="surface"):
        solvation_forces(atoms, mol, phi, surface="apbs-mol")
    nodes = pb.Problem(grid, np.full(grid.shape, 2.0), mol.phi_coulomb, 2.0)
    with pytest.raises(pb.InputError, match="face maps"):
        solvation_forces(atoms, nodes, phi, surface="vdw")
    with pytest.raises(pb.InputError, match="eps_cavity"):
        solvation_forces(atoms, mol, phi, surface="vdw", eps_in=4.0)
    with pytest.raises(pb.InputError, match="box"):
        solvation_forces(atoms, mol, phi, surface="vdw", box=(20.0, 20.0, 20.0))
    with pytest.raises(pb.InputError, match="ionic_strength"):
        solvation_forces(atoms, mol, phi, surface="vdw", ionic_strength=0.1)
    with pytest.raises(pb.InputError, match="linearised"):
        solvation_forces(atoms, mol, phi, surface="vdw", ionic_strength=0.1, nonlinear=True)
    assert pb.forces.supports(pb.PhysicsOptions(surface="smol", probe_radius=0.0))
    assert pb.forces.supports(pb.PhysicsOptions(surface="smol"))
    assert not pb.forces.supports(pb.PhysicsOptions(surface="smol"), smooth=True)
    assert not pb.forces.supports(pb.PhysicsOptions(surface="apbs-mol"))
    for bad in (0, 2.5, "14"):  # the maps' and the forces' SES bisection depth
        with pytest.raises(pb.InputError, match="nbisect"):
            M.face_fractions(atoms, grid, "mol", nbisect=bad)
        with pytest.raises(pb.InputError, match="nbisect"):
            ses_gradient(atoms.positions, atoms.radii, np.arange(len(atoms)), 1.4, grid,
                         (phi, phi, phi), len(atoms), nbisect=bad)  # fmt: skip
    assert not pb.forces.supports(pb.PhysicsOptions(surface="vdw"), smooth=True)
    with pytest.raises(pb.InputError, match="delta"):
        pb.forces.central_difference_forces(lambda x: 0.0, atoms.positions, [0], delta=0.0)
