"""Pictures of grids and solves with matplotlib (optional: ``pip install "pbsolver[plot]"``).

* :func:`plot_slice` — one plane of any grid map (ε, φ_c, φ_rf, κ̄²…) with the molecule's outline
  and a colour bar that states the units;
* :func:`plot_convergence` — relative residual against iterations for one or more solves.

Both take an optional matplotlib ``ax`` and return the :class:`~matplotlib.axes.Axes` drawn on,
so they compose into subplots. Arrays may be NumPy or CuPy (copied to the host for drawing).

Examples
--------
>>> import matplotlib
>>> matplotlib.use("Agg")
>>> import numpy as np, pbsolver as pb
>>> g = pb.Grid((9, 9, 9), spacing=0.5, origin=(-2, -2, -2))
>>> ax = pb.plot.plot_slice(g, np.ones(g.shape), units="kJ mol⁻¹ e⁻¹", label="φ_rf")
>>> ax.get_xlabel(), ax.get_ylabel()
('x (Å)', 'y (Å)')
"""

from __future__ import annotations

import math

import numpy as np

from pbsolver.arrays import to_numpy
from pbsolver.exceptions import InputError
from pbsolver.grid import Grid

#: Unit labels used by the notebooks and the defaults below.
UNITS_POTENTIAL = "kJ mol⁻¹ e⁻¹"
UNITS_KAPPA2 = "Å⁻²"
AXES = "xyz"
#: Outlines are drawn twice, a light halo under a dark line, to show on dark and light colours.
_HALO = (("w", 2.0), ("k", 0.9))


def _pyplot():
    try:
        import matplotlib.pyplot as plt
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            'pbsolver.plot needs matplotlib: pip install "pbsolver[plot]" (or matplotlib>=3.7)'
        ) from exc
    return plt


def _axis_number(axis) -> int:
    if isinstance(axis, str) and axis.lower() in AXES:
        return AXES.index(axis.lower())
    if isinstance(axis, int | np.integer) and 0 <= int(axis) < 3:
        return int(axis)
    raise InputError(f"axis must be 'x', 'y', 'z' or 0, 1, 2, got {axis!r}")


def slice_index(grid: Grid, axis="z", index=None, position=None) -> int:
    """Node index of the plane to show along ``axis``.

    Parameters
    ----------
    grid : Grid
    axis : {"x", "y", "z"} or int
        Axis normal to the plane.
    index : int, optional
        Node index along ``axis`` (negative counts from the end).
    position : float, optional
        Coordinate along ``axis``, Å: the nearest node plane is taken. Give at most one of
        ``index`` and ``position``; with neither, the middle plane.

    Returns
    -------
    int
        A valid index in ``range(grid.shape[axis])``.
    """
    a = _axis_number(axis)
    n = grid.shape[a]
    if index is not None and position is not None:
        raise InputError("give index or position, not both")
    if position is not None:
        index = int(round((float(position) - grid.origin[a]) / grid.spacing[a]))
        if not 0 <= index < n:
            raise InputError(
                f"position {position} Å is outside the grid along {AXES[a]} "
                f"({grid.origin[a]:g} … {grid.origin[a] + grid.lengths[a]:g} Å)"
            )
        return index
    if index is None:
        return n // 2
    index = int(index)
    if not -n <= index < n:
        raise InputError(f"index {index} is outside the grid along {AXES[a]} (0 … {n - 1})")
    return index % n


def plot_slice(
    grid: Grid,
    values,
    axis="z",
    index=None,
    *,
    position=None,
    atoms=None,
    outline=None,
    ax=None,
    units: str = UNITS_POTENTIAL,
    label: str | None = None,
    cmap=None,
    vmin=None,
    vmax=None,
    symmetric=None,
    colorbar: bool = True,
    title: str | None = None,
):
    """Draw one node plane of a grid map, with the molecule's outline and a colour bar.

    Parameters
    ----------
    grid : Grid
        The grid ``values`` lives on.
    values : array (nx, ny, nz)
        Any map on the grid (NumPy or CuPy).
    axis : {"x", "y", "z"} or int
        Axis normal to the plane shown (``"z"``: the x–y plane).
    index : int, optional
        Node index of the plane along ``axis``; default the middle one.
    position : float, optional
        Or the plane's coordinate along ``axis`` in Å (nearest node plane).
    atoms : Atoms or (positions, radii), optional
        Draw each atom's van der Waals circle where the plane cuts its sphere (radius
        √(r² − d²) for an atom at distance d < r from the plane). Anything with ``positions``
        (N, 3) and ``radii`` (N,) attributes works, or a ``(positions, radii)`` pair.
    outline : array (nx, ny, nz), optional
        A map whose mid-level contour is drawn, e.g. the ε node map (the ε_in/ε_out boundary)
        or an edge-fraction map.
    ax : matplotlib Axes, optional
        Where to draw; default a new figure.
    units : str
        Unit of ``values`` for the colour bar (default ``"kJ mol⁻¹ e⁻¹"``; ``""`` for none).
    label : str, optional
        Name of the quantity for the colour bar, e.g. ``"φ_rf"`` or ``"ε"``.
    cmap : str or Colormap, optional
        Default: a diverging map centred on zero when the plane has both signs, else viridis.
    vmin, vmax : float, optional
        Colour limits.
    symmetric : bool, optional
        Force (True) or forbid (False) limits symmetric about zero; default: when both signs
        occur.
    colorbar : bool
        Add a colour bar labelled ``"label (units)"``.
    title : str, optional
        Axes title; default names the plane, e.g. ``"z = 0.00 Å (k = 24)"``.

    Returns
    -------
    matplotlib.axes.Axes
        The axes drawn on; the image is ``ax.images[0]`` and its colour bar
        ``ax.images[0].colorbar``.
    """
    plt = _pyplot()
    if not isinstance(grid, Grid):
        raise InputError(f"grid must be a pbsolver.Grid, got {type(grid).__name__}")
    a = _axis_number(axis)
    data = np.asarray(to_numpy(values), dtype=float)
    if data.shape != grid.shape:
        raise InputError(f"values has shape {data.shape}, the grid needs {grid.shape}")
    k = slice_index(grid, a, index, position)
    plane = np.take(data, k, axis=a)  # 2-D over the two remaining axes, in order
    u, v = [i for i in range(3) if i != a]
    coord = grid.origin[a] + k * grid.spacing[a]

    if ax is None:
        _, ax = plt.subplots(figsize=(5.2, 4.2), layout="constrained")
    finite = plane[np.isfinite(plane)]
    lo = float(finite.min()) if finite.size else 0.0
    hi = float(finite.max()) if finite.size else 1.0
    if symmetric is None:
        symmetric = lo < 0.0 < hi and vmin is None and vmax is None
    if symmetric:
        m = max(abs(lo), abs(hi)) or 1.0
        vmin, vmax = (-m if vmin is None else vmin), (m if vmax is None else vmax)
    if cmap is None:
        cmap = "RdBu_r" if symmetric else "viridis"

    hu, hv = grid.spacing[u], grid.spacing[v]
    extent = (
        grid.origin[u] - 0.5 * hu,
        grid.origin[u] + (grid.shape[u] - 0.5) * hu,
        grid.origin[v] - 0.5 * hv,
        grid.origin[v] + (grid.shape[v] - 0.5) * hv,
    )
    image = ax.imshow(
        plane.T,
        origin="lower",
        extent=extent,
        cmap=cmap,
        vmin=vmin,
        vmax=vmax,
        interpolation="nearest",
        aspect="equal",
    )
    ax.set_xlabel(f"{AXES[u]} (Å)")
    ax.set_ylabel(f"{AXES[v]} (Å)")
    ax.set_title(title if title is not None else f"{AXES[a]} = {coord:.2f} Å ({'ijk'[a]} = {k})")

    if outline is not None:
        omap = np.asarray(to_numpy(outline), dtype=float)
        if omap.shape != grid.shape:
            raise InputError(f"outline has shape {omap.shape}, the grid needs {grid.shape}")
        level = 0.5 * (float(np.nanmin(omap)) + float(np.nanmax(omap)))
        oplane = np.take(omap, k, axis=a)
        if oplane.min() < level < oplane.max():
            gu, gv = (grid.axes()[i] for i in (u, v))
            for colour, width in _HALO:
                ax.contour(gu, gv, oplane.T, levels=[level], colors=colour, linewidths=width)

    if atoms is not None:
        _draw_atom_circles(ax, atoms, a, u, v, coord)

    if colorbar:
        text = label or ""
        if units:
            text = f"{text} ({units})" if text else units
        cbar = ax.figure.colorbar(image, ax=ax, shrink=0.9)
        cbar.set_label(text)
    return ax


def _atom_arrays(atoms):
    if hasattr(atoms, "positions") and hasattr(atoms, "radii"):
        pos, radii = atoms.positions, atoms.radii
    else:
        try:
            pos, radii = atoms
        except (TypeError, ValueError) as exc:
            raise InputError(
                "atoms must have .positions and .radii, or be a (positions, radii) pair"
            ) from exc
    pos = np.asarray(to_numpy(pos), dtype=float).reshape(-1, 3)
    radii = np.asarray(to_numpy(radii), dtype=float).reshape(-1)
    if len(pos) != len(radii):
        raise InputError(f"atoms: {len(pos)} positions but {len(radii)} radii")
    return pos, radii


def _draw_atom_circles(ax, atoms, a, u, v, coord):
    from matplotlib.collections import EllipseCollection

    pos, radii = _atom_arrays(atoms)
    d = pos[:, a] - coord
    cut = np.abs(d) < radii
    if not cut.any():
        return
    r = np.sqrt(radii[cut] ** 2 - d[cut] ** 2)
    for colour, width in _HALO:
        circles = EllipseCollection(
            2 * r,
            2 * r,
            np.zeros_like(r),
            units="xy",
            offsets=np.column_stack([pos[cut, u], pos[cut, v]]),
            offset_transform=ax.transData,
            facecolors="none",
            edgecolors=colour,
            linewidths=width,
        )
        ax.add_collection(circles, autolim=False)


def check_iterations(result) -> np.ndarray:
    """Iteration count at each entry of ``result.residual_norms``.

    Uses ``result.extra["check_iterations"]`` when the solver recorded it. Otherwise the solver's
    fixed cadence is assumed: checks at 0, c, 2c, … and a last one at ``result.iterations``
    (a shorter final stretch when ``maxiter`` cut it), c = ⌈iterations / (checks − 1)⌉.

    Parameters
    ----------
    result : SolveResult

    Returns
    -------
    numpy.ndarray of int
    """
    recorded = getattr(result, "extra", {}).get("check_iterations")
    n = len(result.residual_norms)
    if recorded is not None and len(recorded) == n:
        return np.asarray(recorded)
    if n <= 1:
        return np.zeros(n, dtype=int)
    cadence = math.ceil(result.iterations / (n - 1))
    return np.minimum(np.arange(n) * cadence, result.iterations)


def plot_convergence(results, ax=None, *, labels=None, rtol=None, title=None):
    """Relative residual ‖b − Aφ‖₂/‖b‖₂ against iterations, one line per solve.

    Parameters
    ----------
    results : SolveResult, sequence of SolveResult, or dict of label → SolveResult
        Solves to show (their ``residual_norms``).
    ax : matplotlib Axes, optional
        Where to draw; default a new figure.
    labels : sequence of str, optional
        Legend entries; default ``"method (backend)"`` or the dict's keys.
    rtol : float, optional
        Draw the tolerance as a dashed horizontal line.
    title : str, optional

    Returns
    -------
    matplotlib.axes.Axes

    Notes
    -----
    The x axis counts sweeps for SOR and Jacobi and cycles for multigrid; compare methods on
    time with ``result.seconds``.
    """
    plt = _pyplot()
    if isinstance(results, dict):
        labels = list(results) if labels is None else labels
        results = list(results.values())
    elif hasattr(results, "residual_norms"):
        results = [results]
    else:
        results = list(results)
    if not results:
        raise InputError("plot_convergence needs at least one SolveResult")
    if labels is None:
        labels = [f"{r.method} ({r.backend})" for r in results]
    if len(labels) != len(results):
        raise InputError(f"{len(labels)} labels for {len(results)} results")
    if ax is None:
        _, ax = plt.subplots(figsize=(5.6, 3.8), layout="constrained")
    for res, lab in zip(results, labels, strict=True):
        its = check_iterations(res)
        norms = np.asarray(res.residual_norms, dtype=float)
        line = ax.semilogy(its, np.where(norms > 0, norms, np.nan), marker=".", ms=3, label=lab)
        if not res.converged:
            ax.plot(its[-1:], norms[-1:], "x", color=line[0].get_color(), ms=8)
    if rtol is not None:
        ax.axhline(rtol, color="0.4", ls="--", lw=1, label=f"rtol = {rtol:g}")
    ax.set_xlabel("iteration (sweeps; cycles for multigrid)")
    ax.set_ylabel("relative residual ‖b − Aφ‖₂ / ‖b‖₂")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend()
    if title:
        ax.set_title(title)
    return ax


__all__ = ["check_iterations", "plot_convergence", "plot_slice", "slice_index"]
