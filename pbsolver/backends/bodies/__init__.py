"""Plain-Python formula bodies, compiled by ``numba.njit`` and ``numba.cuda.jit(device=True)``."""
