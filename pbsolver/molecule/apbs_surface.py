"""APBS's own grid surfaces: ``srfm mol`` and ``srfm smol`` as APBS 3.4 discretises them.

pbsolver's surfaces ("mol", "smol", "vdw") give each face the exact fraction of its edge inside
the solute (:func:`pbsolver.molecule.maps.face_fractions`). APBS instead switches ε at points:
the face between nodes i and i+1 along x is the point half a step from node i, and it is solvent
or solute as a whole. Its error is first order in h, so at 0.5 Å the two discretisations of the
same surface give polar solvation energies a few per cent apart (BENCHMARKS.md, issue 20); both
converge to the same value as h → 0. The surfaces "apbs-mol" and "apbs-smol" reproduce APBS's
maps point for point, for comparisons with APBS at one spacing and for users who need APBS's
numbers; the exact surfaces stay pbsolver's default (smaller error at a given h).

What APBS computes (``Vpmg_fillcoCoefMolDiel*``, ``Vacc_atomSurf``, ``VaccSurf_refSphere``,
``markSphere`` in APBS's ``src/mg/vpmg.c`` and ``src/generic/vacc.c``):

1. Three point sets, the nodes shifted by h/2 along x, y or z (one per face orientation),
   start accessible (1).
2. Every point within rᵢ + r_probe of an atom (≤) becomes inaccessible (0); atoms of zero
   radius, and atoms on or outside the grid's bounding box, mark nothing.
3. A reference sphere of N points: N = ⌈4π R² σ⌉ requested, with σ the surface density
   (``sdens``, 10 Å⁻²) and R the largest atomic radius plus APBS's cell-list reach
   (max(largest ion radius, r_probe) + 0.5 Å); θ runs over ``round(√(πN/4))`` circles from the
   pole (θ = 0 itself gives no point), φ over ``round(2 n_θ sin θ)`` points each.
4. Each atom's accessible sphere (radius rᵢ + r_probe) carries the reference points; a point
   is kept when no other atom j has it strictly inside r_j + r_probe. Every point within
   r_probe of a kept point (≤) becomes accessible again (1): the probe rolled over the
   accessible surface at the sampled positions, which is APBS's SES.
5. "apbs-mol": ε = ε_in + (ε_out − ε_in)·a at each shifted point. "apbs-smol": then each
   face's ε is the harmonic mean of its own and the faces of the other two orientations h/√2
   from it (9 points inside the grid; at the grid's ends only those that exist), as APBS's
   ``srfm smol`` smoothing (Bruccoleri et al.) does.

Here the maps come as edge fractions inside the solute (1 − a, or 1 − f), the form every
surface of pbsolver takes; :func:`pbsolver.molecule.maps.faces_from_fractions` turns them into
the same ε (its harmonic rule is APBS's ``molSmoothHarm`` and gives ε_in or ε_out exactly at
fractions 1 and 0). CPU only (the marking loops are
:mod:`pbsolver.backends.cpu.apbs_marking`); no periodic box (APBS has none).
"""

from __future__ import annotations

import math

import numpy as np

from pbsolver.exceptions import InputError
from pbsolver.options import nonnegative, positive

#: The grid surfaces of APBS, by pbsolver's name, and whether each is smoothed.
APBS_SURFACES = {"apbs-mol": False, "apbs-smol": True}
#: APBS's default surface density (``sdens``), points per Å².
APBS_SDENS = 10.0
#: APBS's spline-window allowance in the reach of its cell lists (``MAX_SPLINE_WINDOW``), Å.
APBS_SPLINE_WINDOW = 0.5
#: Atoms with a radius below this mark nothing (APBS's ``VSMALL``), Å.
TINY_RADIUS = 1e-9


def reference_sphere(npts: int) -> np.ndarray:
    """APBS ``VaccSurf_refSphere(npts)``: unit-sphere points, shape (m, 3) with m ≈ npts."""
    npts = int(npts)
    if npts < 1:
        raise InputError(f"the reference sphere needs at least one point, got {npts}")
    ntheta = int(math.floor(math.sqrt(math.pi * npts / 4.0) + 0.5))
    dtheta = math.pi / ntheta
    nphimax = 2 * ntheta
    points = []
    for itheta in range(ntheta):
        theta = dtheta * itheta
        sintheta, costheta = math.sin(theta), math.cos(theta)
        nphi = int(math.floor(sintheta * nphimax + 0.5))
        if nphi == 0:
            continue
        dphi = 2.0 * math.pi / nphi
        for iphi in range(nphi):
            phi = dphi * iphi
            points.append((math.cos(phi) * sintheta, math.sin(phi) * sintheta, costheta))
    return np.asarray(points, dtype=np.float64)


def reference_points(radii, probe_radius, ion_radius, sdens=APBS_SDENS) -> int:
    """The number of points APBS asks of its reference sphere (``Vacc_storeParms``)."""
    reach = max(float(ion_radius), float(probe_radius)) + APBS_SPLINE_WINDOW
    maxrad = float(np.max(radii, initial=0.0)) + reach
    return int(math.ceil(4.0 * math.pi * maxrad * maxrad * sdens))


def apbs_fractions(atoms, grid, probe_radius=1.4, *, smooth=False, ion_radius=0.0,
                   sdens=APBS_SDENS):  # fmt: skip
    """Edge fractions inside the solute of APBS's ``srfm mol`` (or ``smol``) maps on ``grid``.

    Parameters
    ----------
    atoms : Atoms
    grid : Grid
    probe_radius : float
        Solvent probe radius, Å (APBS ``srad``; 0: the vdW spheres at the shifted points).
    smooth : bool
        APBS ``smol`` (the 9-point harmonic average of the face values) instead of ``mol``.
    ion_radius : float
        The largest ion radius of the calculation, Å (0 without salt): APBS's reference sphere
        grows with it (step 3 of the module docstring).
    sdens : float
        APBS ``sdens``, reference-sphere points per Å².

    Returns
    -------
    (fx, fy, fz) : float64 arrays of ``grid.shape``
        ``fx[i, j, k]`` for the face between nodes (i, j, k) and (i+1, j, k): 0 solvent, 1
        solute ("smol": the mean of up to 9 of those).
    """
    from pbsolver.backends.cpu import apbs_marking as marking
    from pbsolver.backends.cpu.maps import neighbour_lists

    probe = nonnegative(probe_radius, "probe_radius")
    ion_radius = nonnegative(ion_radius, "ion_radius")
    sdens = positive(sdens, "sdens")
    pos = np.ascontiguousarray(atoms.positions, dtype=np.float64)
    rad = np.ascontiguousarray(atoms.radii, dtype=np.float64)
    h = np.asarray(grid.spacing, dtype=np.float64)
    lo = np.asarray(grid.origin, dtype=np.float64)
    # the face points of each orientation, as APBS offsets them
    origins = np.array([lo + np.eye(3)[a] * 0.5 * h for a in range(3)])
    acc = np.ones((3, *grid.shape))
    hi = lo + np.asarray(grid.lengths, dtype=np.float64)
    on_mesh = np.all((pos > lo) & (pos < hi), axis=1) & (rad > TINY_RADIUS)
    if on_mesh.any():
        marking.mark_spheres(acc, origins, h, pos[on_mesh], rad[on_mesh] + probe, 0.0)
    if probe > TINY_RADIUS and len(atoms):
        ref = reference_sphere(reference_points(rad, probe, ion_radius, sdens))
        nb_start, nb_index = neighbour_lists(pos, rad + probe)
        keep = marking.free_sphere_points(pos, rad, probe, ref, nb_start, nb_index, TINY_RADIUS)
        marking.mark_free_probes(acc, origins, h, pos, rad, probe, ref, keep, 1.0)
    solute = [1.0 - acc[a] for a in range(3)]
    return tuple(nine_point_average(solute)) if smooth else tuple(solute)


def nine_point_average(fractions):
    """APBS's ``smol`` smoothing of edge fractions (a list of three arrays).

    Each face is averaged with the faces of the other orientations h/√2 from it (8 inside the
    grid, fewer at its ends, which APBS leaves out): for the face of orientation a at index p,
    the faces of each other orientation b at p, p − e_b, p + e_a and p + e_a − e_b. APBS
    averages 1/ε (a harmonic mean of ε), which is the arithmetic mean of the fractions under
    the harmonic face rule.
    """
    out = []
    for a in range(3):
        total = fractions[a].copy()
        count = np.ones_like(total)
        for b in (b for b in range(3) if b != a):
            f = fractions[b]
            for step_a in (0, 1):
                for step_b in (0, -1):
                    part, n = _shifted(f, a, step_a, b, step_b)
                    total += part
                    count += n
        out.append(total / count)
    return out


def _shifted(f, a, step_a, b, step_b):
    """``f`` at p + step_a·e_a + step_b·e_b where that index exists, else 0; and where it does."""
    value = np.zeros_like(f)
    present = np.zeros_like(f)
    dst = [slice(None)] * 3
    src = [slice(None)] * 3
    for axis, step in ((a, step_a), (b, step_b)):
        if step == 1:
            dst[axis], src[axis] = slice(0, -1), slice(1, None)
        elif step == -1:
            dst[axis], src[axis] = slice(1, None), slice(0, -1)
    value[tuple(dst)] = f[tuple(src)]
    present[tuple(dst)] = 1.0
    return value, present


__all__ = ["APBS_SDENS", "APBS_SURFACES", "apbs_fractions", "nine_point_average",
           "reference_points", "reference_sphere"]  # fmt: skip
