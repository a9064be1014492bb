"""Many independent problems solved together: :func:`solve_batch`.

Small grids leave most of a GPU idle: a 65³ red–black sweep is a few microseconds of memory
traffic but tens of microseconds of launch and synchronisation. Three ways to run B problems:

``"loop"``
    One :meth:`Solver.solve` after the other (the reference; the CPU default, where a stacked
    kernel gains nothing: every core is already busy on one grid).
``"stacked"``
    The B problems become one block-diagonal system on a ``(B·n'x, ny, nz)`` grid solved by one
    :class:`~pbsolver.Solver` loop, so each kernel launch (and each CUDA-graph replay) serves all
    B problems. Each problem's fixed Dirichlet values are moved to its right-hand side
    ("lifting": ``b ← b − A φ₀`` on the unknowns), every face that touches a fixed node is set to
    zero and the diagonal is stored, so the former boundary nodes are decoupled (their equation
    is ``1·x = 0``) and neighbouring blocks never see each other. ``n'x = nx`` rounded up to an
    even count (one decoupled padding plane when ``nx`` is odd) keeps every block's red–black
    colouring identical to its own grid's, so a block is swept exactly as its problem alone
    would be. Dirichlet problems of one shape and spacing, methods ``"multigrid"`` (a
    hierarchy that coarsens every block separately, :mod:`pbsolver.stacked_multigrid`; the
    default), ``"sor"`` and ``"jacobi"``.
``"streams"``
    On the CUDA backend: one backend (hence one CUDA stream and its own graph cache) per worker
    thread, each solving its share of the problems with the ordinary solver, so the GPU overlaps
    the streams' kernels. On the CPU this is the loop (numba's parallel kernels are not called
    from several threads).

Stopping rule of a stack: with t_k = max(rtol‖b_k‖₂, atol) each problem's own threshold and
t = min_k t_k, the loop's measure is max_k (t / t_k)‖r_k‖₂ (:func:`stack_norm`), so "measure ≤ t"
holds exactly when ‖r_k‖₂ ≤ t_k for every problem k. (Stopping on ‖r_stack‖₂ ≤ t instead
would over-solve B similar problems by up to √B.) Each problem's own final residual is computed
and reported in its result.

On CUDA the stack is assembled on the device (:mod:`pbsolver.backends.cuda.stack_kernels`:
one launch for all problems); :func:`stack_problems` is the array reference (and the CPU path).
"""

from __future__ import annotations

import dataclasses
import time
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import numpy as np

from pbsolver.arrays import array_module, to_numpy
from pbsolver.backends import Stencil, get_backend
from pbsolver.exceptions import ConvergenceError, InputError
from pbsolver.problem import Problem
from pbsolver.solve.solver import Solver, SolveResult, _Loop, _methods

MODES = ("auto", "loop", "stacked", "streams")
#: Methods the stacked path can run (multigrid through a block-by-block hierarchy).
STACKABLE_METHODS = ("multigrid", "sor", "jacobi")
#: Default number of streams (worker threads) of the "streams" mode.
DEFAULT_STREAMS = 8


def solve_batch(
    problems, x0=None, *, mode="auto", max_stack=None, streams=None, **solver_options
) -> list[SolveResult]:
    """Solve many independent problems, together where the backend profits from it.

    Parameters
    ----------
    problems : sequence of Problem
        Any problems; those of one shape, spacing and Dirichlet boundary can be stacked.
    x0 : sequence of arrays or None, optional
        Initial guesses, one per problem (entries may be None); never modified.
    mode : {"auto", "loop", "stacked", "streams"}
        See the module docstring. ``"auto"``: on the CPU ``"loop"``; on CUDA ``"stacked"`` for
        groups of two or more stackable problems (method "auto", "multigrid", "sor" or
        "jacobi"), else ``"streams"``. ``"stacked"`` stacks what can be stacked and loops
        over the rest; ``"streams"`` on the CPU is the loop run through one worker.
    max_stack : int, optional
        Most problems in one stack (memory: about 100 bytes a node per stacked problem in
        float32 with refinement, 130 with multigrid). Default: all of a group.
    streams : int, optional
        Worker threads / CUDA streams of ``"streams"`` (default 8, at most the batch size).
    **solver_options
        Options of :class:`~pbsolver.Solver` (``method``, ``backend``, ``rtol``, ``atol``,
        ``maxiter``, ``dtype``, ``refine``, ``strict``, ``omega``, ``check_every``, ...).
        ``method="auto"`` means multigrid; a stack's multigrid cycle defaults to
        :data:`pbsolver.stacked_multigrid.STACK_CYCLE` (``cycle``, ``presmooth``,
        ``postsmooth`` and ``omega`` override it).

    Returns
    -------
    list of SolveResult
        In the order of ``problems``. For stacked problems ``iterations`` is the stack's,
        ``residual_norms`` is ``[initial, final]`` of the problem's own relative residual,
        ``seconds`` the stack's wall time divided by its size, and ``extra`` holds
        ``batch="stacked"``, ``batch_size``, ``batch_seconds`` and ``stack_residual_norms``,
        the loop's history: the worst problem's relative residual when rtol sets the thresholds
        (the stopping measure over the smallest threshold's ‖b‖).

    Raises
    ------
    InputError
        Not a sequence of problems, x0 of the wrong length, unknown mode, or ``"stacked"``
        asked for with a method that cannot be stacked.
    ConvergenceError
        With ``strict=True``, when any problem did not converge.

    Examples
    --------
    >>> import numpy as np, pbsolver as pb
    >>> g = pb.Grid((17, 17, 17), spacing=0.5, origin=(-4, -4, -4))
    >>> r2 = sum(c**2 for c in g.coordinates())
    >>> probs = [pb.Problem(g, np.where(r2 < 9.0, 2.0, 80.0),
    ...                     q * 1389.35457 / (2.0 * np.sqrt(r2 + 0.25)), 2.0)
    ...          for q in (1.0, -0.5, 0.25)]
    >>> results = pb.solve_batch(probs, mode="stacked", method="sor", backend="cpu")
    >>> all(r.converged for r in results)
    True
    """
    problems = list(problems) if not isinstance(problems, Problem) else None
    if problems is None or not problems:
        raise InputError("solve_batch needs a non-empty sequence of pbsolver.Problem")
    for i, p in enumerate(problems):
        if not isinstance(p, Problem):
            raise InputError(f"problems[{i}] is a {type(p).__name__}, not a pbsolver.Problem")
    if x0 is None:
        x0 = [None] * len(problems)
    else:
        x0 = list(x0)
        if len(x0) != len(problems):
            raise InputError(f"x0 has {len(x0)} entries for {len(problems)} problems")
    if mode not in MODES:
        raise InputError(f"mode must be one of {MODES}, got {mode!r}")
    if max_stack is not None and (not isinstance(max_stack, int) or max_stack < 1):
        raise InputError(f"max_stack must be a positive integer, got {max_stack!r}")
    solver = Solver(**solver_options)
    backend = get_backend(solver.backend_name, like=problems[0].phi_coulomb)
    explicit = solver.method != "auto"
    method = solver.method if explicit else None
    if mode == "stacked" and explicit and method not in STACKABLE_METHODS:
        raise InputError(
            f"mode='stacked' runs methods {STACKABLE_METHODS}, got method={method!r}: "
            "use mode='loop' or 'streams'"
        )
    if mode == "auto":
        if backend.name != "cuda":
            mode = "loop"
        elif method is None or method in STACKABLE_METHODS:
            mode = "stacked"
        else:
            mode = "streams"

    results: list[SolveResult | None] = [None] * len(problems)
    rest = list(range(len(problems)))
    if mode == "stacked":
        stack_solver = solver if explicit else _replace_solver(solver, "multigrid")
        rest = []
        for group in _stack_groups(problems):
            if len(group) < 2:
                rest.extend(group)
                continue
            size = max_stack or len(group)
            for start in range(0, len(group), size):
                chunk = group[start : start + size]
                solved = _solve_stacked(
                    stack_solver, backend, [problems[i] for i in chunk], [x0[i] for i in chunk]
                )
                for i, res in zip(chunk, solved, strict=True):
                    results[i] = res
        rest.sort()
    if rest:
        if mode == "streams":
            solved = _solve_streams(solver, backend, [problems[i] for i in rest],
                                    [x0[i] for i in rest], streams)  # fmt: skip
        else:
            solved = [solver.solve(problems[i], x0=x0[i]) for i in rest]
        for i, res in zip(rest, solved, strict=True):
            results[i] = res
    if solver.strict:
        bad = [i for i, r in enumerate(results) if not r.converged]
        if bad:
            r = results[bad[0]]
            raise ConvergenceError(
                f"{len(bad)} of {len(problems)} problems did not converge; problem {bad[0]}: "
                f"{r.reason} after {r.iterations} iterations, relative residual {r.residual:.3g}",
                r,
            )
    return results


# ---------------------------------------------------------------------- grouping
def _stack_groups(problems) -> list[list[int]]:
    """Indices of problems that can share a stack: Dirichlet, same shape and spacing."""
    groups: dict = {}
    singles = []
    for i, p in enumerate(problems):
        if p.boundary != "dirichlet":
            singles.append([i])
            continue
        key = (p.grid.shape, p.grid.spacing)
        groups.setdefault(key, []).append(i)
    return list(groups.values()) + singles


def _replace_solver(solver: Solver, method: str) -> Solver:
    """A copy of ``solver`` running ``method``."""
    new = Solver.__new__(Solver)
    new.__dict__.update(solver.__dict__)
    new.method = method
    return new


# ---------------------------------------------------------------------- stacked
@dataclasses.dataclass
class StackedSystem:
    """B Dirichlet problems as one block-diagonal system (see the module docstring).

    Attributes
    ----------
    cx, cy, cz, diag, b : ndarray (B·stride, ny, nz), float64
        Lifted face coefficients, stored diagonal (1 on decoupled nodes) and right-hand side,
        in the problems' array library.
    x : ndarray (B·stride, ny, nz), float64
        Initial guess (interior values of each x0, zero elsewhere).
    stride : int
        Planes per block along x (``nx`` rounded up to even).
    bnorms : list of float
        ‖b_k − A_k φ₀_k‖₂ of each problem (its relative residual's denominator).
    fixed : list of arrays
        φ₀_k: each problem's boundary values on its outer layer, zero inside.
    faces : tuple of 3 arrays or None
        With ``unlifted=True``: every block's face coefficients *including* those to its
        outer layer (zero for faces leaving a block) — what a stacked multigrid hierarchy
        builds its coarse operators from.
    kappa2 : array or None
        With ``unlifted=True``: κ̄² of every node (zero without salt).
    guessed : list of bool
        Whether each block started from a given x0 (else from zero).
    """

    cx: object
    cy: object
    cz: object
    diag: object
    b: object
    x: object
    stride: int
    bnorms: list
    fixed: list
    faces: tuple | None = None
    kappa2: object = None
    guessed: list = dataclasses.field(default_factory=list)

    def block(self, k: int, nx: int):
        """Slice of block ``k``'s nodes along x."""
        return slice(k * self.stride, k * self.stride + nx)


def stack_problems(problems, x0=None, unlifted=False) -> StackedSystem:
    """Assemble the block-diagonal system of Dirichlet problems of one shape and spacing.

    Parameters
    ----------
    problems : sequence of Problem
    x0 : sequence of arrays or None, optional
    unlifted : bool
        Also keep the blocks' unlifted faces and κ̄² (for a stacked multigrid hierarchy).

    Returns
    -------
    StackedSystem
    """
    from pbsolver.operator import apply, coefficients, fixed_values, interior_mask, rhs

    p0 = problems[0]
    shape, spacing = p0.grid.shape, p0.grid.spacing
    for i, p in enumerate(problems):
        if p.boundary != "dirichlet":
            raise InputError(f"problem {i} is periodic: only Dirichlet problems can be stacked")
        if p.grid.shape != shape or p.grid.spacing != spacing:
            raise InputError(
                f"problem {i} has shape {p.grid.shape} and spacing {p.grid.spacing}; the stack "
                f"needs {shape} and {spacing}"
            )
    libs = {array_module(p.phi_coulomb) for p in problems}
    xp = libs.pop() if len(libs) == 1 else np
    nx, ny, nz = shape
    stride = nx + (nx % 2)
    big = (len(problems) * stride, ny, nz)
    cx, cy, cz, b, x = (xp.zeros(big) for _ in range(5))
    diag = xp.ones(big)
    faces = tuple(xp.zeros(big) for _ in range(3)) if unlifted else None
    kappa2 = xp.zeros(big) if unlifted else None
    guessed = []
    inner = interior_mask(shape, False, xp)
    face_masks = [inner & xp.roll(inner, -1, axis=a) for a in range(3)]
    bnorms, fixed = [], []
    x0 = [None] * len(problems) if x0 is None else list(x0)
    for k, p in enumerate(problems):
        if xp is np and array_module(p.phi_coulomb) is not np:
            p = _host_problem(p)
        coef = coefficients(p, np.float64)
        g = fixed_values(p, np.float64)
        lifted = rhs(p) - apply(coef, g)  # zero on the outer layer (apply and rhs both are)
        blk = slice(k * stride, k * stride + nx)
        for dst, c, m in zip((cx, cy, cz), (coef.cx, coef.cy, coef.cz), face_masks, strict=True):
            dst[blk] = xp.where(m, c, 0.0)
        diag[blk] = xp.where(inner, coef.diagonal(), 1.0)
        b[blk] = lifted
        if unlifted:
            for dst, c in zip(faces, (coef.cx, coef.cy, coef.cz), strict=True):
                dst[blk] = c
            # the last layer's faces lead out of the block (on a Dirichlet grid, nowhere)
            faces[0][k * stride + nx - 1] = 0.0
            faces[1][blk][:, -1] = 0.0
            faces[2][blk][:, :, -1] = 0.0
            if p.kappa2 is not None:
                kappa2[blk] = p.kappa2
        guessed.append(x0[k] is not None)
        if x0[k] is not None:
            guess = xp.asarray(to_numpy(x0[k]) if xp is np else x0[k], dtype=np.float64)
            if tuple(guess.shape) != shape:
                raise InputError(f"x0[{k}] has shape {tuple(guess.shape)}, the grid needs {shape}")
            if not bool(xp.isfinite(guess).all()):
                raise InputError(f"x0[{k}] must be finite")
            x[blk] = xp.where(inner, guess, 0.0)
        bnorms.append(float(xp.sqrt(xp.sum(lifted * lifted))))
        fixed.append(g)
    return StackedSystem(cx, cy, cz, diag, b, x, stride, bnorms, fixed, faces, kappa2, guessed)


def _host_problem(p: Problem) -> Problem:
    """A copy of ``p`` with NumPy arrays (for stacks mixing array libraries)."""

    def host(a):
        return None if a is None else to_numpy(a)

    faces = None if p.epsilon_faces is None else tuple(host(f) for f in p.epsilon_faces)
    return Problem(
        p.grid,
        epsilon=host(p.epsilon),
        phi_coulomb=host(p.phi_coulomb),
        eps_cavity=p.eps_cavity,
        epsilon_faces=faces,
        kappa2=host(p.kappa2),
        boundary=p.boundary,
        boundary_values=host(p.boundary_values),
        face_rule=p.face_rule,
    )


def _solve_stacked(solver: Solver, backend, problems, x0) -> list[SolveResult]:
    """One solver loop over the block-diagonal stack of ``problems``."""
    start = time.perf_counter()
    name = solver.method
    p0 = problems[0]
    shape = p0.grid.shape
    options = {}
    if name == "multigrid":
        from pbsolver.multigrid.stacked import StackedMultigrid, stack_cycle_options

        options = stack_cycle_options(solver.method_options, solver.omega)
    stride = shape[0] + shape[0] % 2
    n_blocks = len(problems)
    stack_shape = (n_blocks * stride, *shape[1:])
    ws = _workspace(backend, solver, name, options, stack_shape, p0, stride)
    st, checked = ws.st, ws.checked
    # the stack is assembled straight into the workspace (on CUDA: one kernel launch)
    backend.assemble_stack(problems, x0, stride, _arrays(checked), _arrays(st),
                           ws.mg.inputs if ws.mg is not None else None, ws.fixed, ws.x)  # fmt: skip
    bnorms = _block_norms(checked.b, n_blocks, stride)
    guessed = [g is not None for g in (x0 or [None] * n_blocks)]
    nonzero = bnorms[bnorms > 0.0]
    if nonzero.size == 0:  # every right-hand side is zero: the boundary values are the answer
        return [solver.solve(p) for p in problems]
    for k in np.flatnonzero((bnorms == 0.0) & np.asarray(guessed, dtype=bool)):
        # a zero right-hand side's answer is zero inside, whatever the guess: the stopping
        # measure does not watch such a block (it has no threshold of its own)
        backend.fill(ws.x[k * stride : (k + 1) * stride], 0.0)
        guessed[k] = False
    # the stack stops when every problem meets its own threshold (stack_norm)
    threshold, weights = stack_thresholds(bnorms, solver.rtol, solver.atol)
    stack_solver = _replace_solver(solver, name)
    stack_solver.rtol, stack_solver.atol = 0.0, threshold
    if name == "multigrid":
        ws.mg.rebuild()
        method = StackedMultigrid(ws.mg)
    else:
        options = dict(solver.method_options)
        if solver.omega is not None:
            options["omega"] = solver.omega
        method = _methods()[name](**options)
        method.setup(backend, st, p0)  # ω depends on the block's shape only
    maxiter = solver.maxiter if solver.maxiter is not None else method.default_maxiter(st.shape)
    check_every = solver.check_every or method.check_every
    backend.set_values(ws.weights, weights)
    measure = stack_norm(backend, ws.r, ws.weights, n_blocks)
    loop = _Loop(stack_solver, backend, st, checked, method, maxiter, check_every, ws.work,
                 measure)  # fmt: skip
    x, r = ws.x, ws.r
    safe = np.where(bnorms > 0, bnorms, 1.0)
    initial = np.ones(n_blocks)
    if any(guessed):  # each guessed block's own initial residual, on the device
        backend.residual(checked, x, r)
        initial = np.where(guessed, _block_norms(r, n_blocks, stride) / safe, 1.0)
    # history: the measure over the smallest threshold's ‖b‖ (the worst problem's relative
    # residual when rtol sets the thresholds)
    loop.run(x, threshold / solver.rtol if solver.rtol > 0 else float(np.sqrt(np.sum(bnorms**2))))
    solution = loop.solution
    # every problem's own final residual, in float64, reduced block by block on the device
    backend.residual(checked, solution, r)
    final = _block_norms(r, n_blocks, stride)
    # one new (B, nx, ny, nz) array: block k's solution inside its boundary values
    phis = backend.to_caller(backend.unstack(solution, ws.fixed, shape, stride, n_blocks),
                             p0.phi_coulomb)  # fmt: skip
    seconds = time.perf_counter() - start
    results = []
    for k, p in enumerate(problems):
        rk, bnk = float(final[k]), float(bnorms[k])
        phi = phis[k]
        if array_module(p.phi_coulomb) is not array_module(phi):  # a stack of mixed libraries
            phi = array_module(p.phi_coulomb).asarray(to_numpy(phi))
        if bnk == 0.0:
            history, converged, reason = [0.0], True, "zero rhs"
        else:
            converged = rk <= max(solver.rtol * bnk, solver.atol)
            history = [float(initial[k]), rk / bnk]
            reason = "converged" if converged else loop.reason
        results.append(
            SolveResult(
                phi_rf=phi,
                converged=bool(converged),
                iterations=loop.iterations,
                residual_norms=history,
                seconds=seconds / n_blocks,
                method=method.name,
                backend=backend.name,
                reason=reason,
                omega=getattr(method, "omega", None),
                extra={
                    "batch": "stacked",
                    "batch_size": n_blocks,
                    "batch_seconds": seconds,
                    "stack_residual_norms": list(loop.history),
                },
            )
        )
    return results


def stack_thresholds(bnorms, rtol: float, atol: float):
    """(t, w): the smallest per-block threshold and every block's weight for :func:`stack_norm`.

    t_k = max(rtol‖b_k‖, atol), t = min of t_k over the blocks with b_k ≠ 0, and
    w_k = t / t_k (0 for a block without a threshold of its own: t_k = 0).
    """
    bnorms = np.asarray(bnorms, dtype=np.float64)
    thresholds = np.maximum(rtol * bnorms, atol)
    threshold = float(np.min(thresholds[bnorms > 0.0]))
    safe = np.where(thresholds > 0.0, thresholds, 1.0)
    return threshold, np.where(thresholds > 0.0, threshold / safe, 0.0)


def stack_norm(backend, r, weights, n_blocks: int):
    """The stopping measure of a stack of ``n_blocks`` blocks (None for one block: ‖r‖₂).

    See :meth:`pbsolver.backends.Backend.block_residual_norm`; ``r`` is a float64 work array
    of the stack's shape, ``weights`` the blocks' weights on the backend.
    """
    if n_blocks < 2:
        return None
    return lambda st, x: backend.block_residual_norm(st, x, r, n_blocks, weights)


def _block_norms(a, n_blocks: int, stride: int) -> np.ndarray:
    """‖a_k‖₂ of every block of a stacked array, reduced where ``a`` lives (host result)."""
    xp = array_module(a)
    if xp is np and not isinstance(a, np.ndarray):  # a device array without CuPy
        a = to_numpy(a)
    blocks = a.reshape(n_blocks, stride, *a.shape[1:]).astype(np.float64, copy=False)
    sq = xp.sum(blocks * blocks, axis=(1, 2, 3))
    return np.sqrt(np.asarray(to_numpy(sq), dtype=np.float64))


#: Stack workspaces kept between calls (device buffers and the multigrid hierarchy), least
#: recently used dropped first. A later call on a stack of the same shape reuses them, so the
#: CUDA graphs captured on their addresses are replayed instead of captured again (capturing
#: took ~40 ms of a 130 ms call of 16 problems of 97³ on the H200). They hold memory: about
#: 130 bytes a node of the stack with multigrid; :func:`clear_workspaces` frees them.
WORKSPACE_CACHE = 2
_WORKSPACES: dict = {}


def clear_workspaces() -> None:
    """Drop the stack workspaces :func:`solve_batch` keeps between calls (frees their memory)."""
    _WORKSPACES.clear()


def _workspace(backend, solver: Solver, name, options, shape, p0, stride):
    """Buffers (and hierarchy) of a stack of ``shape``, made once per backend and set-up."""
    refine = bool(solver.refine)
    dtype = np.dtype(solver.dtype)
    key = (id(backend), name, tuple(shape), p0.grid.shape, p0.grid.spacing, stride, dtype.str,
           refine, tuple(sorted(options.items())))  # fmt: skip
    ws = _WORKSPACES.pop(key, None)
    if ws is None or ws.backend is not backend:
        st = Stencil(*(backend.zeros(shape, dtype) for _ in range(5)), False, False)
        checked = st
        if refine:
            checked = Stencil(*(backend.zeros(shape, np.float64) for _ in range(5)), False, False)
        ws = SimpleNamespace(
            backend=backend,
            st=st,
            checked=checked,
            x=backend.zeros(shape, checked.dtype),
            r=backend.zeros(shape, np.float64),
            fixed=backend.zeros(shape, np.float64),
            weights=backend.zeros((shape[0] // stride,), np.float64),
            work=(backend.zeros(shape, dtype), backend.zeros(shape, dtype)) if refine else None,
            mg=None,
        )
        if name == "multigrid":
            from pbsolver.multigrid.stacked import StackedHierarchy

            ws.mg = StackedHierarchy(backend, st, p0.grid.shape, p0.grid.spacing, stride,
                                     **options)  # fmt: skip
    _WORKSPACES[key] = ws  # (re)inserted last: the most recently used
    while len(_WORKSPACES) > WORKSPACE_CACHE:
        _WORKSPACES.pop(next(iter(_WORKSPACES)))
    return ws


def _arrays(stack) -> tuple:
    """(cx, cy, cz, diag, b) of a Stencil or a StackedSystem."""
    return (stack.cx, stack.cy, stack.cz, stack.diag, stack.b)


# ---------------------------------------------------------------------- streams
_STREAM_BACKENDS: list = []


def _stream_backends(count: int):
    """``count`` CUDA backends, each with its own stream and graph cache (kept across calls)."""
    from pbsolver.backends.cuda import CUDABackend

    while len(_STREAM_BACKENDS) < count:
        _STREAM_BACKENDS.append(CUDABackend())
    return _STREAM_BACKENDS[:count]


def _solve_streams(solver: Solver, backend, problems, x0, streams) -> list[SolveResult]:
    """Problems shared round-robin among worker threads, one CUDA backend (stream) each.

    On another backend there is one worker (numba's CPU kernels are not run from several
    threads at once), so this is the loop.
    """
    if streams is not None and (not isinstance(streams, int) or streams < 1):
        raise InputError(f"streams must be a positive integer, got {streams!r}")
    if backend.name == "cuda":
        count = min(len(problems), streams or DEFAULT_STREAMS)
        backends = _stream_backends(count)
    else:
        count, backends = 1, [backend]
    solvers = []
    for be in backends:
        s = _replace_solver(solver, solver.method)
        s.backend_name = be
        solvers.append(s)

    def work(w):
        return [
            (i, solvers[w].solve(problems[i], x0=x0[i])) for i in range(w, len(problems), count)
        ]

    out: list = [None] * len(problems)
    with ThreadPoolExecutor(max_workers=count) as pool:
        for part in pool.map(work, range(count)):
            for i, res in part:
                res.extra["batch"] = "streams"
                res.extra["streams"] = count
                out[i] = res
    return out


__all__ = [
    "MODES",
    "STACKABLE_METHODS",
    "StackedSystem",
    "clear_workspaces",
    "solve_batch",
    "stack_norm",
    "stack_problems",
    "stack_thresholds",
]
