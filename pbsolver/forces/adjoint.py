"""The adjoint solve: A λ = s with the problem's own operator, solver and hierarchy.

The energy G = ½ qᵀ I φ depends on φ through the interpolation I at the atoms; with A φ = b
(A symmetric), the adjoint field λ = A⁻¹ (½ Iᵀ q) turns every derivative of φ into a derivative of
the residual: ½ qᵀ I ∂φ = λᵀ (∂b − (∂A) φ). λ lives on the unknowns (zero on the fixed outer
layer of a Dirichlet grid; zero mean on a periodic grid without salt, whose b has its mean
removed, so that λᵀ ∂(b − mean b) = λᵀ ∂b).

The system is the problem's (:meth:`pbsolver.solving.system.LinearSystem.for_problem`, so the
same stencil, multigrid hierarchy, float32 sweeps with float64 refinement and stopping rule as
the forward solve) with zero boundary values and its right-hand side replaced by s.
"""

from __future__ import annotations

import copy

from pbsolver.exceptions import ConvergenceError, InputError


def adjoint_problem(problem):
    """``problem`` with zero boundary values (its operator unchanged): the adjoint's problem."""
    out = copy.copy(problem)
    out.boundary_values = None
    return out


def adjoint_solve(problem, source, solver, x0=None, system=None):
    """Solve A λ = ``source`` with the operator of ``problem`` and the settings of ``solver``.

    Parameters
    ----------
    problem : Problem
        The forward problem (its faces, κ̄² and boundary kind define A).
    source : array (nx, ny, nz)
        The right-hand side on the unknowns, float64 (its outer layer is ignored on a Dirichlet
        grid; its mean is removed on a periodic grid without salt).
    solver : Solver
        Method, backend, tolerances and precision (those of the forward solve).
    x0 : array, optional
        Initial guess (e.g. the previous frame's λ).
    system : LinearSystem, optional
        The forward solve of ``problem`` (:attr:`SolveResult.system`, from
        ``solver.solve(problem, keep_system=True)`` with the same ``solver``): its stencils and
        hierarchy serve the adjoint, which then builds neither.

    Returns
    -------
    lam : array (nx, ny, nz)
        λ, float64 where the solver refines or runs in float64, in the problem's array library.
    result : SolveResult
        The solve's report (``phi_rf`` is λ).

    Raises
    ------
    ConvergenceError
        With ``solver.strict``, when the adjoint solve does not converge.
    InputError
        A ``system`` of another problem.
    """
    from pbsolver.backends import get_backend
    from pbsolver.solving.solver import SolveResult
    from pbsolver.solving.system import LinearSystem

    adj = adjoint_problem(problem)
    backend = get_backend(solver.backend_name, like=problem.phi_coulomb)
    method = solver.make_method(solver.method_for(backend, adj))
    xp = problem.xp
    b = xp.asarray(source, dtype=xp.float64)  # with_rhs copies it (zero outer layer)
    if problem.is_singular:
        b = b - b.mean()
    if system is None:
        system = LinearSystem.for_problem(backend, adj, solver.dtype, solver.refine, keep=True)
    elif system.problem is not problem:
        raise InputError("the system given to the adjoint solve is not this problem's")
    system = system.with_rhs(b, x0)
    out = system.solve(method, rtol=solver.rtol, atol=solver.atol, maxiter=solver.maxiter,
                       check_every=solver.check_every, callback=solver.callback)  # fmt: skip
    backend.synchronize()
    lam = system.solution(problem.phi_coulomb)
    result = SolveResult(
        phi_rf=lam,
        converged=bool(out.converged[0]),
        iterations=out.iterations,
        residual_norms=out.history,
        seconds=out.seconds,
        method=out.method,
        backend=backend.name,
        reason=out.reason,
        omega=out.omega,
        extra={"adjoint": True},
    )
    if solver.strict and not result.converged:
        raise ConvergenceError(
            f"the adjoint solve of the forces did not converge ({result.reason}) after "
            f"{result.iterations} iterations: relative residual {result.residual:.3g} > rtol "
            f"{solver.rtol:g}",
            result,
        )
    return lam, result


__all__ = ["adjoint_problem", "adjoint_solve"]
