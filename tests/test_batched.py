"""pb.solve_batch: stacked solves equal one-by-one solves and the float64 reference."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import random_problem

import pbsolver as pb
from pbsolver.backends.stacking import stack_problems
from pbsolver.operator import reference_solve, relative_residual
from pbsolver.solving import system as solve_system
from pbsolver.solving.batched import clear_workspaces


def _problems(rng, shape, count=3):
    kinds = [
        {"boundary_values": True},
        {"salt": True, "boundary_values": True},
        {"faces": True},
        {"salt": True, "faces": True, "boundary_values": True},
    ]
    return [random_problem(rng, shape=shape, **kinds[k % len(kinds)]) for k in range(count)]


@pytest.mark.parametrize("shape", [(13, 10, 11), (12, 9, 14)], ids=["odd-nx", "even-nx"])
def test_stacked_system_is_block_diagonal(rng, shape):
    """At each problem's exact solution the lifted, stacked system has zero residual."""
    problems = _problems(rng, shape, 3)
    exact = [reference_solve(p) for p in problems]
    system = stack_problems(problems, x0=exact)
    assert system.stride % 2 == 0 and system.stride - shape[0] in (0, 1)
    x = system.x
    ax = system.diag * x
    for axis, c in enumerate((system.cx, system.cy, system.cz)):
        ax = ax - c * np.roll(x, -1, axis=axis) - np.roll(c * x, 1, axis=axis)
    r = system.b - ax
    assert np.abs(r).max() <= 1e-9 * np.abs(system.b).max()
    # ‖b_k − A_k φ₀_k‖ is the denominator of every problem's relative residual
    for k, p in enumerate(problems):
        blk = system.block(k, shape[0])
        assert system.bnorms[k] == pytest.approx(np.linalg.norm(system.b[blk]))
        zero = np.zeros(shape)
        assert relative_residual(p, system.fixed[k]) == pytest.approx(1.0)
        assert np.array_equal(system.fixed[k][1:-1, 1:-1, 1:-1], zero[1:-1, 1:-1, 1:-1])


@pytest.mark.parametrize("method", ["multigrid", "sor", "jacobi"])
@pytest.mark.parametrize("shape", [(13, 10, 11), (12, 9, 14)], ids=["odd-nx", "even-nx"])
def test_stacked_equals_one_by_one_and_reference(rng, method, shape):
    problems = _problems(rng, shape, 3)
    rtol = 1e-7
    stacked = pb.solve_batch(problems, mode="stacked", method=method, backend="cpu", rtol=rtol)
    single = [pb.solve(p, method=method, backend="cpu", rtol=rtol) for p in problems]
    for p, s, o in zip(problems, stacked, single, strict=True):
        ref = reference_solve(p)
        scale = np.abs(ref).max()
        assert s.converged and s.extra["batch"] == "stacked" and s.extra["batch_size"] == 3
        assert s.residual_norms[-1] <= rtol
        # the reported residual is the problem's own (checked independently in float64;
        # float32 storage of the coefficients sets a floor near 1e-7)
        assert relative_residual(p, s.phi_rf) <= 2e-6
        assert np.abs(s.phi_rf - ref).max() <= 1e-4 * scale
        assert np.abs(s.phi_rf - o.phi_rf).max() <= 1e-4 * scale
        # the outer layer holds the boundary values exactly
        g = p.boundary_values if p.boundary_values is not None else np.zeros(shape)
        assert np.array_equal(s.phi_rf[0], g[0].astype(s.phi_rf.dtype))


def test_stacked_float64_matches_one_by_one_closely(rng):
    problems = _problems(rng, (11, 12, 10), 4)
    opts = {"method": "sor", "backend": "cpu", "rtol": 1e-10, "dtype": np.float64}
    stacked = pb.solve_batch(problems, mode="stacked", **opts)
    for p, s in zip(problems, stacked, strict=True):
        ref = reference_solve(p)
        assert np.abs(s.phi_rf - ref).max() <= 1e-7 * np.abs(ref).max()
        assert s.phi_rf.dtype == np.float64


def test_warm_start_per_problem(rng):
    problems = _problems(rng, (13, 12, 11), 3)
    opts = {"method": "sor", "backend": "cpu", "rtol": 1e-7}
    cold = pb.solve_batch(problems, mode="stacked", **opts)
    x0 = [r.phi_rf + rng.normal(0.0, 1e-4, r.phi_rf.shape) for r in cold]
    copies = [x.copy() for x in x0]
    warm = pb.solve_batch(problems, x0=x0, mode="stacked", **opts)
    assert all(np.array_equal(a, b) for a, b in zip(x0, copies, strict=True))
    assert warm[0].iterations < cold[0].iterations
    assert all(w.residual_norms[0] < 1e-2 for w in warm)
    for w, c in zip(warm, cold, strict=True):
        assert np.abs(w.phi_rf - c.phi_rf).max() <= 1e-4 * np.abs(c.phi_rf).max()


def test_workspace_is_reused_and_results_do_not_alias_it(rng):
    problems = _problems(rng, (11, 10, 9), 4)
    opts = {"mode": "stacked", "method": "multigrid", "backend": "cpu", "rtol": 1e-8}
    clear_workspaces()
    first = pb.solve_batch(problems[:2], **opts)
    kept = [r.phi_rf.copy() for r in first]
    (workspace,) = solve_system._WORKSPACES.values()
    second = pb.solve_batch(problems[2:], **opts)
    assert list(solve_system._WORKSPACES.values()) == [workspace]  # the same buffers, used again
    for r, k in zip(first, kept, strict=True):
        np.testing.assert_array_equal(r.phi_rf, k)
    for p, r in zip(problems[2:], second, strict=True):
        assert r.converged and relative_residual(p, r.phi_rf) <= 1e-6
    clear_workspaces()
    assert not solve_system._WORKSPACES


def test_mixed_shapes_and_boundaries_keep_order(rng):
    a = _problems(rng, (11, 10, 9), 2)
    b = _problems(rng, (9, 12, 11), 2)
    periodic = random_problem(rng, shape=(10, 8, 12), boundary="periodic")
    problems = [a[0], b[0], periodic, a[1], b[1]]
    opts = {"method": "sor", "backend": "cpu", "rtol": 1e-7}
    res = pb.solve_batch(problems, mode="stacked", max_stack=2, **opts)
    for p, r in zip(problems, res, strict=True):
        assert r.phi_rf.shape == p.grid.shape and r.converged
        assert relative_residual(p, r.phi_rf) <= 2e-6
    assert res[2].extra.get("batch") is None  # periodic: solved alone
    assert res[0].extra["batch_size"] == 2 and res[1].extra["batch_size"] == 2


def test_auto_on_cpu_is_the_loop(rng):
    problems = _problems(rng, (9, 9, 9), 2)
    res = pb.solve_batch(problems, backend="cpu", method="multigrid", rtol=1e-8)
    for p, r in zip(problems, res, strict=True):
        one = pb.solve(p, backend="cpu", method="multigrid", rtol=1e-8)
        assert "batch" not in r.extra
        np.testing.assert_array_equal(r.phi_rf, one.phi_rf)


def test_streams_mode_on_cpu_is_the_loop(rng):
    problems = _problems(rng, (9, 10, 9), 3)
    res = pb.solve_batch(problems, mode="streams", backend="cpu", method="multigrid", rtol=1e-8)
    for p, r in zip(problems, res, strict=True):
        one = pb.solve(p, backend="cpu", method="multigrid", rtol=1e-8)
        assert r.extra["batch"] == "streams" and r.extra["streams"] == 1
        np.testing.assert_array_equal(r.phi_rf, one.phi_rf)
    with pytest.raises(pb.InputError, match="streams"):
        pb.solve_batch(problems, mode="streams", backend="cpu", streams=0)


def test_bad_input(rng):
    problems = _problems(rng, (9, 9, 9), 2)
    with pytest.raises(pb.InputError, match="non-empty"):
        pb.solve_batch([])
    with pytest.raises(pb.InputError, match="not a pbsolver.Problem"):
        pb.solve_batch([problems[0], "x"])
    with pytest.raises(pb.InputError, match="x0 has 1 entries"):
        pb.solve_batch(problems, x0=[None])
    with pytest.raises(pb.InputError, match="mode must be"):
        pb.solve_batch(problems, mode="fast")
    with pytest.raises(pb.InputError, match="runs methods"):
        pb.solve_batch(problems, mode="stacked", method="mgcg")
    with pytest.raises(pb.InputError, match="max_levels.*stack of blocks"):
        pb.solve_batch(problems, mode="stacked", method="multigrid", backend="cpu", max_levels=2)
    with pytest.raises(pb.InputError, match="x0\\[1\\] has shape"):
        pb.solve_batch(problems, x0=[None, np.zeros((3, 3, 3))], mode="stacked", method="sor",
                       backend="cpu")  # fmt: skip
    with pytest.raises(pb.InputError, match="x0\\[0\\] must be finite"):
        pb.solve_batch(problems, x0=[np.full((9, 9, 9), np.nan), None], mode="stacked",
                       method="sor", backend="cpu")  # fmt: skip
    with pytest.raises(pb.InputError, match="periodic"):
        stack_problems([random_problem(rng, shape=(8, 8, 8), boundary="periodic")] * 2)
    with pytest.raises(pb.InputError, match="needs"):
        stack_problems([problems[0], random_problem(rng, shape=(9, 9, 10))])


def test_strict_reports_non_convergence(rng):
    problems = _problems(rng, (11, 11, 11), 2)
    with pytest.raises(pb.ConvergenceError, match="did not converge"):
        pb.solve_batch(problems, mode="stacked", method="sor", backend="cpu", maxiter=3,
                       strict=True)  # fmt: skip
    res = pb.solve_batch(problems, mode="stacked", method="sor", backend="cpu", maxiter=3)
    assert not any(r.converged for r in res) and all(r.reason == "maxiter" for r in res)


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("mode", "method"),
    [("stacked", "multigrid"), ("stacked", "sor"), ("streams", "multigrid"), ("loop", "multigrid")],
)
def test_gpu_batch_matches_cpu(rng, mode, method):
    import cupy as cp

    problems = _problems(rng, (33, 33, 33), 4)
    cpu = pb.solve_batch(problems, backend="cpu", method=method, rtol=1e-7)
    gpu = pb.solve_batch(problems, backend="cuda", mode=mode, method=method, rtol=1e-7)
    for c, g in zip(cpu, gpu, strict=True):
        assert g.converged and g.backend == "cuda"
        assert np.abs(cp.asnumpy(g.phi_rf) - c.phi_rf).max() <= 1e-4 * np.abs(c.phi_rf).max()


@pytest.mark.gpu
def test_gpu_stack_of_device_problems_matches_reference(rng):
    """CuPy problems (read in place by the assembly kernel), an odd shape, guesses for some."""
    import cupy as cp

    host = _problems(rng, (17, 14, 15), 4)
    problems = [p.to("cupy") for p in host]
    exact = [reference_solve(p) for p in host]
    x0 = [None, cp.asarray(exact[1] * 0.9), None, cp.asarray(exact[3] + 1.0)]
    res = pb.solve_batch(problems, x0=x0, backend="cuda", mode="stacked", rtol=1e-8)
    for k, (r, ref) in enumerate(zip(res, exact, strict=True)):
        assert isinstance(r.phi_rf, cp.ndarray) and r.converged, (k, r.reason)
        phi = cp.asnumpy(r.phi_rf)
        assert np.abs(phi - ref).max() <= 1e-5 * np.abs(ref).max(), k
        # the boundary layer is the problem's own values, exactly
        g = host[k].boundary_values
        assert np.array_equal(phi[0], g[0] if g is not None else np.zeros_like(phi[0])), k
    assert res[1].residual_norms[0] < 0.5 and res[0].residual_norms[0] == 1.0


@pytest.mark.parametrize("method", ["multigrid", "sor"])
def test_stack_stops_when_every_problem_meets_its_own_threshold(rng, method):
    """Right-hand sides 10⁴ apart: each problem is judged on its own ‖b_k‖, none is left short."""
    problems = _problems(rng, (13, 12, 11), 3)
    scaled = problems[1]
    problems[1] = pb.Problem(scaled.grid, scaled.epsilon, scaled.phi_coulomb * 1e-4,
                             scaled.eps_cavity, face_rule=scaled.face_rule)  # fmt: skip
    rtol = 1e-6
    res = pb.solve_batch(problems, mode="stacked", method=method, backend="cpu", rtol=rtol)
    for p, r in zip(problems, res, strict=True):
        assert r.converged and r.residual_norms[-1] <= rtol
        assert relative_residual(p, r.phi_rf) <= 1.01 * rtol  # checked independently
    # the loop's history is the worst problem's relative residual: its last entry meets rtol
    history = res[0].extra["stack_residual_norms"]
    assert history[-1] <= rtol < history[0]


@pytest.mark.parametrize("backend", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_a_zero_right_hand_side_in_a_stack_ends_at_zero_whatever_its_guess(rng, backend):
    problems = _problems(rng, (11, 10, 9), 3)
    p = problems[2]
    zero = np.zeros(p.grid.shape)
    problems[2] = pb.Problem(p.grid, epsilon_faces=p.epsilon_faces, phi_coulomb=zero,
                             eps_cavity=p.eps_cavity)  # fmt: skip
    guess = [None, None, rng.normal(0.0, 10.0, p.grid.shape)]
    res = pb.solve_batch(problems, x0=guess, mode="stacked", method="sor", backend=backend)
    assert res[2].converged and res[2].reason == "zero rhs"
    assert np.all(np.asarray(res[2].phi_rf) == 0.0)
    assert res[0].converged and res[1].converged
