"""CPU kernels of APBS's grid surfaces (:mod:`pbsolver.molecule.apbs_surface`).

Two kernels, the loops of APBS 3.4's ``Vacc_atomSurf``/``ivdwAccExclus`` (which points of an
atom's solvent-accessible sphere no other inflated sphere covers) and ``markSphere`` (set every
grid point within a sphere to a value), with APBS's floating-point order, so that the marked
points are APBS's own. Marking writes one constant per call into shared arrays: spheres that
overlap write the same value, so the parallel loop's order does not matter.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

_JIT = {"cache": True, "nogil": True, "boundscheck": False}


@njit(**_JIT, parallel=True)
def free_sphere_points(pos, rad, probe, ref, nb_start, nb_index, tiny):
    """``keep[i, p]``: point p of atom i's accessible sphere lies outside every other atom's.

    Point p is ``pos[i] + (rad[i] + probe)·ref[p]``; it is kept when no neighbour j holds it
    strictly inside ``rad[j] + probe`` (atoms of radius below ``tiny`` have no points).
    """
    n, npts = pos.shape[0], ref.shape[0]
    keep = np.zeros((n, npts), dtype=np.uint8)
    for i in prange(n):
        if rad[i] < tiny:
            continue
        r = rad[i] + probe
        for p in range(npts):
            x = r * ref[p, 0] + pos[i, 0]
            y = r * ref[p, 1] + pos[i, 1]
            z = r * ref[p, 2] + pos[i, 2]
            free = True
            for s in range(nb_start[i], nb_start[i + 1]):
                j = nb_index[s]
                d2 = (x - pos[j, 0]) ** 2 + (y - pos[j, 1]) ** 2 + (z - pos[j, 2]) ** 2
                if d2 < (rad[j] + probe) ** 2:
                    free = False
                    break
            if free:
                keep[i, p] = 1
    return keep


@njit(**_JIT)
def _mark_one(array, cx, cy, cz, rtot, hx, hy, hz, xmin, ymin, zmin, value):
    """APBS ``markSphere``: points of ``array`` (origin ``xmin…``) within ``rtot`` get ``value``."""
    nx, ny, nz = array.shape
    px, py, pz = cx - xmin, cy - ymin, cz - zmin
    rtot2 = rtot * rtot
    dx = rtot + 0.5 * hx
    imin = max(0, int(math.ceil((px - dx) / hx)))
    imax = min(nx - 1, int(math.floor((px + dx) / hx)))
    for i in range(imin, imax + 1):
        dx2 = (px - hx * i) ** 2
        dy = math.sqrt(rtot2 - dx2) + 0.5 * hy if rtot2 > dx2 else 0.5 * hy
        jmin = max(0, int(math.ceil((py - dy) / hy)))
        jmax = min(ny - 1, int(math.floor((py + dy) / hy)))
        for j in range(jmin, jmax + 1):
            dy2 = (py - hy * j) ** 2
            dz = math.sqrt(rtot2 - dx2 - dy2) + 0.5 * hz if rtot2 > dx2 + dy2 else 0.5 * hz
            kmin = max(0, int(math.ceil((pz - dz) / hz)))
            kmax = min(nz - 1, int(math.floor((pz + dz) / hz)))
            for k in range(kmin, kmax + 1):
                dz2 = (k * hz - pz) ** 2
                if dz2 + dy2 + dx2 <= rtot2:
                    array[i, j, k] = value


@njit(**_JIT, parallel=True)
def mark_spheres(arrays, origins, spacing, centers, radii, value):
    """Every sphere (``centers``, ``radii``) marked with ``value`` on every array.

    ``arrays[g]`` is a grid of points at ``origins[g] + (i, j, k)·spacing``.
    """
    hx, hy, hz = spacing[0], spacing[1], spacing[2]
    for g in range(arrays.shape[0]):
        a = arrays[g]
        x0, y0, z0 = origins[g, 0], origins[g, 1], origins[g, 2]
        for s in prange(centers.shape[0]):
            _mark_one(a, centers[s, 0], centers[s, 1], centers[s, 2], radii[s], hx, hy, hz,
                      x0, y0, z0, value)  # fmt: skip


@njit(**_JIT, parallel=True)
def mark_free_probes(arrays, origins, spacing, pos, rad, probe, ref, keep, value):
    """Spheres of radius ``probe`` at every kept accessible-sphere point, marked ``value``."""
    hx, hy, hz = spacing[0], spacing[1], spacing[2]
    n, npts = keep.shape
    for g in range(arrays.shape[0]):
        a = arrays[g]
        x0, y0, z0 = origins[g, 0], origins[g, 1], origins[g, 2]
        for i in prange(n):
            r = rad[i] + probe
            for p in range(npts):
                if keep[i, p]:
                    x = r * ref[p, 0] + pos[i, 0]
                    y = r * ref[p, 1] + pos[i, 1]
                    z = r * ref[p, 2] + pos[i, 2]
                    _mark_one(a, x, y, z, probe, hx, hy, hz, x0, y0, z0, value)
