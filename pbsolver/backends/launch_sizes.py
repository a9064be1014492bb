"""Block sizes of the CUDA kernels that are compile-time constants (shared-memory array sizes).

numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``: the CUDA kernels in CI, without a GPU) runs
every CUDA thread as a Python thread, so there the same kernels run with 32 threads a block:
the same code and summation order, a fraction of the simulated threads. Importing this module
needs no numba-cuda.
"""

from __future__ import annotations

import os


def simulated() -> bool:
    """True under numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``)."""
    return os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"


#: Threads a block of the frame and map kernels (:mod:`pbsolver.backends.frame_kernels`,
#: :mod:`pbsolver.backends.cuda.maps`).
THREADS = 32 if simulated() else 128
#: Threads of the one-block reductions and of the dot product's blocks
#: (:mod:`pbsolver.backends.cuda.kernels`).
FINISH_THREADS = 32 if simulated() else 256

__all__ = ["FINISH_THREADS", "THREADS", "simulated"]
