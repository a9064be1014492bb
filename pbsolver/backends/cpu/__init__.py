"""The CPU backend: numba ``@njit(parallel=True)`` kernels on NumPy arrays (``backend.py``).

Nothing is imported here, so that light modules of this package (``firstrun``) load without
numba.
"""
