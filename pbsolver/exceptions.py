"""Exceptions raised by pbsolver."""

from __future__ import annotations


class PBSolverError(Exception):
    """Base class of every error pbsolver raises on purpose."""


class InputError(PBSolverError, ValueError):
    """Invalid input: a bad shape, dtype, value or option. The message names the field."""


class ConvergenceError(PBSolverError, RuntimeError):
    """Raised by ``Solver(strict=True)`` when a solve does not converge.

    The unconverged :class:`~pbsolver.SolveResult` is available as ``.result``.
    """

    def __init__(self, message: str, result=None):
        super().__init__(message)
        self.result = result


class BackendUnavailableError(PBSolverError, RuntimeError):
    """The requested backend cannot run here (e.g. ``backend="cuda"`` with no usable GPU)."""
