"""From atoms to a :class:`~pbsolver.Problem`: the maps of :mod:`pbsolver.molecule.maps`, assembled.

The maps module computes arrays and knows nothing of the Problem class; this module joins the
two (so that neither imports the other).
"""

from __future__ import annotations

from pbsolver.molecule.maps import build_maps
from pbsolver.problem import Problem


def build_problem(atoms, grid=None, *, physics=None, **options) -> Problem:
    """Grid and every map for ``atoms`` as a :class:`~pbsolver.Problem` (ε_c = ε_in).

    Parameters
    ----------
    atoms : Atoms
    grid : Grid, optional
        The grid (default: placed around the atoms, or filling a periodic ``box``).
    physics : PhysicsOptions, optional
        The physics; fields given as keywords override it.
    **options
        Physics fields and grid/map options of :func:`pbsolver.molecule.maps.build_maps`.
    """
    return Problem.from_maps(build_maps(atoms, grid, physics=physics, **options))


__all__ = ["build_problem"]
