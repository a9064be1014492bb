"""Which fine nodes each coarser multigrid level keeps: per-axis coarsening plans.

Node-centred, non-uniform vertex coarsening: the coarse nodes are a subset of the fine nodes,
every other one along each coarsened axis, and where the count does not divide evenly one
coarse interval spans a single fine interval instead of two:

* Dirichlet axis of ``n`` nodes: coarse nodes at ``0, 2, 4, …`` and always the last node
  ``n − 1`` (so the fixed outer layer is kept); when ``n − 1`` is odd the last interval is
  one fine interval long. ``n → ⌈(n − 1)/2⌉ + 1`` (at least 3 nodes: one unknown).
* Periodic axis of even ``n``: coarse nodes at ``0, 2, …, n − 2``; when ``n/2`` is odd (the
  coarse red–black ordering would race across the wrap) the node ``n − 1`` is kept as well,
  giving ``n/2 + 1`` (even) nodes with two single-interval gaps (at least 2 nodes).

No padding is needed, every fine node is either a coarse node or the midpoint of a two-interval
gap, and the transfers stay the simple trilinear ones. Axes with a physical spacing more than
√2 times the finest one are not coarsened (semi-coarsening) until the others catch up, which
keeps the coarse operators' anisotropy below 2 for anisotropic spacings.

A stack of B independent blocks (:func:`stacked_plan`) is coarsened block by block: each block
as its own grid would be, down to 3 nodes an axis, and along the stacked axis every block's
padding planes are kept, so no transfer weight ever joins two blocks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from pbsolver.exceptions import InputError

#: Axes whose spacing exceeds this multiple of the finest spacing wait (semi-coarsening).
ANISOTROPY_LIMIT = math.sqrt(2.0) * (1 + 1e-9)


@dataclass(frozen=True)
class AxisCoarsening:
    """Which fine nodes along one axis are kept on the next coarser level.

    Attributes
    ----------
    n_fine : int
        Fine node count along the axis.
    pos : ndarray of int64
        Fine index of each coarse node (increasing; includes ``0``).
    periodic : bool
        Whether the axis wraps.
    """

    n_fine: int
    pos: np.ndarray
    periodic: bool

    @property
    def n_coarse(self) -> int:
        """Coarse node count."""
        return len(self.pos)

    @property
    def gap(self) -> np.ndarray:
        """Fine intervals (1 or 2) from each coarse node to the next (1 past a Dirichlet end)."""
        nxt = np.append(self.pos[1:], self.pos[0] + self.n_fine)
        gap = nxt - self.pos
        if not self.periodic:
            gap[-1] = 1
        return gap

    @property
    def lo(self) -> np.ndarray:
        """Coarse node at or before each fine node."""
        lo = np.searchsorted(self.pos, np.arange(self.n_fine), side="right") - 1
        return lo

    @property
    def hi(self) -> np.ndarray:
        """Coarse node at or after each fine node (wrapping on a periodic axis)."""
        lo = self.lo
        is_coarse = np.zeros(self.n_fine, dtype=bool)
        is_coarse[self.pos] = True
        return np.where(is_coarse, lo, (lo + 1) % self.n_coarse)

    @property
    def weights(self) -> np.ndarray:
        """Restriction weights ``(n_coarse, 3)`` of the fine nodes ``pos − 1, pos, pos + 1``."""
        mid = self.lo != self.hi
        w = np.zeros((self.n_coarse, 3))
        w[:, 1] = 1.0
        w[:, 0] = np.where(mid[(self.pos - 1) % self.n_fine], 0.5, 0.0)
        w[:, 2] = np.where(mid[(self.pos + 1) % self.n_fine], 0.5, 0.0)
        return w


def coarsen_axis(n: int, periodic: bool) -> AxisCoarsening | None:
    """Coarsening of one axis of ``n`` nodes, or None where it cannot shrink any further."""
    if periodic:
        if n < 4 or n % 2:
            return None
        pos = np.arange(0, n - 1, 2)
        if (n // 2) % 2:
            pos = np.append(pos, n - 1)
        if len(pos) >= n:
            return None
        return AxisCoarsening(n, pos, True)
    if n < 4:
        return None
    pos = np.arange(0, n, 2)
    if pos[-1] != n - 1:
        pos = np.append(pos, n - 1)
    return AxisCoarsening(n, pos, False)


def identity_axis(n: int, periodic: bool) -> AxisCoarsening:
    """An axis that is not coarsened on this level."""
    return AxisCoarsening(n, np.arange(n), periodic)


def plan_coarsening(
    shape, spacing, periodic: bool, max_levels: int | None = None, coarsest_nodes: int = 0
):
    """The per-level, per-axis coarsenings from ``shape`` down to the coarsest level.

    Coarsening stops when no axis can shrink, after ``max_levels`` levels, or once a level has
    at most ``coarsest_nodes`` nodes.

    Returns
    -------
    list of (tuple of 3 AxisCoarsening, tuple of 3 float)
        One entry per coarser level: the coarsening from the level above and the coarse
        level's nominal spacing.
    """
    plans = []
    shape, spacing = tuple(shape), tuple(float(h) for h in spacing)
    while max_levels is None or len(plans) + 1 < max_levels:
        if math.prod(shape) <= coarsest_nodes:
            break
        options = [coarsen_axis(n, periodic) for n in shape]
        if not any(options):
            break
        hmin = min(h for h, o in zip(spacing, options, strict=True) if o is not None)
        axes, new_spacing = [], []
        for n, h, opt in zip(shape, spacing, options, strict=True):
            if opt is not None and h <= ANISOTROPY_LIMIT * hmin:
                axes.append(opt)
                intervals = n if periodic else n - 1
                new_spacing.append(h * intervals / (opt.n_coarse if periodic else opt.n_coarse - 1))
            else:
                axes.append(identity_axis(n, periodic))
                new_spacing.append(h)
        plans.append((tuple(axes), tuple(new_spacing)))
        shape = tuple(a.n_coarse for a in axes)
        spacing = tuple(new_spacing)
    return plans


def stacked_plan(block_shape, spacing, n_blocks: int, stride: int):
    """Per-level coarsening of a stack of ``n_blocks`` blocks of ``block_shape`` nodes.

    Parameters
    ----------
    block_shape : 3 ints
        Nodes of one block (its problem's grid).
    spacing : 3 floats
        Grid spacing, Å.
    n_blocks : int
    stride : int
        Planes a block occupies along the stacked (x) axis: ``nx`` plus padding planes.

    Returns
    -------
    list of (tuple of 3 AxisCoarsening, spacing, block nx, stride)
        One entry per coarser level: the coarsening from the level above (axis 0 over the whole
        stack), the coarse nominal spacing, and the coarse block's node count and stride.
    """
    nx = int(block_shape[0])
    if stride < nx:
        raise InputError(f"stride {stride} is smaller than the block's {nx} planes")
    out = []
    for axes, coarse_spacing in plan_coarsening(block_shape, spacing, False, None, 0):
        keep = np.concatenate([axes[0].pos, np.arange(nx, stride)])  # padding planes stay
        pos = (np.arange(n_blocks)[:, None] * stride + keep[None, :]).ravel()
        stacked = AxisCoarsening(n_blocks * stride, pos, False)
        nx, stride = axes[0].n_coarse, len(keep)
        out.append(((stacked, axes[1], axes[2]), coarse_spacing, nx, stride))
    return out


@dataclass(frozen=True)
class LevelPlan:
    """How one coarser level is made from the level above it.

    Attributes
    ----------
    axes : tuple of 3 AxisCoarsening
        The coarsening of each axis (axis 0 over the whole stack for a stack of blocks).
    spacing : tuple of 3 float
        The coarse level's nominal spacing, Å.
    periodic : bool
    blocks : tuple (nx, stride) or None
        For a stack of blocks: the coarse block's node count and its planes along x; its
        outer layer and padding planes are fixed nodes. None for one grid.
    """

    axes: tuple
    spacing: tuple
    periodic: bool
    blocks: tuple | None = None

    @property
    def shape(self) -> tuple[int, int, int]:
        """The coarse level's shape."""
        return tuple(a.n_coarse for a in self.axes)


def grid_levels(shape, spacing, periodic: bool, max_levels=None, coarsest_nodes: int = 0):
    """:class:`LevelPlan` of every coarser level of one grid (see :func:`plan_coarsening`)."""
    plans = plan_coarsening(shape, spacing, periodic, max_levels, coarsest_nodes)
    return [LevelPlan(axes, sp, periodic) for axes, sp in plans]


def stack_levels(block_shape, spacing, n_blocks: int, stride: int):
    """:class:`LevelPlan` of every coarser level of a stack (see :func:`stacked_plan`)."""
    plans = stacked_plan(block_shape, spacing, n_blocks, stride)
    return [LevelPlan(axes, sp, False, (nx, st)) for axes, sp, nx, st in plans]


__all__ = [
    "ANISOTROPY_LIMIT",
    "AxisCoarsening",
    "LevelPlan",
    "coarsen_axis",
    "grid_levels",
    "identity_axis",
    "plan_coarsening",
    "stack_levels",
    "stacked_plan",
]
