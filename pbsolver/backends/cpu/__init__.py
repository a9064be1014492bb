"""The CPU backend: numba ``@njit(parallel=True)`` kernels on NumPy arrays (``backend.py``).

Nothing but :mod:`pbsolver.backends.kernel_cache` is imported here, so that light modules of
this package (``firstrun``) load without numba; it points numba's disk cache at the directory of
this version of the kernels' sources before any kernel module is imported.
"""

from pbsolver.backends import kernel_cache

kernel_cache.configure()
