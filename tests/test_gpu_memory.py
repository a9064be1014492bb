"""The lean refinement operator and stencil build on a real GPU (marker ``gpu``), issue 18.

The refinement's float64 operator (:class:`pbsolver.backends.ProblemOperator`) reads the
problem's own maps on the device: its residuals equal the CPU's float64 stencil's, CuPy maps
are used without a copy, and a default solve's CuPy pool peak stays within the estimate of
:mod:`pbsolver.resources` with a true float64 residual at rtol. The kernels are also checked
under the simulator (``test_cuda_sim.py``).
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import random_problem

import pbsolver as pb
from pbsolver import resources
from pbsolver.operator import relative_residual

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def cp():
    return pytest.importorskip("cupy")


def _backends():
    from pbsolver.backends.cpu.backend import CPUBackend
    from pbsolver.backends.cuda import CUDABackend

    return CPUBackend(), CUDABackend()


@pytest.mark.parametrize(
    "kind", ["dirichlet-harmonic-salt", "periodic-faces-singular", "dirichlet-float32-maps"]
)
def test_operator_matches_the_cpu_float64_stencil(kind):
    rng = np.random.default_rng(18)
    if kind.startswith("periodic"):
        p = random_problem(rng, shape=(34, 40, 46), boundary="periodic", faces=True)
    else:
        rule = "harmonic" if "harmonic" in kind else "arithmetic"
        p = random_problem(rng, shape=(37, 41, 45), salt=True, boundary_values=True,
                           face_rule=rule)  # fmt: skip
        if "float32" in kind:
            p = pb.Problem(p.grid, p.epsilon.astype(np.float32), p.phi_coulomb, p.eps_cavity,
                           kappa2=p.kappa2.astype(np.float32),
                           boundary_values=p.boundary_values)  # fmt: skip
    cpu, gpu = _backends()
    st64 = cpu.stencil(p, np.float64)
    op = gpu.operator64(p)
    b = gpu.to_host(op.b)
    assert np.abs(b - st64.b).max() <= 1e-13 * np.abs(st64.b).max()
    x = rng.normal(0.0, 50.0, p.grid.shape)
    want = np.zeros(p.grid.shape)
    cpu.residual(st64, x, want)
    got = gpu.zeros(p.grid.shape, np.float64)
    gpu.residual(op, gpu.asarray(x, np.float64), got)
    assert np.abs(gpu.to_host(got) - want).max() <= 1e-12 * np.abs(want).max()
    ref = cpu.residual_norm(st64, x)
    assert abs(gpu.residual_norm(op, gpu.asarray(x, np.float64)) - ref) <= 1e-12 * ref


def test_cupy_maps_are_read_in_place(cp):
    rng = np.random.default_rng(5)
    p = random_problem(rng, shape=(33, 35, 37), salt=True).to(cp)
    _, gpu = _backends()
    op = gpu.operator64(p)
    assert op.eps[0] is p.epsilon and op.kappa2 is p.kappa2


@pytest.mark.parametrize("n", [193, 257])
def test_default_solve_memory_and_accuracy(cp, n):
    """The CuPy pool's growth over a default solve (MG-CG on these grids) against the estimate.

    The problem lives on the GPU (built with CuPy); the pool's blocks are freed before the
    solve, so its held bytes after it are the high-water mark of the solve's arrays.
    """
    from pbsolver.bench import random_problem as bench_problem

    pool = cp.get_default_memory_pool()
    problem = bench_problem(n, xp=cp, seed=100 + n, salt=True)
    solver = pb.Solver(backend="cuda", rtol=1e-6)
    solver.solve(problem)  # compile and capture first
    cp.cuda.Device().synchronize()
    pb.clear_workspaces()  # the measured solve makes its own workspace (not the kept one)
    pool.free_all_blocks()
    before = pool.total_bytes()
    res = solver.solve(problem)
    cp.cuda.Device().synchronize()
    grown = pool.total_bytes() - before
    assert res.converged and res.method == "mgcg"
    assert relative_residual(problem.to(np), cp.asnumpy(res.phi_rf)) <= 1e-6
    per = grown / n**3
    print(f"{n}³ default CUDA solve: {per:.1f} bytes a node of CuPy pool")
    assert grown <= resources.estimate_bytes((n, n, n), "auto", "cuda")
