"""Multigrid and MG-CG on the CPU: coarsening, transfer kernels, coarse operators, convergence."""

import numba
import numpy as np
import pytest
from conftest import coulomb_map, random_problem, random_spheres_epsilon
from reference_kernels import rb_sor_color as reference_rb_sor_color
from reference_kernels import residual as reference_residual

import pbsolver as pb
from pbsolver import operator as op
from pbsolver.backends import get_backend
from pbsolver.backends.coarse import coarse_coefficients
from pbsolver.backends.cpu import mg_kernels as MG
from pbsolver.backends.cpu.backend import CPUBackend
from pbsolver.multigrid.builders import grid_hierarchy
from pbsolver.multigrid.coarsening import coarsen_axis, plan_coarsening


def on_threads(threads, kernel, *args):
    """``kernel(*args)`` on every numba thread (0) or on one, as the CPU backend runs it."""
    if not threads:
        return kernel(*args)
    old = numba.get_num_threads()
    numba.set_num_threads(threads)
    try:
        return kernel(*args)
    finally:
        numba.set_num_threads(old)


def rel_err(x, ref):
    return np.linalg.norm(x - ref) / np.linalg.norm(ref)


# ---------------------------------------------------------------------- slow references
def interpolation_matrix_1d(n_fine, pos, periodic):
    """Linear interpolation from coarse nodes at fine indices ``pos`` (dense, from the definition).

    A fine node that is a coarse node copies it; any other fine node must sit halfway between
    its two neighbours, which must both be coarse nodes.
    """
    pos = list(pos)
    P = np.zeros((n_fine, len(pos)))
    for i in range(n_fine):
        if i in pos:
            P[i, pos.index(i)] = 1.0
            continue
        left, right = i - 1, i + 1
        if periodic:
            left, right = left % n_fine, right % n_fine
        assert left in pos and right in pos, f"fine node {i} is not a midpoint"
        P[i, pos.index(left)] += 0.5
        P[i, pos.index(right)] += 0.5
    return P


def interpolation_matrix(axes):
    Ps = [interpolation_matrix_1d(a.n_fine, a.pos, a.periodic) for a in axes]
    return np.kron(np.kron(Ps[0], Ps[1]), Ps[2])


def unknown_mask(shape, periodic):
    return op.interior_mask(shape, periodic)


def transfer_case(rng, shape, periodic, dtype):
    axes = plan_coarsening(shape, (1.0, 1.0, 1.0), periodic)[0][0]
    be = get_backend("cpu")
    from pbsolver.backends import Transfer

    tr = Transfer(
        pos=tuple(a.pos.astype(np.int32) for a in axes),
        lo=tuple(a.lo.astype(np.int32) for a in axes),
        hi=tuple(a.hi.astype(np.int32) for a in axes),
        periodic=periodic,
        fine_shape=shape,
        coarse_shape=tuple(a.n_coarse for a in axes),
    )
    return be, axes, tr


def problem_with_odd_shapes(rng, shape, spacing=0.5, boundary="dirichlet", salt=False):
    """Random ε 1:80 spheres plus a slab and a cylinder of ε_in: not a single smooth blob."""
    grid = pb.Grid(shape, spacing=spacing, origin=(-2.0, -3.0, -1.0))
    eps = random_spheres_epsilon(grid, rng, n_spheres=3, eps_in=2.0)
    x, y, z = grid.coordinates()
    lo = np.array(grid.origin)
    hi = lo + np.array(grid.lengths)
    c = rng.uniform(lo + 0.3 * (hi - lo), hi - 0.3 * (hi - lo))
    slab = (np.abs(x - c[0]) < 0.15 * (hi - lo)[0]) & (np.abs(y - c[1]) < 0.3 * (hi - lo)[1])
    slab = slab & (np.abs(z - c[2]) < 0.1 * (hi - lo)[2])
    cyl = ((x - c[0]) ** 2 + (z - c[2]) ** 2 < (0.08 * min(hi - lo)) ** 2) & (y > c[1])
    eps = np.where(slab | cyl, 2.0, eps)
    phi_c = coulomb_map(grid, rng, eps_c=2.0)
    kwargs = {"boundary": boundary, "face_rule": "harmonic"}
    if salt:
        kwargs["kappa2"] = np.where(eps > 40, 80.0 * 0.12**2, 0.0)
    return pb.Problem(grid, eps, phi_c, 2.0, **kwargs)


# ---------------------------------------------------------------------- coarsening
@pytest.mark.parametrize("periodic", [False, True])
def test_coarsen_axis_keeps_every_fine_node_coarse_or_a_midpoint(periodic):
    for n in range(3, 70):
        if periodic and n % 2:
            assert coarsen_axis(n, periodic) is None
            continue
        ax = coarsen_axis(n, periodic)
        if ax is None:
            assert n < 4
            continue
        pos = ax.pos
        assert pos[0] == 0 and np.all(np.diff(pos) >= 1) and ax.n_coarse < n
        gaps = np.diff(np.append(pos, pos[0] + n)) if periodic else np.diff(pos)
        assert set(gaps) <= {1, 2}
        if periodic:
            assert ax.n_coarse % 2 == 0, "red-black on the coarse periodic axis needs even n"
            assert ax.n_coarse <= n // 2 + 1
        else:
            assert pos[-1] == n - 1, "the fixed boundary node must stay a coarse node"
            assert ax.n_coarse == (n - 1 + 1) // 2 + 1
        # lo/hi agree with the dense definition
        P = interpolation_matrix_1d(n, pos, periodic)
        P_maps = np.zeros_like(P)
        np.add.at(P_maps, (np.arange(n), ax.lo), 0.5)
        np.add.at(P_maps, (np.arange(n), ax.hi), 0.5)
        np.testing.assert_array_equal(P, P_maps)


def test_plan_reaches_one_unknown_and_semi_coarsens_anisotropic_spacing():
    plans = plan_coarsening((37, 30, 129), (0.5, 0.5, 0.5), periodic=False)
    shapes = [tuple(a.n_coarse for a in axes) for axes, _ in plans]
    assert shapes[0] == (19, 16, 65) and shapes[-1] == (3, 3, 3)
    plans = plan_coarsening((34, 28, 44), (0.5, 0.5, 0.5), periodic=True)
    shapes = [tuple(a.n_coarse for a in axes) for axes, _ in plans]
    assert shapes[0] == (18, 14, 22) and shapes[-1] == (2, 2, 2)
    assert all(n % 2 == 0 for s in shapes for n in s)
    # z twice as coarse: x and y catch up first, then all three coarsen together
    plans = plan_coarsening((65, 65, 33), (0.25, 0.25, 0.5), periodic=False)
    first_axes, first_spacing = plans[0]
    assert tuple(a.n_coarse for a in first_axes) == (33, 33, 33)
    assert first_spacing == (0.5, 0.5, 0.5)
    assert tuple(a.n_coarse for a in plans[1][0]) == (17, 17, 17)


# ---------------------------------------------------------------------- transfer kernels
TRANSFER_SHAPES = [((13, 10, 9), False), ((12, 14, 8), True), ((6, 7, 11), False)]


@pytest.mark.parametrize(("shape", "periodic"), TRANSFER_SHAPES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_restrict_is_the_transpose_of_trilinear_interpolation(rng, shape, periodic, dtype):
    be, axes, tr = transfer_case(rng, shape, periodic, dtype)
    P = interpolation_matrix(axes)
    fine = rng.normal(size=shape).astype(dtype)
    want = (P.T @ fine.astype(np.float64).ravel()).reshape(tr.coarse_shape)
    want[~unknown_mask(tr.coarse_shape, periodic)] = 0
    args = (*tr.pos, *tr.lo, *tr.hi)
    args = (args[0], args[3], args[6], args[1], args[4], args[7], args[2], args[5], args[8])
    tol = {"rtol": 0, "atol": (1e-6 if dtype == np.float32 else 1e-14) * np.abs(want).max()}
    for threads in (0, 1):  # every thread, then one (the backend's small grids)
        coarse = np.full(tr.coarse_shape, np.nan, dtype=dtype)
        on_threads(threads, MG.restrict, fine, coarse, *args, periodic)
        np.testing.assert_allclose(coarse, want, **tol)
    coarse = np.full(tr.coarse_shape, np.nan, dtype=dtype)
    be.restrict(tr, fine, coarse)
    np.testing.assert_allclose(coarse, want, **tol)


@pytest.mark.parametrize(("shape", "periodic"), TRANSFER_SHAPES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_prolong_add_adds_trilinear_interpolation_on_unknowns(rng, shape, periodic, dtype):
    be, axes, tr = transfer_case(rng, shape, periodic, dtype)
    P = interpolation_matrix(axes)
    coarse = rng.normal(size=tr.coarse_shape).astype(dtype)
    fine0 = rng.normal(size=shape).astype(dtype)
    add = (P @ coarse.astype(np.float64).ravel()).reshape(shape)
    want = fine0.astype(np.float64) + np.where(unknown_mask(shape, periodic), add, 0.0)
    lo_hi = (tr.lo[0], tr.hi[0], tr.lo[1], tr.hi[1], tr.lo[2], tr.hi[2])
    tol = {"rtol": 0, "atol": (1e-6 if dtype == np.float32 else 1e-14) * np.abs(want).max()}
    for threads in (0, 1):  # every thread, then one (the backend's small grids)
        fine = fine0.copy()
        on_threads(threads, MG.prolong_add, coarse, fine, *lo_hi, periodic)
        np.testing.assert_allclose(fine, want, **tol)
        fixed = ~unknown_mask(shape, periodic)
        np.testing.assert_array_equal(fine[fixed], fine0[fixed])
    fine = fine0.copy()
    be.prolong_add(tr, coarse, fine)
    np.testing.assert_allclose(fine, want, **tol)


@pytest.mark.parametrize(
    ("shape", "periodic"),
    [((12, 10, 14), False), ((7, 9, 3), False), ((12, 10, 14), True), ((4, 6, 2), True)],
)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_mg_smoother_and_residual_match_the_core_kernels_bitwise(rng, shape, periodic, dtype):
    """The z-vectorised colour sweep and residual (all threads and one) against node-by-node."""
    cx, cy, cz = (rng.uniform(1.0, 80.0, shape).astype(dtype) for _ in range(3))
    diag = (rng.uniform(0.0, 5.0, shape) + 6 * 80).astype(dtype)
    b = rng.normal(size=shape).astype(dtype)
    x0 = rng.normal(size=shape).astype(dtype)
    w = dtype(1.3)
    for color in (0, 1):
        want = x0.copy()
        reference_rb_sor_color(want, b, cx, cy, cz, diag, color, w, periodic)
        assert not np.array_equal(want, x0)
        for threads in (0, 1):  # every thread, then one (the backend's small grids)
            got = x0.copy()
            on_threads(threads, MG.rb_sor_color, got, b, cx, cy, cz, diag, color, w, periodic)
            np.testing.assert_array_equal(got, want)
        # the one-pass sweep: this colour then the other, any number of blocks of planes
        reference_rb_sor_color(want, b, cx, cy, cz, diag, 1 - color, w, periodic)
        for blocks in (1, 2, 3, 64):
            for threads in (0, 1):
                got = x0.copy()
                on_threads(threads, MG.rb_sor_sweep, got, b, cx, cy, cz, diag, color, w,
                           periodic, blocks)  # fmt: skip
                np.testing.assert_array_equal(got, want, err_msg=f"{blocks} blocks")
    want = np.empty_like(x0)
    reference_residual(x0, b, cx, cy, cz, diag, want, periodic)
    for threads in (0, 1):  # every thread, then one (the backend's small grids)
        got = np.full_like(x0, np.nan)
        on_threads(threads, MG.residual, x0, b, cx, cy, cz, diag, got, periodic)
        np.testing.assert_array_equal(got, want)
    sums = [on_threads(n, MG.residual_sumsq, x0, b, cx, cy, cz, diag, periodic) for n in (0, 1)]
    assert sums[0] == sums[1]  # one order of summation whatever the threads
    # the squares of the node-by-node residual, summed in float64 (``want`` is rounded to dtype)
    rel = 1e-6 if dtype == np.float32 else 1e-12
    assert sums[0] == pytest.approx(float(np.sum(want.astype(np.float64) ** 2)), rel=rel)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_vector_kernels_against_numpy(rng, dtype):
    be = CPUBackend()
    shape = (9, 11, 7)
    x = rng.normal(size=shape).astype(dtype)
    y = rng.normal(size=shape).astype(dtype)
    tol = 1e-6 if dtype == np.float32 else 1e-14
    assert be.dot(x, y) == pytest.approx(
        float(np.sum(x.astype(float) * y.astype(float))), rel=1e-12
    )
    z = y.copy()
    be.axpby(z, x, 0.7, -1.9)
    np.testing.assert_allclose(z, 0.7 * x.astype(float) - 1.9 * y.astype(float), rtol=tol, atol=tol)
    for big in (False, True):  # serial and parallel fill
        a = np.ones((50, 50, 50) if big else shape, dtype=dtype)
        be.fill(a, -2.5)
        assert np.all(a == -2.5)


# ---------------------------------------------------------------------- coarse operators
def test_coarse_operator_of_uniform_coefficients_is_the_scaled_rediscretisation():
    shape = (17, 17, 17)
    c = np.full(shape, 3.0)
    k2 = np.full(shape, 0.25)
    axes = plan_coarsening(shape, (1, 1, 1), False)[0][0]
    cx, cy, cz, kc = coarse_coefficients(c, c, c, k2, axes)
    inner = (slice(1, -2),) * 3
    # Pᵀ A P scaling in 3D: 8 × (ε/(2h)²) = 2 ε/h², and 8 κ̄² (lumped)
    np.testing.assert_allclose(cx[inner], 6.0)
    np.testing.assert_allclose(cy[inner], 6.0)
    np.testing.assert_allclose(kc[1:-1, 1:-1, 1:-1], 2.0)


@pytest.mark.parametrize("n", [17, 18, 23])
def test_coarse_operator_is_exact_for_layered_media(rng, n):
    """ε varying along x only, 1..80: the flux-conserving fine solution injected to the coarse
    grid (possibly with a one-interval gap) is also annihilated by the coarse operator."""
    shape = (n, 9, 8)
    layer = rng.uniform(1.0, 80.0, n)
    cx = np.broadcast_to(layer[:, None, None], shape).copy()
    cy = rng.uniform(1.0, 80.0, shape)
    cz = rng.uniform(1.0, 80.0, shape)
    # v(i+1) − v(i) = 1 / c(i): constant flux along x, constant in y and z
    v = np.concatenate([[0.0], np.cumsum(1.0 / layer[:-1])])
    fine = np.broadcast_to(v[:, None, None], shape).copy()
    coef = op.Coefficients(cx, cy, cz, None, periodic=False)
    assert np.abs(op.apply(coef, fine)).max() < 1e-12
    axes = plan_coarsening(shape, (1, 1, 1), False)[0][0]
    ccx, ccy, ccz, _ = coarse_coefficients(cx, cy, cz, None, axes)
    coarse = fine[np.ix_(axes[0].pos, axes[1].pos, axes[2].pos)]
    ccoef = op.Coefficients(ccx, ccy, ccz, None, periodic=False)
    assert np.abs(op.apply(ccoef, coarse)).max() < 1e-10 * np.abs(ccx).max()


# ---------------------------------------------------------------------- solving
CASES = [
    {"shape": (29, 37, 23)},
    {"shape": (26, 21, 31), "salt": True},
    {"shape": (28, 34, 22), "boundary": "periodic"},
    {"shape": (30, 26, 18), "boundary": "periodic", "salt": True},
]
CASE_IDS = ["dirichlet", "dirichlet+salt", "periodic", "periodic+salt"]
METHODS = [
    ("multigrid", {}, 14),
    ("multigrid", {"cycle": "V"}, 20),
    ("multigrid", {"cycle": "W", "presmooth": 1, "postsmooth": 1}, 20),
    ("mgcg", {}, 12),
]
METHOD_IDS = ["F", "V", "W11", "mgcg"]


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
@pytest.mark.parametrize(("method", "options", "bound"), METHODS, ids=METHOD_IDS)
def test_converges_on_random_high_contrast_problems(rng, case, method, options, bound):
    p = problem_with_odd_shapes(rng, **case)
    res = pb.solve(p, method=method, backend="cpu", dtype=np.float64, **options)
    assert res.converged and res.reason == "converged"
    assert res.iterations <= bound
    assert op.relative_residual(p, res.phi_rf) <= 1e-6


@pytest.mark.parametrize(
    ("shape", "boundary"),
    [
        ((3, 40, 41), "dirichlet"),
        ((5, 5, 90), "dirichlet"),
        ((100, 7, 9), "dirichlet"),
        ((4, 30, 6), "periodic"),
        ((64, 4, 10), "periodic"),
    ],
)
def test_thin_and_awkward_shapes(rng, shape, boundary):
    p = random_problem(rng, shape=shape, boundary=boundary, salt=True)
    for method in ("multigrid", "mgcg"):
        res = pb.solve(p, method=method, backend="cpu", dtype=np.float64)
        assert res.converged and res.iterations <= 10
        assert op.relative_residual(p, res.phi_rf) <= 1e-6


@pytest.mark.parametrize(
    "spacing", [(0.4, 0.7, 0.5), (0.3, 0.3, 0.9)], ids=["aniso", "strong-aniso"]
)
@pytest.mark.parametrize("method", ["multigrid", "mgcg"])
def test_face_maps_anisotropic_spacing_and_boundary_values(rng, spacing, method):
    """Face maps of one geometry (harmonic faces of a node map, each face ±10 % noise)."""
    p0 = problem_with_odd_shapes(rng, (27, 30, 25), spacing=spacing, salt=True)
    faces = tuple(f * rng.uniform(0.9, 1.1, f.shape) for f in p0.face_permittivities())
    p = pb.Problem(
        p0.grid,
        phi_coulomb=p0.phi_coulomb,
        eps_cavity=p0.eps_cavity,
        epsilon_faces=faces,
        kappa2=p0.kappa2,
        boundary_values=rng.normal(0.0, 5.0, p0.grid.shape),
    )
    res = pb.solve(p, method=method, backend="cpu", dtype=np.float64)
    assert res.converged and res.iterations <= 12
    assert op.relative_residual(p, res.phi_rf) <= 1e-6


def test_inconsistent_face_maps_need_mgcg(rng):
    """Each axis' faces from a different random geometry: the medium is locally anisotropic
    up to 80:1, which point smoothers handle badly; MG-CG stays fast, plain cycles converge."""
    p = random_problem(rng, shape=(27, 30, 25), faces=True, spacing=(0.4, 0.7, 0.5))
    cg = pb.solve(p, method="mgcg", backend="cpu", dtype=np.float64)
    mg = pb.solve(p, method="multigrid", backend="cpu", dtype=np.float64)
    assert cg.converged and mg.converged
    # MG-CG's cycles are V(2,2), plain multigrid's V(3,3): compare the sweeps
    assert cg.iterations <= 20 and 4 * cg.iterations < 6 * mg.iterations
    assert op.relative_residual(p, cg.phi_rf) <= 1e-6


@pytest.mark.parametrize(
    "case",
    [
        {"shape": (13, 17, 11)},
        {"shape": (14, 9, 12), "salt": True, "boundary_values": True},
        {"shape": (12, 14, 10), "boundary": "periodic"},
        {"shape": (12, 10, 16), "boundary": "periodic", "salt": True},
        {"shape": (11, 15, 12), "faces": True, "spacing": (0.4, 0.7, 0.5)},
    ],
    ids=["dirichlet", "salt+bv", "periodic", "periodic+salt", "faces+aniso"],
)
@pytest.mark.parametrize("method", ["multigrid", "mgcg"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_agrees_with_float64_direct_solve(rng, case, method, dtype):
    p = random_problem(rng, **case)
    ref = op.reference_solve(p)
    res = pb.solve(p, method=method, backend="cpu", dtype=dtype, strict=True)
    assert res.method == method and res.converged
    assert rel_err(res.phi_rf, ref) <= 1e-4
    assert op.relative_residual(p, res.phi_rf) <= 1e-6


@pytest.mark.parametrize("boundary", ["dirichlet", "periodic"])
@pytest.mark.parametrize("method", ["multigrid", "mgcg"])
def test_float32_with_refinement_reaches_rtol_in_float64(rng, boundary, method):
    shape = (34, 30, 26) if boundary == "periodic" else (33, 30, 27)
    p = problem_with_odd_shapes(rng, shape, boundary=boundary, salt=True)
    res = pb.solve(p, method=method, backend="cpu", dtype=np.float32, rtol=1e-6)
    assert res.converged and res.phi_rf.dtype == np.float64
    assert op.relative_residual(p, res.phi_rf) <= 1e-6
    # plain float32 (no refinement) stalls near its rounding floor instead
    flat = pb.solve(
        p, method=method, backend="cpu", dtype=np.float32, refine=False, rtol=1e-9, maxiter=40
    )
    assert not flat.converged


def test_mgcg_phases_are_measured_by_the_recurrence_residual(rng, monkeypatch):
    """Under refinement MG-CG's phase checks read its own r; the float64 checks still decide."""
    from pbsolver.multigrid.methods import MGCG

    p = problem_with_odd_shapes(rng, (33, 30, 27), boundary="dirichlet", salt=True)
    be = CPUBackend()
    calls = {"own": 0, "operator": 0}
    own, operator = MGCG.residual_norm, CPUBackend.residual_norm

    def counted_own(self):
        calls["own"] += 1
        return own(self)

    def counted_operator(self, st, x):
        calls["operator"] += 1
        return operator(self, st, x)

    monkeypatch.setattr(MGCG, "residual_norm", counted_own)
    monkeypatch.setattr(CPUBackend, "residual_norm", counted_operator)
    res = pb.Solver(method="mgcg", backend=be, rtol=1e-6).solve(p)
    assert res.converged and op.relative_residual(p, res.phi_rf) <= 1e-6
    assert calls["own"] == res.iterations  # one check an iteration, none by the operator
    # float64 (no refinement): the loop measures b − A x with the operator at every check
    calls.update(own=0, operator=0)
    res = pb.Solver(method="mgcg", backend=be, rtol=1e-6, dtype=np.float64).solve(p)
    assert res.converged and calls["own"] == 0 and calls["operator"] >= res.iterations


def sphere_map(n, rng):
    """A dielectric sphere ε 2 in 80 with off-centre charges on a (n, n, n) grid of 16 Å."""
    h = 16.0 / (n - 1)
    grid = pb.Grid((n, n, n), spacing=h, origin=(-8.0, -8.0, -8.0))
    x, y, z = grid.coordinates()
    eps = np.where(x**2 + y**2 + z**2 < 5.0**2, 2.0, 80.0)
    phi = np.zeros(grid.shape)
    for q, c in zip([1.0, -0.6, 0.4], rng.uniform(-2.5, 2.5, (3, 3)), strict=True):
        r = np.sqrt((x - c[0]) ** 2 + (y - c[1]) ** 2 + (z - c[2]) ** 2 + 0.04)
        phi += pb.COULOMB_KJ * q / (2.0 * r)
    return pb.Problem(grid, eps, phi, 2.0, face_rule="harmonic")


def cycles_to_converge(n, seed=7, **options):
    p = sphere_map(n, np.random.default_rng(seed))
    res = pb.solve(p, backend="cpu", dtype=np.float64, **options)
    assert res.converged
    return res.iterations


def cycles_and_rate(n, seed=7, **options):
    """Cycles to rtol 1e-6 and the mean residual reduction a cycle over the last three."""
    p = sphere_map(n, np.random.default_rng(seed))
    res = pb.solve(p, backend="cpu", dtype=np.float64, **options)
    assert res.converged
    h = res.residual_norms
    return res.iterations, (h[-1] / h[-4]) ** (1 / 3)


# (method, options, most extra cycles from 33³ to 129³, largest factor a cycle)
LEVEL_FREE = [
    ("multigrid", {}, 2, 0.32),
    ("multigrid", {"cycle": "W"}, 2, 0.32),
    ("mgcg", {}, 2, 0.2),
]


@pytest.mark.parametrize(
    ("method", "options", "extra", "factor"), LEVEL_FREE, ids=["F", "W", "mgcg"]
)
def test_cycles_do_not_grow_with_grid_size(method, options, extra, factor):
    small, small_rate = cycles_and_rate(33, method=method, **options)
    large, large_rate = cycles_and_rate(65, method=method, **options)
    assert small <= 12 and large <= small + extra
    assert small_rate < factor and large_rate < factor


@pytest.mark.parametrize(
    ("method", "options", "extra", "factor"),
    # a 129³ CPU multigrid each: slow (CI time; test_cycles_do_not_grow_with_grid_size stays)
    [
        pytest.param(*LEVEL_FREE[0], marks=pytest.mark.slow),
        pytest.param(*LEVEL_FREE[2], marks=pytest.mark.slow),
    ],
    ids=["F", "mgcg"],
)
def test_cycles_do_not_grow_up_to_129(method, options, extra, factor):
    """129³ (about 1.5 s on a quiet machine; the MG-CG case is marked slow)."""
    small, small_rate = cycles_and_rate(33, method=method, **options)
    large, large_rate = cycles_and_rate(129, method=method, **options)
    assert large <= small + extra and large <= 12
    assert large_rate < factor


def test_v_cycle_rate_creeps_up_with_levels():
    """Documented behaviour (module docstring): a V-cycle is still fast but not level-free."""
    v33, rate33 = cycles_and_rate(33, method="multigrid", cycle="V")
    v65, rate65 = cycles_and_rate(65, method="multigrid", cycle="V")
    assert v33 <= 12 and v65 <= 14
    assert rate33 < 0.4 and rate65 < 0.5


# ---------------------------------------------------------------------- contract and structure
def test_auto_picks_by_size_and_boundary(rng):
    small = random_problem(rng, shape=(17, 19, 15))
    res = pb.solve(small, backend="cpu")
    assert res.method == "sor" and res.converged  # below 60³ SOR is faster on the CPU
    large = random_problem(rng, shape=(61, 62, 60))
    res = pb.solve(large, backend="cpu", maxiter=1)
    assert res.method == "multigrid"
    res = pb.solve(small, backend="cpu", cycle="V", maxiter=1)  # multigrid options keep it
    assert res.method == "multigrid"
    odd_periodic = random_problem(rng, shape=(12, 15, 16), boundary="periodic")
    assert pb.solve(odd_periodic, backend="cpu", rtol=1e-4).method == "jacobi"


def test_maxiter_x0_and_callback(rng):
    p = random_problem(rng, shape=(17, 19, 15))
    x0 = rng.normal(size=p.grid.shape)
    keep = x0.copy()
    seen = []
    res = pb.Solver(
        method="multigrid", backend="cpu", maxiter=2, callback=lambda i, r: seen.append(i)
    ).solve(p, x0=x0)
    assert res.iterations == 2 and res.reason == "maxiter" and not res.converged
    assert seen == [0, 1, 2]
    np.testing.assert_array_equal(x0, keep)


def test_bad_options_are_refused(rng):
    p = random_problem(rng, shape=(16, 14, 16))
    with pytest.raises(pb.InputError, match="cycle"):
        pb.solve(p, method="multigrid", backend="cpu", cycle="X")
    with pytest.raises(pb.InputError, match="cycle"):
        pb.solve(p, method="mgcg", backend="cpu", cycle="F")
    with pytest.raises(pb.InputError, match="presmooth == postsmooth"):
        pb.solve(p, method="mgcg", backend="cpu", presmooth=2, postsmooth=1)
    with pytest.raises(pb.InputError, match="max_levels"):
        pb.solve(p, method="multigrid", backend="cpu", max_levels=0)
    p = random_problem(rng, shape=(16, 15, 16), boundary="periodic")
    with pytest.raises(pb.InputError, match="even number"):
        pb.solve(p, method="multigrid", backend="cpu")
    p = random_problem(rng, shape=(16, 14, 16))
    with pytest.raises(pb.InputError, match="presmooth"):
        pb.solve(p, method="multigrid", backend="cpu", presmooth=-1)


class RecordingBackend(CPUBackend):
    """The CPU backend, recording every call and offering a ``capture`` hook."""

    name = "cpu"

    def __init__(self):
        self.calls = []
        self.captured = 0

    def __getattribute__(self, name):
        attr = object.__getattribute__(self, name)
        if callable(attr) and not name.startswith("_") and name not in ("capture",):
            calls = object.__getattribute__(self, "calls")

            def wrapped(*args, **kwargs):
                calls.append(name)
                return attr(*args, **kwargs)

            return wrapped
        return attr

    def capture(self, fn, key=None):
        self.captured += 1
        return fn


def test_cycle_only_enqueues_kernels_and_goes_through_capture(rng):
    be = RecordingBackend()
    p = random_problem(rng, shape=(21, 18, 25), salt=True)
    res = pb.Solver(method="multigrid", backend=be, dtype=np.float64).solve(p)
    assert res.converged and be.captured >= 1
    st = be.stencil(p, np.float32)
    for cycle in ("V", "W", "F"):
        h = grid_hierarchy(be, st, p.grid.spacing, p.kappa2, cycle=cycle)
        x = be.zeros(st.shape, np.float32)
        h.bind(st, x)
        be.calls.clear()
        h.cycle()
        # nothing that allocates or reads a value back (a host synchronisation)
        kernels = {"rb_sor_sweeps", "rb_sor_sweep", "residual", "restrict", "fill", "prolong_add",
                   "dense_solve"}  # fmt: skip
        assert set(be.calls) == kernels
        assert np.abs(x).max() > 0
    res = pb.Solver(method="mgcg", backend=be, dtype=np.float64).solve(p)
    assert res.converged and res.method == "mgcg"


def test_hierarchy_report(rng):
    p = random_problem(rng, shape=(33, 20, 27))
    be = get_backend("cpu")
    h = grid_hierarchy(be, be.stencil(p, np.float32), p.grid.spacing, p.kappa2)
    text = repr(h)
    assert "3 levels" in text and "(33, 20, 27)" in text and "(9, 6, 8)" in text
    assert h.shapes == [(33, 20, 27), (17, 11, 14), (9, 6, 8)]
    assert h.coarse_inverse.shape == (9 * 6 * 8,) * 2
    inverse_bytes = (9 * 6 * 8) ** 2 * 4
    assert inverse_bytes < h.nbytes() < 33 * 20 * 27 * 4 * 3 + inverse_bytes
    # coarsest_nodes=0: coarsen as far as possible, down to a single unknown
    h = grid_hierarchy(be, be.stencil(p, np.float32), p.grid.spacing, p.kappa2, coarsest_nodes=0)
    assert h.shapes[-1] == (3, 3, 3) and h.coarse_inverse.shape == (27, 27)
    # a single level: the "cycle" is symmetric Gauss-Seidel sweeps on the grid itself
    h = grid_hierarchy(be, be.stencil(p, np.float32), p.grid.spacing, p.kappa2, max_levels=1)
    assert h.shapes == [(33, 20, 27)] and h.coarse_inverse is None
    res = pb.solve(p, method="multigrid", backend="cpu", max_levels=1, maxiter=3)
    assert res.iterations == 3 and res.residual < res.residual_norms[0]


@pytest.mark.parametrize(
    "case",
    [{}, {"salt": True}, {"boundary": "periodic"}, {"boundary": "periodic", "salt": True}],
    ids=["dirichlet", "salt", "periodic", "periodic+salt"],
)
def test_coarsest_level_is_solved_exactly(rng, case):
    shape = (16, 14, 18) if case.get("boundary") == "periodic" else (17, 14, 19)
    p = random_problem(rng, shape=shape, **case)
    be = get_backend("cpu")
    h = grid_hierarchy(be, be.stencil(p, np.float64), p.grid.spacing, p.kappa2)
    coarsest = h.levels[-1]
    st = coarsest.stencil
    assert 0 < np.prod(st.shape) <= 512 and h.coarse_inverse is not None
    b = rng.normal(size=st.shape)
    b[~op.interior_mask(st.shape, st.periodic)] = 0
    if st.singular:
        b -= b.mean()
    st.b[...] = b
    coarsest.x[...] = np.nan
    h._visit(len(h.levels) - 1, "V")
    assert be.residual_norm(st, coarsest.x) <= 1e-10 * np.linalg.norm(b)
    if st.singular:
        assert abs(coarsest.x.mean()) <= 1e-10 * np.abs(coarsest.x).max()
    # and the sweep fallback (no dense inverse) gets close too
    h.coarse_inverse = None
    coarsest.x[...] = 0
    h._visit(len(h.levels) - 1, "V")
    assert be.residual_norm(st, coarsest.x) <= 0.3 * np.linalg.norm(b)
