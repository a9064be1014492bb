"""The linear system a solve runs on: one problem, or a stack of B problems of one shape.

:class:`LinearSystem` owns everything between the problems and the loop: the stencil (the
sweep dtype) and, under refinement, the float64 operator (one problem's
:class:`~pbsolver.backends.ProblemOperator`, a stack's float64 stencil), the iterate, each
block's ‖b‖ and threshold, the stopping measure, the multigrid hierarchy and the work
buffers. :meth:`LinearSystem.solve` runs
the :class:`~pbsolver.solving.loop.IterationLoop` with a method on it and reports every block's
own outcome. :class:`~pbsolver.Solver` (one problem), :func:`~pbsolver.solve_batch` (a stack)
and the MD engine (:mod:`pbsolver.md.engine`, a stack its kernels assemble) all solve through
it.

Two ways to make one:

:meth:`LinearSystem.for_problem`
    One problem of any boundary: the problem's own stencil, the fixed boundary values in the
    iterate; the multigrid hierarchy is built for the grid.
:meth:`LinearSystem.stack`
    B Dirichlet problems of one shape and spacing as one block-diagonal system
    (:mod:`pbsolver.backends.stacking` describes the layout): a workspace kept between solves,
    filled by :meth:`LinearSystem.assemble` (or by the caller's own kernels); the hierarchy
    coarsens every block separately and is rebuilt in place for each new stack, so a GPU
    backend replays its captured work.

Stopping rule of a stack: with t_k = max(rtol‖b_k‖₂, atol) each block's own threshold and
t = min_k t_k, the loop's measure is max_k (t / t_k)‖r_k‖₂
(:meth:`pbsolver.backends.Backend.block_residual_norm`), so "measure ≤ t" holds exactly when
‖r_k‖₂ ≤ t_k for every block k (stopping on ‖r_stack‖₂ ≤ t instead would over-solve B similar
problems by up to √B). Each block's own final residual is computed and reported.
"""

from __future__ import annotations

import copy
import dataclasses
import time
from dataclasses import dataclass, field

import numpy as np

from pbsolver.arrays import array_module, as_real_array
from pbsolver.backends import Stencil
from pbsolver.backends.stacking import stride_for
from pbsolver.exceptions import InputError
from pbsolver.multigrid.builders import GRID_ONLY, grid_hierarchy, stack_hierarchy
from pbsolver.operator import fixed_values, zero_outer_layer
from pbsolver.solving.loop import IterationLoop
from pbsolver.solving.methods import optimal_sor_omega


@dataclass
class SystemOutcome:
    """What :meth:`LinearSystem.solve` returns (per-block arrays are NumPy, length B).

    Attributes
    ----------
    iterations : int
        Steps (sweeps or cycles) of the loop; every block got them all.
    reason : str
        The loop's stop reason ("zero rhs" when every right-hand side is zero).
    history : list of float
        The loop's measure over the scale of its smallest threshold's block at every check
        (for one problem: its relative residual).
    initial, final : ndarray
        Each block's relative residual at the initial guess and at the end (float64 operator).
    converged : ndarray of bool
        Whether each block met its own threshold.
    method : str
    omega : float or None
    seconds : float
    """

    iterations: int
    reason: str
    history: list
    initial: np.ndarray
    final: np.ndarray
    converged: np.ndarray
    method: str
    omega: float | None
    seconds: float


class LinearSystem:
    """One problem, or B problems of one shape, as one linear system on a backend.

    Make one with :meth:`for_problem` or :meth:`stack`, then :meth:`solve`.

    Attributes
    ----------
    backend : Backend
    st : Stencil
        The system the methods iterate on (the solve's dtype).
    checked : Stencil or ProblemOperator
        The float64 system that decides convergence (``st`` itself without refinement; one
        problem's :class:`~pbsolver.backends.ProblemOperator` under refinement, a stack's
        float64 stencil).
    x : array
        The iterate (``checked``'s dtype).
    block_shape, spacing : tuple
        One block's grid shape and spacing (the problem's, for one problem).
    n_blocks, stride : int
        Blocks, and planes a block occupies along x.
    kept : bool
        Whether the buffers are a workspace kept between solves (captured work is filed under
        their addresses and found again).
    bnorms : ndarray
        ‖b_k‖₂ of every block over its unknowns.
    guessed : list of bool
        Whether each block starts from a given guess.
    fixed : array or None
        A stack's boundary values on every block's outer layer (zero elsewhere).
    unlifted : tuple of 4 arrays or None
        A stack's unlifted faces (x, y, z) and κ̄², float64: its hierarchy's inputs.
    """

    def __init__(self, backend, st, checked, x, *, block_shape, spacing, n_blocks, stride, kept):
        self.backend = backend
        self.st, self.checked, self.x = st, checked, x
        self.block_shape = tuple(int(n) for n in block_shape)
        self.spacing = tuple(float(h) for h in spacing)
        self.n_blocks, self.stride, self.kept = int(n_blocks), int(stride), bool(kept)
        self.problem = None
        self._zero_inside = None  # one problem's boundary values with zero inside
        self.bnorms = np.zeros(self.n_blocks)
        self.guessed = [False] * self.n_blocks
        self.fixed = None
        self.unlifted = None
        self.work = None
        self.r = None
        self.weights = None
        self._hierarchy = None
        self._scratch = {}
        self._workspace = None  # one problem's kept GridWorkspace

    # ------------------------------------------------------------------ construction
    @classmethod
    def for_problem(cls, backend, problem, dtype=np.float32, refine=True, x0=None, keep=False):
        """The system of one problem (any boundary); ``x0`` is copied, never modified.

        With ``refine`` and float32 ``dtype`` the iterate is a float64 accumulator from the
        start (x0 included: rounding it to float32 would put its residual at float32's floor).

        ``keep``: where the backend replays captured work (``Backend.CAPTURES``) and the solve
        is refined, the sweep stencil, the correction, the hierarchies and the methods' work
        arrays are a workspace kept for the next problem of the same grid, boundary and salt
        (:func:`grid_workspace`), whose cycles then replay what this one recorded. The
        iterate and the float64 operator are the problem's own.
        """
        dtype = np.dtype(dtype)
        refine = bool(refine) and dtype == np.float32
        kept = None
        if refine and keep and backend.CAPTURES:
            kept = grid_workspace(backend, problem, dtype)
        if refine:
            # the float64 operator read from the problem's own maps: one float64 array (b), not
            # a second, float64 stencil (see pbsolver.backends.ProblemOperator)
            if kept is not None:
                st, checked = backend.refined_system(problem, dtype, into=kept.st)
                kept.st = st
            else:
                st, checked = backend.refined_system(problem, dtype)
        else:
            st = checked = backend.sweep_stencil(problem, dtype)
        fixed = fixed_values(problem, checked.dtype)
        if x0 is None:
            zero_inside = x = backend.take(fixed, checked.dtype)
        else:
            zero_inside = backend.asarray(fixed, checked.dtype)
            x = _guess(backend, problem, x0, fixed, checked.dtype)
        del fixed  # the host array is the backend's now, or not needed past here
        system = cls(backend, st, checked, x, block_shape=problem.grid.shape,
                     spacing=problem.grid.spacing, n_blocks=1, stride=problem.grid.shape[0],
                     kept=kept is not None)  # fmt: skip
        system.problem = problem
        if refine:
            # the refinement phases' r and e, made once: every phase's right-hand side is its
            # r, so the sweep stencil's own b (never read under refinement) is that buffer;
            # e is made by solve() after the method's set-up (not beside its temporaries)
            system.work = (st.b, None if kept is None else kept.e)
        if kept is not None:
            system._workspace = kept
            system._scratch = kept.scratch
        # ‖b‖ of the system over the unknowns: the residual with zero inside
        system.bnorms = np.array([backend.residual_norm(checked, zero_inside)])
        system.guessed = [x0 is not None]
        system._zero_inside = zero_inside
        return system

    def with_rhs(self, b, x0=None):
        """A system of the same operator with right-hand side ``b`` and zero boundary values.

        One problem's system only. The new system shares this one's stencils, multigrid
        hierarchy, refinement buffers and work arrays (so the two are solved one after the
        other, never at once) and has its own iterate: zero, or a copy of ``x0`` with a zero
        outer layer on a Dirichlet grid. The forces' adjoint solve (same operator, another
        right-hand side) uses it instead of building the stencils and hierarchy again.

        Parameters
        ----------
        b : array (nx, ny, nz)
            Right-hand side on the unknowns, NumPy or CuPy (copied in float64; its outer layer
            is not read on a Dirichlet grid: those nodes are fixed).
        x0 : array, optional
            Initial guess (never modified).
        """
        if self.problem is None:
            raise InputError("with_rhs() takes one problem's system, not a stack")
        be = self.backend
        problem = copy.copy(self.problem)
        problem.boundary_values = None
        xp = array_module(b)
        rhs = xp.array(b, dtype=xp.float64)  # the system's own copy, zero on the fixed nodes
        if problem.boundary != "periodic":
            zero_outer_layer(rhs)
        if self.checked is self.st:
            st = checked = dataclasses.replace(self.st, b=be.asarray(rhs, self.st.dtype))
        else:  # refined: the float32 stencil's b is the phases' residual buffer, never b
            st, checked = self.st, dataclasses.replace(self.checked, b=be.take(rhs, np.float64))
        fixed = fixed_values(problem, checked.dtype)  # zero
        zero_inside = be.take(fixed, checked.dtype)
        x = zero_inside if x0 is None else _guess(be, problem, x0, fixed, checked.dtype)
        out = LinearSystem(be, st, checked, x, block_shape=self.block_shape,
                           spacing=self.spacing, n_blocks=1, stride=self.stride,
                           kept=self.kept)  # fmt: skip
        out.problem = problem
        out.work, out._workspace, out._scratch = self.work, self._workspace, self._scratch
        out._hierarchy = self._hierarchy
        # ‖b‖ over the unknowns (zero elsewhere), by the backend's own dot: a BLAS call would
        # leave its threads spinning beside the backend's on the CPU
        out.bnorms = np.array([np.sqrt(be.dot(checked.b, checked.b))])
        out.guessed = [x0 is not None]
        out._zero_inside = zero_inside
        return out

    @classmethod
    def stack(cls, backend, block_shape, spacing, n_blocks, dtype=np.float32, refine=True,
              unlifted=False):  # fmt: skip
        """An empty stack of ``n_blocks`` Dirichlet blocks (a workspace kept between solves).

        Fill it with :meth:`assemble`, or write its arrays (``checked``, ``st``, ``x``,
        ``unlifted``) with kernels of one's own and set :attr:`bnorms` and :attr:`guessed`.
        ``unlifted``: keep the blocks' unlifted faces and κ̄² (a multigrid hierarchy's inputs).
        """
        dtype = np.dtype(dtype)
        refine = bool(refine) and dtype == np.float32
        block_shape = tuple(int(n) for n in block_shape)
        stride = stride_for(block_shape[0])
        shape = (int(n_blocks) * stride, *block_shape[1:])
        st = Stencil(*(backend.zeros(shape, dtype) for _ in range(5)), False, False)
        checked = st
        if refine:
            checked = Stencil(*(backend.zeros(shape, np.float64) for _ in range(5)), False, False)
        x = backend.zeros(shape, checked.dtype)
        system = cls(backend, st, checked, x, block_shape=block_shape, spacing=spacing,
                     n_blocks=n_blocks, stride=stride, kept=True)  # fmt: skip
        system.r = backend.zeros(shape, np.float64)
        system.fixed = backend.zeros(shape, np.float64)
        system.weights = backend.zeros((int(n_blocks),), np.float64)
        if refine:
            system.work = (backend.zeros(shape, dtype), backend.zeros(shape, dtype))
        if unlifted:
            system.unlifted = tuple(backend.zeros(shape, np.float64) for _ in range(4))
        return system

    def assemble(self, problems, x0=None) -> None:
        """Write the stack of ``problems`` (Dirichlet, of the stack's block shape) into it."""
        if self.problem is not None:
            raise InputError("assemble() fills a stack; this system is one problem's")
        if len(problems) != self.n_blocks:
            raise InputError(f"{len(problems)} problems for a stack of {self.n_blocks} blocks")
        be = self.backend
        arrays = (self.checked.cx, self.checked.cy, self.checked.cz, self.checked.diag,
                  self.checked.b)  # fmt: skip
        arrays32 = (self.st.cx, self.st.cy, self.st.cz, self.st.diag, self.st.b)
        be.assemble_stack(problems, x0, self.stride, arrays, arrays32, self.unlifted, self.fixed,
                          self.x)  # fmt: skip
        self.bnorms = be.block_norms(self.checked.b, self.n_blocks)
        self.guessed = [g is not None for g in (x0 or [None] * self.n_blocks)]

    # ------------------------------------------------------------------ for the methods
    def hierarchy(self, given: dict, defaults: dict):
        """The system's multigrid hierarchy with options ``given`` (the rest: defaults).

        One problem: built for its grid (the method's grid ``defaults`` where ``given`` is
        silent, then the builder's). A stack:
        built once for its buffers with the stack's defaults, its coarse operators rebuilt
        from :attr:`unlifted` on every call.
        """
        if self.problem is not None:
            options = {**defaults, **given}
            kept = self._workspace
            key = tuple(sorted(options.items()))
            if kept is None and self._hierarchy is not None and self._hierarchy[0] == key:
                return self._hierarchy[1]  # this operator's, built by an earlier solve
            if kept is None or key not in kept.hierarchies:
                h = grid_hierarchy(self.backend, self.st, self.spacing, self.problem.kappa2,
                                   **options)  # fmt: skip
                if kept is not None:
                    kept.hierarchies[key] = h
                else:  # kept for a system of the same operator (with_rhs)
                    self._hierarchy = (key, h)
                return h
            # a kept hierarchy: its levels and transfers are this grid's; the coarse operators
            # are rebuilt in place from this problem's faces (the kept stencil's) and κ̄²
            h = kept.hierarchies[key]
            h.inputs = (*h.inputs[:3], _on(self.st.cx, self.problem.kappa2))
            h.rebuild()
            return h
        bad = sorted(set(given) & set(GRID_ONLY))
        if bad:
            raise InputError(
                f"multigrid option {bad[0]!r} does not apply to a stack of blocks (a stack "
                "always coarsens to one unknown a block)"
            )
        if self.unlifted is None:
            raise InputError("this stack keeps no unlifted faces: make it with unlifted=True")
        key = tuple(sorted(given.items()))
        if self._hierarchy is None or self._hierarchy[0] != key:
            h = stack_hierarchy(self.backend, self.st, self.block_shape, self.spacing,
                                self.stride, inputs=self.unlifted, **given)  # fmt: skip
            self._hierarchy = (key, h)
        h = self._hierarchy[1]
        h.rebuild()
        return h

    def scratch(self, name: str, count: int, dtype) -> list:
        """``count`` work arrays of the system's shape (kept with a kept workspace)."""
        key = (name, count, np.dtype(dtype).str)
        arrays = self._scratch.get(key) if self.kept else None
        if arrays is None:
            arrays = [self.backend.zeros(self.st.shape, dtype) for _ in range(count)]
            if self.kept:
                self._scratch[key] = arrays
        return arrays

    def sor_omega(self) -> float:
        """SOR's ω for this system (:func:`~pbsolver.solving.methods.optimal_sor_omega`)."""
        p = self.problem
        if p is None:  # a stack: each block's own Dirichlet grid
            return optimal_sor_omega(self.block_shape, self.spacing, False)
        periodic = p.boundary == "periodic"
        k2_sum = diag_sum = 0.0
        if periodic and p.kappa2 is not None:
            weights = [1.0 / (h * h) for h in self.spacing]
            faces = p.face_permittivities()
            diag_sum = sum(2.0 * float(f.sum()) * w for f, w in zip(faces, weights, strict=True))
            k2_sum = float(p.kappa2.sum())
        return optimal_sor_omega(self.block_shape, self.spacing, periodic, k2_sum, diag_sum)

    # ------------------------------------------------------------------ the solve
    def solve(self, method, *, rtol, atol=0.0, maxiter=None, check_every=None, callback=None):
        """Run ``method`` on the system until every block meets its own threshold.

        Parameters
        ----------
        method
            A method object (:mod:`pbsolver.solving.methods`), not yet set up.
        rtol, atol : float
            Block k's threshold is ``max(rtol·‖b_k‖, atol)``.
        maxiter, check_every : int, optional
            Default: the method's.
        callback : callable, optional
            ``callback(iteration, measure / scale)`` at every check (see
            :attr:`SystemOutcome.history`).

        Returns
        -------
        SystemOutcome
            The solution is in :attr:`x` (see :meth:`solution`).
        """
        start = time.perf_counter()
        be, n = self.backend, self.n_blocks
        bnorms = np.asarray(self.bnorms, dtype=np.float64)
        nonzero = bnorms > 0.0
        if not nonzero.any():  # every right-hand side is zero: the boundary values are the answer
            self._zero_solution()
            ones = np.ones(n, dtype=bool)
            return SystemOutcome(0, "zero rhs", [0.0], np.zeros(n), np.zeros(n), ones,
                                 method.name, getattr(method, "omega", None),
                                 time.perf_counter() - start)  # fmt: skip
        guessed = list(self.guessed)
        for k in np.flatnonzero(~nonzero & np.asarray(guessed, dtype=bool)):
            # a zero right-hand side's answer is zero inside, whatever the guess: the
            # stopping measure does not watch such a block (it has no threshold of its own)
            be.fill(self.x[k * self.stride : (k + 1) * self.stride], 0.0)
            guessed[k] = False
        thresholds = np.maximum(rtol * bnorms, atol)
        watched = np.flatnonzero(nonzero)
        smallest = watched[np.argmin(thresholds[watched])]
        threshold = float(thresholds[smallest])
        norm = None
        if n > 1:
            safe = np.where(thresholds > 0.0, thresholds, 1.0)
            be.set_values(self.weights, np.where(thresholds > 0.0, threshold / safe, 0.0))
            norm = self._block_measure
        method.setup(self)
        if self.work is not None and self.work[1] is None:
            self.work = (self.work[0], be.empty(self.st.shape, self.st.dtype))
            if self._workspace is not None:
                self._workspace.e = self.work[1]
        if maxiter is None:
            maxiter = method.default_maxiter(self.st.shape)
        check_every = check_every or method.check_every
        initial = np.where(nonzero, 1.0, 0.0)
        if n > 1 and any(guessed):  # each guessed block's own initial residual
            be.residual(self.checked, self.x, self.r)
            r0 = be.block_norms(self.r, n) / np.where(nonzero, bnorms, 1.0)
            initial = np.where(guessed, r0, initial)
        loop = IterationLoop(0.0, threshold, maxiter, check_every, callback, norm)
        loop.run(be, method, self.st, self.x, float(bnorms[smallest]), checked=self.checked,
                 work=self.work)  # fmt: skip
        if n == 1:
            initial = np.array([loop.history[0]])
            final = np.array([loop.history[-1]])
            converged = np.array([loop.reason == "converged"])
            if self.st.singular:
                be.remove_mean(self.x)
            if self._workspace is not None:
                self._workspace.let_go()
        else:  # every block's own final residual, in float64
            be.residual(self.checked, self.x, self.r)
            final_norms = be.block_norms(self.r, n)
            final = np.where(nonzero, final_norms / np.where(nonzero, bnorms, 1.0), 0.0)
            converged = (final_norms <= thresholds) | ~nonzero
        return SystemOutcome(loop.iterations, loop.reason, list(loop.history), initial, final,
                             converged, method.name, getattr(method, "omega", None),
                             time.perf_counter() - start)  # fmt: skip

    def _block_measure(self, st, x):
        return self.backend.block_residual_norm(st, x, self.r, self.n_blocks, self.weights)

    def _zero_solution(self):
        if self.problem is not None:
            self.x = self._zero_inside
        else:
            self.backend.fill(self.x, 0.0)

    # ------------------------------------------------------------------ results
    def solution(self, like):
        """The solution in the array library of ``like``.

        One problem: its φ. A stack: a new ``(B, nx, ny, nz)`` array of every block inside its
        boundary values.
        """
        be = self.backend
        if self.problem is not None:
            return be.to_caller(self.x, like)
        out = be.unstack(self.x, self.fixed, self.block_shape, self.stride, self.n_blocks)
        return be.to_caller(out, like)


def _guess(backend, problem, x0, fixed, dtype):
    """x0 as the iterate: copied, finite, its outer layer replaced by the boundary values."""
    x0 = as_real_array(x0, "x0", problem.grid.shape)
    xp = array_module(x0)
    if not bool(xp.isfinite(x0).all()):
        raise InputError("x0 must be finite")
    x = backend.asarray(x0, dtype)
    if problem.boundary == "dirichlet":  # the six outer planes (no whole-grid copy)
        for axis in range(3):
            for end in (0, -1):
                plane = tuple(end if a == axis else slice(None) for a in range(3))
                x[plane] = backend.asarray(fixed[plane], dtype)
    return x


def _on(like, a):
    """``a`` (or None) in the array library of ``like``."""
    return None if a is None else array_module(like).asarray(a)


@dataclass
class GridWorkspace:
    """What one problem's refined solve keeps for the next problem of its grid.

    See :meth:`LinearSystem.for_problem`. Attributes: its ``backend``, the sweep stencil ``st``
    (None until the first problem's is made), the correction ``e``, the multigrid
    ``hierarchies`` by their options and the methods' work arrays (``scratch``).
    """

    backend: object = None
    st: object = None
    e: object = None
    hierarchies: dict = field(default_factory=dict)
    scratch: dict = field(default_factory=dict)

    def let_go(self) -> None:
        """Drop the solved problem's κ̄² from the hierarchies' inputs.

        It is a device copy of a host map, or the caller's own array; the next problem's
        replaces it before a rebuild.
        """
        for h in self.hierarchies.values():
            h.inputs = (*h.inputs[:3], None)


_GRID_WORKSPACE: dict = {}


def grid_workspace(backend, problem, dtype) -> GridWorkspace:
    """The kept :class:`GridWorkspace` for ``problem``'s grid, boundary and salt on ``backend``.

    One is kept, for the last grid solved: a problem of another grid drops it before its own
    arrays are made, so two grids' workspaces are never held at once.
    """
    g = problem.grid
    key = (id(backend), g.shape, tuple(g.spacing), problem.boundary,
           problem.kappa2 is not None, np.dtype(dtype).str)  # fmt: skip
    kept = _GRID_WORKSPACE.get(key)
    if kept is None or kept.backend is not backend:  # (an id reused by a new backend)
        _GRID_WORKSPACE.clear()
        kept = _GRID_WORKSPACE[key] = GridWorkspace(backend)
    return kept


#: Stack workspaces kept between calls of :func:`workspace`, least recently used dropped first:
#: a later call on a stack of the same shape reuses the buffers (and their captured work).
WORKSPACE_CACHE = 2
_WORKSPACES: dict = {}


def workspace(backend, block_shape, spacing, n_blocks, dtype, refine, unlifted):
    """A kept :meth:`LinearSystem.stack` workspace for these parameters (made once)."""
    key = (id(backend), tuple(block_shape), tuple(spacing), int(n_blocks), np.dtype(dtype).str,
           bool(refine), bool(unlifted))  # fmt: skip
    system = _WORKSPACES.pop(key, None)
    if system is None or system.backend is not backend:
        system = LinearSystem.stack(backend, block_shape, spacing, n_blocks, dtype, refine,
                                    unlifted)  # fmt: skip
    _WORKSPACES[key] = system  # (re)inserted last: the most recently used
    while len(_WORKSPACES) > WORKSPACE_CACHE:
        _WORKSPACES.pop(next(iter(_WORKSPACES)))
    return system


def clear_workspaces() -> None:
    """Drop the workspaces kept between solves, stacks' and one grid's (frees their memory)."""
    _WORKSPACES.clear()
    _GRID_WORKSPACE.clear()


__all__ = [
    "GridWorkspace",
    "LinearSystem",
    "SystemOutcome",
    "WORKSPACE_CACHE",
    "clear_workspaces",
    "grid_workspace",
    "workspace",
]
