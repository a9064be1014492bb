"""The CPU backend: numba ``@njit(parallel=True)`` kernels on NumPy arrays."""

from pbsolver.backends.cpu.backend import CPUBackend

__all__ = ["CPUBackend"]
