"""Which compiled sampling loops serve a field: the CPU's for NumPy, the CUDA ones for CuPy.

Both modules have ``sample_points`` and ``tensor_lerp`` with the same arguments (the bodies of
:mod:`pbsolver.backends.bodies.sampling`); each returns arrays of its field's library.
"""

from __future__ import annotations

import numpy as np


def sampling_loops(xp):
    """:mod:`pbsolver.backends.cpu.sampling` for ``xp`` NumPy, else the CUDA twins (CuPy)."""
    if xp is np:
        from pbsolver.backends.cpu import sampling
    else:
        from pbsolver.backends.cuda import sampling
    return sampling


__all__ = ["sampling_loops"]
