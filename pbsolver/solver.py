"""The Solver: iterate a backend's kernels to convergence, checking the residual sparingly.

The loop here is the only place that decides anything (when to check, when to stop, what to
report); it does not know which backend or which method runs it. A method is a small object
with ``setup`` and ``step(count)`` (see :data:`METHODS`).
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import inspect
import math
import time
from dataclasses import dataclass, field

import numpy as np

from . import _display
from ._arrays import array_module, as_real_array
from .backends import Backend, Stencil, get_backend
from .exceptions import ConvergenceError, InputError
from .problem import Problem
from .resources import check_memory

#: Stop as "diverging" when the residual exceeds this multiple of the initial one.
DIVERGENCE_FACTOR = 1e4
#: Stop as "stagnated" after this many checks without a 1 % improvement of the best residual.
STAGNATION_CHECKS = 30


@dataclass
class SolveResult:
    """What :meth:`Solver.solve` returns.

    Attributes
    ----------
    phi_rf : array (nx, ny, nz)
        Reaction-field potential, kJ mol⁻¹ e⁻¹, in the caller's array library (NumPy or CuPy).
    converged : bool
        Whether ``‖b − Aφ‖₂ ≤ max(rtol‖b‖₂, atol)`` was reached.
    iterations : int
        Sweeps (SOR, Jacobi) or cycles (multigrid) done.
    residual_norms : list of float
        Relative residual ‖b − Aφ‖₂/‖b‖₂ at each check, starting with the initial guess.
    seconds : float
        Wall time of the solve, set-up included.
    method, backend : str
        What ran.
    reason : str
        Why the loop stopped: "converged", "maxiter", "diverged", "nan", "stagnated",
        or "zero rhs".
    omega : float or None
        Relaxation factor used (SOR, Jacobi).
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


# ---------------------------------------------------------------------- methods
class _StationaryMethod:
    """Shared set-up of the sweep methods.

    A method is driven by :class:`Solver` through ``setup`` (once per solve), ``start`` (at the
    beginning of each refinement phase, with the phase's stencil and iterate) and
    ``step(count)``.
    """

    name = "abstract"
    check_every = 10

    def __init__(self, omega=None):
        if omega is not None:
            omega = float(omega)
            if not 0.0 < omega < 2.0:
                raise InputError(f"omega must be in (0, 2), got {omega}")
        self.omega = omega

    def setup(self, backend: Backend, st: Stencil, problem: Problem):
        self.backend = backend

    def start(self, st: Stencil, x):
        self.st, self.x = st, x

    def default_maxiter(self, shape) -> int:
        raise NotImplementedError


class SOR(_StationaryMethod):
    """Red–black successive over-relaxation.

    ω defaults to 2 / (1 + √(1 − ρ²)), the optimum for the constant-coefficient operator, with ρ
    the Jacobi spectral radius of the grid's Laplacian (DelPhi's estimate).
    """

    name = "sor"

    def setup(self, backend, st, problem):
        super().setup(backend, st, problem)
        require_even_periodic(st, self.name)
        if self.omega is None:
            self.omega = optimal_sor_omega(problem)

    def step(self, count):
        self.backend.sor_sweeps(self.st, self.x, self.omega, count)

    def default_maxiter(self, shape):
        return 100 * max(shape) + 1000


class Jacobi(_StationaryMethod):
    """Weighted Jacobi with two buffers (the seed kernel's method, without its race)."""

    name = "jacobi"
    check_every = 50

    def setup(self, backend, st, problem):
        super().setup(backend, st, problem)
        if self.omega is None:
            self.omega = 0.9

    def start(self, st, x):
        super().start(st, x)
        self.work = self.backend.copy(x)

    def step(self, count):
        self.backend.jacobi_sweeps(self.st, self.x, self.work, self.omega, count)

    def default_maxiter(self, shape):
        return 20 * max(shape) ** 2 + 1000


#: Registry of methods by name; other modules (multigrid) add theirs.
METHODS: dict[str, type] = {"sor": SOR, "jacobi": Jacobi}


def require_even_periodic(st: Stencil, method: str) -> None:
    """Refuse odd periodic axes for red–black methods.

    With an odd count two same-colour neighbours meet across the wrap and the sweep would race.
    """
    if st.periodic and any(n % 2 for n in st.shape):
        raise InputError(
            f"method {method!r} uses red-black ordering, which needs an even number of nodes "
            f"along periodic axes; got shape {st.shape}: use an even grid or method='jacobi'"
        )


def optimal_sor_omega(problem: Problem) -> float:
    """Optimal SOR ω for the constant-coefficient Laplacian on ``problem``'s grid.

    ρ_J = Σ_a cos(θ_a)/h_a² / Σ_a 1/h_a², θ_a = π/(n_a − 1) (Dirichlet) or 2π/n_a (periodic);
    ω = 2 / (1 + √(1 − ρ_J²)). A periodic problem with salt also keeps the constant mode, whose
    Jacobi factor is 1 − Σκ̄²/Σdiag (its Rayleigh quotient); ρ_J is the larger of the two.
    """
    weights = [1.0 / (h * h) for h in problem.grid.spacing]
    if problem.boundary == "periodic":
        thetas = [2.0 * math.pi / n for n in problem.grid.shape]
    else:
        thetas = [math.pi / (n - 1) for n in problem.grid.shape]
    rho = sum(w * math.cos(t) for w, t in zip(weights, thetas, strict=True)) / sum(weights)
    if problem.boundary == "periodic" and problem.kappa2 is not None:
        faces = problem.face_permittivities()
        diag_sum = sum(2.0 * float(f.sum()) * w for f, w in zip(faces, weights, strict=True))
        k2_sum = float(problem.kappa2.sum())
        rho = max(rho, 1.0 - k2_sum / (diag_sum + k2_sum))
    return 2.0 / (1.0 + math.sqrt(max(0.0, 1.0 - rho * rho)))


# ---------------------------------------------------------------------- solver
class Solver:
    """Iterative solver for :class:`~pbsolver.Problem`.

    Parameters
    ----------
    method : {"auto", "sor", "jacobi", "multigrid", "mgcg"}
        Iteration. "auto" picks by backend and grid size from measured times: SOR on small
        grids, multigrid (CPU) or MG-CG (GPU) on large ones, Jacobi for odd periodic grids.
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
        **method_options,
    ):
        if method != "auto" and method not in _methods():
            raise InputError(
                f"method must be 'auto' or one of {sorted(_methods())}, got {method!r}"
            )
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
        _check_method_options(method, method_options)  # a misspelt keyword fails here
        self.method_options = method_options

    def _resolve_method(self, backend, problem) -> str:
        """The method "auto" stands for, from measured times to rtol 1e-6 (BENCHMARKS.md).

        On the H200, SOR (graph-replayed sweeps) beats multigrid below about 190³ nodes
        (129³: 22 ms against 52 ms), whose set-up and coarse levels are launch-bound; above it
        MG-CG wins (257³: 89 ms against 184 ms). On the CPU multigrid wins from about 60³
        (129³: 0.55 s against 1.97 s for SOR). Odd periodic grids, which red–black methods
        refuse, get Jacobi. Multigrid options (e.g. ``cycle=``) keep multigrid.
        """
        if self.method != "auto":
            return self.method
        if problem.boundary == "periodic" and any(n % 2 for n in problem.grid.shape):
            return "jacobi"
        if "multigrid" not in _methods() or (set(self.method_options) - {"omega"}):
            return "multigrid" if "multigrid" in _methods() else "sor"
        size = problem.grid.size
        if backend.name == "cuda":
            return "sor" if size < 190**3 else "mgcg"
        return "sor" if size < 60**3 else "multigrid"

    def solve(self, problem: Problem, x0=None) -> SolveResult:
        """Solve ``problem`` for φ_rf.

        Parameters
        ----------
        problem : Problem
        x0 : array (nx, ny, nz), optional
            Initial guess (never modified). Its outer layer is replaced by the boundary values
            for Dirichlet problems.

        Returns
        -------
        SolveResult
            ``phi_rf`` is in the array library of the problem's arrays.

        Raises
        ------
        ConvergenceError
            Only with ``strict=True``, when the solve did not converge.
        """
        if not isinstance(problem, Problem):
            raise InputError(f"solve() needs a pbsolver.Problem, got {type(problem).__name__}")
        start = time.perf_counter()
        backend = get_backend(self.backend_name, like=problem.phi_coulomb)
        name = self._resolve_method(backend, problem)
        check_memory(problem.grid.shape, name, backend.name, self.dtype, self.refine)
        options = dict(self.method_options)
        if self.omega is not None:
            options["omega"] = self.omega
        method = _methods()[name](**options)

        st = backend.stencil(problem, self.dtype)
        # With refinement, the system is defined by float64 coefficients (``checked``): the
        # float32 stencil only drives the correction phases, and every residual that decides
        # convergence is computed on the float64 one, so rtol holds for the float64 operator.
        checked = backend.stencil(problem, np.float64) if self.refine else st
        method.setup(backend, st, problem)
        maxiter = self.maxiter if self.maxiter is not None else method.default_maxiter(st.shape)
        check_every = self.check_every or method.check_every
        loop = _Loop(self, backend, st, checked, method, maxiter, check_every)
        # Under refinement the iterate is the float64 accumulator from the start (x0 included:
        # rounding it to float32 would put its residual at float32's floor).
        x = self._initial_guess(backend, problem, x0, checked.dtype)

        # ‖b‖ of the system over the unknowns: the residual with zero inside.
        zero_inside = self._initial_guess(backend, problem, None, checked.dtype)
        bnorm = backend.residual_norm(checked, zero_inside)
        if bnorm == 0.0:
            return self._finish(
                backend, problem, st, zero_inside, method, 0, [0.0], "zero rhs", start
            )
        loop.run(x, bnorm)
        return self._finish(
            backend,
            problem,
            st,
            loop.solution,
            method,
            loop.iterations,
            loop.history,
            loop.reason,
            start,
        )

    # ------------------------------------------------------------------ helpers
    def _initial_guess(self, backend, problem, x0, dtype=None):
        from .operator import fixed_values

        dtype = self.dtype if dtype is None else np.dtype(dtype)
        fixed = fixed_values(problem, dtype)
        if x0 is None:
            return backend.asarray(fixed, dtype)
        x0 = as_real_array(x0, "x0", problem.grid.shape)
        xp = array_module(x0)
        if not bool(xp.isfinite(x0).all()):
            raise InputError("x0 must be finite")
        x = backend.asarray(x0, dtype)
        if problem.boundary == "dirichlet":
            g = backend.asarray(fixed, dtype)
            inner = (slice(1, -1),) * 3
            g[inner] = x[inner]
            x = g
        return x

    def _finish(self, backend, problem, st, x, method, it, history, reason, start):
        converged = reason in ("converged", "zero rhs")
        if st.singular:
            backend.remove_mean(x)
        backend.synchronize()
        result = SolveResult(
            phi_rf=backend.to_caller(x, problem.phi_coulomb),
            converged=converged,
            iterations=it,
            residual_norms=history,
            seconds=time.perf_counter() - start,
            method=method.name,
            backend=backend.name,
            reason=reason,
            omega=getattr(method, "omega", None),
        )
        if self.strict and not converged:
            raise ConvergenceError(
                f"{method.name} on {backend.name} did not converge ({reason}) after {it} "
                f"iterations: relative residual {result.residual:.3g} > rtol {self.rtol:g}",
                result,
            )
        return result

    def __repr__(self) -> str:
        return (
            f"Solver(method={self.method!r}, backend={self.backend_name!r}, rtol={self.rtol:g}, "
            f"atol={self.atol:g}, maxiter={self.maxiter}, dtype={self.dtype.name})"
        )


class _Loop:
    """One solve's iteration: checks, stopping rules and float64 iterative refinement.

    Without refinement the method iterates on x itself (``checked is st``). With it, x is the
    float64 accumulator; each phase solves A e = r in float32 for a correction e, with
    r = b − A x computed on the float64 stencil ``checked``, and ends when its residual has
    dropped by ``PHASE_REDUCTION``, reached the overall threshold, or stalled; then x += e and
    the true residual is recomputed in float64.
    """

    PHASE_REDUCTION = 1e-3

    def __init__(
        self, solver, backend, st, checked, method, maxiter, check_every, work=None, norm=None
    ):
        self.solver, self.backend, self.method = solver, backend, method
        # the stopping measure of (stencil, x): ‖b − A x‖₂, or a stack's weighted block maximum
        # (``norm``, see Backend.block_residual_norm) so that every block meets its own threshold
        self._norm = norm or backend.residual_norm
        self.st, self.checked = st, checked
        self.maxiter, self.check_every = maxiter, check_every
        # (r, e) in st's shape and dtype for every refinement phase, or None: fresh each phase.
        # A caller that solves again and again on the same buffers passes its own, so the
        # phases always run on the same addresses and their captured graphs are found again.
        self.work = work
        self.iterations, self.history, self.reason, self.solution = 0, [], None, None

    def _record(self, rnorm):
        self.history.append(rnorm / self.bnorm)
        if self.solver.callback is not None:
            self.solver.callback(self.iterations, rnorm / self.bnorm)

    def run(self, x, bnorm):
        backend, method = self.backend, self.method
        self.bnorm = bnorm
        threshold = max(self.solver.rtol * bnorm, self.solver.atol)
        refine = self.checked is not self.st
        rnorm = self._norm(self.checked, x)
        self.initial = rnorm
        self._record(rnorm)
        reason = None
        while True:
            reason = self._stop_reason(rnorm, threshold)
            if reason is not None:
                break
            phase_st, phase_x = self._correction_system(x) if refine else (self.st, x)
            method.start(phase_st, phase_x)
            phase_start = rnorm
            rnorm, reason = self._phase(phase_st, phase_x, threshold, phase_start, refine)
            if not refine or reason in ("nan", "diverged"):
                break
            backend.axpy(x, phase_x, 1.0)  # fold the correction into the float64 iterate
            rnorm = self._norm(self.checked, x)
            self.history[-1] = rnorm / bnorm
            reason = self._stop_reason(rnorm, threshold)
            if reason is not None:
                break
            if rnorm > 0.5 * phase_start:
                reason = "stagnated"  # a whole phase gained less than 2×: no progress left
                break
        if reason is None:
            reason = self._stop_reason(rnorm, threshold) or "maxiter"
        self.reason = reason
        self.solution = x

    def _correction_system(self, x):
        """(stencil with b = r = b − A·x, zero iterate): the next phase's float32 system."""
        backend, st = self.backend, self.st
        if self.work is None:
            r, e = backend.zeros(st.shape, st.dtype), backend.zeros(st.shape, st.dtype)
        else:
            r, e = self.work
            backend.fill(e, 0.0)
        backend.residual(self.checked, x, r)
        if st.singular:
            backend.remove_mean(r)
        return dataclasses.replace(st, b=r), e

    def _stop_reason(self, rnorm, threshold):
        if not math.isfinite(rnorm):
            return "nan"
        if rnorm <= threshold:
            return "converged"
        if rnorm > DIVERGENCE_FACTOR * self.initial:
            return "diverged"
        if self.iterations >= self.maxiter:
            return "maxiter"
        return None

    def _phase(self, st, x, threshold, phase_start, refine):
        """Iterate on (st, x) until this phase ends; return (residual norm, stop reason)."""
        best, since_best = phase_start, 0
        # SOR with ω near 2 lets the residual grow for O(n) sweeps before it falls, so a stall
        # is only called after STAGNATION_CHECKS checks without a 1 % gain.
        stall = STAGNATION_CHECKS
        target = max(threshold, self.PHASE_REDUCTION * phase_start) if refine else threshold
        while True:
            count = min(self.check_every, self.maxiter - self.iterations)
            self.method.step(count)
            self.iterations += count
            rnorm = self._norm(st, x)
            self._record(rnorm)
            reason = self._stop_reason(rnorm, threshold)
            if reason in ("nan", "diverged", "maxiter"):
                return rnorm, reason
            if rnorm <= target:
                return rnorm, reason
            if rnorm < 0.99 * best:
                best, since_best = rnorm, 0
            else:
                since_best += 1
                if since_best >= stall:
                    return rnorm, "stagnated"


def solve(problem: Problem, x0=None, **options) -> SolveResult:
    """Solve ``problem`` with ``Solver(**options)``; see :class:`Solver` for the options."""
    return Solver(**options).solve(problem, x0=x0)


def _methods() -> dict[str, type]:
    # Methods in other modules register themselves in METHODS when imported.
    if importlib.util.find_spec(f"{__package__}.multigrid") is not None:
        importlib.import_module(f"{__package__}.multigrid")
    return METHODS


def _nonnegative(value, name):
    try:
        value = float(value)
    except (TypeError, ValueError) as exc:
        raise InputError(f"{name} must be a number, got {value!r}") from exc
    if not (math.isfinite(value) and value >= 0):
        raise InputError(f"{name} must be finite and >= 0, got {value}")
    return value


def _method_keywords(cls) -> set[str]:
    """Keyword options a method class accepts (through ``*args, **kwargs`` to its bases)."""
    for klass in cls.__mro__:
        if "__init__" not in vars(klass):
            continue
        params = inspect.signature(klass.__init__).parameters.values()
        if any(p.kind is p.VAR_KEYWORD for p in params):
            continue
        return {p.name for p in params if p.name != "self"} - {"args"}
    return set()


def _check_method_options(method: str, options: dict) -> None:
    """Refuse keywords that neither the Solver nor its method accepts, naming the valid ones."""
    if not options:
        return
    methods = _methods()
    classes = methods.values() if method == "auto" else [methods[method]]
    accepted = set().union(*(_method_keywords(c) for c in classes))
    unknown = sorted(set(options) - accepted)
    if unknown:
        own = [p for p in inspect.signature(Solver.__init__).parameters if p != "self"]
        valid = [p for p in own if p != "method_options"] + sorted(accepted - set(own))
        raise InputError(
            f"Solver: unknown keyword {', '.join(map(repr, unknown))} for method {method!r}; "
            f"valid keywords: {', '.join(valid)}"
        )
