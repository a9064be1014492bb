"""The Solver on the CPU: accuracy against float64 spsolve, and scipy-style contract tests."""

import numba
import numpy as np
import pytest
from conftest import random_problem

import pbsolver as pb
from pbsolver import operator as op

CASES = [
    {"boundary": "dirichlet"},
    {"boundary": "dirichlet", "salt": True, "boundary_values": True},
    {"boundary": "dirichlet", "faces": True, "spacing": (0.4, 0.7, 0.5)},
    {"boundary": "periodic", "shape": (16, 22, 28)},
    {"boundary": "periodic", "shape": (16, 22, 28), "salt": True},
]
IDS = ["dirichlet", "salt+bv", "faces+aniso", "periodic", "periodic+salt"]


def rel_err(x, ref):
    return np.linalg.norm(x - ref) / np.linalg.norm(ref)


@pytest.mark.parametrize("case", CASES, ids=IDS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sor_matches_float64_direct_solve(rng, case, dtype):
    p = random_problem(rng, **case)
    ref = op.reference_solve(p)
    res = pb.solve(p, method="sor", backend="cpu", dtype=dtype, strict=True)
    assert res.converged and res.reason == "converged"
    assert rel_err(res.phi_rf, ref) <= 1e-4
    # the promise: rtol holds when the residual is recomputed in float64 from the result
    assert op.relative_residual(p, res.phi_rf) <= 1e-6
    assert res.residual <= 1e-6
    assert res.method == "sor" and res.backend == "cpu"


def test_jacobi_and_sor_agree(rng):
    p = random_problem(rng, shape=(13, 15, 17), salt=True)
    sor = pb.solve(p, method="sor", backend="cpu", rtol=1e-8, dtype=np.float64)
    jac = pb.solve(p, method="jacobi", backend="cpu", rtol=1e-8, dtype=np.float64)
    assert sor.converged and jac.converged
    assert jac.iterations > 3 * sor.iterations
    assert rel_err(jac.phi_rf, sor.phi_rf) < 1e-6
    assert jac.omega == 0.9 and 1.0 < sor.omega < 2.0


def test_uniform_permittivity_gives_zero_reaction_field(rng):
    p0 = random_problem(rng)
    eps = np.full(p0.grid.shape, 3.0)
    p = pb.Problem(p0.grid, eps, p0.phi_coulomb, 3.0)
    res = pb.solve(p, method="sor", backend="cpu")
    assert res.converged and res.reason == "zero rhs" and res.iterations == 0
    assert np.abs(res.phi_rf).max() == 0.0


def test_zero_rhs_with_boundary_values_solves_laplace(rng):
    """ε ≡ ε_c but nonzero boundary values: φ_rf is the harmonic extension, not zero."""
    p0 = random_problem(rng, boundary_values=True)
    p = pb.Problem(
        p0.grid,
        np.full(p0.grid.shape, 1.0),
        p0.phi_coulomb,
        1.0,
        boundary_values=p0.boundary_values,
    )
    res = pb.solve(p, method="sor", backend="cpu", strict=True)
    assert rel_err(res.phi_rf, op.reference_solve(p)) < 1e-5


def test_maxiter_is_honoured_exactly(rng):
    p = random_problem(rng)
    calls = []
    res = pb.solve(
        p, method="sor", backend="cpu", maxiter=1, callback=lambda it, r: calls.append((it, r))
    )
    assert not res.converged and res.reason == "maxiter" and res.iterations == 1
    assert [c[0] for c in calls] == [0, 1]
    res = pb.solve(p, method="jacobi", backend="cpu", maxiter=73, check_every=10)
    assert res.iterations == 73 and res.reason == "maxiter"
    res = pb.solve(p, method="sor", backend="cpu", maxiter=0)
    assert res.iterations == 0 and not res.converged


def test_x0_is_not_modified_and_warm_start_helps(rng):
    p = random_problem(rng, boundary_values=True)
    cold = pb.solve(p, method="sor", backend="cpu", dtype=np.float64)
    x0 = cold.phi_rf + rng.normal(0.0, 1e-3, size=p.grid.shape)
    x0_copy = x0.copy()
    warm = pb.solve(p, x0=x0, method="sor", backend="cpu", dtype=np.float64)
    np.testing.assert_array_equal(x0, x0_copy)
    assert warm.converged and warm.iterations < cold.iterations


def test_strict_raises_with_the_result(rng):
    p = random_problem(rng)
    with pytest.raises(pb.ConvergenceError, match="did not converge") as info:
        pb.solve(p, method="sor", backend="cpu", maxiter=2, strict=True)
    assert info.value.result.iterations == 2


@pytest.mark.filterwarnings("ignore:overflow encountered")
def test_overflow_is_reported_not_returned(rng):
    """Values that overflow float32 give NaN/inf: the solve stops and says so."""
    p0 = random_problem(rng)
    p = pb.Problem(p0.grid, p0.epsilon, p0.phi_coulomb * 1e36, p0.eps_cavity)
    res = pb.solve(p, method="sor", backend="cpu", dtype=np.float32)
    assert not res.converged and res.reason == "nan"
    with pytest.raises(pb.ConvergenceError, match="nan"):
        pb.solve(p, method="sor", backend="cpu", dtype=np.float32, strict=True)


def test_divergence_is_reported(rng):
    p = random_problem(rng, shape=(9, 10, 11))
    res = pb.solve(p, method="jacobi", backend="cpu", omega=1.9, dtype=np.float64, check_every=5)
    assert not res.converged and res.reason == "diverged"


def test_sor_is_bitwise_deterministic_across_thread_counts(rng):
    p = random_problem(rng, shape=(24, 19, 21), salt=True)
    results = []
    for threads in (1, numba.config.NUMBA_NUM_THREADS):
        numba.set_num_threads(threads)
        try:
            results.append(pb.solve(p, method="sor", backend="cpu", maxiter=40).phi_rf)
        finally:
            numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
    np.testing.assert_array_equal(results[0], results[1])


def test_periodic_solution_has_zero_mean(rng):
    p = random_problem(rng, boundary="periodic", shape=(12, 14, 16))
    res = pb.solve(p, method="sor", backend="cpu")
    assert abs(res.phi_rf.mean()) < 1e-9 * np.abs(res.phi_rf).max()


def test_periodic_red_black_refuses_odd_sizes(rng):
    p = random_problem(rng, boundary="periodic", shape=(12, 15, 16))
    with pytest.raises(pb.InputError, match="even number of nodes"):
        pb.solve(p, method="sor", backend="cpu")
    res = pb.solve(p, method="jacobi", backend="cpu", rtol=1e-5)
    assert res.converged


def test_unrefined_float32_reports_its_floor(rng):
    p = random_problem(rng, shape=(21, 21, 21))
    res = pb.solve(p, method="sor", backend="cpu", rtol=1e-9, refine=False, maxiter=3000)
    assert not res.converged and res.reason == "stagnated"
    assert res.phi_rf.dtype == np.float32


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"method": "gmres"}, "method must be"),
        ({"backend": "tpu"}, "backend must be"),
        ({"rtol": -1}, "rtol"),
        ({"atol": float("nan")}, "atol"),
        ({"maxiter": -3}, "maxiter"),
        ({"maxiter": 2.5}, "maxiter"),
        ({"callback": 3}, "callable"),
        ({"check_every": 0}, "check_every"),
        ({"dtype": np.int32}, "dtype"),
        ({"omega": 2.5, "method": "sor"}, "omega"),
    ],
)
def test_solver_rejects_bad_options(rng, kwargs, match):
    p = random_problem(rng, shape=(8, 8, 8))
    with pytest.raises(pb.InputError, match=match):
        pb.Solver(**kwargs).solve(p)


def test_bad_x0_and_problem(rng):
    p = random_problem(rng, shape=(8, 8, 8))
    with pytest.raises(pb.InputError, match="x0 has shape"):
        pb.solve(p, x0=np.zeros((8, 8, 9)), method="sor")
    with pytest.raises(pb.InputError, match="x0 must be finite"):
        pb.solve(p, x0=np.full((8, 8, 8), np.nan), method="sor")
    with pytest.raises(pb.InputError, match="needs a pbsolver.Problem"):
        pb.solve("problem.h5", method="sor")


def test_cuda_backend_unavailable_is_a_clear_error(rng):
    from pbsolver.backends import cuda_available

    if cuda_available():
        pytest.skip("a GPU is usable here")
    with pytest.raises(pb.BackendUnavailableError, match="backend='cpu'"):
        pb.Solver(backend="cuda")


def test_result_repr(rng):
    res = pb.solve(random_problem(rng, shape=(8, 8, 8)), method="sor", backend="cpu")
    assert "converged=True" in repr(res) and "sor" in repr(res)
