"""Builders of :class:`~pbsolver.multigrid.hierarchy.Hierarchy`: one grid, or a stack of blocks.

Both return the same kind of object; they differ in how the levels are planned and where the
coarse operators' inputs come from:

:func:`grid_hierarchy`
    One grid (Dirichlet or periodic), coarsened by
    :func:`~pbsolver.multigrid.coarsening.grid_levels` until a level has at most
    ``coarsest_nodes`` nodes, which is solved by a dense inverse. The coarse operators are
    built once, from the finest stencil's face coefficients and κ̄².
:func:`stack_hierarchy`
    B independent Dirichlet blocks stacked along x (:mod:`pbsolver.backends.stacking`): every
    block coarsened as its own grid would be, down to one unknown a block
    (:func:`~pbsolver.multigrid.coarsening.stack_levels`). The lifted fine stencil has zero faces
    to every block's outer layer, so the coarse operators are built from the blocks' *unlifted*
    faces (with the faces to the outer layer), written by whoever assembles the stack into
    :attr:`Hierarchy.inputs`; fixed coarse nodes get a penalty diagonal
    (:data:`pbsolver.backends.coarse.PENALTY`). :meth:`Hierarchy.rebuild` is called for every
    new batch of blocks, in place.
"""

from __future__ import annotations

import math

import numpy as np

from pbsolver.arrays import array_module
from pbsolver.backends import Stencil
from pbsolver.exceptions import InputError
from pbsolver.multigrid.coarsening import grid_levels, stack_levels
from pbsolver.multigrid.hierarchy import (
    CYCLES,
    DENSE_MAX_NODES,
    Hierarchy,
    Level,
    add_level,
)

#: A grid's default cycle options (the methods set some of their own: the "multigrid" method
#: V(3,3), MG-CG V(2,2)). Red–black SOR with ω = 1.2 as the smoother: as few cycles as ω = 1 or
#: one or two fewer on proteins (``benchmarks/grid_mg_omega.py`` compares ω from 1 to 1.3, and
#: cycles; BENCHMARKS.md).
GRID_CYCLE = {"cycle": "V", "presmooth": 2, "postsmooth": 2, "omega": 1.2, "coarse_sweeps": 8}
#: A stack's default cycle: V(3,3) smoothed by red–black SOR with ω = 1.15, the cheapest of the
#: cycles compared by ``benchmarks/stacked_mg_cycles.py`` (BENCHMARKS.md).
STACK_CYCLE = {"cycle": "V", "presmooth": 3, "postsmooth": 3, "omega": 1.15, "coarse_sweeps": 1}
#: Options only a grid's hierarchy takes (a stack always coarsens to one unknown a block).
GRID_ONLY = ("max_levels", "coarsest_nodes")


def check_cycle(cycle, presmooth, postsmooth, omega, coarse_sweeps) -> None:
    """Refuse bad cycle options with an :class:`~pbsolver.InputError` naming the option."""
    if cycle not in CYCLES:
        raise InputError(f"cycle must be one of {sorted(CYCLES)}, got {cycle!r}")
    for name, value in (("presmooth", presmooth), ("postsmooth", postsmooth)):
        if not isinstance(value, int | np.integer) or value < 0:
            raise InputError(f"{name} must be a non-negative integer, got {value!r}")
    if not isinstance(coarse_sweeps, int | np.integer) or coarse_sweeps < 1:
        raise InputError(f"coarse_sweeps must be a positive integer, got {coarse_sweeps!r}")
    try:
        omega = float(omega)
    except (TypeError, ValueError) as exc:
        raise InputError(f"omega must be a number, got {omega!r}") from exc
    if not 0.0 < omega < 2.0:
        raise InputError(f"omega must be in (0, 2), got {omega}")


def grid_hierarchy(
    backend,
    st: Stencil,
    spacing,
    kappa2=None,
    *,
    cycle: str = GRID_CYCLE["cycle"],
    presmooth: int = GRID_CYCLE["presmooth"],
    postsmooth: int = GRID_CYCLE["postsmooth"],
    omega: float = GRID_CYCLE["omega"],
    max_levels: int | None = None,
    coarsest_nodes: int = 512,
    coarse_sweeps: int = GRID_CYCLE["coarse_sweeps"],
) -> Hierarchy:
    """The hierarchy of one grid, its coarse operators built.

    Parameters
    ----------
    backend : Backend
    st : Stencil
        The finest level's stencil (in the solve's dtype; its faces, in float64, are the
        coarse operators' source).
    spacing : 3 floats
        Grid spacing, Å.
    kappa2 : array or None
        κ̄² of the finest level (None: no salt).
    cycle, presmooth, postsmooth, omega, coarse_sweeps
        See :class:`~pbsolver.multigrid.hierarchy.Hierarchy`.
    max_levels : int, optional
        Cap on the number of levels.
    coarsest_nodes : int
        Coarsen until a level has at most this many nodes (at most ``DENSE_MAX_NODES``); it is
        solved by a dense inverse.
    """
    check_cycle(cycle, presmooth, postsmooth, omega, coarse_sweeps)
    if max_levels is not None and (not isinstance(max_levels, int) or max_levels < 1):
        raise InputError(f"max_levels must be a positive integer, got {max_levels!r}")
    if not isinstance(coarsest_nodes, int | np.integer) or coarsest_nodes < 0:
        raise InputError(f"coarsest_nodes must be an integer >= 0, got {coarsest_nodes!r}")
    if coarsest_nodes > DENSE_MAX_NODES:
        raise InputError(f"coarsest_nodes must be at most {DENSE_MAX_NODES}")
    st.check_red_black("multigrid")
    be, dtype = backend, st.dtype
    spacing = tuple(float(h) for h in spacing)
    # float32 rounding of the stored faces is irrelevant to a coarse-grid correction; the
    # coarse operators are computed in float64 from the planes they need (no float64 copy of
    # the finest faces: three grid arrays fewer at set-up)
    xp = array_module(st.cx)
    inputs = tuple(xp.asarray(c) for c in (st.cx, st.cy, st.cz))
    inputs += (None if kappa2 is None else xp.asarray(kappa2),)
    plans = grid_levels(st.shape, spacing, st.periodic, max_levels, int(coarsest_nodes))
    levels = [Level(st, None, None, None, spacing)]
    coarse = []
    for plan in plans:
        stencil = _coarse_stencil(be, plan.shape, dtype, st.periodic, st.singular)
        level = add_level(be, levels, plan, stencil)
        if be.COARSE_KERNELS:  # the level's own faces are the next level's input
            level.work = (stencil.cx, stencil.cy, stencil.cz, be.zeros(plan.shape, dtype))
            level.two = _two(be, plan)
        coarse.append(level)
    dense = len(levels) > 1 and math.prod(levels[-1].stencil.shape) <= DENSE_MAX_NODES
    h = Hierarchy(be, levels, coarse, inputs, cycle=cycle, presmooth=presmooth,
                  postsmooth=postsmooth, omega=omega, coarse_sweeps=coarse_sweeps, dense=dense,
                  singular=st.singular)  # fmt: skip
    h.rebuild()
    return h


def stack_hierarchy(
    backend,
    st: Stencil,
    block_shape,
    spacing,
    stride: int,
    *,
    inputs=None,
    cycle: str = STACK_CYCLE["cycle"],
    presmooth: int = STACK_CYCLE["presmooth"],
    postsmooth: int = STACK_CYCLE["postsmooth"],
    omega: float = STACK_CYCLE["omega"],
    coarse_sweeps: int = STACK_CYCLE["coarse_sweeps"],
) -> Hierarchy:
    """The hierarchy of a stack of independent blocks; call ``rebuild()`` once inputs are set.

    Parameters
    ----------
    backend : Backend
    st : Stencil
        The stack's finest (lifted) stencil in the solve's dtype; only its shape and dtype are
        used here (the cycle is given the stencil it works on by ``bind``/``runner``).
    block_shape : 3 ints
        Nodes of one block (its problem's grid).
    spacing : 3 floats
        Grid spacing, Å.
    stride : int
        Planes a block occupies along x.
    inputs : 4 arrays (stack shape), float64, optional
        Where the blocks' unlifted faces (x, y, z) and κ̄² will be written (e.g. by an
        assembly kernel); default: four new zero arrays (:attr:`Hierarchy.inputs`).
    cycle, presmooth, postsmooth, omega, coarse_sweeps
        See :class:`~pbsolver.multigrid.hierarchy.Hierarchy`; defaults :data:`STACK_CYCLE`.
    """
    check_cycle(cycle, presmooth, postsmooth, omega, coarse_sweeps)
    if st.periodic:
        raise InputError("a stack of blocks is a Dirichlet system")
    total = st.shape[0]
    if total % stride:
        raise InputError(f"the stack's {total} planes are not a multiple of stride {stride}")
    be, dtype = backend, st.dtype
    block_shape = tuple(int(n) for n in block_shape)
    spacing = tuple(float(h) for h in spacing)
    if inputs is None:
        inputs = tuple(be.zeros(st.shape, np.float64) for _ in range(4))
    elif len(inputs) != 4 or any(tuple(a.shape) != st.shape for a in inputs):
        raise InputError(f"inputs must be four arrays of the stack's shape {st.shape}")
    levels = [Level(st, None, None, None, spacing)]
    coarse = []
    for plan in stack_levels(block_shape, spacing, total // stride, stride):
        stencil = _coarse_stencil(be, plan.shape, dtype, False, False)
        level = add_level(be, levels, plan, stencil)
        level.work = tuple(be.zeros(plan.shape, np.float64) for _ in range(4))
        level.two = _two(be, plan)
        coarse.append(level)
    if len(levels) < 2:
        raise InputError(f"blocks of shape {block_shape} are too small for multigrid")
    return Hierarchy(be, levels, coarse, inputs, cycle=cycle, presmooth=presmooth,
                     postsmooth=postsmooth, omega=omega, coarse_sweeps=coarse_sweeps,
                     dense=False)  # fmt: skip


def _two(be, plan) -> tuple:
    """Per axis, 1 where a coarse interval of ``plan`` spans two fine ones (int32 arrays)."""
    return tuple(be.asarray((a.gap == 2).astype(np.int32), np.int32) for a in plan.axes)


def _coarse_stencil(be, shape, dtype, periodic, singular) -> Stencil:
    """A coarse level's stencil: faces and diagonal written by the rebuild, b zero."""
    faces = (be.empty(shape, dtype) for _ in range(4))
    return Stencil(*faces, be.zeros(shape, dtype), periodic, singular)


__all__ = [
    "GRID_CYCLE",
    "GRID_ONLY",
    "STACK_CYCLE",
    "check_cycle",
    "grid_hierarchy",
    "stack_hierarchy",
]
