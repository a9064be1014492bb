"""Many independent problems solved together: :func:`solve_batch`.

Small grids leave most of a GPU idle: a 65³ red–black sweep is a few microseconds of memory
traffic but tens of microseconds of launch and synchronisation. Three ways to run B problems:

``"loop"``
    One :meth:`Solver.solve` after the other (the reference; the CPU default, where a stacked
    kernel gains nothing: every core is already busy on one grid).
``"stacked"``
    The B (linear) problems become one block-diagonal system
    (:meth:`pbsolver.solving.system.LinearSystem.stack`, layout in
    :mod:`pbsolver.backends.stacking`) solved by one loop, so each kernel launch (and each
    CUDA-graph replay) serves all B problems, and every block is swept exactly as its problem
    alone would be. Dirichlet problems of one shape and spacing, methods ``"multigrid"`` (a
    hierarchy that coarsens every block separately; the default), ``"sor"`` and
    ``"jacobi"``.
``"streams"``
    On the CUDA backend: one backend (hence one CUDA stream and its own graph cache) per worker
    thread, each solving its share of the problems with the ordinary solver, so the GPU overlaps
    the streams' kernels. On the CPU this is the loop (numba's parallel kernels are not called
    from several threads).

Nonlinear problems (``Problem(nonlinear=True)`` with salt) of one shape, spacing, temperature and
ion valence are stacked apart from the linear ones: one Newton iteration on the stack
(:func:`pbsolver.nonlinear.newton.solve_newton_stack`), each block stopping on its own residual;
the loop and streams modes solve them one at a time with :meth:`Solver.solve`.

Stopping rule of a stack: every problem meets its own threshold ``max(rtol‖b_k‖, atol)``
(see :mod:`pbsolver.solving.system`); each problem's own final residual is reported in its
result. On CUDA the stack is assembled on the device in one launch.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np

from pbsolver.arrays import array_module, to_numpy
from pbsolver.backends import get_backend
from pbsolver.exceptions import ConvergenceError, InputError
from pbsolver.nonlinear.newton import solve_newton_stack
from pbsolver.problem import Problem
from pbsolver.solving.solver import Solver, SolveResult
from pbsolver.solving.system import clear_workspaces, workspace

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
        "jacobi"), else ``"streams"``. ``"stacked"`` stacks what can be stacked (linear
        problems) and loops over the rest; ``"streams"`` on the CPU is the loop run through
        one worker.
    max_stack : int, optional
        Most problems in one stack (memory: about 100 bytes a node per stacked problem in
        float32 with refinement, 130 with multigrid). Default: all of a group.
    streams : int, optional
        Worker threads / CUDA streams of ``"streams"`` (default 8, at most the batch size).
    **solver_options
        Options of :class:`~pbsolver.Solver` (``method``, ``backend``, ``rtol``, ``atol``,
        ``maxiter``, ``dtype``, ``refine``, ``strict``, ``omega``, ``check_every``, ...).
        ``method="auto"`` means multigrid; a stack's multigrid cycle defaults to
        :data:`pbsolver.multigrid.builders.STACK_CYCLE` (``cycle``, ``presmooth``,
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
        if not backend.STACKS_BATCHES:
            mode = "loop"
        elif method is None or method in STACKABLE_METHODS:
            mode = "stacked"
        else:
            mode = "streams"

    results: list[SolveResult | None] = [None] * len(problems)
    rest = list(range(len(problems)))
    if mode == "stacked":
        name = method if explicit else "multigrid"
        rest = []
        for group in _stack_groups(problems):
            if len(group) < 2:
                rest.extend(group)
                continue
            size = max_stack or len(group)
            for start in range(0, len(group), size):
                chunk = group[start : start + size]
                solved = _solve_stacked(
                    solver, name, backend, [problems[i] for i in chunk], [x0[i] for i in chunk]
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
    """Indices of problems that can share a stack: Dirichlet, of one shape and spacing.

    Linear and nonlinear problems (with salt) are stacked apart; nonlinear ones also need one
    temperature and ion valence (one scale of the Boltzmann term).
    """
    groups: dict = {}
    singles = []
    for i, p in enumerate(problems):
        if p.boundary != "dirichlet":
            singles.append([i])
            continue
        key = (p.grid.shape, p.grid.spacing)
        if p.nonlinear and p.has_salt:
            key += ("nonlinear", p.temperature, p.ion_valence)
        groups.setdefault(key, []).append(i)
    return list(groups.values()) + singles


# ---------------------------------------------------------------------- stacked
def _solve_stacked(solver: Solver, name: str, backend, problems, x0) -> list[SolveResult]:
    """One loop over the block-diagonal stack of ``problems`` (a kept workspace)."""
    p0 = problems[0]
    if p0.nonlinear and p0.has_salt:
        return _solve_stacked_nonlinear(solver, name, backend, problems, x0)
    system = workspace(backend, p0.grid.shape, p0.grid.spacing, len(problems), solver.dtype,
                       solver.refine, unlifted=name == "multigrid")  # fmt: skip
    # the stack is assembled straight into the workspace (on CUDA: one kernel launch)
    system.assemble(problems, x0)
    if not (np.asarray(system.bnorms) > 0).any():
        # every right-hand side is zero: the boundary values are each problem's answer
        return [Solver(**{**solver.options(), "method": name}).solve(p) for p in problems]
    out = system.solve(solver.make_method(name), rtol=solver.rtol, atol=solver.atol,
                       maxiter=solver.maxiter, check_every=solver.check_every,
                       callback=solver.callback)  # fmt: skip
    # one new (B, nx, ny, nz) array: block k's solution inside its boundary values
    phis = system.solution(p0.phi_coulomb)
    results = []
    for k, p in enumerate(problems):
        phi = phis[k]
        if array_module(p.phi_coulomb) is not array_module(phi):  # a stack of mixed libraries
            phi = array_module(p.phi_coulomb).asarray(to_numpy(phi))
        if system.bnorms[k] == 0.0:
            history, reason = [0.0], "zero rhs"
        else:
            history = [float(out.initial[k]), float(out.final[k])]
            reason = "converged" if out.converged[k] else out.reason
        results.append(
            SolveResult(
                phi_rf=phi,
                converged=bool(out.converged[k]),
                iterations=out.iterations,
                residual_norms=history,
                seconds=out.seconds / len(problems),
                method=out.method,
                backend=backend.name,
                reason=reason,
                omega=out.omega,
                extra={
                    "batch": "stacked",
                    "batch_size": len(problems),
                    "batch_seconds": out.seconds,
                    "stack_residual_norms": list(out.history),
                },
            )
        )
    return results


def _solve_stacked_nonlinear(solver, name, backend, problems, x0) -> list[SolveResult]:
    """One Newton iteration on the stack of nonlinear ``problems`` (their own results)."""
    outs = solve_newton_stack(solver, backend, problems, name, x0)
    results = []
    for p, out in zip(problems, outs, strict=True):
        phi = backend.to_caller(out.phi_rf, p.phi_coulomb)
        result = SolveResult(phi_rf=phi, converged=out.converged, iterations=out.iterations,
                             residual_norms=[float(h) for h in out.history],
                             seconds=out.seconds / len(problems), method=out.method,
                             backend=backend.name, reason=out.reason, omega=out.omega,
                             newton_steps=out.newton_steps,
                             extra={"newton": out.steps, "capped": out.capped,
                                    "newton_start_seconds": out.start_seconds,
                                    "batch": "stacked", "batch_size": len(problems),
                                    "batch_seconds": out.seconds})  # fmt: skip
        results.append(result)
    return results


# ---------------------------------------------------------------------- streams
def _solve_streams(solver: Solver, backend, problems, x0, streams) -> list[SolveResult]:
    """Problems shared round-robin among worker threads, one backend (stream) each.

    A backend that cannot run from several threads (the CPU) gives one worker: the loop.
    """
    if streams is not None and (not isinstance(streams, int) or streams < 1):
        raise InputError(f"streams must be a positive integer, got {streams!r}")
    backends = backend.workers(min(len(problems), streams or DEFAULT_STREAMS))
    count = len(backends)
    solvers = [Solver(**{**solver.options(), "backend": be}) for be in backends]

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


__all__ = ["MODES", "STACKABLE_METHODS", "clear_workspaces", "solve_batch"]
