"""The iteration loop: when to check, when to stop, and float64 iterative refinement.

:class:`IterationLoop` is the only place that decides anything about convergence. It drives a
method (an object with ``start(st, x)`` and ``step(count)``, see :mod:`pbsolver.solving.methods`)
on a backend's stencil and iterate and stops when the measure — ``‖b − A x‖₂`` by default, or a
stack's weighted block maximum (:meth:`pbsolver.backends.Backend.block_residual_norm`) —
reaches ``max(rtol·‖b‖, atol)``, or reports why it did not: ``"maxiter"``, ``"nan"`` (NaN or
inf), ``"diverged"`` (the measure grew :data:`DIVERGENCE_FACTOR`-fold) or ``"stagnated"``.

Refinement: with float32 storage the method iterates on a float32 copy of the system for a
correction, while the iterate is a float64 accumulator and every residual that decides
convergence is computed with the float64 operator (``checked``: a float64 stencil, or one
problem's :class:`~pbsolver.backends.ProblemOperator`). Each phase solves A e = r in
float32 with r = b − A x from the float64 operator and ends when its residual has dropped by
``PHASE_REDUCTION``, reached the overall threshold, or stalled; then x += e and the true
residual is recomputed in float64. So rtol far below float32's floor is reached, and holds
for the float64 operator. Within a phase, a method that keeps its own residual (MG-CG's
recurrence r, ``method.residual_norm()``) is measured by that instead of a pass of the
operator: a phase reduces the residual by at most ``PHASE_REDUCTION``, far above the float32
drift of a recurrence, and the float64 residual after the phase decides again.
"""

from __future__ import annotations

import dataclasses
import math

#: Stop as "diverging" when the residual exceeds this multiple of the initial one.
DIVERGENCE_FACTOR = 1e4
#: Stop as "stagnated" after this many checks without a 1 % improvement of the best residual.
STAGNATION_CHECKS = 30


class IterationLoop:
    """Iterate a method to ``‖b − A x‖ ≤ max(rtol·‖b‖, atol)``, checking every few steps.

    Parameters
    ----------
    rtol, atol : float
        Relative and absolute tolerance of the measure.
    maxiter : int
        Most steps (sweeps or cycles) to do; honoured exactly.
    check_every : int
        Steps between two measurements (each one a host synchronisation).
    callback : callable, optional
        ``callback(iteration, relative_residual)`` at every measurement.
    norm : callable, optional
        ``norm(stencil, x)``: the measure (default ``backend.residual_norm``).

    Attributes
    ----------
    iterations : int
        Steps done by :meth:`run`.
    history : list of float
        The measure over ‖b‖ at every check, starting with the initial guess.
    reason : str
        Why the loop stopped ("converged", "maxiter", "nan", "diverged", "stagnated").
    solution : array
        The final iterate (the x given to :meth:`run`, updated in place).
    """

    PHASE_REDUCTION = 1e-3

    def __init__(self, rtol, atol, maxiter, check_every, callback=None, norm=None):
        self.rtol, self.atol = float(rtol), float(atol)
        self.maxiter, self.check_every = int(maxiter), int(check_every)
        self.callback = callback
        self.norm = norm
        self.iterations, self.history, self.reason, self.solution = 0, [], None, None

    def run(self, backend, method, st, x, bnorm, *, checked=None, work=None):
        """Iterate ``method`` on ``(st, x)`` until a stopping rule holds; returns ``self``.

        Parameters
        ----------
        backend : Backend
        method
            Set up already (``method.setup``); ``start`` is called once a phase.
        st : Stencil
            The system the method iterates on (float32 under refinement).
        x : array
            The iterate, updated in place (float64 under refinement).
        bnorm : float
            ‖b‖ of the system: the relative residuals' denominator.
        checked : Stencil or ProblemOperator, optional
            The float64 system that decides convergence; one other than ``st`` turns on
            refinement.
        work : (r, e) arrays of st's shape and dtype, optional
            The refinement phases' residual and correction buffers (fresh each phase if None;
            a caller that solves again on the same buffers passes its own, so captured work is
            found again).
        """
        self.backend, self.method, self.st, self.work = backend, method, st, work
        self.checked = checked if checked is not None else st
        self._norm = self.norm or backend.residual_norm
        self.bnorm = bnorm
        threshold = max(self.rtol * bnorm, self.atol)
        refine = self.checked is not st
        # under refinement with the plain norm, each check also writes the residual that the
        # next phase solves for: one pass over the float64 operator instead of two
        writes_residual = refine and self.norm is None
        if writes_residual and self.work is None:
            self.work = (backend.zeros(st.shape, st.dtype), backend.zeros(st.shape, st.dtype))
        rnorm = self._check(x, writes_residual)
        self.initial = rnorm
        self._record(rnorm)
        reason = None
        while True:
            reason = self._stop_reason(rnorm, threshold)
            if reason is not None:
                break
            phase_st, phase_x = self._correction_system(x, writes_residual) if refine else (st, x)
            method.start(phase_st, phase_x)
            phase_start = rnorm
            rnorm, reason = self._phase(phase_st, phase_x, threshold, phase_start, refine)
            if not refine or reason in ("nan", "diverged"):
                break
            backend.axpy(x, phase_x, 1.0)  # fold the correction into the float64 iterate
            rnorm = self._check(x, writes_residual)
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
        return self

    def _record(self, rnorm):
        self.history.append(rnorm / self.bnorm)
        if self.callback is not None:
            self.callback(self.iterations, rnorm / self.bnorm)

    def _check(self, x, writes_residual):
        """‖b − A x‖ of the float64 system.

        With ``writes_residual`` the residual itself goes into the work buffer in the same pass
        (where :meth:`_correction_system` finds it).
        """
        if writes_residual:
            return self.backend.residual_and_norm(self.checked, x, self.work[0])
        return self._norm(self.checked, x)

    def _correction_system(self, x, residual_written):
        """(stencil with b = r = b − A·x, zero iterate): the next phase's float32 system.

        ``residual_written``: the last check wrote the residual at ``x`` into the work buffer
        (:meth:`_check`), so it is used as it is.
        """
        backend, st = self.backend, self.st
        if self.work is None:
            r, e = backend.zeros(st.shape, st.dtype), backend.zeros(st.shape, st.dtype)
        else:
            r, e = self.work
            backend.fill(e, 0.0)
        if not residual_written:
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
        # a method's own residual (MG-CG's recurrence) measures the phase: see the module
        own_norm = getattr(self.method, "residual_norm", None)
        if not refine or self.norm is not None:
            own_norm = None
        # SOR with ω near 2 lets the residual grow for O(n) sweeps before it falls, so a stall
        # is only called after STAGNATION_CHECKS checks without a 1 % gain.
        target = max(threshold, self.PHASE_REDUCTION * phase_start) if refine else threshold
        while True:
            count = min(self.check_every, self.maxiter - self.iterations)
            self.method.step(count)
            self.iterations += count
            rnorm = own_norm() if own_norm is not None else self._norm(st, x)
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
                if since_best >= STAGNATION_CHECKS:
                    return rnorm, "stagnated"


__all__ = ["DIVERGENCE_FACTOR", "STAGNATION_CHECKS", "IterationLoop"]
