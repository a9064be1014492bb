"""numba-cuda loops of the force sums (bodies in :mod:`pbsolver.backends.bodies.forces`).

The CUDA twins of :func:`pbsolver.backends.cpu.forces.coulomb_sums` and
:func:`~pbsolver.backends.cpu.forces.debye_huckel_sums`: one block per centre, its threads
striding over the weighted nodes, then a fixed-order tree reduction in shared memory, so the
result does not depend on scheduling; and of
:func:`~pbsolver.backends.cpu.forces.coulomb_sensitivity` and
:func:`~pbsolver.backends.cpu.forces.kappa_sensitivity` (one thread a node) and
:func:`~pbsolver.backends.cpu.forces.grid_nodes` (array code). Device arrays in (CuPy, or NumPy
under numba's simulator), an array of the same library out. Compiled lazily on first launch.
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from pbsolver.arrays import array_module
from pbsolver.backends.bodies import forces as B
from pbsolver.backends.cuda.device import launch_on_legacy_stream as launch
from pbsolver.backends.launch_sizes import FINISH_THREADS, THREADS

_dev = cuda.jit(device=True)
_term = _dev(B.make_radial_term(*(_dev(body) for body in B.radial_bodies(float))))
_sensitivity = _dev(B.coulomb_sensitivity_body)
_kappa = _dev(B.kappa_sensitivity_body)
_fraction = _dev(B.fraction_sensitivity_body)


_node_dev = _dev(B.node_body)


@cuda.jit
def _k_fraction_sensitivities(lam, phic, phi, fx, fy, fz, cx, cy, cz, slope, ox, oy, oz):
    p = cuda.grid(1)
    if p >= lam.size:
        return
    i, j, k = _node_dev(p, lam.shape)
    ox[i, j, k] = _fraction(lam, phic, phi, fx, 0, i, j, k, cx, slope)
    oy[i, j, k] = _fraction(lam, phic, phi, fy, 1, i, j, k, cy, slope)
    oz[i, j, k] = _fraction(lam, phic, phi, fz, 2, i, j, k, cz, slope)


def fraction_sensitivities(lam, phi_coulomb, phi, faces, spacing, slope):
    """∂G/∂f of every face; see :func:`pbsolver.backends.cpu.forces.fraction_sensitivities`."""
    xp = array_module(lam)
    out = tuple(xp.empty(lam.shape) for _ in range(3))
    c = [1.0 / (h * h) for h in spacing]
    blocks = (lam.size + THREADS - 1) // THREADS
    launch(_k_fraction_sensitivities, blocks, THREADS,
        *(xp.ascontiguousarray(a) for a in (lam, phi_coulomb, phi, *faces)), *c, float(slope),
        *out,
    )  # fmt: skip
    return out


@cuda.jit
def _k_kappa_sensitivity(lam, phic, phi, out):
    p = cuda.grid(1)
    if p >= lam.size:
        return
    i, j, k = _node_dev(p, lam.shape)
    out[i, j, k] = _kappa(lam, phic, phi, i, j, k)


def kappa_sensitivity(lam, phi_coulomb, phi):
    """∂G/∂κ̄² at every node; see :func:`pbsolver.backends.cpu.forces.kappa_sensitivity`."""
    xp = array_module(lam)
    out = xp.empty(lam.shape)
    blocks = (lam.size + THREADS - 1) // THREADS
    launch(_k_kappa_sensitivity, blocks, THREADS,
           *(xp.ascontiguousarray(a) for a in (lam, phi_coulomb, phi)), out)  # fmt: skip
    return out


@cuda.jit
def _k_coulomb_sensitivity(lam, fx, fy, fz, kappa2, salt, eps_c, cx, cy, cz, out):
    p = cuda.grid(1)
    if p >= lam.size:
        return
    i, j, k = _node_dev(p, lam.shape)
    out[i, j, k] = _sensitivity(lam, fx, fy, fz, kappa2, salt, i, j, k, eps_c, cx, cy, cz)


def coulomb_sensitivity(lam, faces, kappa2, eps_cavity, spacing):
    """μ = ∂G/∂φ_c at every node; see :func:`pbsolver.backends.cpu.forces.coulomb_sensitivity`."""
    xp = array_module(lam)
    lam = xp.ascontiguousarray(lam, dtype=xp.float64)
    out = xp.empty(lam.shape)
    salt = kappa2 is not None
    c = [1.0 / (h * h) for h in spacing]
    blocks = (lam.size + THREADS - 1) // THREADS
    launch(_k_coulomb_sensitivity, blocks, THREADS,
        lam, *(xp.ascontiguousarray(f) for f in faces),
        xp.ascontiguousarray(kappa2) if salt else lam, salt, float(eps_cavity), *c, out,
    )  # fmt: skip
    return out


def grid_nodes(field, origin, spacing):
    """Coordinates (3, m) and values (m,) of the nodes where ``field`` ≠ 0 (array code)."""
    xp = array_module(field)
    flat = field.reshape(-1)
    idx = xp.flatnonzero(flat)
    ijk = xp.unravel_index(idx, field.shape)
    points = xp.stack([origin[a] + ijk[a] * spacing[a] for a in range(3)])
    return points, flat[idx].astype(xp.float64)


#: Centres a block of the radial sums: each node is read once for this many centres (a block a
#: centre read the whole node list once per atom). 4 keeps a thread at 120 registers on sm_90
#: (ptxas), two blocks of 256 a multiprocessor; 8 took 186, one block.
SUM_CENTRES = 4


@cuda.jit
def _k_radial_sums(points, weights, centres, box, periodic, mdh, radii, kappa, eps_out, inv_c,
                   out):  # fmt: skip
    """Block b: Σ_p w_p g(|p − c_i|)(p − c_i) of the centres i = b·SUM_CENTRES + k.

    g is the Coulomb or (``mdh``) the Debye–Hückel slope. Each centre's sum is formed as by a
    block of its own: thread t adds the nodes t, t + FINISH_THREADS, … in order, then a tree
    over the threads, so the results do not depend on SUM_CENTRES.
    """
    first = cuda.blockIdx.x * SUM_CENTRES
    t = cuda.threadIdx.x
    acc = cuda.shared.array((3, FINISH_THREADS), dtype=np.float64)
    # the centres in shared memory (every thread reads them all), the sums in registers
    c = cuda.shared.array((SUM_CENTRES, 4), dtype=np.float64)  # x, y, z, radius
    g = cuda.local.array((SUM_CENTRES, 3), dtype=np.float64)
    n = centres.shape[0]
    if t < SUM_CENTRES:
        i = min(first + t, n - 1)  # past the last centre: the last again, not written
        c[t, 0] = centres[i, 0]
        c[t, 1] = centres[i, 1]
        c[t, 2] = centres[i, 2]
        c[t, 3] = radii[i]
    for k in range(SUM_CENTRES):
        for a in range(3):
            g[k, a] = 0.0
    cuda.syncthreads()
    px, py, pz = points[0], points[1], points[2]
    for p in range(t, points.shape[1], FINISH_THREADS):
        for k in range(SUM_CENTRES):
            fx, fy, fz = _term(px, py, pz, weights, p, c[k, 0], c[k, 1], c[k, 2], box, periodic,
                               mdh, c[k, 3], kappa, eps_out, inv_c)  # fmt: skip
            g[k, 0] += fx
            g[k, 1] += fy
            g[k, 2] += fz
    for k in range(SUM_CENTRES):
        for a in range(3):
            acc[a, t] = g[k, a]
        cuda.syncthreads()
        s = FINISH_THREADS // 2
        while s > 0:
            if t < s:
                for a in range(3):
                    acc[a, t] += acc[a, t + s]
            cuda.syncthreads()
            s //= 2
        if t == 0 and first + k < n:
            for a in range(3):
                out[first + k, a] = acc[a, 0]
        cuda.syncthreads()


def _sums(points, weights, centres, box=None, radii=None, kappa=0.0, eps_out=1.0, inv_c=1.0):
    xp = array_module(points)
    n = len(centres)
    out = xp.zeros((n, 3))
    if n == 0 or points.shape[1] == 0:
        return out
    periodic = box is not None
    mdh = radii is not None

    def dev(a):
        return xp.ascontiguousarray(xp.asarray(a, dtype=xp.float64))

    launch(_k_radial_sums, -(-n // SUM_CENTRES), FINISH_THREADS,
        dev(points), dev(weights), dev(centres),
        dev(box if periodic else (1.0, 1.0, 1.0)), periodic, mdh,
        dev(radii if mdh else np.zeros(n)), float(kappa), float(eps_out), float(inv_c), out,
    )  # fmt: skip
    return out


def coulomb_sums(points, weights, centres, box=None):
    """Σ_p w_p (p − c_i)/|p − c_i|³ for every centre (nearest image with ``box``): (n, 3)."""
    return _sums(points, weights, centres, box)


def coulomb_grid_sums(field, origin, spacing, centres, box=None):
    """:func:`coulomb_sums` over the nodes where ``field`` ≠ 0 (:func:`grid_nodes`'s list)."""
    return coulomb_sums(*grid_nodes(field, origin, spacing), centres, box)


def debye_huckel_sums(points, weights, centres, radii, kappa, eps_out, eps_cavity):
    """Σ_p w_p (−T_i'(r)/r)(p − c_i) of the "mdh" terms for every centre: (n, 3)."""
    return _sums(points, weights, centres, None, radii, kappa, eps_out, 1.0 / float(eps_cavity))


__all__ = [
    "coulomb_grid_sums",
    "coulomb_sensitivity",
    "coulomb_sums",
    "debye_huckel_sums",
    "fraction_sensitivities",
    "grid_nodes",
    "kappa_sensitivity",
]
