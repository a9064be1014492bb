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
    # Each row's tests are or-ed into integers with no branch and no store in the loop, so
    # that LLVM vectorises it; a plane's flags are written once.
    nx, ny, nz = phi.shape
    for i in prange(nx):
        bad_face = phi_nan = phi_inf = bad_kappa = some_kappa = 0
        for j in range(ny):
            for k in range(nz):
                a, b, c = ex[i, j, k], ey[i, j, k], ez[i, j, k]
                # a NaN fails "> 0" and "< inf" both
                good = (a > 0.0) & (a < math.inf) & (b > 0.0) & (b < math.inf)
                bad_face |= not (good & (c > 0.0) & (c < math.inf))
                p = phi[i, j, k]
                phi_nan |= p != p
                phi_inf |= abs(p) == math.inf
            if has_kappa:
                for k in range(nz):
                    q = kappa2[i, j, k]
                    bad_kappa |= not ((q >= 0.0) & (q < math.inf))
                    some_kappa |= q > 0.0
        flags[i, BAD_FACE] = bad_face
        flags[i, PHI_NAN] = phi_nan
        flags[i, PHI_INF] = phi_inf
        flags[i, BAD_KAPPA] = bad_kappa
        flags[i, SOME_KAPPA] = some_kappa


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
