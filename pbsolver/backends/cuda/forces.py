"""numba-cuda loops of the force sums (bodies in :mod:`pbsolver.backends.bodies.forces`).

The CUDA twins of :func:`pbsolver.backends.cpu.forces.coulomb_sums` and
:func:`~pbsolver.backends.cpu.forces.debye_huckel_sums`: one block per centre, its threads
striding over the weighted nodes, then a fixed-order tree reduction in shared memory, so the
result does not depend on scheduling. Device arrays in (CuPy, or NumPy under numba's
simulator), an array of the same library out. Compiled lazily on first launch.
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from pbsolver.arrays import array_module
from pbsolver.backends.bodies import forces as B
from pbsolver.backends.launch_sizes import FINISH_THREADS

_dev = cuda.jit(device=True)
_term = _dev(B.make_radial_term(_dev(B.inverse_cube_body), _dev(B.debye_huckel_slope_body),
                                _dev(B.minimum_image_body)))  # fmt: skip


@cuda.jit
def _k_radial_sums(points, weights, centres, box, periodic, mdh, radii, kappa, eps_out, inv_c,
                   out):  # fmt: skip
    """Block i: Σ_p w_p g(|p − c_i|)(p − c_i) (g: the Coulomb or, ``mdh``, the DH slope)."""
    i = cuda.blockIdx.x
    t = cuda.threadIdx.x
    acc = cuda.shared.array((3, FINISH_THREADS), dtype=np.float64)
    cx = centres[i, 0]
    cy = centres[i, 1]
    cz = centres[i, 2]
    gx = 0.0
    gy = 0.0
    gz = 0.0
    radius = radii[i]
    for p in range(t, points.shape[1], FINISH_THREADS):
        fx, fy, fz = _term(points, weights, p, cx, cy, cz, box, periodic, mdh, radius, kappa,
                           eps_out, inv_c)  # fmt: skip
        gx += fx
        gy += fy
        gz += fz
    acc[0, t] = gx
    acc[1, t] = gy
    acc[2, t] = gz
    cuda.syncthreads()
    s = FINISH_THREADS // 2
    while s > 0:
        if t < s:
            for a in range(3):
                acc[a, t] += acc[a, t + s]
        cuda.syncthreads()
        s //= 2
    if t == 0:
        for a in range(3):
            out[i, a] = acc[a, 0]


def _sums(points, weights, centres, box=None, radii=None, kappa=0.0, eps_out=1.0, inv_c=1.0):
    xp = array_module(points)
    n = len(centres)
    out = xp.zeros((n, 3))
    if n == 0 or points.shape[0] == 0:
        return out
    periodic = box is not None
    mdh = radii is not None

    def dev(a):
        return xp.ascontiguousarray(xp.asarray(a, dtype=xp.float64))

    _k_radial_sums[n, FINISH_THREADS](
        dev(xp.asarray(points).T), dev(weights), dev(centres),
        dev(box if periodic else (1.0, 1.0, 1.0)), periodic, mdh,
        dev(radii if mdh else np.zeros(n)), float(kappa), float(eps_out), float(inv_c), out,
    )  # fmt: skip
    return out


def coulomb_sums(points, weights, centres, box=None):
    """Σ_p w_p (p − c_i)/|p − c_i|³ for every centre (nearest image with ``box``): (n, 3)."""
    return _sums(points, weights, centres, box)


def debye_huckel_sums(points, weights, centres, radii, kappa, eps_out, eps_cavity):
    """Σ_p w_p (−T_i'(r)/r)(p − c_i) of the "mdh" terms for every centre: (n, 3)."""
    return _sums(points, weights, centres, None, radii, kappa, eps_out, 1.0 / float(eps_cavity))


__all__ = ["coulomb_sums", "debye_huckel_sums"]
