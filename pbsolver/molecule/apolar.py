"""APBS 3.4.1's ``APOLAR`` model: γ·SASA + p·SAV + the WCA dispersion integral, and its forces.

**Model** (Wagoner & Baker 2006, as APBS 3.4.1 evaluates it)::

    W = γ · Σᵢ Aᵢ  +  p · V  +  Σᵢ Wᵢ,    Wᵢ = ρ ∫ uᵢ(|x − rᵢ|) χ(x) d³x

Aᵢ is atom i's solvent-accessible area, V the volume of the union of the spheres of radius
Rₖ = rₖ + srad, χ(x) = Πₖ H(|x − rₖ| − Rₖ) the accessibility (1 outside every such sphere),
ρ = ``bconc`` and uᵢ the WCA-split Lennard-Jones attraction of atom i and a water molecule:
σᵢ = rᵢ + ``water_radius``, εᵢ = √(εᵢᴸᴶ · ``water_epsilon``),
uᵢ(r) = εᵢ(σᵢ¹²/r¹² − 2σᵢ⁶/r⁶) for σᵢ ≤ r ≤ 14 Å, −εᵢ for r < σᵢ, 0 beyond 14 Å.

**Units.** Å, kJ/mol; γ in kJ mol⁻¹ Å⁻², p in kJ mol⁻¹ Å⁻³, ρ in Å⁻³; forces kJ mol⁻¹ Å⁻¹.

**Energies follow APBS exactly** (``src/generic/vacc.c``, ``vclist.c``, ``routines.c``
``initAPOL``), same rules and the same quadrature, so the numbers agree with APBS's printout to
rounding (``tests/test_apolar.py``):

* APBS's cell list uses the padded radius srad + 2·dpos; its domain is the atoms' bounding box
  grown by 1.42·(max rᵢ + srad + 2·dpos) on each side (``VCLIST_INFLATE``).
* Areas use APBS's reference sphere (:func:`apbs_sphere_points`, ``VaccSurf_refSphere``) of
  ⌈4π·(max rᵢ + srad + 2·dpos)²·sdens⌉ requested points; Aᵢ = 4πRᵢ² · exposed / npts, a point
  exposed when strictly outside (``<``) every other atom's sphere Rₖ; an atom of radius 0 has
  no area (APBS gives it an empty surface) but its sphere of radius srad still buries others'.
  The point test is the Shrake–Rupley kernel of :mod:`pbsolver.molecule.nonpolar`.
* V (only when p ≠ 0, else 0 as in APBS) is ``Vacc_totalSAV``: lattice points from the lower to
  the upper corner of the cell-list domain, spacing ``grid`` or else length/(⌈2·length + 1⌉ − 1),
  half weights at the two ends, each point counted when inside some sphere Rₖ.
* Wᵢ (only when ρ ≠ 0) is ``Vacc_wcaEnergyAtom``: a lattice per atom from C's integer
  truncation of rᵢ − 14 to that of rᵢ + 14, stepped by ``x = x + h`` (h = ``grid``, else 0.5 Å)
  exactly as the C loop accumulates, half weights where |x − end| < 10⁻⁹, times h³.
  The box [int(rᵢ − 14), int(rᵢ + 14)] may clip the 14 Å ball by up to 1 Å on one side; that
  is APBS's quadrature and is kept.

APBS computes the area whatever γ is; here too (it prints zero areas when γ = 0, this module
returns the areas).

**Forces are F = −∂W/∂rᵢ, not APBS's printout.** APBS 3.4.1's apolar forces are inconsistent:
its per-atom ``tot`` is −(γ·dA + p·dV + ρ·f_wca) although f_wca already contains ρ and is
already a force, its dA is the derivative of the moved atom's own area only (the neighbours'
areas change too), and ``print apolForce`` adds the raw area derivatives to forces. Here:

* ``"sasa"``: −γ × the central difference (step ``dpos``) of the *total* area Σₖ Aₖ with
  respect to each coordinate of each atom, with the same point set and rules as the energy
  (only the moved atom and the atoms within Rᵢ + Rₖ + dpos of it are recounted).
* ``"sav"``: −p · ∂V/∂rᵢ with ∂V/∂rᵢ = ∮ n̂ dS over the exposed part of atom i's sphere Rᵢ
  (``Vacc_atomdSAV``'s formula, the exact derivative of the union's volume: moving an exposed
  cap outward grows V), by the reference-sphere points. Unlike APBS, an atom of radius 0 also
  gets it: its sphere of radius srad is part of V.
* ``"wca"``: −∂(Σᵢ Wᵢ)/∂rᵢ of the integral over the 14 Å ball (the derivative of the
  continuous integral, not of the lattice sum, which jumps as points enter and leave spheres).
  With U(x) = Σⱼ uⱼ(|x − rⱼ|) the total integrand and n̂ the outward normal,
  ∂χ/∂rᵢ = −δ(|x − rᵢ| − Rᵢ) n̂ Πₖ≠ᵢ H(|x − rₖ| − Rₖ), so

      Fᵢ = ρ ∫ uᵢ'(|x − rᵢ|) n̂ χ d³x          (the integrand moves; APBS's Vacc_wcaForceAtom)
         + ρ ∮_{exposed |x − rᵢ| = Rᵢ} U n̂ dS    (the excluded sphere moves)
         − ρ uᵢ(14) ∮_{|x − rᵢ| = 14} χ n̂ dS      (the 14 Å cutoff, where uᵢ jumps to 0)

  The first term is evaluated on the energy's lattice, exactly as APBS (it equals APBS's
  printed ``wca`` force to rounding); the surface terms by the reference-sphere points scaled
  to Rᵢ and to 14 Å. The last term vanishes for a lone atom and is small (ρ·uᵢ(14) ~ 10⁻⁵
  kJ mol⁻¹ Å⁻³), but it is what balances the exclusion force on an atom ~14 Å away.
  APBS's clipping of the ball by the integer box (above) is a quadrature artefact, not
  differentiated.
* ``"total"`` = the sum of the three. ``"wca_apbs"`` (an extra key) is the integrand term of
  ``"wca"`` alone, what APBS prints as its ``wca`` force.

**Accuracy of the forces** (``tests/test_apolar.py``): the area force is exactly the central
difference of the total area; the surface integrals carry the point set's error, which falls
with ``sdens`` (two spheres' dV/dd within 0.2 % at sdens 100, 1.6 % at sdens 10; the WCA
exclusion term within ~1 % of itself at sdens 20, ~0.2 % at sdens 100). The WCA forces agree
with energy differences along 1 Å paths to the lattice noise of those energies
(≤ 2.3·10⁻³ kJ/mol at an effective 0.0625 Å lattice) and, for an atom pair straddling the cutoff,
with a 1-D radial integral to 10⁻³ (exclusion) and 0.4 % (integrand + cutoff terms).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
from numba import njit, prange

from pbsolver.backends import kernel_cache
from pbsolver.exceptions import InputError
from pbsolver.molecule.nonpolar import sasa_on_points
from pbsolver.options import finite

#: APBS's ``VSMALL``: the tolerance of its end-point (half-weight) tests and of radius 0, Å.
VSMALL = 1e-9
#: APBS's ``VCLIST_INFLATE``: the cell-list domain's margin, in units of max rᵢ + padded srad.
VCLIST_INFLATE = 1.42
#: Reach of the WCA integral around each atom, Å (APBS's ``pad``, also the cutoff of uᵢ).
WCA_PAD = 14
#: APBS's default WCA lattice spacing, Å (when ``grid`` is not given).
WCA_SPACING = 0.5

kernel_cache.configure()  # before the kernels below are defined: their cache's directory
_JIT = {"cache": True, "nogil": True, "boundscheck": False}


@dataclass(frozen=True)
class ApolarParameters:
    """The parameters of an APBS ``APOLAR`` section.

    Attributes
    ----------
    gamma : float
        Surface tension, kJ mol⁻¹ Å⁻² (APBS ``gamma``).
    press : float
        Solvent pressure, kJ mol⁻¹ Å⁻³ (APBS ``press``).
    bconc : float
        Solvent number density, Å⁻³ (APBS ``bconc``).
    srad : float
        Probe radius, Å (APBS ``srad``).
    sdens : float
        Sphere points per Å² (APBS ``sdens``).
    dpos : float
        Displacement of the finite-difference area force, Å (APBS ``dpos``); it also pads the
        cell list and so sets the reference sphere's point count.
    grid : tuple of 3 floats or None
        Lattice spacing of the volume and WCA integrals, Å (APBS ``grid``); None: APBS's
        defaults.
    water_radius : float
        Water's LJ radius, Å (APBS ``watsigma``: ``WAT OW`` of the parameter file).
    water_epsilon : float
        Water's LJ well depth, kJ/mol (APBS ``watepsilon``).
    """

    gamma: float = 0.0
    press: float = 0.0
    bconc: float = 0.0
    srad: float = 1.4
    sdens: float = 10.0
    dpos: float = 0.2
    grid: tuple | None = None
    water_radius: float = 0.0
    water_epsilon: float = 0.0


@dataclass
class ApolarResult:
    """Per-atom and total apolar terms (see the module docstring for the model).

    Attributes
    ----------
    sasa : ndarray (n,)
        Per-atom solvent-accessible area, Å².
    sav : float
        Solvent-accessible volume, Å³ (0.0 when ``press`` is 0, as APBS skips it).
    wca : ndarray (n,)
        Per-atom WCA energy, kJ/mol (zeros when ``bconc`` is 0).
    energy : float
        γ·Σ sasa + p·sav + Σ wca, kJ/mol.
    forces : dict or None
        None unless asked for; then ``"sasa"``, ``"sav"``, ``"wca"``, ``"total"`` → (n, 3)
        arrays, kJ mol⁻¹ Å⁻¹, F = −∂W/∂r; and ``"wca_apbs"``, the integrand part of
        ``"wca"`` alone: what APBS prints as its ``wca`` force (``Vacc_wcaForceAtom``).
    """

    sasa: np.ndarray
    sav: float
    wca: np.ndarray
    energy: float
    forces: dict | None = None


# ---------------------------------------------------------------------- public API
@functools.lru_cache(maxsize=16)
def _ref_sphere(npts: int) -> np.ndarray:
    # math.sin/cos (libm, as APBS's C) rather than numpy's vectorised ones, whose last bit may
    # differ: a point on a sphere's edge would then flip.
    frac = npts / 4.0
    ntheta = int(math.floor(math.sqrt(math.pi * frac) + 0.5))  # VRINT
    dtheta = math.pi / ntheta
    nphimax = 2 * ntheta
    out = []
    for itheta in range(ntheta):
        theta = dtheta * itheta
        sintheta = math.sin(theta)
        costheta = math.cos(theta)
        nphi = int(math.floor(sintheta * nphimax + 0.5))
        if nphi != 0:
            dphi = 2 * math.pi / nphi
            for iphi in range(nphi):
                phi = dphi * iphi
                out.append((math.cos(phi) * sintheta, math.sin(phi) * sintheta, costheta))
    pts = np.array(out, dtype=np.float64).reshape(-1, 3)
    pts.flags.writeable = False
    return pts


def apbs_sphere_points(n: int) -> np.ndarray:
    """APBS's reference unit sphere for ``n`` requested points (``VaccSurf_refSphere``).

    Rings of constant polar angle θ = kπ/nθ, nθ = rint(√(πn/4)), k = 0 … nθ − 1, with
    rint(2nθ·sin θ) equally spaced points each (azimuth from 0). The actual count m is near
    ``n``, not equal to it; APBS divides by m.

    Parameters
    ----------
    n : int
        Requested point count (≥ 1).

    Returns
    -------
    ndarray (m, 3)
        Unit vectors, in APBS's order.

    Raises
    ------
    InputError
        ``n`` not an integer ≥ 1.
    """
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 1:
        raise InputError(f"n must be an integer >= 1, got {n!r}")
    return _ref_sphere(int(n)).copy()


def apolar_terms(positions, radii, epsilons, params: ApolarParameters, *, forces: bool = False):
    """APBS's apolar energy terms (and, optionally, their forces) for one molecule.

    Parameters
    ----------
    positions, radii : array_like (n, 3) and (n,)
        The atoms' centres and radii (≥ 0), Å (APBS's parameter-file radii).
    epsilons : array_like (n,) or None
        LJ well depths of the atoms, kJ/mol (≥ 0); used only when ``params.bconc`` ≠ 0
        (None is accepted then).
    params : ApolarParameters
    forces : bool
        Also compute F = −∂W/∂r per term (see the module docstring).

    Returns
    -------
    ApolarResult

    Raises
    ------
    InputError
        Bad shapes, non-finite or negative values, ``bconc`` ≠ 0 without positive
        ``water_radius`` and ``water_epsilon``.
    """
    pos, rad, eps, p = _check(positions, radii, epsilons, params)
    n = len(pos)
    srad_pad = p["srad"] + 2.0 * p["dpos"]
    if n == 0:
        zero = np.zeros((0, 3))
        fz = {k: zero.copy() for k in ("sasa", "sav", "wca", "total")} if forces else None
        return ApolarResult(np.zeros(0), 0.0, np.zeros(0), 0.0, fz)
    # the reference sphere: APBS sizes it by the largest atom plus the cell list's padded radius
    maxrad = float(rad.max()) + srad_pad
    npts = math.ceil(4.0 * math.pi * maxrad * maxrad * p["sdens"])
    points = _ref_sphere(npts)
    expanded = rad + p["srad"]

    area = sasa_on_points(pos, rad, points, probe=p["srad"])
    area[rad < VSMALL] = 0.0  # Vacc_atomSurf: no surface for a zero-radius atom
    grid = _AccessGrid(pos, expanded)

    sav = 0.0
    if abs(p["press"]) > VSMALL:
        lower, upper = _clist_domain(pos, rad, srad_pad)
        sav = _total_sav(grid, lower, upper, p["grid"])

    wca = np.zeros(n)
    wca_force = np.zeros((n, 3))
    if abs(p["bconc"]) > VSMALL:
        spacing = p["grid"] if p["grid"] is not None else (WCA_SPACING,) * 3
        sig = rad + p["water_radius"]
        ep = np.sqrt(eps * p["water_epsilon"])
        wca, wca_force = _wca_lattice(grid, pos, sig, ep, p["bconc"], spacing)

    energy = p["gamma"] * float(area.sum()) + p["press"] * sav + float(wca.sum())
    out = ApolarResult(area, sav, wca, energy, None)
    if not forces:
        return out

    f_sasa = np.zeros((n, 3))
    if p["gamma"] != 0.0:
        f_sasa = -p["gamma"] * _dsasa(pos, rad, expanded, points, p["dpos"])
    f_sav = np.zeros((n, 3))
    if abs(p["press"]) > VSMALL:
        f_sav = -p["press"] * _surface_integral(grid, pos, expanded, points)
    f_wca = np.zeros((n, 3))
    if abs(p["bconc"]) > VSMALL:
        sig = rad + p["water_radius"]
        ep = np.sqrt(eps * p["water_epsilon"])
        f_wca = wca_force + p["bconc"] * _surface_integral(grid, pos, expanded, points, sig, ep)
        f_wca += _cutoff_term(grid, pos, sig, ep, p["bconc"], points)
    out.forces = {"sasa": f_sasa, "sav": f_sav, "wca": f_wca, "total": f_sasa + f_sav + f_wca,
                  "wca_apbs": wca_force}  # fmt: skip
    return out


# ---------------------------------------------------------------------- input checks
def _check(positions, radii, epsilons, params):
    if not isinstance(params, ApolarParameters):
        raise InputError(f"params must be an ApolarParameters, got {type(params).__name__}")
    try:
        pos = np.asarray(positions, dtype=np.float64)
        rad = np.asarray(radii, dtype=np.float64)
    except (TypeError, ValueError):
        raise InputError("positions and radii must be numeric arrays") from None
    if pos.ndim != 2 or pos.shape[1] != 3:
        raise InputError(f"positions must be an (n, 3) array, got shape {pos.shape}")
    n = len(pos)
    if rad.shape != (n,):
        raise InputError(f"radii must have shape ({n},), got {rad.shape}")
    if not np.isfinite(pos).all():
        raise InputError("positions must be finite")
    if not (np.isfinite(rad).all() and (rad >= 0).all()):
        raise InputError("radii must be finite and >= 0")
    p = {}
    for name in ("gamma", "press", "bconc"):
        p[name] = finite(getattr(params, name), name)
    for name in ("srad", "water_radius", "water_epsilon"):
        p[name] = finite(getattr(params, name), name)
        if p[name] < 0:
            raise InputError(f"{name} must be >= 0, got {p[name]!r}")
    p["sdens"] = finite(params.sdens, "sdens")
    if p["sdens"] <= 0:
        raise InputError(f"sdens must be > 0, got {params.sdens!r}")
    p["dpos"] = finite(params.dpos, "dpos")
    if p["dpos"] <= 0:
        raise InputError(f"dpos must be > 0, got {params.dpos!r}")
    if p["bconc"] < 0:
        raise InputError(f"bconc must be >= 0, got {params.bconc!r}")
    if params.grid is None:
        p["grid"] = None
    else:
        try:
            g = tuple(float(v) for v in params.grid)
        except (TypeError, ValueError):
            raise InputError(f"grid must be 3 numbers or None, got {params.grid!r}") from None
        if len(g) != 3 or not all(math.isfinite(v) and v > 0 for v in g):
            raise InputError(f"grid must be 3 finite spacings > 0, got {params.grid!r}")
        p["grid"] = g
    eps = np.zeros(n)
    if abs(p["bconc"]) > VSMALL:
        if not (p["water_radius"] > 0 and p["water_epsilon"] > 0):
            raise InputError(
                "bconc != 0 needs water's LJ parameters: water_radius and water_epsilon must be "
                f"> 0 (APBS reads them from WAT OW of the parameter file), got "
                f"{p['water_radius']!r} and {p['water_epsilon']!r}"
            )
        if epsilons is None:
            raise InputError("bconc != 0 needs the atoms' LJ well depths (epsilons)")
        try:
            eps = np.asarray(epsilons, dtype=np.float64)
        except (TypeError, ValueError):
            raise InputError("epsilons must be a numeric array") from None
        if eps.shape != (n,):
            raise InputError(f"epsilons must have shape ({n},), got {eps.shape}")
        if not (np.isfinite(eps).all() and (eps >= 0).all()):
            raise InputError("epsilons must be finite and >= 0")
    return np.ascontiguousarray(pos), np.ascontiguousarray(rad), np.ascontiguousarray(eps), p


def _clist_domain(pos, rad, srad_pad):
    """APBS's auto cell-list domain (``Vclist_setupGrid``): the SAV integral's box."""
    grow = VCLIST_INFLATE * (float(rad.max()) + srad_pad)
    return pos.min(axis=0) - grow, pos.max(axis=0) + grow


# ---------------------------------------------------------------------- accessibility grid
class _AccessGrid:
    """Each atom listed in every cubic cell its sphere Rₖ's bounding box touches.

    A point then needs only its own cell's atoms to decide χ (as APBS's cell list); points
    outside the grid are accessible.
    """

    def __init__(self, pos, expanded):
        self.pos = pos
        self.r2 = expanded * expanded
        rmax = max(float(expanded.max()), 1e-3)
        lo = pos.min(axis=0) - rmax - 1.0
        hi = pos.max(axis=0) + rmax + 1.0
        size = 1.0
        while np.prod(np.ceil((hi - lo) / size)) > 4e6:
            size *= 1.25
        self.lo = lo
        self.size = size
        self.dims = np.ceil((hi - lo) / size).astype(np.int64)
        self.start, self.members = _cover(pos, expanded, lo, size, self.dims)

    def args(self):
        return self.pos, self.r2, self.lo, self.size, self.dims, self.start, self.members


@njit(**_JIT)
def _span(pos, expanded, lo, size, dims, k):
    """The cells (inclusive index ranges) that sphere k's bounding box touches."""
    a = np.empty(3, dtype=np.int64)
    b = np.empty(3, dtype=np.int64)
    for d in range(3):
        a[d] = max(int(math.floor((pos[k, d] - expanded[k] - lo[d]) / size)), 0)
        b[d] = min(int(math.floor((pos[k, d] + expanded[k] - lo[d]) / size)), dims[d] - 1)
    return a, b


@njit(**_JIT)
def _cover(pos, expanded, lo, size, dims):
    n = pos.shape[0]
    ncell = dims[0] * dims[1] * dims[2]
    counts = np.zeros(ncell + 1, dtype=np.int64)
    for k in range(n):
        a, b = _span(pos, expanded, lo, size, dims, k)
        for i in range(a[0], b[0] + 1):
            for j in range(a[1], b[1] + 1):
                for m in range(a[2], b[2] + 1):
                    counts[(i * dims[1] + j) * dims[2] + m + 1] += 1
    for c in range(ncell):
        counts[c + 1] += counts[c]
    members = np.empty(counts[ncell], dtype=np.int64)
    fill = counts[:ncell].copy()
    for k in range(n):
        a, b = _span(pos, expanded, lo, size, dims, k)
        for i in range(a[0], b[0] + 1):
            for j in range(a[1], b[1] + 1):
                for m in range(a[2], b[2] + 1):
                    c = (i * dims[1] + j) * dims[2] + m
                    members[fill[c]] = k
                    fill[c] += 1
    return counts, members


@njit(**_JIT, inline="always")
def _row_cell(x, y, lo, size, dims):
    """First cell of the row of points (x, y, ·), or −1 when that row is off the grid."""
    fx = (x - lo[0]) / size
    fy = (y - lo[1]) / size
    if fx < 0.0 or fy < 0.0:
        return -1
    i = int(fx)
    j = int(fy)
    if i >= dims[0] or j >= dims[1]:
        return -1
    return (i * dims[1] + j) * dims[2]


@njit(**_JIT, inline="always")
def _accessible_in_row(x, y, z, row, skip, pos, r2, lo, size, dims, start, members):
    """:func:`_accessible` of a point whose row :func:`_row_cell` gave (a row's loop hoists it)."""
    if row < 0:
        return 1
    fz = (z - lo[2]) / size
    if fz < 0.0:
        return 1
    m = int(fz)
    if m >= dims[2]:
        return 1
    c = row + m
    for t in range(start[c], start[c + 1]):
        k = members[t]
        if k == skip:
            continue
        dx = x - pos[k, 0]
        dy = y - pos[k, 1]
        dz = z - pos[k, 2]
        if dx * dx + dy * dy + dz * dz < r2[k]:
            return 0
    return 1


@njit(**_JIT)
def _accessible(x, y, z, skip, pos, r2, lo, size, dims, start, members):
    """1 if (x, y, z) is strictly outside every sphere Rₖ (k ≠ skip), else 0 (APBS's test)."""
    row = _row_cell(x, y, lo, size, dims)
    return _accessible_in_row(x, y, z, row, skip, pos, r2, lo, size, dims, start, members)


# ---------------------------------------------------------------------- lattices
@njit(**_JIT)
def _axis(lo, hi, h):
    """APBS's 1-D lattice: x = lo, x = x + h while x <= hi; half weights at |x − end| < VSMALL."""
    count = 0
    x = lo
    while x <= hi:
        count += 1
        x = x + h
    xs = np.empty(count)
    ws = np.empty(count)
    x = lo
    for t in range(count):
        xs[t] = x
        if abs(x - lo) < VSMALL or abs(x - hi) < VSMALL:
            ws[t] = 0.5
        else:
            ws[t] = 1.0
        x = x + h
    return xs, ws


@njit(parallel=True, **_JIT)
def _sav_kernel(xs, wx, ys, wy, zs, wz, pos, r2, lo, size, dims, start, members):
    part = np.zeros(len(xs))
    for a in prange(len(xs)):
        s = 0.0
        for b in range(len(ys)):
            row = _row_cell(xs[a], ys[b], lo, size, dims)
            for c in range(len(zs)):
                w = wx[a] * wy[b] * wz[c]
                acc = _accessible_in_row(xs[a], ys[b], zs[c], row, -1, pos, r2, lo, size, dims,
                                         start, members)  # fmt: skip
                s += w * (1.0 - acc)
        part[a] = s
    return part


def _total_sav(grid, lower, upper, spacing):
    """``Vacc_totalSAV``: the trapezoid count of lattice points inside some sphere Rₖ, Å³."""
    axes = []
    spacs = []
    for d in range(3):
        length = upper[d] - lower[d]
        h = length / (math.ceil(length * 2.0 + 1.0) - 1.0) if spacing is None else spacing[d]
        spacs.append(h)
        axes.extend(_axis(float(lower[d]), float(upper[d]), h))
    part = _sav_kernel(*axes, *grid.args())
    return float(part.sum()) * spacs[0] * spacs[1] * spacs[2]


@njit(**_JIT)
def _wca_axes(pos, h):
    """Per-atom lattices of ``Vacc_wcaEnergyAtom`` (CSR by atom, one set per axis)."""
    n = pos.shape[0]
    offs = np.zeros((3, n + 1), dtype=np.int64)
    for d in range(3):
        for i in range(n):
            # C assigns pos ∓ 14 to an int: truncation toward zero
            lo = float(int(pos[i, d] - WCA_PAD))
            hi = float(int(pos[i, d] + WCA_PAD))
            xs, _ = _axis(lo, hi, h[d])
            offs[d, i + 1] = offs[d, i] + len(xs)
    total = offs[:, n].max()
    coords = np.zeros((3, total))
    weights = np.zeros((3, total))
    for d in range(3):
        for i in range(n):
            lo = float(int(pos[i, d] - WCA_PAD))
            hi = float(int(pos[i, d] + WCA_PAD))
            xs, ws = _axis(lo, hi, h[d])
            coords[d, offs[d, i] : offs[d, i + 1]] = xs
            weights[d, offs[d, i] : offs[d, i + 1]] = ws
    return offs, coords, weights


@njit(parallel=True, **_JIT)
def _wca_kernel(job_atom, job_x, offs, coords, weights, sig, ep, rho, pos, r2, lo, size, dims,
                start, members):  # fmt: skip
    """Per (atom, x-plane): Σ w·u·χ and Σ w·ρu'·n̂·χ (``Vacc_wcaEnergyAtom``/``ForceAtom``)."""
    nj = len(job_atom)
    energy = np.zeros(nj)
    force = np.zeros((nj, 3))
    for job in prange(nj):
        i = job_atom[job]
        ix = offs[0, i] + job_x[job]
        x = coords[0, ix]
        wx = weights[0, ix]
        px, py, pz = pos[i, 0], pos[i, 1], pos[i, 2]
        sigma = sig[i]
        eps = ep[i]
        sigma6 = sigma**6.0
        sigma12 = sigma**12.0
        c_e = rho * eps
        c_f = 12.0 * rho * eps
        e = 0.0
        fx = 0.0
        fy = 0.0
        fz = 0.0
        for iy in range(offs[1, i], offs[1, i + 1]):
            y = coords[1, iy]
            wxy = wx * weights[1, iy]
            row = _row_cell(x, y, lo, size, dims)
            for iz in range(offs[2, i], offs[2, i + 1]):
                z = coords[2, iz]
                x2 = (x - px) * (x - px)
                y2 = (y - py) * (y - py)
                z2 = (z - pz) * (z - pz)
                r = math.sqrt(x2 + y2 + z2)
                # beyond 14 Å nothing counts: skip the accessibility test (a third of the box)
                if r > WCA_PAD:
                    continue
                w = wxy * weights[2, iz]
                if _accessible_in_row(x, y, z, row, -1, pos, r2, lo, size, dims, start,
                                      members) == 0:  # fmt: skip
                    continue
                if r >= sigma:
                    # APBS's r**6 … r**13 by products (pow calls were most of the time; the
                    # terms move by a few ulp)
                    r2_ = r * r
                    r6 = r2_ * r2_ * r2_
                    r12 = r6 * r6
                    e += c_e * (-2.0 * sigma6 / r6 + sigma12 / r12) * w
                    fo = c_f * (sigma6 / (r6 * r) - sigma12 / (r12 * r)) / r
                    fx += w * ((x - px) * fo)
                    fy += w * ((y - py) * fo)
                    fz += w * ((z - pz) * fo)
                else:
                    e += -1.0 * eps * rho * w
        energy[job] = e
        force[job, 0] = fx
        force[job, 1] = fy
        force[job, 2] = fz
    return energy, force


def _wca_lattice(grid, pos, sig, ep, rho, spacing):
    """Per-atom WCA energies and APBS's integrand force on APBS's lattices."""
    h = np.asarray(spacing, dtype=np.float64)
    offs, coords, weights = _wca_axes(pos, h)
    nx = np.diff(offs[0])
    job_atom = np.repeat(np.arange(len(pos), dtype=np.int64), nx)
    job_x = np.arange(len(job_atom), dtype=np.int64) - np.repeat(offs[0, :-1], nx)
    e, f = _wca_kernel(job_atom, job_x, offs, coords, weights, sig, ep, rho, *grid.args())
    cell = h[0] * h[1] * h[2]
    energy = np.bincount(job_atom, weights=e, minlength=len(pos)) * cell
    force = np.column_stack(
        [np.bincount(job_atom, weights=f[:, d], minlength=len(pos)) for d in range(3)]
    )
    return energy, force * cell


# ---------------------------------------------------------------------- surface integrals
@njit(**_JIT)
def _u(r, sigma, eps):
    """uᵢ(r) as APBS integrates it: LJ for σ ≤ r ≤ 14, −ε inside σ, 0 beyond 14 Å."""
    if r > WCA_PAD:
        return 0.0
    if r < sigma:
        return -eps
    s6 = (sigma / r) ** 6
    return eps * (s6 * s6 - 2.0 * s6)


@njit(parallel=True, **_JIT)
def _surface_kernel(points, expanded, near_start, near, sig, ep, with_u, skip_own, pos, r2, lo,
                    size, dims, start, members):  # fmt: skip
    """Σ over atom i's exposed points of g(p)·n̂·4πRᵢ²/m, g = 1 or U(p) = Σⱼ uⱼ.

    A point of sphere i is exposed outside every sphere Rₖ, k ≠ i with ``skip_own`` (the sphere
    is atom i's own), all k without (a sphere of another radius around atom i).
    """
    n = pos.shape[0]
    m = points.shape[0]
    out = np.zeros((n, 3))
    for i in prange(n):
        R = expanded[i]
        if R <= 0.0:
            continue
        w = 4.0 * math.pi * R * R / m
        sx = 0.0
        sy = 0.0
        sz = 0.0
        for q in range(m):
            x = R * points[q, 0] + pos[i, 0]
            y = R * points[q, 1] + pos[i, 1]
            z = R * points[q, 2] + pos[i, 2]
            skip = i if skip_own else -1
            if _accessible(x, y, z, skip, pos, r2, lo, size, dims, start, members) == 0:
                continue
            g = 1.0
            if with_u:
                g = 0.0
                for t in range(near_start[i], near_start[i + 1]):
                    j = near[t]
                    dx = x - pos[j, 0]
                    dy = y - pos[j, 1]
                    dz = z - pos[j, 2]
                    g += _u(math.sqrt(dx * dx + dy * dy + dz * dz), sig[j], ep[j])
            sx += g * points[q, 0]
            sy += g * points[q, 1]
            sz += g * points[q, 2]
        out[i, 0] = sx * w
        out[i, 1] = sy * w
        out[i, 2] = sz * w
    return out


def _pairs_within(pos, reach):
    """CSR lists of the atoms j (j = i included) within ``reach[i]`` of each atom i, sorted."""
    from scipy.spatial import cKDTree

    lists = cKDTree(pos).query_ball_point(pos, reach, return_sorted=True)
    start = np.zeros(len(pos) + 1, dtype=np.int64)
    np.cumsum([len(x) for x in lists], out=start[1:])
    flat = np.fromiter((j for x in lists for j in x), dtype=np.int64, count=int(start[-1]))
    return start, flat


def _surface_integral(grid, pos, expanded, points, sig=None, ep=None, skip_own=True):
    """∮ over each atom's exposed sphere Rᵢ of n̂ dS (``sig`` None) or of U n̂ dS.

    ``expanded`` gives the spheres' radii; ``skip_own`` False: the sphere is not atom i's own
    (the 14 Å cutoff sphere), so atom i's sphere Rᵢ also excludes.
    """
    n = len(pos)
    if sig is None:
        near_start = np.zeros(n + 1, dtype=np.int64)
        near = np.zeros(0, dtype=np.int64)
        with_u = False
        sig = ep = np.zeros(n)
    else:
        # the atoms whose uⱼ reaches atom i's sphere: within Rᵢ + 14 Å
        near_start, near = _pairs_within(pos, expanded + WCA_PAD + 1e-6)
        with_u = True
    return _surface_kernel(points, expanded, near_start, near, sig, ep, with_u, skip_own,
                           *grid.args())  # fmt: skip


def _cutoff_term(grid, pos, sig, ep, rho, points):
    """−ρ uᵢ(14) ∮_{14 Å} χ n̂ dS: uᵢ drops from uᵢ(14) to 0 at the cutoff."""
    u14 = np.array([_u(float(WCA_PAD), s, e) for s, e in zip(sig, ep, strict=True)])
    cutoff = np.full(len(pos), float(WCA_PAD))
    flux = _surface_integral(grid, pos, cutoff, points, skip_own=False)
    return -rho * u14[:, None] * flux


# ---------------------------------------------------------------------- area derivative
@njit(**_JIT)
def _inside(x, y, z, cx, cy, cz, R):
    """Whether (x, y, z) lies strictly inside the sphere of radius R around (cx, cy, cz)."""
    dx = x - cx
    dy = y - cy
    dz = z - cz
    return dx * dx + dy * dy + dz * dz < R * R


@njit(parallel=True, **_JIT)
def _burial(pos, expanded, points, near_start, near):
    """min(number of spheres Rₖ (k ≠ j) holding point q of atom j, 2), per (j, q)."""
    n = pos.shape[0]
    m = points.shape[0]
    out = np.zeros((n, m), dtype=np.uint8)
    for j in prange(n):
        R = expanded[j]
        for q in range(m):
            x = R * points[q, 0] + pos[j, 0]
            y = R * points[q, 1] + pos[j, 1]
            z = R * points[q, 2] + pos[j, 2]
            c = 0
            for t in range(near_start[j], near_start[j + 1]):
                k = near[t]
                if k != j and _inside(x, y, z, pos[k, 0], pos[k, 1], pos[k, 2], expanded[k]):
                    c += 1
                    if c == 2:
                        break
            out[j, q] = c
    return out


@njit(parallel=True, **_JIT)
def _dsasa_kernel(pos, rad, expanded, points, near_start, near, buried, dpos):
    """Central difference of the total area for each coordinate of each atom, Å."""
    n = pos.shape[0]
    m = points.shape[0]
    out = np.zeros((n, 3))
    for i in prange(n):
        Ri = expanded[i]
        for d in range(3):
            total = np.zeros(2)
            for s in range(2):
                shift = dpos if s == 1 else -dpos
                c = np.empty(3)
                c[0], c[1], c[2] = pos[i, 0], pos[i, 1], pos[i, 2]
                c[d] = pos[i, d] + shift
                # atom i's own area at the moved centre
                area = 0.0
                if rad[i] >= VSMALL:
                    exposed = 0
                    for q in range(m):
                        x = Ri * points[q, 0] + c[0]
                        y = Ri * points[q, 1] + c[1]
                        z = Ri * points[q, 2] + c[2]
                        hit = False
                        for t in range(near_start[i], near_start[i + 1]):
                            k = near[t]
                            if k == i:
                                continue
                            if _inside(x, y, z, pos[k, 0], pos[k, 1], pos[k, 2], expanded[k]):
                                hit = True
                                break
                        if not hit:
                            exposed += 1
                    area = 4.0 * math.pi * Ri * Ri * exposed / m
                # the neighbours' areas: only points that no third sphere buries can change
                for t in range(near_start[i], near_start[i + 1]):
                    j = near[t]
                    if j == i or rad[j] < VSMALL:
                        continue
                    Rj = expanded[j]
                    change = 0
                    for q in range(m):
                        x = Rj * points[q, 0] + pos[j, 0]
                        y = Rj * points[q, 1] + pos[j, 1]
                        z = Rj * points[q, 2] + pos[j, 2]
                        before = _inside(x, y, z, pos[i, 0], pos[i, 1], pos[i, 2], Ri)
                        others = buried[j, q] - (1 if before else 0)
                        if others > 0:
                            continue
                        after = _inside(x, y, z, c[0], c[1], c[2], Ri)
                        change += (1 if before else 0) - (1 if after else 0)
                    area += 4.0 * math.pi * Rj * Rj * change / m
                total[s] = area
            out[i, d] = (total[1] - total[0]) / (2.0 * dpos)
    return out


def _dsasa(pos, rad, expanded, points, dpos):
    """∂(Σₖ Aₖ)/∂rᵢ by central differences of step ``dpos`` (APBS's areas), Å."""
    # pairs whose spheres can touch after a move of dpos
    reach = expanded + float(expanded.max()) + dpos + 1e-9
    near_start, near = _pairs_within(pos, reach)
    buried = _burial(pos, expanded, points, near_start, near)
    return _dsasa_kernel(pos, rad, expanded, points, near_start, near, buried, dpos)
