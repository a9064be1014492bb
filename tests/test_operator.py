"""The discrete operator: vectorised form, sparse assembly, symmetry, and the CPU kernels."""

import numpy as np
import pytest
from conftest import random_problem

import pbsolver as pb
from pbsolver import operator as op
from pbsolver.backends import get_backend

CASES = [
    {"boundary": "dirichlet"},
    {"boundary": "dirichlet", "salt": True},
    {"boundary": "dirichlet", "faces": True, "boundary_values": True},
    {"boundary": "dirichlet", "face_rule": "harmonic", "spacing": (0.4, 0.7, 0.5)},
    {"boundary": "periodic"},
    {"boundary": "periodic", "salt": True, "faces": True, "spacing": (0.5, 0.6, 0.45)},
]
IDS = ["dirichlet", "salt", "faces+bv", "harmonic+aniso", "periodic", "periodic+salt+faces"]


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_vectorised_operator_matches_sparse_assembly(rng, case):
    p = random_problem(rng, **case)
    A, rhs, unknowns = op.assemble_matrix(p)
    assert abs(A - A.T).max() <= 1e-12 * abs(A).max()  # symmetric
    coef = op.coefficients(p)
    x = rng.normal(size=p.grid.shape)
    x_fixed = np.where(unknowns, 0.0, x)  # fixed nodes keep their values out of A
    ax = op.apply(coef, np.where(unknowns, x, 0.0))
    np.testing.assert_allclose(ax[unknowns], A @ x[unknowns], rtol=1e-12, atol=1e-9)
    # the rhs over unknowns equals b minus the coupling to fixed values
    b = op.rhs(p)
    if p.boundary == "dirichlet":
        moved = b - op.apply(coef, op.fixed_values(p))
        np.testing.assert_allclose(moved[unknowns], rhs, rtol=1e-12, atol=1e-9)
    else:
        np.testing.assert_allclose(b[unknowns], rhs, rtol=1e-12, atol=1e-9)
    assert x_fixed.shape == x.shape


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_operator_is_positive_definite_on_random_vectors(rng, case):
    p = random_problem(rng, **case)
    A, _, _ = op.assemble_matrix(p)
    for _ in range(5):
        v = rng.normal(size=A.shape[0])
        if p.is_singular:
            v -= v.mean()
        assert v @ (A @ v) > 0


def test_constant_is_the_null_space_of_periodic_poisson(rng):
    p = random_problem(rng, boundary="periodic")
    A, _, _ = op.assemble_matrix(p)
    assert np.abs(A @ np.ones(A.shape[0])).max() < 1e-9 * abs(A).max()


def test_rhs_follows_the_design_formula_at_one_node(rng):
    """b at one node, written out term by term from DESIGN §1 (per-axis spacing)."""
    p = random_problem(rng, faces=True, salt=True, spacing=(0.4, 0.5, 0.6))
    ex, ey, ez = p.epsilon_faces
    phi, ec = p.phi_coulomb, p.eps_cavity
    i, j, k = 5, 7, 9
    hx, hy, hz = p.grid.spacing
    expected = (
        (ex[i, j, k] - ec) * (phi[i + 1, j, k] - phi[i, j, k]) / hx**2
        + (ex[i - 1, j, k] - ec) * (phi[i - 1, j, k] - phi[i, j, k]) / hx**2
        + (ey[i, j, k] - ec) * (phi[i, j + 1, k] - phi[i, j, k]) / hy**2
        + (ey[i, j - 1, k] - ec) * (phi[i, j - 1, k] - phi[i, j, k]) / hy**2
        + (ez[i, j, k] - ec) * (phi[i, j, k + 1] - phi[i, j, k]) / hz**2
        + (ez[i, j, k - 1] - ec) * (phi[i, j, k - 1] - phi[i, j, k]) / hz**2
        - p.kappa2[i, j, k] * phi[i, j, k]
    )
    assert op.rhs(p)[i, j, k] == pytest.approx(expected, rel=1e-12)


def test_harmonic_and_arithmetic_faces():
    g = pb.Grid((4, 4, 4))
    eps = np.ones(g.shape)
    eps[2:] = 80.0
    arith = pb.Problem(g, eps, np.zeros(g.shape)).face_permittivities()[0]
    harm = pb.Problem(g, eps, np.zeros(g.shape), face_rule="harmonic").face_permittivities()[0]
    assert arith[1, 0, 0] == pytest.approx(40.5)
    assert harm[1, 0, 0] == pytest.approx(2 * 80 / 81)


def test_charge_on_a_node_never_forms_zero_times_infinity():
    g = pb.Grid((9, 9, 9), spacing=0.5, origin=(-2, -2, -2))
    x, y, z = g.coordinates()
    r = np.sqrt(x**2 + y**2 + z**2)
    with np.errstate(divide="ignore"):
        phi = pb.COULOMB_KJ / (2.0 * r)
    eps = np.where(r < 1.2, 2.0, 80.0)
    p = pb.Problem(g, eps, phi, 2.0)
    b = op.rhs(p)
    assert np.isfinite(b).all() and np.abs(b).max() > 0
    st = get_backend("cpu").stencil(p, np.float64)
    np.testing.assert_allclose(st.b, b, rtol=1e-12, atol=1e-12 * np.abs(b).max())


# ---------------------------------------------------------------- CPU kernels vs the reference
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_cpu_rhs_and_residual_match_reference(rng, case):
    p = random_problem(rng, **case)
    be = get_backend("cpu")
    st = be.stencil(p, np.float64)
    b = op.rhs(p)
    np.testing.assert_allclose(st.b, b, rtol=1e-10, atol=1e-10 * np.abs(b).max())
    coef = op.coefficients(p)
    x = rng.normal(size=p.grid.shape) + op.fixed_values(p)
    r_ref = op.residual(coef, b, x)
    r = np.empty_like(x)
    be.residual(st, x, r)
    np.testing.assert_allclose(r, r_ref, rtol=1e-10, atol=1e-10 * np.abs(r_ref).max())
    assert be.residual_norm(st, x) == pytest.approx(np.linalg.norm(r_ref), rel=1e-10)
    # float32 storage: same function to float32 round-off
    st32 = be.stencil(p, np.float32)
    r32 = np.empty(p.grid.shape, np.float32)
    be.residual(st32, x.astype(np.float32), r32)
    assert np.linalg.norm(r32 - r_ref) / np.linalg.norm(r_ref) < 1e-5


def _sor_reference(p, x, omega, sweeps):
    """Red–black SOR written plainly with the sparse matrix (slow, float64)."""
    A, rhs, unknowns = op.assemble_matrix(p)
    A = A.tocsr()
    idx = np.argwhere(unknowns)
    colour = idx.sum(axis=1) % 2
    xu = x[unknowns].copy()
    d = A.diagonal()
    for _ in range(sweeps):
        for c in (0, 1):
            sel = np.flatnonzero(colour == c)
            gs = (rhs[sel] - A[sel] @ xu + d[sel] * xu[sel]) / d[sel]
            xu[sel] += omega * (gs - xu[sel])
    out = x.copy()
    out[unknowns] = xu
    return out


@pytest.mark.parametrize("case", CASES[:5], ids=IDS[:5])
def test_cpu_sor_sweep_matches_reference(rng, case):
    p = random_problem(rng, shape=(10, 12, 14), **case)
    be = get_backend("cpu")
    st = be.stencil(p, np.float64)
    x0 = rng.normal(size=p.grid.shape)
    x0 = np.where(op.interior_mask(x0.shape, p.boundary == "periodic"), x0, op.fixed_values(p))
    expected = _sor_reference(p, x0, 1.7, 3)
    x = x0.copy()
    be.sor_sweeps(st, x, 1.7, 3)
    np.testing.assert_allclose(x, expected, rtol=1e-9, atol=1e-9 * np.abs(expected).max())


def test_cpu_jacobi_sweep_matches_reference(rng):
    p = random_problem(rng, shape=(10, 12, 14), salt=True, boundary_values=True)
    be = get_backend("cpu")
    st = be.stencil(p, np.float64)
    coef = op.coefficients(p)
    b = op.rhs(p)
    x = rng.normal(size=p.grid.shape)
    inner = op.interior_mask(x.shape, False)
    x = np.where(inner, x, op.fixed_values(p))
    expected = x + 0.8 * np.where(inner, op.residual(coef, b, x) / coef.diagonal(), 0.0)
    work = np.empty_like(x)
    got = x.copy()
    be.jacobi_sweeps(st, got, work, 0.8, 1)
    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-10 * np.abs(expected).max())


def test_operator_bodies_run_as_plain_python_and_compiled_alike(rng):
    """The per-node bodies give the same bits as plain Python and compiled for the CPU."""
    from pbsolver.backends.bodies import operator as bodies
    from pbsolver.backends.cpu.kernels import B

    v = [float(a) for a in rng.normal(size=18)]
    args = (v[0], 2.0, *v[1:13], 0.25, 0.36, 0.49, v[13])
    assert B.rhs_node(*args) == bodies.rhs_node(*args)
    assert B.stencil_sum(*v[:13]) == bodies.stencil_sum(*v[:13])
    assert B.relax(v[0], v[1], 7.5, 1.3) == bodies.relax(v[0], v[1], 7.5, 1.3)
    assert B.residual(v[0], 7.5, v[2]) == bodies.residual(v[0], 7.5, v[2])
    assert bodies.diagonal_sum(*v[:6]) == B.diagonal_sum(*v[:6])
    # a face equal to ε_c never forms 0·inf (a charge on the node or its neighbour)
    assert bodies.face_term(2.0, 2.0, np.inf, 1.0) == 0.0 == B.face_term(2.0, 2.0, 1.0, -np.inf)
    for n in (1, 2, 5):
        for i in range(n):
            want = ((i - 1) % n, (i + 1) % n)
            assert bodies.neighbours(i, n) == want == B.neighbours(i, n)
