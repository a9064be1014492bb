"""A globalised inexact Newton method for the nonlinear Poisson–Boltzmann equation.

The equation over the unknowns (README *The equation*, with the salt term made nonlinear) is

    F(u) = A_ε u + κ̄² (kT/z) g(z (φ_c + u)/kT) − b_ε = 0

with u = φ_rf, A_ε the operator without κ̄², b_ε its right-hand side without −κ̄² φ_c (the
flux terms of φ_c and the fixed boundary values' coupling) and g the overflow-safe sinh of
:mod:`pbsolver.nonlinear.boltzmann` (κ̄² is zero wherever φ_c is singular). F is the gradient
of the strictly convex functional (with salt somewhere)

    J(u) = ½ uᵀ A_ε u − b_εᵀ u + Σ κ̄² (kT/z)² G(z (φ_c + u)/kT)

(the discrete free energy of :mod:`pbsolver.nonlinear.energy` up to sign and the factor
h³/4πk), so the solution is J's unique minimiser, and Newton's method globalised by a line
search on J converges from any start.

The iteration
    1. Start: ``x0`` when given; otherwise from φ = 0 in the ion-accessible region, where sinh
       equals its linearisation, so the first Newton step is the linearised equation's solve
       (to :data:`START_RTOL`), followed by a line search along that step.
    2. Each Newton step solves (A_ε + diag(κ̄² g'(x))) δ = −F with the problem's linear method
       (SOR, Jacobi, multigrid or MG-CG: the solver's "auto" choice), inexactly: to the
       relative residual η_k of Eisenstat and Walker's second choice, η_k = 0.9 (‖F_k‖ /
       ‖F_k−1‖)², between what the target still needs and :data:`ETA_MAX`, in float32 with
       float64 refinement as linear solves are. One :class:`NewtonStepSystem` serves every
       step (and the start): its diagonal and right-hand side are rewritten in place, its
       multigrid hierarchy is built once and its coarse operators rebuilt for each diagonal.
    3. A line search along δ on J (:func:`line_search`): Δ'(α) = F(u + αδ)ᵀδ costs one pass
       over the grid (the quadratic part is two dot products) and Δ(α) = J(u + αδ) − J(u)
       another, needed only beyond the minimiser (convexity bounds it elsewhere). The full
       step is taken when it removes 90 % of the slope; otherwise the minimiser along δ is
       bracketed — expanding while still downhill, so that steps longer than Newton's are
       taken where the exponential makes Newton's short (a potential coming down from far
       above its value moves about one kT a step otherwise) — and Δ' driven to within 1 % of
       its start (strong Wolfe conditions). A step that is no descent direction (too inexact)
       is solved again with a tighter η.
    4. Stop when ‖F‖₂ ≤ max(rtol·‖b‖₂, atol) over the unknowns, ‖b‖ the right-hand side norm of
       the linearised system (the linear solve's denominator: at low potential the two
       relative residuals are the same number).

Outcomes: "converged"; "maxiter" (Newton steps, or the linear iterations of all steps together,
``maxiter``); "stagnated" (no descent direction even after tighter solves, or no step along it
that decreases J); "nan" (a non-finite residual or linear step); "capped" (converged, but the
potential of an ion-accessible unknown lies beyond the Boltzmann term's cap: the solution of
the continued equation, not of the Poisson–Boltzmann one; never with physical input).

Stacks (:func:`solve_newton_stack`, used by :func:`pbsolver.solve_batch`): B problems of one
shape as one block-diagonal system (:meth:`pbsolver.solving.system.LinearSystem.stack`, each
block's boundary values lifted into its right-hand side). F and the Jacobian are the blocks'
own side by side and J is their sum, so every step above is every block's: each block has its
own ‖F_k‖, forcing term and threshold (the stacked linear solve stops on each block's own
residual), and the line search runs once, along the stacked step, on the sum of the blocks' J.
The iteration stops when every block meets its threshold; ``eta`` in a step's record is the
largest of the blocks'.

Every array operation is the backend's (residuals, the linear methods) or array code on its
array module (NumPy or CuPy), so the same code runs on the CPU and on CUDA.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

from pbsolver.arrays import array_module, as_real_array, to_numpy
from pbsolver.backends import Stencil
from pbsolver.exceptions import InputError
from pbsolver.io.units import kT_kj_per_mol
from pbsolver.multigrid.builders import grid_hierarchy
from pbsolver.nonlinear import boltzmann
from pbsolver.operator import fixed_values, interior_mask
from pbsolver.solving.system import LinearSystem

#: Loosest relative residual of a Newton step's linear solve (a multigrid cycle or two).
ETA_MAX = 0.1
#: Relative residual of the linearised solve that starts an iteration without x0.
START_RTOL = 1e-2
#: A step that is no descent direction, or along which J cannot decrease, is solved again to a
#: hundredfold tighter η, at most RETRIES times and not below ETA_MIN.
RETRIES = 2
ETA_MIN = 1e-10
#: Eisenstat–Walker choice 2: η_k = GAMMA (‖F_k‖/‖F_k−1‖)^2.
EW_GAMMA = 0.9
#: Default most Newton steps.
NEWTON_MAXITER = 100
#: Line search: Armijo constant, strong-Wolfe slope fraction, the fraction of the initial
#: slope the full step must remove to be taken at once, expansion factor and largest step,
#: and most evaluations of Δ(α).
ARMIJO = 1e-4
WOLFE = 0.01
FULL_STEP = 0.1
EXPAND = 4.0
ALPHA_MAX = 1e6
LINE_SEARCH_EVALS = 40


@dataclass
class NewtonOutcome:
    """What :func:`solve_newton` returns.

    Attributes
    ----------
    phi_rf : array
        φ_rf on the whole grid (boundary values on the fixed layer), float64, on the backend.
    reason : str
        See the module docstring.
    converged : bool
    newton_steps : int
        Newton steps taken (the linear start not counted).
    iterations : int
        Linear iterations (sweeps or cycles) of all linear solves, the start's included.
    history : list of float
        ‖F‖/‖b‖ at the start and after every Newton step.
    steps : list of dict
        Per Newton step: ``eta`` (the last tried), linear ``iterations``, ``linear_reason``,
        ``retries`` (tighter solves of a step that was no descent direction), ``alpha``,
        ``line_search_evaluations``, ``linear_seconds`` (its linear solves, set-up included)
        and ``seconds`` (the whole step: Jacobian, solves, line search, update and the next
        residual).
    capped : int
        Ion-accessible unknowns where |zφ/kT| exceeds the cap at the end.
    method : str
    omega : float or None
    seconds : float
    start_seconds : float
        The start (the linearised solve and its line search; zero when ``x0`` was given) and
        the first residual.
    """

    phi_rf: object
    reason: str
    converged: bool
    newton_steps: int
    iterations: int
    history: list
    steps: list = field(default_factory=list)
    capped: int = 0
    method: str = ""
    omega: float | None = None
    seconds: float = 0.0
    start_seconds: float = 0.0


class NewtonStepSystem(LinearSystem):
    """The linear system of a Newton step: the problem's faces, diagonal A_ε + κ̄² g'(x).

    The stencils' ``diag`` and ``b`` are rewritten in place before each step's solve, and
    ``kappa2`` (κ̄² g'(x) on every node, float64) with them; the multigrid hierarchy is built
    on the first solve and its coarse operators rebuilt from ``kappa2`` on every later one, so
    its levels and buffers are made once.

    Parameters
    ----------
    backend : Backend
    problem : Problem
        The nonlinear problem (its grid and boundary; SOR's ω).
    st, checked : Stencil
        The stencil the method iterates on and the float64 one deciding convergence (the same
        object without refinement).
    kappa2 : array
        The effective κ̄² the coarse levels are built from.
    """

    def __init__(self, backend, problem, st, checked, kappa2):
        shape = problem.grid.shape
        x = backend.zeros(shape, checked.dtype)
        # the steps' work arrays kept from step to step where the backend replays recorded
        # work: every step's cycles and coarse rebuild then replay the first step's recording
        super().__init__(backend, st, checked, x, block_shape=shape,
                         spacing=problem.grid.spacing, n_blocks=1, stride=shape[0],
                         kept=backend.CAPTURES)  # fmt: skip
        self.problem = problem
        self.kappa2 = kappa2
        # float64 faces to build coarse operators from (the refinement's, or float64 storage)
        self._faces = (checked.cx, checked.cy, checked.cz) if checked.dtype == np.float64 else None
        self._hierarchies = {}

    def hierarchy(self, given: dict, defaults: dict):
        """The grid hierarchy (made once per set of options), rebuilt for the current κ̄²."""
        options = {**defaults, **given}
        key = tuple(sorted(options.items()))
        h = self._hierarchies.get(key)
        if h is None:
            h = grid_hierarchy(self.backend, self.st, self.spacing, self.kappa2, **options)
            # the coarse operators' sources: κ̄² is rewritten in place each step, and the
            # float64 faces are the checked stencil's (the hierarchy's own float64 copies of
            # the float32 faces are let go: three grid arrays fewer for the whole solve)
            h.inputs = (*(self._faces or h.inputs[:3]), self.kappa2)
            self._hierarchies[key] = h
        else:
            h.rebuild()
        return h


class _Equation:
    """F, J along a line, and the Jacobian of one problem or a stack, as array code.

    Made by :meth:`of_problem` (one problem, its boundary values in the iterate) or
    :meth:`of_stack` (a stack's lifted system: every block's boundary values are in its
    right-hand side and its outer layer is decoupled, so the iterate is zero there). Over a
    stack F and J are the blocks' own, side by side, and J is their sum.
    """

    def __init__(self, backend, lin, k2, inner, phi_c, *, temperature, valence, periodic,
                 fixed, bnorms, stride):  # fmt: skip
        be = self.backend = backend
        xp = self.xp = backend.array_module()
        f64 = np.float64
        self.periodic = periodic
        kT = kT_kj_per_mol(temperature)
        z = float(valence)
        self.scale = z / kT  # x = zφ/kT
        self.lin = lin
        self.k2 = k2
        self.k2u = self.k2 * inner  # κ̄² on the unknowns (zero on fixed and decoupled nodes)
        # φ_c where ions may be (finite there); zero elsewhere, where it may be infinite
        self.phic = xp.where(self.k2 > 0, phi_c, 0.0)
        self.unit = kT / z  # F's Boltzmann term is κ̄² (kT/z) g(x); J's κ̄² (kT/z)² G(x)
        self.diag_eps = lin.diag - self.k2u  # 1 on fixed nodes, as in the stencil
        self.b_eps = lin.b + self.k2u * self.phic
        self.eps_st = Stencil(lin.cx, lin.cy, lin.cz, self.diag_eps, self.b_eps, periodic, False)
        self.apply_st = Stencil(lin.cx, lin.cy, lin.cz, self.diag_eps, be.zeros(lin.shape, f64),
                                periodic, False)  # fmt: skip
        self.work = be.zeros(lin.shape, f64)
        # a new array of the iterate's fixed part (boundary values, or zero for a stack) each
        # call: not a grid array kept through the solve
        self.fixed = fixed
        # ‖b_k‖ of every block's linearised system (boundary coupling included): the scales
        self.bnorms = np.asarray(bnorms, dtype=np.float64)
        self.n_blocks = len(self.bnorms)
        self.stride = stride

    @classmethod
    def of_problem(cls, backend, problem):
        """One problem: its float64 stencil; the iterate holds its boundary values."""
        f64 = np.float64
        xp = backend.array_module()
        periodic = problem.boundary == "periodic"
        lin = backend.stencil(problem, f64)
        k2 = backend.asarray(problem.kappa2, f64)
        # the mask of the unknowns made on the backend's device (not crossed from the host)
        inner = interior_mask(problem.grid.shape, periodic, xp)

        def fixed():
            return backend.asarray(fixed_values(problem), f64)

        bnorm = backend.residual_norm(lin, fixed())
        return cls(backend, lin, k2, inner, backend.asarray(problem.phi_coulomb, f64),
                   temperature=problem.temperature, valence=problem.ion_valence,
                   periodic=periodic, fixed=fixed, bnorms=[bnorm],
                   stride=problem.grid.shape[0])  # fmt: skip

    @classmethod
    def of_stack(cls, backend, system, problems):
        """A stack assembled in ``system`` (a :meth:`LinearSystem.stack`): its lifted stencil.

        The float64 stencil is the system's own checked one (its diag and b are the Newton
        steps' from here on), or float64 copies where the stack is float32 throughout.
        """
        f64 = np.float64
        checked = system.checked
        if checked.dtype == f64:
            lin = checked
        else:
            lin = Stencil(*(backend.asarray(a, f64) for a in (checked.cx, checked.cy,
                          checked.cz, checked.diag, checked.b)), False, False)  # fmt: skip
        shape, stride = system.block_shape, system.stride
        k2, phic, inner = (backend.zeros(lin.shape, f64) for _ in range(3))
        nx = shape[0]
        for k, p in enumerate(problems):
            block = slice(k * stride, k * stride + nx)
            k2[block] = backend.asarray(p.kappa2, f64)
            phic[block] = backend.asarray(p.phi_coulomb, f64)
            inner[k * stride + 1 : k * stride + nx - 1, 1:-1, 1:-1] = 1.0
        p0 = problems[0]
        return cls(backend, lin, k2, inner, phic, temperature=p0.temperature,
                   valence=p0.ion_valence, periodic=False,
                   fixed=lambda: backend.zeros(lin.shape, f64), bnorms=system.bnorms,
                   stride=stride)  # fmt: skip

    def scaled(self, u):
        """x = z (φ_c + u)/kT on every node (meaningful where κ̄² > 0)."""
        x = self.phic + u
        x *= self.scale
        return x

    def gradient(self, u, x):
        """F at u over the unknowns (zero on fixed nodes): κ̄² (kT/z) g(x) − (b_ε − A_ε u)."""
        F = self.backend.zeros(u.shape, np.float64)
        self.backend.residual(self.eps_st, u, F)
        F *= -1.0
        ions = boltzmann.term(x, self.xp)
        ions *= self.unit
        ions *= self.k2u
        F += ions
        return F

    def norms(self, a):
        """‖a_k‖₂ of every block, a NumPy array (synchronises)."""
        if self.n_blocks == 1:
            return np.array([float(self.xp.linalg.norm(a))])
        return self.backend.block_norms(a, self.n_blocks)

    def jacobian(self, x, diag, kappa2) -> None:
        """Write the Newton diagonal A_ε's + κ̄² g'(x) and the effective κ̄² in place.

        ``kappa2`` None: no coarse levels to build from it (SOR, Jacobi).
        """
        xp = self.xp
        gp = boltzmann.derivative(x, xp)
        if kappa2 is not None:
            xp.multiply(self.k2, gp, out=kappa2)
        gp *= self.k2u
        xp.add(self.diag_eps, gp, out=diag)

    def line(self, x, delta, d0):
        """Δ'(α) and Δ(α) = J(u + αδ) − J(u) along δ from u (x = scaled(u), d0 = F(u)ᵀδ).

        Returns ``(slope, value)``, two functions of α; Δ(α) is computed with the cancellation-
        free increment of G (only where the line search needs it).
        """
        xp, be = self.xp, self.backend
        be.residual(self.apply_st, delta, self.work)  # −A_ε δ
        c1 = -float(xp.vdot(self.work, delta))  # δᵀ A_ε δ ≥ 0
        wd = self.k2u * delta
        wd *= self.unit
        # (A_ε u − b_ε)ᵀδ = F(u)ᵀδ − (κ̄² (kT/z) g(x))ᵀδ: no residual array kept for it
        c0 = d0 - float(xp.vdot(wd, boltzmann.term(x, xp)))

        def trial(alpha):
            """x + α z δ/kT, in the work array (free once c1 is known)."""
            y = self.work
            xp.multiply(delta, alpha * self.scale, out=y)
            y += x
            return y

        def slope(alpha):
            return c0 + alpha * c1 + float(xp.vdot(wd, boltzmann.term(trial(alpha), xp)))

        def value(alpha):
            change = boltzmann.energy_increment(x, trial(alpha), xp)
            change = float(xp.vdot(self.k2u, change))
            return alpha * c0 + 0.5 * alpha * alpha * c1 + self.unit**2 * change

        return slope, value

    def beyond_cap(self, x):
        """Ion-accessible unknowns where |x| > CAP, per block (a NumPy int array)."""
        xp = self.xp
        over = ((self.k2u > 0) & (xp.abs(x) > boltzmann.CAP)).reshape(self.n_blocks, -1)
        return np.asarray(to_numpy(xp.count_nonzero(over, axis=1)), dtype=np.int64)


def line_search(slope, value, d0):
    """A step along a descent direction of the convex J: (alpha or None, evaluations).

    ``slope(α)`` is Δ'(α) = F(u + αδ)ᵀδ, increasing in α since J is convex, ``value(α)`` is
    Δ(α) = J(u + αδ) − J(u) and ``d0 = Δ'(0) < 0``. Convexity gives Δ(α) ≤ α Δ'(α), so a step
    left of the minimiser (Δ'(α) ≤ 0) decreases J without Δ being computed; Δ is computed
    only for a step beyond the minimiser (Armijo's condition). The full step is taken when
    its slope lies within FULL_STEP·|d0| of zero (and, beyond the minimiser, J decreased
    enough); otherwise the minimiser is bracketed (expanding by EXPAND while still downhill)
    and Δ' driven to within WOLFE·|d0| of zero by geometric bisection across decades and
    Illinois regula falsi within one. None: no step decreases J (a stagnated search).
    """
    evals = 0
    tol = WOLFE * abs(d0)

    def ev(alpha):
        nonlocal evals
        evals += 1
        d = slope(alpha)
        return d if math.isfinite(d) else math.inf

    def decreases(alpha, d):
        """Armijo's condition at a step whose slope is within tolerance."""
        return d <= 0.0 or value(alpha) <= ARMIJO * alpha * d0

    d1 = ev(1.0)
    if abs(d1) <= FULL_STEP * abs(d0) and decreases(1.0, d1):
        return 1.0, evals
    lo, hi = [0.0, d0], [1.0, d1]
    if d1 < 0.0:  # still steeply downhill at the full step: expand
        lo, alpha = [1.0, d1], EXPAND
        while True:
            if alpha > ALPHA_MAX or evals >= LINE_SEARCH_EVALS:
                return lo[0], evals
            d = ev(alpha)
            if d >= 0.0:
                hi = [alpha, d]
                break
            if d >= -tol:
                return alpha, evals
            lo, alpha = [alpha, d], alpha * EXPAND
    kept = 0  # which end regula falsi kept last (Illinois: halve the other's slope)
    while evals < LINE_SEARCH_EVALS:
        a, b = lo[0], hi[0]
        w = b - a
        if w <= 1e-12 * b:
            break
        if a > 0.0 and b > 10.0 * a:
            cand = math.sqrt(a * b)  # decades apart: bisect the logarithm
        else:
            rf = a - lo[1] * w / (hi[1] - lo[1]) if math.isfinite(hi[1]) else math.nan
            if not math.isfinite(rf):
                rf = a + 0.5 * w
            low = 1e-3 * b if a == 0.0 else a + 0.01 * w
            high = 0.5 * b if a == 0.0 else b - 0.01 * w
            cand = min(max(rf, low), high)
        d = ev(cand)
        if abs(d) <= tol and decreases(cand, d):
            return cand, evals
        if d < 0.0:
            lo = [cand, d]
            if kept == 1:
                hi[1] *= 0.5
            kept = 1
        else:
            hi = [cand, d]
            if kept == -1:
                lo[1] *= 0.5
            kept = -1
    return (lo[0], evals) if lo[0] > 0.0 else (None, evals)


def _guess(backend, problem, x0):
    """x0 as a new float64 iterate on the backend, its outer layer the boundary values."""
    x0 = as_real_array(x0, "x0", problem.grid.shape)
    if not bool(array_module(x0).isfinite(x0).all()):
        raise InputError("x0 must be finite")
    u = backend.asarray(x0, np.float64)
    if problem.boundary == "dirichlet":
        g = backend.asarray(fixed_values(problem), np.float64)
        inner = (slice(1, -1),) * 3
        g[inner] = u[inner]
        return g
    return backend.copy(u)  # the iterate is updated in place: never the caller's array


def _forcing(fnorm, previous, eta_previous, target):
    """Eisenstat–Walker choice 2 with its safeguard, within [target/2‖F‖, ETA_MAX]."""
    if previous is None:
        eta = ETA_MAX
    else:
        eta = EW_GAMMA * (fnorm / previous) ** 2
        floor = EW_GAMMA * eta_previous**2
        if floor > 0.1:
            eta = max(eta, floor)
    eta = min(eta, ETA_MAX)
    return max(eta, 0.5 * target / fnorm, ETA_MIN)


def solve_newton(solver, backend, problem, method_name: str, x0=None) -> NewtonOutcome:
    """Solve the nonlinear problem by the globalised inexact Newton method (module docstring).

    Parameters
    ----------
    solver : Solver
        Supplies ``rtol``, ``atol``, ``maxiter`` (linear iterations of all steps together),
        ``newton_maxiter``, ``dtype``, ``refine``, ``check_every``, ``callback`` (called as
        ``callback(newton_step, ‖F‖/‖b‖)`` after every step) and ``make_method``.
    backend : Backend
    problem : Problem
        Nonlinear, with salt.
    method_name : str
        The linear method of the steps.
    x0 : array, optional
        Initial φ_rf (never modified; its outer layer replaced by the boundary values).
    """
    # the array code below runs on the backend's stream (CuPy), ordered with its kernels
    with backend.stream_context():
        start = time.perf_counter()
        eq = _Equation.of_problem(backend, problem)
        dtype = np.dtype(solver.dtype)
        refine = bool(solver.refine) and dtype == np.float32
        lin = eq.lin
        checked = Stencil(lin.cx, lin.cy, lin.cz, lin.diag, lin.b, eq.periodic, False)
        st = checked
        if dtype != np.float64:
            st = Stencil(*(backend.asarray(a, dtype) for a in (lin.cx, lin.cy, lin.cz,
                         lin.diag, lin.b)), eq.periodic, False)  # fmt: skip
            if not refine:
                checked = st
        # diag, b and κ̄²_eff are rewritten each step, in the linearised stencil's own diag and
        # b (kept nowhere else: one grid array each less)
        system = NewtonStepSystem(backend, problem, st, checked, backend.copy(eq.k2))
        u = None if x0 is None else _guess(backend, problem, x0)
        out = _iterate(solver, eq, system, st, system.kappa2, method_name, u, start)
        return out[0]


def solve_newton_stack(solver, backend, problems, method_name: str, x0=None) -> list:
    """Solve B nonlinear Dirichlet problems of one shape and spacing as one stack.

    The blocks' equations are independent, so F and the Jacobian are theirs side by side and
    the functional J is their sum: one Newton iteration on the stack is each block's Newton
    iteration, with one line search along the stacked step (on the sum of the blocks' J) and
    each block's own forcing term and threshold (its linear solves stop on its own residual).
    It stops when every block meets ``max(rtol·‖b_k‖, atol)``.

    Parameters
    ----------
    solver : Solver
        As :func:`solve_newton`.
    backend : Backend
    problems : sequence of Problem
        Nonlinear, with salt, Dirichlet, of one shape, spacing, temperature and valence.
    method_name : {"multigrid", "sor", "jacobi"}
        The stack's linear method.
    x0 : sequence of arrays or None, optional
        Initial φ_rf per problem (entries may be None); never modified.

    Returns
    -------
    list of NewtonOutcome
        One per problem: its φ_rf, reason, ‖F_k‖/‖b_k‖ history and capped count; the Newton
        steps, linear iterations and times are the stack's.
    """
    problems = list(problems)
    p0 = problems[0]
    for p in problems:
        if p.boundary != "dirichlet" or not (p.nonlinear and p.has_salt):
            raise InputError("a nonlinear stack takes nonlinear Dirichlet problems with salt")
        if (p.grid.shape, p.grid.spacing, p.temperature, p.ion_valence) != (
            p0.grid.shape, p0.grid.spacing, p0.temperature, p0.ion_valence
        ):  # fmt: skip
            raise InputError("a nonlinear stack takes problems of one shape, spacing, "
                             "temperature and ion valence")  # fmt: skip
    with backend.stream_context():
        start = time.perf_counter()
        system = LinearSystem.stack(backend, p0.grid.shape, p0.grid.spacing, len(problems),
                                    solver.dtype, solver.refine,
                                    unlifted=method_name == "multigrid")  # fmt: skip
        system.assemble(problems, x0)
        guessed = x0 is not None and any(g is not None for g in x0)
        # the iterate is updated in place: a float64 copy of the assembled guesses, never x
        u = backend.copy(backend.asarray(system.x, np.float64)) if guessed else None
        eq = _Equation.of_stack(backend, system, problems)
        kappa2 = system.unlifted[3] if system.unlifted is not None else None
        outs = _iterate(solver, eq, system, system.st, kappa2, method_name, u, start)
        phis = backend.unstack(outs[0].phi_rf, system.fixed, system.block_shape, system.stride,
                               system.n_blocks)  # fmt: skip
        for k, out in enumerate(outs):
            out.phi_rf = phis[k]
        return outs


def _iterate(solver, eq, system, st, kappa2, method_name, u, start):
    """The Newton iteration on ``eq`` with its steps solved on ``system`` (one or B blocks).

    ``st`` is the stencil the linear method sweeps (float32 or the float64 one), ``kappa2``
    where the effective κ̄² of the coarse levels is written (None: no hierarchy), ``u`` the
    float64 start (None: the linearised solve). Returns one NewtonOutcome per block (their
    ``phi_rf`` all the stacked iterate).
    """
    be, xp = eq.backend, eq.xp
    f64 = np.float64
    n = eq.n_blocks
    lin = eq.lin
    checked = system.checked
    diag64, b64 = lin.diag, lin.b
    targets = np.maximum(solver.rtol * eq.bnorms, solver.atol)
    newton_maxiter = NEWTON_MAXITER if solver.newton_maxiter is None else solver.newton_maxiter
    method = solver.make_method(method_name)
    budget = solver.maxiter  # linear iterations of all solves together (None: no cap)
    iterations = 0
    # wall times: every step ends in a norm read back to the host, so no extra synchronisation
    laps = [start]
    start_seconds = 0.0

    def lap():
        """Seconds since the last lap (or the start)."""
        laps.append(time.perf_counter())
        return laps[-1] - laps[-2]

    def linear_solve(thresholds):
        """Solve the system until block k's residual is at most ``thresholds[k]``."""
        nonlocal iterations
        system.bnorms = np.asarray(thresholds, dtype=f64)
        system.guessed = [False] * n
        remaining = None if budget is None else budget - iterations
        out = system.solve(method, rtol=1.0, atol=0.0, maxiter=remaining,
                           check_every=solver.check_every)  # fmt: skip
        iterations += out.iterations
        return out, (system.x if system.x.dtype == f64 else be.asarray(system.x, f64))

    def copy_to_sweeps():
        """The float32 stencil the method sweeps takes the new diag and b."""
        if st is not checked or st.dtype != f64:
            xp.copyto(st.diag, diag64, casting="unsafe")
            xp.copyto(st.b, b64, casting="unsafe")

    def outcome(u, reason, history, steps=(), capped=None, converged=None):
        be.synchronize()
        capped = np.zeros(n, dtype=np.int64) if capped is None else capped
        converged = np.zeros(n, dtype=bool) if converged is None else converged
        seconds = time.perf_counter() - start
        outs = []
        for k in range(n):
            if converged[k]:
                why = "capped" if capped[k] else "converged"
            else:
                why = "maxiter" if reason == "converged" else reason  # others not yet there
            outs.append(NewtonOutcome(u, why, why == "converged", len(steps), iterations,
                                      [h[k] for h in history], list(steps), int(capped[k]),
                                      method.name, getattr(method, "omega", None), seconds,
                                      start_seconds))  # fmt: skip
        return outs

    # ---- the start
    if u is None and not (eq.bnorms > 0).any():  # no charges, zero boundary values: φ = 0
        u = eq.fixed()
    elif u is None:
        # the linearised equation (the system holds it now) is the Newton step from φ = 0 in
        # the ion-accessible region, where sinh is its own linearisation
        if system.n_blocks == 1:
            system.x = be.asarray(eq.fixed(), checked.dtype)
        else:
            be.fill(system.x, 0.0)
        copy_to_sweeps()
        out, u_lin = linear_solve(max(START_RTOL, solver.rtol) * eq.bnorms)
        u_lin = be.copy(u_lin)
        if out.reason in ("nan", "diverged"):
            return outcome(u_lin, out.reason, [np.full(n, math.nan)])
        u0 = eq.fixed() - xp.where(eq.k2u > 0, eq.phic, 0.0)
        x = eq.scaled(u0)
        F = eq.gradient(u0, x)
        delta = u_lin - u0
        d0 = float(xp.vdot(F, delta))
        del F
        alpha = None
        if d0 < 0.0:
            alpha, _ = line_search(*eq.line(x, delta, d0), d0)
        u = u_lin if alpha is None or alpha == 1.0 else u0 + alpha * delta
        del u0, delta, x
        if system.n_blocks == 1:
            system.x = be.zeros(lin.shape, checked.dtype)

    # ---- the Newton steps
    history, steps = [], []
    previous = etas = None
    reason = None
    scales = np.where(eq.bnorms > 0, eq.bnorms, 1.0)
    while True:
        x = eq.scaled(u)
        F = eq.gradient(u, x)
        fnorms = eq.norms(F)
        fnorm = float(np.sqrt(np.sum(fnorms**2)))
        if steps:
            steps[-1]["seconds"] = lap()
        else:
            start_seconds = lap()
        history.append(fnorms / scales)
        if solver.callback is not None and steps:
            solver.callback(len(steps), float(np.max(history[-1])))
        if not math.isfinite(fnorm):
            reason = "nan"
            break
        if np.all(fnorms <= targets):
            reason = "converged"
            break
        if len(steps) >= newton_maxiter or (budget is not None and iterations >= budget):
            reason = "maxiter"
            break
        etas = np.array([
            _forcing(fnorms[k], None if previous is None else previous[k],
                     None if etas is None else etas[k], targets[k]) if fnorms[k] > 0 else ETA_MAX
            for k in range(n)
        ])  # fmt: skip
        previous = fnorms
        eq.jacobian(x, diag64, kappa2)
        xp.negative(F, out=b64)
        del F  # −F lives on in b64, which the linear solves only read
        copy_to_sweeps()
        info = {"eta": float(etas.max()) if n > 1 else float(etas[0]), "iterations": 0,
                "retries": 0, "linear_seconds": 0.0}  # fmt: skip
        steps.append(info)
        alpha = None
        tighter = 1.0  # a step that was no descent direction: its η, a hundredfold smaller
        while True:  # an inexact step that is no descent direction is solved again, tighter
            be.fill(system.x, 0.0)
            solving = time.perf_counter()
            out, delta = linear_solve(np.maximum(etas * tighter, ETA_MIN) * fnorms)
            info["linear_seconds"] += time.perf_counter() - solving
            info["iterations"] += out.iterations
            info["linear_reason"] = out.reason
            if out.reason in ("nan", "diverged"):
                reason = out.reason
                break
            d0 = -float(xp.vdot(b64, delta))
            if not math.isfinite(d0):
                reason = "nan"
                break
            if d0 < 0.0:
                alpha, evals = line_search(*eq.line(x, delta, d0), d0)
                info.update(alpha=alpha, line_search_evaluations=evals)
                if alpha is not None:
                    break
            out_of_budget = budget is not None and iterations >= budget
            if info["eta"] <= ETA_MIN or info["retries"] >= RETRIES or out_of_budget:
                reason = "stagnated"
                break
            tighter *= 1e-2
            info["eta"] = max(info["eta"] * 1e-2, ETA_MIN)  # the record: the largest block's
            info["retries"] += 1
        if alpha is None:
            break
        # in place (u is the solve's own array, never the caller's x0), through the work
        # array the line search is done with: no temporary grid array
        xp.multiply(delta, alpha, out=eq.work)
        u += eq.work
        del x  # the next step's x is made from u: never two at once
    converged = fnorms <= targets if reason in ("converged", "maxiter", "stagnated") else None
    capped = eq.beyond_cap(x) if reason == "converged" else None
    return outcome(u, reason, history, steps, capped, converged)


__all__ = [
    "ETA_MAX",
    "NEWTON_MAXITER",
    "NewtonOutcome",
    "NewtonStepSystem",
    "line_search",
    "solve_newton",
    "solve_newton_stack",
]
