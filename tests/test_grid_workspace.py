"""One grid's kept workspace: a new problem of a known grid reuses the last solve's buffers.

Where a backend replays captured work (``Backend.CAPTURES``: CUDA), ``Solver.solve`` keeps
the sweep stencil, the correction, the hierarchies and the methods' work arrays for the next
problem of the same grid, boundary and salt (``solving.system.grid_workspace``). These tests
run that path on the CPU backend with ``CAPTURES`` set (the CPU records nothing, so what is
checked is the reuse itself: every buffer rewritten, nothing of the last problem left), and on
a GPU through the public API.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import random_problem

import pbsolver as pb
from pbsolver.backends.cpu.backend import CPUBackend
from pbsolver.solving import system as system_module
from pbsolver.solving.system import LinearSystem, clear_workspaces


class KeepingCPU(CPUBackend):
    """The CPU backend, told that it replays recordings (so solves keep their workspace)."""

    CAPTURES = True


def solve(backend, problem, method, keep, **options):
    """``problem`` solved as ``Solver.solve`` does, its workspace kept or not."""
    solver = pb.Solver(method=method, rtol=1e-9, **options)
    system = LinearSystem.for_problem(backend, problem, np.float32, True, keep=keep)
    out = system.solve(solver.make_method(method), rtol=1e-9)
    assert out.converged[0], (method, out.reason)
    return system, system.solution(problem.phi_coulomb)


@pytest.fixture(autouse=True)
def no_kept_workspace():
    clear_workspaces()
    yield
    clear_workspaces()


@pytest.mark.parametrize("method", ["mgcg", "multigrid", "sor"])
@pytest.mark.parametrize("salt", [True, False])
def test_a_new_problem_on_a_kept_workspace_equals_a_fresh_solve(rng, method, salt):
    be = KeepingCPU()
    shape = (19, 22, 17)  # odd and even sizes: two coarse levels below the finest
    first = random_problem(rng, shape=shape, salt=salt, boundary_values=True)
    second = random_problem(rng, shape=shape, salt=salt, face_rule="harmonic")
    sys1, phi1 = solve(be, first, method, keep=True)
    kept = phi1.copy()
    sys2, phi2 = solve(be, second, method, keep=True)
    # the second solve ran on the first one's buffers ...
    assert sys2.kept and sys2.st.cx is sys1.st.cx and sys2.work[1] is sys1.work[1]
    if method != "sor":
        assert sys2._workspace.hierarchies and sys2._workspace.hierarchies is (
            sys1._workspace.hierarchies
        )
    # the kept hierarchies hold no problem's κ̄² between solves
    assert all(h.inputs[3] is None for h in sys2._workspace.hierarchies.values())
    # ... and its answer is the fresh solve's, bit for bit; the first answer is untouched
    _, fresh = solve(be, second, method, keep=False)
    assert np.array_equal(phi2, fresh)
    assert np.array_equal(phi1, kept)
    assert not np.shares_memory(phi1, phi2)


def test_another_grid_or_salt_gets_its_own_workspace_and_the_last_one_is_dropped(rng):
    be = KeepingCPU()
    a = random_problem(rng, shape=(17, 17, 17), salt=True)
    b = random_problem(rng, shape=(17, 17, 17), salt=False)  # same grid, no κ̄²
    c = random_problem(rng, shape=(17, 19, 17), salt=True)
    sa, _ = solve(be, a, "mgcg", keep=True)
    sb, phib = solve(be, b, "mgcg", keep=True)
    assert sb._workspace is not sa._workspace
    assert list(system_module._GRID_WORKSPACE.values()) == [sb._workspace]  # one kept at most
    sc, _ = solve(be, c, "mgcg", keep=True)
    assert list(system_module._GRID_WORKSPACE.values()) == [sc._workspace]
    _, fresh = solve(be, b, "mgcg", keep=False)
    assert np.array_equal(phib, fresh)


def test_backends_that_record_nothing_keep_nothing(rng):
    p = random_problem(rng, shape=(17, 17, 17), salt=True)
    system, _ = solve(CPUBackend(), p, "mgcg", keep=True)
    assert not system.kept and system._workspace is None
    assert not system_module._GRID_WORKSPACE


def test_refined_system_into_writes_the_given_arrays(rng):
    be = CPUBackend()
    p = random_problem(rng, shape=(11, 12, 13), salt=True, boundary_values=True)
    q = random_problem(rng, shape=(11, 12, 13), salt=True, face_rule="harmonic")
    st, _ = be.refined_system(p, np.float32)
    again, op = be.refined_system(q, np.float32, into=st)
    fresh, op_fresh = be.refined_system(q, np.float32)
    for name in ("cx", "cy", "cz", "diag", "b"):
        assert getattr(again, name) is getattr(st, name)
        assert np.array_equal(getattr(again, name), getattr(fresh, name)), name
    assert np.array_equal(op.b, op_fresh.b)
    with pytest.raises(pb.InputError, match="into"):
        be.refined_system(random_problem(rng, shape=(11, 12, 14)), np.float32, into=st)


@pytest.mark.gpu
@pytest.mark.parametrize("method", ["mgcg", "sor"])
def test_gpu_a_new_problem_of_a_known_grid_equals_a_fresh_solve(rng, method):
    cp = pytest.importorskip("cupy")
    shape = (65, 66, 63)
    first = random_problem(rng, shape=shape, salt=True).to(cp)
    second = random_problem(rng, shape=shape, salt=True, face_rule="harmonic").to(cp)
    solver = pb.Solver(method=method, backend="cuda", rtol=1e-8)
    r1 = solver.solve(first)
    kept = r1.phi_rf.copy()
    r2 = solver.solve(second)  # on the first solve's workspace, replaying its recordings
    clear_workspaces()
    fresh = solver.solve(second)
    assert r1.converged and r2.converged and fresh.converged
    assert bool(cp.array_equal(r1.phi_rf, kept))
    scale = float(cp.abs(fresh.phi_rf).max())
    assert float(cp.abs(r2.phi_rf - fresh.phi_rf).max()) <= 1e-12 * scale
    assert r2.iterations == fresh.iterations
