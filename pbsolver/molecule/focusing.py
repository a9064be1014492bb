"""Focusing: a coarse solve over a large box gives the Dirichlet values of finer boxes inside it.

As APBS' ``mg-auto``: the coarsest grid (large, coarse spacing) gets the usual far-field
boundary values (``boundary_kind``: Debye–Hückel or zero) and is solved; each finer grid lies
inside the one before it, and its outer layer takes that coarser solution, trilinearly
interpolated. pbsolver interpolates the reaction field φ_rf, not the total potential: φ_rf is
smooth wherever the charges are (φ_c, the singular part, is analytic on every grid), so a
boundary that cuts through the solute interpolates as well as one in the solvent. Where ions
reach the outer layer (κ̄² > 0) the total potential is the smooth one (screened, while φ_rf
≈ −φ_c there carries φ_c's interpolation error): those nodes take the coarse total potential
less the fine φ_c (:func:`screened_values`).

Grids (:func:`apbs_focus_grids`, :func:`focus_grids`) follow APBS' rules
(``NOsh_setupCalcMGAUTO``): every level has the same node counts (``dime``); the spacing
shrinks by the same factor per level and by at most 4 (APBS' ``VREDFRAC`` = 0.25), so the
number of levels is ``max(2, ceil(log(h_f/h_c) / log(1/4)) + 1)``; the coarsest is centred on
``cgcent``, the finest on ``fgcent``, and each intermediate one on ``fgcent`` moved back inside
the coarser one where it sticks out. A finest grid that leaves its coarser one is an error.

Energies come from the finest grid that holds each atom (:func:`finest_level`). Atoms outside
the finest grid take φ_rf from the next coarser grid that holds them, as APBS' total energy
does (its "external energy", ``extQfEnergy``, evaluates the charges outside the fine box on the
coarser level's potential). APBS' per-atom list (``calcenergy comps``) gives those atoms 0
instead, so that its per-atom energies do not add up to its total; pbsolver's per-atom terms
use the same values as the total and do.

Every solve goes through :class:`~pbsolver.Solver` (CPU or GPU alike) and every map through
:func:`~pbsolver.molecule.maps.build_maps`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from pbsolver.arrays import array_module, flat_values, to_numpy
from pbsolver.exceptions import InputError
from pbsolver.grid import Grid, operator_index
from pbsolver.molecule.maps import grid_for_atoms, nice_size

#: Least factor between the spacings of two successive levels (APBS' ``VREDFRAC``): each level
#: is at most 4 times finer than the one before it.
REDUCTION_LIMIT = 0.25
#: Distance (Å) by which a finer grid may stick out of its coarser one and still count as inside
#: (rounding of the centres and lengths).
NESTING_TOLERANCE = 1e-9
#: Keys of Problem.from_atoms that place a grid: focusing places every level itself.
_PLACEMENT = ("grid", "shape", "center", "box", "spacing", "margin", "dirichlet_values")


# ---------------------------------------------------------------------- the grids
def apbs_focus_grids(dime, cglen, fglen, cgcent, fgcent) -> list[Grid]:
    """The grids of an APBS ``mg-auto`` calculation, coarsest first.

    Parameters
    ----------
    dime : int or 3 ints
        Nodes along x, y, z of every level (APBS ``dime``).
    cglen, fglen : float or 3 floats
        Lengths of the coarsest and finest grids, Å (APBS ``cglen``, ``fglen``; a length is
        (n − 1) spacings).
    cgcent, fgcent : 3 floats
        Centres of the coarsest and finest grids, Å (APBS ``cgcent``, ``fgcent`` as
        coordinates; ``mol N`` is the caller's: the centre of molecule N's bounding box).

    Returns
    -------
    list of Grid
        At least two levels, coarsest first (see the module's notes for the rules).

    Raises
    ------
    InputError
        Bad sizes, ``fglen`` > ``cglen`` along an axis, or a finest grid that does not lie
        inside the coarser ones.

    Examples
    --------
    >>> grids = apbs_focus_grids(65, 100.0, 6.25, (0, 0, 0), (45.0, 0, 0))
    >>> [g.spacing[0] for g in grids]
    [1.5625, 0.390625, 0.09765625]
    >>> [g.center[0] for g in grids]  # the middle level moved back inside the coarsest
    [0.0, 37.5, 45.0]
    """
    shape = _shape(dime)
    cglen, fglen = _lengths(cglen, "cglen"), _lengths(fglen, "fglen")
    if np.any(fglen > cglen):
        raise InputError(
            f"fglen {tuple(fglen.tolist())} Å must not exceed cglen {tuple(cglen.tolist())} Å "
            "along any axis: the fine grid lies inside the coarse one"
        )
    steps = np.asarray(shape, dtype=float) - 1.0
    return _levels(shape, cglen / steps, fglen / steps, _point(cgcent, "cgcent"),
                   _point(fgcent, "fgcent"))  # fmt: skip


def focus_grids(
    atoms,
    spacing=0.5,
    *,
    margin=8.0,
    shape=None,
    length=None,
    center=None,
    coarse_length=None,
    coarse_center=None,
) -> list[Grid]:
    """Focusing grids for ``atoms``, coarsest first: a fine grid as usual and coarser ones.

    The fine grid is the one :meth:`pbsolver.Problem.from_atoms` would use with the same
    ``spacing``, ``margin``, ``shape`` and ``center`` (or ``length``); the coarser levels have
    its node counts and follow APBS' rules (:func:`apbs_focus_grids`).

    Parameters
    ----------
    atoms : Atoms
    spacing : float or 3 floats
        Spacing of the finest grid, Å (kept exactly).
    margin : float
        Least gap between the atomic spheres and the finest grid's outer layer, Å (unused with
        ``shape`` or ``length``).
    shape : 3 ints, optional
        Node counts of every level.
    length : float or 3 floats, optional
        Least length of the finest grid, Å (node counts rounded up to multigrid-friendly ones):
        a box around a region of interest, e.g. a binding site given by ``center``.
    center : 3 floats, optional
        Centre of the finest grid, Å (default: the middle of the atoms' bounding box).
    coarse_length : float or 3 floats, optional
        Length of the coarsest grid, Å (default: twice the finest grid's, i.e. one level of
        twice the spacing).
    coarse_center : 3 floats, optional
        Centre of the coarsest grid, Å (default: the middle of the atoms' bounding box).

    Returns
    -------
    list of Grid

    Raises
    ------
    InputError
        Bad sizes, or a coarsest grid that cannot hold the finest one.

    Examples
    --------
    >>> import pbsolver as pb
    >>> ion = pb.Atoms([[0.0, 0.0, 0.0]], [1.0], [2.0])
    >>> [g.shape for g in focus_grids(ion, 0.5, margin=4.0)]
    [(25, 25, 25), (25, 25, 25)]
    """
    lo, hi = atoms.bounds()
    middle = 0.5 * (lo + hi)
    h = _lengths(spacing, "spacing")
    if length is not None:
        if shape is not None:
            raise InputError("give shape or length for the finest grid, not both")
        counts = np.ceil(_lengths(length, "length") / h - 1e-9).astype(int) + 1
        shape = tuple(nice_size(int(n)) for n in counts)
    fine = grid_for_atoms(atoms, h, margin, shape=shape, center=center)
    flen = np.asarray(fine.lengths)
    clen = 2.0 * flen if coarse_length is None else _lengths(coarse_length, "coarse_length")
    if np.any(clen < flen):
        raise InputError(
            f"coarse_length {tuple(clen.tolist())} Å is shorter than the finest grid's "
            f"{tuple(flen.tolist())} Å along some axis"
        )
    cc = middle if coarse_center is None else _point(coarse_center, "coarse_center")
    steps = np.asarray(fine.shape, dtype=float) - 1.0
    return _levels(fine.shape, clen / steps, h, cc, np.asarray(fine.center))


def _levels(shape, coarse_h, fine_h, coarse_center, fine_center) -> list[Grid]:
    """APBS' ``NOsh_setupCalcMGAUTO`` on spacings: the levels, coarsest first."""
    ratio = fine_h / coarse_h
    counts = [
        math.ceil(math.log(r) / math.log(REDUCTION_LIMIT)) + 1 if r < REDUCTION_LIMIT else 2
        for r in ratio
    ]
    nlev = max(counts)
    step = ratio ** (1.0 / (nlev - 1))
    n1 = np.asarray(shape, dtype=float) - 1.0
    grids: list[Grid] = []
    for k in range(nlev):
        last = k == nlev - 1
        h = fine_h if last else coarse_h * step**k
        half = 0.5 * h * n1
        c = np.array(coarse_center if k == 0 else fine_center, dtype=float)
        if k > 0:
            prev = grids[-1]
            plo = np.asarray(prev.origin)
            phi = plo + np.asarray(prev.lengths)
            for a in range(3):
                below = plo[a] - (c[a] - half[a])
                above = (c[a] + half[a]) - phi[a]
                if last and max(below, above) > NESTING_TOLERANCE:
                    raise InputError(
                        f"the finest focusing grid (centre {tuple(fine_center.tolist())} Å, "
                        f"length {2 * half[a]:g} Å along {'xyz'[a]}) sticks out of the "
                        f"coarser grid by {max(below, above):.4g} Å along {'xyz'[a]}: move "
                        "its centre or enlarge the coarse grid"
                    )
                # an intermediate level centred on the fine centre is moved back inside (it
                # is shorter than the level before it: at most one side sticks out)
                if below > NESTING_TOLERANCE:
                    c[a] += below
                elif above > NESTING_TOLERANCE:
                    c[a] -= above
        grids.append(Grid(shape, spacing=tuple(h), origin=tuple(c - half)))
    return grids


def check_nested(grids) -> list[Grid]:
    """``grids`` as a list of Grid, coarsest first, each inside the one before it.

    Raises
    ------
    InputError
        An entry that is not a Grid, an empty list, or a grid that sticks out of its coarser
        one (beyond :data:`NESTING_TOLERANCE`), naming the level, the axis and by how much.
    """
    if isinstance(grids, Grid) or not hasattr(grids, "__iter__"):
        raise InputError("focus must be a list of pbsolver.Grid, coarsest first")
    grids = list(grids)
    if not grids:
        raise InputError("focus needs at least one grid")
    for k, g in enumerate(grids):
        if not isinstance(g, Grid):
            raise InputError(f"focus[{k}] must be a pbsolver.Grid, got {type(g).__name__}")
    for k in range(1, len(grids)):
        outer, inner = grids[k - 1], grids[k]
        olo, ilo = np.asarray(outer.origin), np.asarray(inner.origin)
        below = olo - ilo
        above = (ilo + np.asarray(inner.lengths)) - (olo + np.asarray(outer.lengths))
        worst = np.maximum(below, above)
        a = int(np.argmax(worst))
        if worst[a] > NESTING_TOLERANCE:
            raise InputError(
                f"focus grid {k} sticks out of focus grid {k - 1} by {worst[a]:.4g} Å along "
                f"{'xyz'[a]}: each grid must lie inside the coarser one before it"
            )
    return grids


def finest_level(grids, points) -> np.ndarray:
    """For each point (Å), the index of the last (finest) grid of ``grids`` that holds it.

    A point on a grid's outer layer counts as inside; −1 where no grid holds the point.
    """
    pts = np.asarray(points, dtype=float).reshape(-1, 3)
    out = np.full(len(pts), -1, dtype=np.int64)
    for k, g in enumerate(grids):
        # in node units, with the rounding tolerance of molecule.energy.node_coordinates
        s = (pts - np.asarray(g.origin)) / np.asarray(g.spacing)
        tol = 1e-9
        inside = np.all((s >= -tol) & (s <= np.asarray(g.shape) - 1 + tol), axis=1)
        out[inside] = k
    return out


# ---------------------------------------------------------------------- the values
def focus_values(fine: Grid, coarse: Grid, coarse_phi_rf):
    """The coarse φ_rf trilinearly interpolated at every node of ``fine`` (float64).

    Its outer layer is the fine grid's Dirichlet values; its interior a starting guess.

    Parameters
    ----------
    fine, coarse : Grid
        ``fine`` must lie inside ``coarse``.
    coarse_phi_rf : array (coarse.shape)
        kJ mol⁻¹ e⁻¹, NumPy or CuPy.

    Returns
    -------
    array (fine.shape), float64
        In ``coarse_phi_rf``'s library: a CuPy field is interpolated on its device.

    Raises
    ------
    InputError
        ``fine`` not inside ``coarse``, or a field of the wrong shape.
    """
    from pbsolver.backends.sampling import sampling_loops

    check_nested([coarse, fine])
    xp = array_module(coarse_phi_rf)
    f = xp.ascontiguousarray(xp.asarray(coarse_phi_rf), dtype=xp.float64)
    if f.shape != coarse.shape:
        raise InputError(f"coarse field has shape {f.shape}, its grid needs {coarse.shape}")
    # trilinear weights are a product over the axes and the fine nodes lie on a tensor grid:
    # per axis, each fine coordinate's coarse cell and weight; the cells and clamping are the
    # sampling body's (pbsolver.backends.bodies.sampling.cell_of)
    cells, weights = [], []
    for ax, o, h, n in zip(fine.axes(), coarse.origin, coarse.spacing, coarse.shape,
                           strict=True):  # fmt: skip
        s = np.clip((ax - o) / h, 0.0, n - 1.0)
        i0 = np.clip(np.floor(s).astype(np.int64), 0, max(n - 2, 0))
        cells.append(i0)
        weights.append(s - i0)
    return sampling_loops(xp).tensor_lerp(f, cells, weights)


def screened_values(values, fine: Grid, coarse_level, fine_phi_c, fine_kappa2):
    """``values`` with the ion-accessible nodes of ``fine``'s outer layer from the total potential.

    In the salt φ_rf is close to −φ_c (the total potential is screened), so interpolating φ_rf
    carries the interpolation error of φ_c, about h²/8 · ∂²φ_c: a kT or more at a few Å from a
    charged molecule on a 1 Å grid, where the total potential is nearly flat. There the outer
    layer takes the coarse *total* potential interpolated, less the fine grid's exact φ_c (as
    APBS interpolates its total potential); elsewhere (the solute, where φ_rf is the smooth
    part) it keeps ``values``. Nodes whose coarse total is not finite (a charge on a coarse
    node of the cell) keep ``values`` too.

    Parameters
    ----------
    values : array (fine.shape)
        The coarse φ_rf interpolated (:func:`focus_values`), kJ mol⁻¹ e⁻¹, NumPy or CuPy.
    fine : Grid
    coarse_level : FocusLevel
        Its φ_c and φ_rf are sampled where they live (on the GPU for CuPy fields).
    fine_phi_c, fine_kappa2 : arrays (fine.shape)
        The fine grid's φ_c (kJ mol⁻¹ e⁻¹) and κ̄² (Å⁻²; > 0 where ions reach), NumPy or CuPy
        (only their outer layer is read, and copied to the host).

    Returns
    -------
    array (fine.shape), float64
        A new array of ``values``' library: the interior is ``values``' (a starting guess),
        the outer layer the Dirichlet values.
    """
    from pbsolver.backends.sampling import sampling_loops
    from pbsolver.molecule.maps import outer_layer_points

    coarse = coarse_level.grid
    check_nested([coarse, fine])
    xp = array_module(values)
    out = xp.array(values, dtype=xp.float64)
    layer, pts = outer_layer_points(fine)
    ions = flat_values(fine_kappa2, layer) > 0
    if not ions.any():
        return out
    layer, pts = layer[ions], pts[ions]
    # the nodes in the coarse grid's node units, clipped onto it as in focus_values
    node = (pts - np.asarray(coarse.origin)) / np.asarray(coarse.spacing)
    node = np.clip(node, 0.0, np.asarray(coarse.shape, dtype=float) - 1.0)
    # the coarse total φ_c + φ_rf, sampled as its two terms (interpolation is linear); a
    # non-finite φ_c on a cell's node (a charge on it) makes the sum there NaN or ±inf
    total = 0.0
    for field in (coarse_level.problem.phi_coulomb, coarse_level.result.phi_rf):
        fxp = array_module(field)
        sampled = sampling_loops(fxp).sample_points(field, coarse.spacing, node, False)
        total = total + to_numpy(sampled[:, 0])
    screened = total - flat_values(fine_phi_c, layer)
    ok = np.isfinite(screened)
    out.reshape(-1)[xp.asarray(layer[ok])] = xp.asarray(screened[ok])
    return out


# ---------------------------------------------------------------------- the solves
@dataclass
class FocusLevel:
    """One level of a focused calculation.

    Attributes
    ----------
    grid : Grid
    problem : Problem
        Its maps (Dirichlet values: ``boundary_kind``'s on the coarsest level, the coarser
        solution's on the others).
    result : SolveResult
        Its solve (``result.phi_rf``: kJ mol⁻¹ e⁻¹).
    """

    grid: Grid
    problem: object
    result: object


def solve_focused(atoms, grids, *, physics=None, solver=None, warm_start=True, **map_options):
    """Solve ``atoms`` on focusing ``grids`` (coarsest first): one :class:`FocusLevel` each.

    Parameters
    ----------
    atoms : Atoms
        Every atom must lie inside the coarsest grid (its Debye–Hückel boundary needs it); the
        finer grids may cut through the solute.
    grids : list of Grid or FocusLevel
        Coarsest first, each inside the one before it (:func:`check_nested`), e.g. from
        :func:`focus_grids` or :func:`apbs_focus_grids`. Leading :class:`FocusLevel` entries
        are levels already solved (e.g. an earlier calculation of the same atoms and physics,
        as APBS' ``bcfl focus`` continues the calculation before it): they are kept as they
        are and the grids after them focus from the last one.
    physics : PhysicsOptions, optional
        The physics (its ``boundary_kind`` applies to the coarsest level).
    solver : Solver, optional
        The solver of every level (default ``Solver()``).
    warm_start : bool
        Start each finer solve from the coarser solution interpolated at its nodes.
    **map_options
        Further options of :func:`pbsolver.molecule.maps.build_maps` (physics fields,
        ``ses_step``, ``kappa_subsamples``, ``maps_backend``); not the grid's placement.

    Returns
    -------
    list of FocusLevel
        Coarsest first (the levels given as solved included); the last one is the finest.

    Raises
    ------
    InputError
        Grids that are not nested, placement options, a periodic boundary.
    ConvergenceError
        From a strict solver.
    """
    from pbsolver.molecule.maps import build_maps
    from pbsolver.options import PhysicsOptions
    from pbsolver.problem import Problem
    from pbsolver.solving.solver import Solver

    if isinstance(grids, Grid) or not hasattr(grids, "__iter__"):
        check_nested(grids)  # its error for a lone grid or a non-list
    entries = list(grids)
    solved = []
    while len(solved) < len(entries) and isinstance(entries[len(solved)], FocusLevel):
        solved.append(entries[len(solved)])
    if any(isinstance(e, FocusLevel) for e in entries[len(solved) :]):
        raise InputError("levels already solved (FocusLevel) must come before every Grid")
    grids = check_nested([lv.grid for lv in solved] + entries[len(solved) :])
    placed = sorted(set(map_options) & set(_PLACEMENT))
    if placed:
        raise InputError(f"focusing places its grids itself; drop {placed}")
    if map_options.get("boundary", "dirichlet") != "dirichlet":
        raise InputError("focusing needs Dirichlet boundaries (boundary='dirichlet')")
    physics, map_options = PhysicsOptions.split(map_options, physics=physics)
    solver = Solver() if solver is None else solver
    levels: list[FocusLevel] = list(solved)
    for grid in grids[len(solved) :]:
        values = None
        if levels:
            prev = levels[-1]
            values = focus_values(grid, prev.grid, prev.result.phi_rf)
        maps = build_maps(atoms, grid, physics=physics, dirichlet_values=values, **map_options)
        if levels:
            if maps.kappa2 is not None:
                values = screened_values(values, grid, prev, maps.phi_coulomb, maps.kappa2)
                maps.boundary_values = array_module(maps.phi_coulomb).asarray(values)
            # the warm start is the Dirichlet values' array, in the maps' library (on a GPU
            # with the maps: one copy up)
            values = maps.boundary_values
        problem = Problem.from_maps(maps)
        result = solver.solve(problem, x0=values if warm_start else None)
        levels.append(FocusLevel(grid, problem, result))
    return levels


# ---------------------------------------------------------------------- checkers
def _shape(dime) -> tuple[int, int, int]:
    arr = np.atleast_1d(np.asarray(dime, dtype=object))
    if arr.size == 1:
        arr = np.repeat(arr, 3)
    try:
        shape = tuple(operator_index(n) for n in arr)
    except TypeError as exc:
        raise InputError(f"dime must be one or three integers, got {dime!r}") from exc
    if len(shape) != 3 or min(shape) < 3:
        raise InputError(f"dime must be three integers >= 3, got {dime!r}")
    return shape


def _lengths(value, name) -> np.ndarray:
    try:
        arr = np.broadcast_to(np.asarray(value, dtype=float), (3,)).copy()
    except (TypeError, ValueError) as exc:
        raise InputError(f"{name} must be one or three lengths > 0 Å, got {value!r}") from exc
    if not np.all(np.isfinite(arr) & (arr > 0)):
        raise InputError(f"{name} must be one or three lengths > 0 Å, got {value!r}")
    return arr


def _point(value, name) -> np.ndarray:
    try:
        arr = np.asarray(value, dtype=float).reshape(3)
    except (TypeError, ValueError) as exc:
        raise InputError(f"{name} must be three coordinates, Å, got {value!r}") from exc
    if not np.all(np.isfinite(arr)):
        raise InputError(f"{name} must be finite, got {value!r}")
    return arr


__all__ = [
    "REDUCTION_LIMIT",
    "FocusLevel",
    "apbs_focus_grids",
    "check_nested",
    "finest_level",
    "focus_grids",
    "focus_values",
    "screened_values",
    "solve_focused",
]
