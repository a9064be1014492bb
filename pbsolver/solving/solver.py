"""The Solver: one problem to convergence, through the linear system and the iteration loop.

:class:`Solver` holds the options (method, backend, tolerances, precision); :meth:`Solver.solve`
makes the problem's :class:`~pbsolver.solving.system.LinearSystem`, a method
(:mod:`pbsolver.solving.methods`) and lets the system run the
:class:`~pbsolver.solving.loop.IterationLoop`; :func:`pbsolver.solve_batch` runs the same system
and loop on stacks of problems.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from pbsolver import display as _display
from pbsolver.backends import get_backend
from pbsolver.exceptions import ConvergenceError, InputError
from pbsolver.nonlinear.boltzmann import CAP
from pbsolver.nonlinear.newton import solve_newton
from pbsolver.options import flag
from pbsolver.problem import Problem
from pbsolver.resources import check_memory
from pbsolver.solving.methods import METHODS, make_method, method_options
from pbsolver.solving.spectral import applies
from pbsolver.solving.system import LinearSystem


@dataclass
class SolveResult:
    """What :meth:`Solver.solve` returns.

    Attributes
    ----------
    phi_rf : array (nx, ny, nz)
        Reaction-field potential, kJ mol⁻¹ e⁻¹, in the caller's array library (NumPy or CuPy).
    converged : bool
        Whether ``‖b − Aφ‖₂ ≤ max(rtol‖b‖₂, atol)`` was reached (nonlinear: ``‖F(φ)‖₂``).
    iterations : int
        Sweeps (SOR, Jacobi) or cycles (multigrid) done (nonlinear: of all linear solves).
    residual_norms : list of float
        Relative residual ‖b − Aφ‖₂/‖b‖₂ at each check, starting with the initial guess
        (nonlinear: ‖F‖₂/‖b‖₂ at the start and after each Newton step).
    seconds : float
        Wall time of the solve, set-up included.
    method, backend : str
        What ran.
    reason : str
        Why the loop stopped: "converged", "maxiter", "diverged", "nan", "stagnated",
        or "zero rhs"; nonlinear solves also "capped" (:mod:`pbsolver.nonlinear.newton`).
    omega : float or None
        Relaxation factor used (SOR, Jacobi).
    newton_steps : int or None
        Newton steps of a nonlinear solve (None: a linear solve); ``extra["newton"]`` holds
        each step's forcing term ``eta``, linear ``iterations``, ``linear_reason``, line
        search step ``alpha`` and wall times (``linear_seconds``, ``seconds``);
        ``extra["newton_start_seconds"]`` the start's (see
        :class:`~pbsolver.nonlinear.newton.NewtonOutcome`).
    system : LinearSystem or None
        The solved linear system (stencils, hierarchy), with ``keep_system=True`` only: a
        solve of the same operator with another right-hand side
        (:meth:`~pbsolver.solving.system.LinearSystem.with_rhs`, the forces' adjoint) reuses it.
        It holds the solve's arrays while it is kept.
    """

    phi_rf: object
    converged: bool
    iterations: int
    residual_norms: list[float]
    seconds: float
    method: str
    backend: str
    reason: str = "converged"
    omega: float | None = None
    extra: dict = field(default_factory=dict)
    newton_steps: int | None = None
    system: object = field(default=None, repr=False)

    @property
    def residual(self) -> float:
        """The last relative residual."""
        return self.residual_norms[-1] if self.residual_norms else math.nan

    _repr_html_ = _display.result_html

    def __repr__(self) -> str:
        shape = tuple(self.phi_rf.shape)
        return (
            f"SolveResult(converged={self.converged}, reason={self.reason!r}, "
            f"iterations={self.iterations}, residual={self.residual:.3g}, "
            f"seconds={self.seconds:.3g}, method={self.method!r}, backend={self.backend!r}, "
            f"phi_rf=<{shape} {self.phi_rf.dtype}>)"
        )


class Solver:
    """Iterative solver for :class:`~pbsolver.Problem`.

    Parameters
    ----------
    method : {"auto", "sor", "jacobi", "multigrid", "mgcg", "spectral"}
        Iteration. "auto" picks by backend and grid size from measured times: SOR on small
        grids, multigrid (CPU) or MG-CG (GPU) on large ones, Jacobi for odd periodic grids;
        and the direct "spectral" solve (discrete sine transform,
        :mod:`pbsolver.solving.spectral`) for a Dirichlet problem whose ε and κ̄² are uniform.
    backend : {"auto", "cpu", "cuda"}
        Where to compute. "auto": CUDA when a GPU is usable or the input is a CuPy array.
    rtol, atol : float
        Stop when ``‖b − Aφ‖₂ ≤ max(rtol·‖b‖₂, atol)``, both norms over the unknowns and
        accumulated in float64 (b includes the fixed boundary values' coupling).
    maxiter : int, optional
        Most sweeps (or cycles) to do; honoured exactly. Default depends on the method.
    callback : callable, optional
        ``callback(iteration, relative_residual)`` at every residual check.
    omega : float, optional
        Relaxation factor (SOR: automatic; Jacobi: 0.9).
    check_every : int, optional
        Sweeps between residual checks (each check costs about one sweep and a host sync).
    dtype : {numpy.float32, numpy.float64}
        Storage and arithmetic precision of the fields (residual norms always in float64).
    strict : bool
        Raise :class:`~pbsolver.ConvergenceError` instead of returning an unconverged result.
    refine : bool
        With float32 storage, accumulate the solution in float64 by iterative refinement: the
        float32 iteration solves for corrections, each cutting the residual about 1000-fold, so
        ``rtol`` far below float32's floor (about 1e-5 for these operators) is reached and holds
        when the returned φ_rf (then float64) is checked in float64. ``False``: plain float32.
    newton_maxiter : int, optional
        Most Newton steps of a nonlinear problem (default
        :data:`pbsolver.nonlinear.newton.NEWTON_MAXITER`); ``maxiter`` then caps the linear
        iterations of all its steps together.

    Notes
    -----
    A problem made with ``nonlinear=True`` (and salt) is solved by the globalised inexact
    Newton method of :mod:`pbsolver.nonlinear.newton`, whose linear steps run this solver's
    method, precision and refinement; it stops when ‖F(φ)‖₂ ≤ max(rtol‖b‖₂, atol), ‖b‖ the
    right-hand side norm of the linearised equation.

    Examples
    --------
    >>> import numpy as np, pbsolver as pb
    >>> g = pb.Grid((17, 17, 17), spacing=0.5)
    >>> r2 = sum(c**2 for c in g.coordinates())
    >>> eps = np.where(r2 < 9.0, 2.0, 80.0)
    >>> phi_c = 1389.35457 / (2.0 * np.sqrt(r2 + 0.25))
    >>> res = pb.Solver(method="sor", backend="cpu").solve(pb.Problem(g, eps, phi_c, 2.0))
    >>> res.converged
    True
    """

    def __init__(
        self,
        method: str = "auto",
        backend: str = "auto",
        rtol: float = 1e-6,
        atol: float = 0.0,
        maxiter: int | None = None,
        callback=None,
        *,
        omega: float | None = None,
        check_every: int | None = None,
        dtype=np.float32,
        strict: bool = False,
        refine: bool = True,
        newton_maxiter: int | None = None,
        **method_options,
    ):
        if method != "auto" and method not in METHODS:
            raise InputError(f"method must be 'auto' or one of {sorted(METHODS)}, got {method!r}")
        self.method = method
        self.backend_name = backend
        get_backend(backend) if backend != "auto" else None  # fail early on a bad name
        self.rtol = _nonnegative(rtol, "rtol")
        self.atol = _nonnegative(atol, "atol")
        if maxiter is not None and (not isinstance(maxiter, int | np.integer) or maxiter < 0):
            raise InputError(f"maxiter must be a non-negative integer, got {maxiter!r}")
        self.maxiter = None if maxiter is None else int(maxiter)
        if callback is not None and not callable(callback):
            raise InputError("callback must be callable")
        self.callback = callback
        self.omega = omega
        if check_every is not None and (not isinstance(check_every, int) or check_every < 1):
            raise InputError(f"check_every must be a positive integer, got {check_every!r}")
        self.check_every = check_every
        self.dtype = np.dtype(dtype)
        if self.dtype not in (np.float32, np.float64):
            raise InputError(f"dtype must be float32 or float64, got {self.dtype}")
        self.strict = bool(strict)
        self.refine = bool(refine) and self.dtype == np.float32
        if newton_maxiter is not None and (
            isinstance(newton_maxiter, bool)
            or not isinstance(newton_maxiter, int | np.integer)
            or newton_maxiter < 0
        ):
            raise InputError(
                f"newton_maxiter must be a non-negative integer, got {newton_maxiter!r}"
            )
        self.newton_maxiter = None if newton_maxiter is None else int(newton_maxiter)
        self.method_options = method_options
        _check_method_options(method, method_options)

    def method_for(self, backend, problem) -> str:
        """The method this solver runs on ``problem`` ("auto" resolved).

        "auto": Jacobi for odd periodic grids (which red–black methods refuse); multigrid when
        multigrid options are given; the direct "spectral" solve for a Dirichlet problem in a
        homogeneous medium (:func:`~pbsolver.solving.spectral.applies`); otherwise the
        backend's choice by grid size
        (:meth:`pbsolver.backends.Backend.auto_method`: SOR on small grids, where it is
        fastest, multigrid or MG-CG on large ones; BENCHMARKS.md has the measurements).
        """
        if self.method != "auto":
            return self.method
        if problem.boundary == "periodic" and any(n % 2 for n in problem.grid.shape):
            return "jacobi"
        if set(self.method_options) - {"omega"}:
            return "multigrid"
        if applies(problem):  # a homogeneous medium: one exact solve, no iteration
            return "spectral"
        return backend.auto_method(problem.grid.size)

    def make_method(self, name: str):
        """A new method object ``name`` with this solver's method options and ω."""
        options = dict(self.method_options)
        if self.omega is not None:
            options["omega"] = self.omega
        return make_method(name, options)

    def options(self) -> dict:
        """The keyword arguments that make this solver again (``Solver(**s.options())``)."""
        return {
            "method": self.method,
            "backend": self.backend_name,
            "rtol": self.rtol,
            "atol": self.atol,
            "maxiter": self.maxiter,
            "callback": self.callback,
            "omega": self.omega,
            "check_every": self.check_every,
            "dtype": self.dtype,
            "strict": self.strict,
            "refine": self.refine,
            "newton_maxiter": self.newton_maxiter,
            **self.method_options,
        }

    def solve(self, problem: Problem, x0=None, *, nonlinear=None,
              keep_system=False) -> SolveResult:  # fmt: skip
        """Solve ``problem`` for φ_rf.

        Parameters
        ----------
        problem : Problem
        x0 : array (nx, ny, nz), optional
            Initial guess (never modified). Its outer layer is replaced by the boundary values
            for Dirichlet problems.
        nonlinear : bool, optional
            Solve the nonlinear equation (True; with the problem's ``ion_valence`` and
            ``temperature``) or the linearised one (False); default: ``problem.nonlinear``.
        keep_system : bool
            Return the linear system in :attr:`SolveResult.system` (a linear solve; None for a
            nonlinear one), for a solve of the same operator after this one.

        Returns
        -------
        SolveResult
            ``phi_rf`` is in the array library of the problem's arrays.

        Raises
        ------
        ConvergenceError
            Only with ``strict=True``, when the solve did not converge.

        Notes
        -----
        On a backend that records its work (CUDA) the solve keeps its grid's workspace
        (stencil, correction, hierarchy, work arrays) for the next problem of the same grid,
        boundary and salt, which then replays the recorded cycles; one is kept at a time and
        :func:`pbsolver.clear_workspaces` frees it. ``phi_rf`` is never part of it.
        """
        if not isinstance(problem, Problem):
            raise InputError(f"solve() needs a pbsolver.Problem, got {type(problem).__name__}")
        nonlinear = problem.nonlinear if nonlinear is None else flag(nonlinear, "nonlinear")
        keep_system = flag(keep_system, "keep_system")
        backend = get_backend(self.backend_name, like=problem.phi_coulomb)
        name = self.method_for(backend, problem)
        # refuse what cannot fit before any array is allocated
        newton = nonlinear and problem.has_salt  # without salt the two equations are one
        check_memory(problem.grid.shape, name, backend.name, self.dtype, self.refine,
                     nonlinear=newton)  # fmt: skip
        if newton:
            return self._solve_nonlinear(backend, problem, name, x0)
        method = self.make_method(name)
        # With refinement, the system is defined by float64 coefficients (``checked``): the
        # float32 stencil only drives the correction phases, and every residual that decides
        # convergence is computed on the float64 one, so rtol holds for the float64 operator.
        # keep=True: a GPU solve's buffers serve the next problem of this grid, whose cycles
        # then replay this solve's recordings (LinearSystem.for_problem)
        system = LinearSystem.for_problem(backend, problem, self.dtype, self.refine, x0,
                                          keep=True)  # fmt: skip
        out = system.solve(method, rtol=self.rtol, atol=self.atol, maxiter=self.maxiter,
                           check_every=self.check_every, callback=self.callback)  # fmt: skip
        backend.synchronize()
        return self._result(backend, system.solution(problem.phi_coulomb),
                            bool(out.converged[0]), out,
                            system=system if keep_system else None)  # fmt: skip

    def _solve_nonlinear(self, backend, problem, name, x0) -> SolveResult:
        out = solve_newton(self, backend, problem, name, x0)
        return self._result(backend, backend.to_caller(out.phi_rf, problem.phi_coulomb),
                            out.converged, out, extra={"newton": out.steps, "capped": out.capped,
                                                   "newton_start_seconds": out.start_seconds},
                            newton_steps=out.newton_steps)  # fmt: skip

    def _result(self, backend, phi_rf, converged, out, **more) -> SolveResult:
        """The SolveResult of a loop's (or Newton's) outcome ``out``, checked (``strict``)."""
        result = SolveResult(phi_rf=phi_rf, converged=converged, iterations=out.iterations,
                             residual_norms=out.history, seconds=out.seconds, method=out.method,
                             backend=backend.name, reason=out.reason, omega=out.omega,
                             **more)  # fmt: skip
        self.check(result)
        return result

    def check(self, result: SolveResult) -> None:
        """With ``strict=True``, raise :class:`~pbsolver.ConvergenceError` for ``result``."""
        if self.strict and result.reason == "capped":
            raise ConvergenceError(
                f"{result.method} on {result.backend}: the nonlinear solve stopped (capped): "
                f"|zφ/kT| exceeds {CAP:g} at {result.extra.get('capped')} ion-accessible "
                "node(s), where the Boltzmann term is continued linearly: not a Poisson–"
                "Boltzmann solution",
                result,
            )
        if self.strict and not result.converged:
            raise ConvergenceError(
                f"{result.method} on {result.backend} did not converge ({result.reason}) after "
                f"{result.iterations} iterations: relative residual {result.residual:.3g} > "
                f"rtol {self.rtol:g}",
                result,
            )

    def __repr__(self) -> str:
        return (
            f"Solver(method={self.method!r}, backend={self.backend_name!r}, rtol={self.rtol:g}, "
            f"atol={self.atol:g}, maxiter={self.maxiter}, dtype={self.dtype.name})"
        )


def solve(problem: Problem, x0=None, *, nonlinear=None, **options) -> SolveResult:
    """Solve ``problem`` with ``Solver(**options)``; see :class:`Solver` for the options.

    ``nonlinear``: see :meth:`Solver.solve` (default: ``problem.nonlinear``).
    """
    return Solver(**options).solve(problem, x0=x0, nonlinear=nonlinear)


def _nonnegative(value, name):
    try:
        value = float(value)
    except (TypeError, ValueError) as exc:
        raise InputError(f"{name} must be a number, got {value!r}") from exc
    if not (math.isfinite(value) and value >= 0):
        raise InputError(f"{name} must be finite and >= 0, got {value}")
    return value


def _check_method_options(method: str, options: dict) -> None:
    """Refuse method options no method (or not the chosen one) takes, naming them."""
    if method != "auto":
        accepted = set(method_options(method))
    else:
        accepted = {o for name in METHODS for o in method_options(name)}
    unknown = sorted(set(options) - accepted)
    if unknown:
        where = f"method {method!r}" if method != "auto" else "any method"
        raise InputError(
            f"Solver: unknown keyword {', '.join(map(repr, unknown))} for {where}; valid "
            f"keywords: method, backend, rtol, atol, maxiter, callback, omega, check_every, "
            f"dtype, strict, refine, newton_maxiter, {', '.join(sorted(accepted - {'omega'}))}"
        )


__all__ = ["SolveResult", "Solver", "solve"]
