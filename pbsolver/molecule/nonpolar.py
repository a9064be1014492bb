"""Nonpolar solvation: solvent-accessible surface area and the term γ·SASA + b.

**Surface.** The solvent-accessible surface of atom i is the part of the sphere of radius
Rᵢ = rᵢ + probe around it that lies outside every other atom's sphere Rⱼ = rⱼ + probe (Lee &
Richards 1971). :func:`sasa` measures it per atom with the Shrake–Rupley method (1973): a fixed
set of ``n_points`` points on each sphere (a golden-spiral lattice, the same for every atom and
every call), each either inside another sphere or exposed; SASAᵢ = 4πRᵢ² · exposed / n_points.
Neighbours come from a cell list (cells ≥ 2 max R wide) and atoms run in parallel (numba), so
the cost is linear in the atoms; the result is deterministic. Each atom tries its neighbours
largest buried cap first, starting from the one that buried the previous point.
:func:`sasa_parts` gives the areas of a complex and of its parts alone (receptor, ligand) in
one pass, the same numbers as :func:`sasa` of each. An isolated sphere is exact; the
error of a partly buried one falls as the point count grows (``tests/test_nonpolar.py`` measures
it against the exact cap area of two spheres). Atoms of radius 0 (PARSE polar hydrogens) have
spheres of the probe's radius, as in APBS; inside their heavy atom's sphere they add nothing.

**Energy.** ``nonpolar_energy = γ · Σᵢ SASAᵢ + b`` with, by default, γ = 0.00542 kcal mol⁻¹ Å⁻²
= 0.02268 kJ mol⁻¹ Å⁻² and b = 0.92 kcal/mol = 3.849 kJ/mol (Sitkoff, Sharp & Honig 1994, the
cavity term of the PARSE parameters; Amber's MMPBSA.py ``cavity_surften``/``cavity_offset`` and
gmx_MMPBSA use the same), probe 1.4 Å. :func:`nonpolar_terms` gives the per-atom γ·SASAᵢ (the
offset b belongs to the molecule, not to an atom).

**APBS's apolar model** (its ``APOLAR`` section; Wagoner & Baker 2006) is
W = γ·A + p·V + ρ̄ Σᵢ ∫ uᵢᵃᵗᵗ θ dV. Its keywords map as: ``gamma`` (kJ mol⁻¹ Å⁻², the same unit
as ``gamma`` here), ``srad`` (= ``probe``), ``srfm sacc`` (this surface), ``sdens`` (APBS places
points by a density per Å²; here a fixed count per atom). Not included here: the volume term
``press`` · SAV (p = 0), the WCA dispersion integral of ``bconc`` with Lennard-Jones parameters
(ρ̄ = 0), ``swin`` smoothing and ``dpos`` finite-difference forces (no nonpolar forces). APBS
has no constant b: ``offset=0`` with ``gamma`` set as in an APBS input gives its ``γ·A`` term.
:mod:`pbsolver.molecule.apolar` has APBS's whole model (its point set, the volume and WCA
terms, forces); it measures areas with this module's kernel through :func:`sasa_on_points`.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from pbsolver.backends import kernel_cache
from pbsolver.exceptions import InputError
from pbsolver.options import KCAL, finite, nonnegative

#: Surface tension of the nonpolar term, kJ mol⁻¹ Å⁻² (0.00542 kcal mol⁻¹ Å⁻², Sitkoff 1994).
GAMMA = 0.00542 * KCAL
#: Constant of the nonpolar term, kJ/mol (0.92 kcal/mol, Sitkoff 1994).
OFFSET = 0.92 * KCAL
#: Solvent probe radius of the accessible surface, Å (APBS ``srad``).
PROBE = 1.4
#: Points per atom sphere (the Shrake–Rupley resolution; see tests/test_nonpolar.py for the
#: error it gives).
N_POINTS = 960

kernel_cache.configure()  # before the kernels below are defined: their cache's directory
_JIT = {"cache": True, "nogil": True, "boundscheck": False}


def sphere_points(n: int) -> np.ndarray:
    """``n`` nearly uniform unit vectors on a golden spiral (the fixed Shrake–Rupley point set).

    Point k has z = 1 − (2k + 1)/n and azimuth k·π(3 − √5): every point covers the same area
    4π/n, in bands of equal height.

    Returns
    -------
    ndarray (n, 3)
    """
    n = _check_points(n)
    k = np.arange(n, dtype=np.float64)
    z = 1.0 - (2.0 * k + 1.0) / n
    rho = np.sqrt(np.maximum(0.0, 1.0 - z * z))
    phi = k * (math.pi * (3.0 - math.sqrt(5.0)))
    return np.column_stack((rho * np.cos(phi), rho * np.sin(phi), z))


def sasa(atoms, *, probe: float = PROBE, n_points: int = N_POINTS) -> np.ndarray:
    """Solvent-accessible surface area of each atom, Å² (Shrake–Rupley).

    Parameters
    ----------
    atoms : Atoms
        Positions (Å) and radii (Å).
    probe : float
        Solvent probe radius, Å (≥ 0; 0 gives the van der Waals surface).
    n_points : int
        Points per atom sphere (≥ 1).

    Returns
    -------
    ndarray (n,)
        SASAᵢ, Å²; their sum is the molecule's accessible area.

    Raises
    ------
    InputError
        A negative or non-finite probe, or a point count below 1.

    Examples
    --------
    >>> import pbsolver as pb
    >>> ion = pb.Atoms([[0.0, 0.0, 0.0]], [1.0], [1.6])
    >>> round(float(sasa(ion)[0]), 6) == round(4 * math.pi * 3.0**2, 6)
    True
    """
    return _areas(atoms, np.zeros(len(atoms), dtype=np.int64), probe, n_points)[0]


def sasa_parts(atoms, groups, *, probe: float = PROBE, n_points: int = N_POINTS):
    """Each atom's SASA in the whole molecule and in its group alone, Å² (one pass).

    The areas :func:`sasa` gives for ``atoms`` and for each group's atoms on their own (the
    receptor and the ligand of a complex), from one Shrake–Rupley pass: each point is tried
    against its own group's spheres first and, if exposed there, against the other groups'.

    Parameters
    ----------
    atoms : Atoms
        Positions (Å) and radii (Å).
    groups : array_like of int (n,)
        Each atom's group label.
    probe, n_points
        As in :func:`sasa`.

    Returns
    -------
    whole, alone : ndarray (n,)
        SASAᵢ in the whole molecule and in its group alone, Å².

    Raises
    ------
    InputError
        ``groups`` not n integers; see :func:`sasa`.
    """
    try:
        labels = np.asarray(groups)
    except (TypeError, ValueError):
        raise InputError("groups must be one integer label per atom") from None
    if labels.shape != (len(atoms),) or not np.issubdtype(labels.dtype, np.integer):
        raise InputError(
            f"groups must be {len(atoms)} integer labels, got {labels.dtype} {labels.shape}"
        )
    return _areas(atoms, labels.astype(np.int64), probe, n_points)


def sasa_on_points(positions, radii, points, *, probe: float = PROBE) -> np.ndarray:
    """Shrake–Rupley SASA of each atom with a given set of unit points, Å².

    The kernel of :func:`sasa`, with the caller's point set instead of the golden spiral (for
    example APBS's reference sphere, :func:`pbsolver.molecule.apolar.apbs_sphere_points`).
    A point of atom i is exposed when it lies strictly outside (``<``) every other atom's
    sphere of radius rⱼ + probe; SASAᵢ = 4π(rᵢ + probe)² · exposed / len(points).

    Parameters
    ----------
    positions : array_like (n, 3)
        Atom centres, Å.
    radii : array_like (n,)
        Atom radii, Å (≥ 0).
    points : array_like (m, 3)
        Unit vectors, m ≥ 1; used as given (no normalisation).
    probe : float
        Solvent probe radius, Å (≥ 0).

    Returns
    -------
    ndarray (n,)
        SASAᵢ, Å².

    Raises
    ------
    InputError
        Shapes that do not match, non-finite values, negative radii or probe, no points.
    """
    probe = nonnegative(probe, "probe")
    pos = np.asarray(positions, dtype=np.float64)
    rad = np.asarray(radii, dtype=np.float64)
    pts = np.ascontiguousarray(points, dtype=np.float64)
    if pos.ndim != 2 or pos.shape[1] != 3 or rad.shape != (len(pos),):
        raise InputError(
            f"positions must be (n, 3) and radii (n,), got {pos.shape} and {rad.shape}"
        )
    if pts.ndim != 2 or pts.shape[1] != 3 or len(pts) < 1:
        raise InputError(f"points must be (m, 3) with m >= 1, got {pts.shape}")
    if not (np.isfinite(pos).all() and np.isfinite(rad).all() and np.isfinite(pts).all()):
        raise InputError("positions, radii and points must be finite")
    if (rad < 0).any():
        raise InputError("radii must be >= 0")
    if len(pos) == 0:
        return np.zeros(0)
    whole, _ = _exposed(pos, rad + probe, np.zeros(len(pos), dtype=np.int64), pts)
    return 4.0 * math.pi * (rad + probe) ** 2 * (whole / len(pts))


def _exposed(pos, expanded, groups, points):
    """Exposed point counts per atom (whole molecule, own group alone)."""
    pos = np.ascontiguousarray(pos, dtype=np.float64)
    expanded = np.ascontiguousarray(expanded, dtype=np.float64)
    start, members, cells, dims = _cell_list(pos, expanded)
    whole = np.empty(len(pos), dtype=np.int64)
    alone = np.empty(len(pos), dtype=np.int64)
    _count_exposed(pos, expanded, np.ascontiguousarray(groups), points, start, members, cells,
                   dims, whole, alone)  # fmt: skip
    return whole, alone


def _areas(atoms, groups, probe, n_points):
    """(whole, alone) areas, Å²: the exposed point counts of :func:`_count_exposed` scaled."""
    probe = nonnegative(probe, "probe")
    points = sphere_points(n_points)
    pos = np.ascontiguousarray(atoms.positions, dtype=np.float64)
    expanded = np.ascontiguousarray(atoms.radii, dtype=np.float64) + probe
    whole, alone = _exposed(pos, expanded, groups, points)
    sphere = 4.0 * math.pi * expanded**2
    return sphere * (whole / len(points)), sphere * (alone / len(points))


def nonpolar_terms(
    atoms, *, gamma: float = GAMMA, probe: float = PROBE, n_points: int = N_POINTS
) -> np.ndarray:
    """Per-atom nonpolar energy γ·SASAᵢ, kJ/mol (without the molecule's offset).

    Parameters
    ----------
    atoms : Atoms
    gamma : float
        Surface tension, kJ mol⁻¹ Å⁻² (APBS ``gamma``).
    probe, n_points
        As in :func:`sasa`.

    Returns
    -------
    ndarray (n,)
        kJ/mol; ``nonpolar_terms(...).sum() + offset == nonpolar_energy(...)``.
    """
    gamma = finite(gamma, "gamma")
    return gamma * sasa(atoms, probe=probe, n_points=n_points)


def nonpolar_energy(
    atoms,
    *,
    gamma: float = GAMMA,
    offset: float = OFFSET,
    probe: float = PROBE,
    n_points: int = N_POINTS,
) -> float:
    """Nonpolar solvation energy γ·SASA + b, kJ/mol.

    Parameters
    ----------
    atoms : Atoms
    gamma : float
        Surface tension, kJ mol⁻¹ Å⁻² (default 0.00542 kcal mol⁻¹ Å⁻², Sitkoff et al. 1994).
    offset : float
        Constant b, kJ/mol (default 0.92 kcal/mol; 0 for APBS's γ·A alone).
    probe : float
        Solvent probe radius, Å (default 1.4).
    n_points : int
        Points per atom sphere.

    Returns
    -------
    float
        kJ/mol.

    Raises
    ------
    InputError
        Non-finite ``gamma`` or ``offset``; see :func:`sasa`.
    """
    offset = finite(offset, "offset")
    terms = nonpolar_terms(atoms, gamma=gamma, probe=probe, n_points=n_points)
    return float(terms.sum()) + offset


# ---------------------------------------------------------------------- helpers
def _check_points(n) -> int:
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 1:
        raise InputError(f"n_points must be an integer >= 1, got {n!r}")
    return int(n)


def _cell_list(pos, radii):
    """Atoms sorted into cubic cells at least two largest radii wide.

    Returns the start of each cell's run in ``members`` (length cells + 1), the atoms by cell,
    each atom's integer cell coordinates and the number of cells along each axis. Cells grow
    beyond 2 max R where a sparse, wide system would otherwise need more cells than ~8 per atom.
    """
    n = len(pos)
    lo = pos.min(axis=0)
    extent = pos.max(axis=0) - lo
    size = max(2.0 * float(radii.max()), 1e-6)
    limit = max(8 * n, 4096)
    while True:
        dims = np.floor(extent / size).astype(np.int64) + 1
        if int(np.prod(dims)) <= limit:
            break
        size *= 1.5
    cells = np.minimum(np.floor((pos - lo) / size).astype(np.int64), dims - 1)
    linear = (cells[:, 0] * dims[1] + cells[:, 1]) * dims[2] + cells[:, 2]
    members = np.argsort(linear, kind="stable").astype(np.int64)
    counts = np.bincount(linear, minlength=int(np.prod(dims)))
    start = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=start[1:])
    return start, members, cells, dims


@njit(**_JIT)
def _burier(px, py, pz, nx, ny, nz, nr2, lo, n, start):
    """The first of spheres ``lo … lo+n-1`` that holds (px, py, pz), or −1.

    Tried from ``start`` on, wrapping within the range.
    """
    for t in range(n):
        k = start + t
        if k >= lo + n:
            k -= n
        dx = px - nx[k]
        dy = py - ny[k]
        dz = pz - nz[k]
        if dx * dx + dy * dy + dz * dz < nr2[k]:
            return k
    return -1


@njit(parallel=True, **_JIT)
def _count_exposed(pos, radii, groups, points, start, members, cells, dims, whole, alone):
    """Exposed points per atom: outside every neighbour (``whole``), outside its own group's.

    ``alone`` counts the points outside every sphere of the atom's own group.
    """
    n = pos.shape[0]
    m = points.shape[0]
    for i in prange(n):
        ri = radii[i]
        xi, yi, zi = pos[i, 0], pos[i, 1], pos[i, 2]
        # neighbours: spheres that intersect sphere i (two passes: count, then collect)
        found = 0
        for sweep in range(2):
            if sweep == 1:
                nb = np.empty(found, dtype=np.int64)
                key = np.empty(found, dtype=np.float64)
                found = 0
            for cx in range(max(cells[i, 0] - 1, 0), min(cells[i, 0] + 2, dims[0])):
                for cy in range(max(cells[i, 1] - 1, 0), min(cells[i, 1] + 2, dims[1])):
                    for cz in range(max(cells[i, 2] - 1, 0), min(cells[i, 2] + 2, dims[2])):
                        c = (cx * dims[1] + cy) * dims[2] + cz
                        for k in range(start[c], start[c + 1]):
                            j = members[k]
                            if j == i:
                                continue
                            dx = pos[j, 0] - xi
                            dy = pos[j, 1] - yi
                            dz = pos[j, 2] - zi
                            reach = ri + radii[j]
                            d2 = dx * dx + dy * dy + dz * dz
                            if d2 < reach * reach:
                                if sweep == 1:
                                    nb[found] = j
                                    # the cosine of the cap j buries (smaller: a larger cap,
                                    # tried first), own group before the others
                                    d = max(math.sqrt(d2), 1e-300)
                                    cap = (ri * ri + d2 - radii[j] * radii[j]) / (2.0 * ri * d)
                                    cap = min(max(cap, -1.0), 1.0)
                                    key[found] = cap + (0.0 if groups[j] == groups[i] else 4.0)
                                found += 1
        # the neighbours' centres and squared radii in that order, contiguous
        order = np.argsort(key)
        nx = np.empty(found)
        ny = np.empty(found)
        nz = np.empty(found)
        nr2 = np.empty(found)
        own = 0
        for t in range(found):
            j = nb[order[t]]
            nx[t], ny[t], nz[t] = pos[j, 0], pos[j, 1], pos[j, 2]
            nr2[t] = radii[j] * radii[j]
            if groups[j] == groups[i]:
                own += 1
        other = found - own
        count_whole = 0
        count_alone = 0
        # the neighbour that buried the previous point is likely to bury the next: start there
        last_own = 0
        last_other = own
        for p in range(m):
            px = xi + ri * points[p, 0]
            py = yi + ri * points[p, 1]
            pz = zi + ri * points[p, 2]
            k = _burier(px, py, pz, nx, ny, nz, nr2, 0, own, last_own)
            if k >= 0:
                last_own = k
                continue
            count_alone += 1
            k = _burier(px, py, pz, nx, ny, nz, nr2, own, other, last_other)
            if k >= 0:
                last_other = k
            else:
                count_whole += 1
        whole[i] = count_whole
        alone[i] = count_alone
