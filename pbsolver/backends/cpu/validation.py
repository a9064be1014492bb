"""One parallel pass over a problem's host maps: what :class:`pbsolver.Problem` checks.

:func:`scan_maps` reads the three face maps, φ_c and κ̄² once and reports whether every face is
finite and > 0, whether φ_c holds a NaN or an infinity, whether κ̄² is finite and ≥ 0, and
whether any κ̄² is > 0. The problem's NumPy checks make a dozen passes for the same answers;
it runs them (for their messages, which name the first bad node) only where this scan finds
something wrong.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

# the flags' columns, per x plane (then reduced)
BAD_FACE, PHI_NAN, PHI_INF, BAD_KAPPA, SOME_KAPPA = range(5)


@njit(cache=True, nogil=True, parallel=True)
def _scan(ex, ey, ez, phi, kappa2, has_kappa, flags):
    nx, ny, nz = phi.shape
    for i in prange(nx):
        for j in range(ny):
            for k in range(nz):
                for f in (ex[i, j, k], ey[i, j, k], ez[i, j, k]):
                    if not (f > 0.0 and f < math.inf):  # NaN fails both
                        flags[i, BAD_FACE] = 1
                p = phi[i, j, k]
                if p != p:
                    flags[i, PHI_NAN] = 1
                elif p == math.inf or p == -math.inf:
                    flags[i, PHI_INF] = 1
                if has_kappa:
                    q = kappa2[i, j, k]
                    if not (q >= 0.0 and q < math.inf):
                        flags[i, BAD_KAPPA] = 1
                    elif q > 0.0:
                        flags[i, SOME_KAPPA] = 1


def scan_maps(faces, phi, kappa2=None) -> dict:
    """What holds for host maps of one shape: a dict of five booleans.

    "bad_face" (a face not finite and > 0), "phi_nan", "phi_inf" (φ_c holds a NaN, an
    infinity), "bad_kappa" (a κ̄² not finite and ≥ 0), "some_kappa" (a κ̄² > 0). ``faces`` is
    (ex, ey, ez); ``kappa2`` None stands for no map (its flags are False).
    """
    flags = np.zeros((phi.shape[0], 5), dtype=np.uint8)
    has_kappa = kappa2 is not None
    _scan(*faces, phi, phi if kappa2 is None else kappa2, has_kappa, flags)
    found = flags.any(axis=0)
    names = ("bad_face", "phi_nan", "phi_inf", "bad_kappa", "some_kappa")
    return {name: bool(found[k]) for k, name in enumerate(names)}


__all__ = ["scan_maps"]
