"""The uniform 3D grid every map and solution lives on.

Conventions (used everywhere in pbsolver):

* arrays are ``(nx, ny, nz)``, C-ordered, so ``k`` (z) varies fastest;
* node ``[i, j, k]`` sits at ``origin + (i, j, k) * spacing`` (the *centre* of node ``[0, 0, 0]``
  is the origin, as in GridDataFormats and OpenDX);
* lengths are in ångström.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from pbsolver import display as _display
from pbsolver.exceptions import InputError

#: The largest grid accepted unless a caller raises it: 1024³ nodes, 4 GiB a float32 map.
MAX_POINTS = 1024**3
MIN_NODES = 3


def _as_triple(value, name: str) -> tuple[float, float, float]:
    arr = np.asarray(value, dtype=float)
    if arr.ndim == 0:
        arr = np.repeat(arr, 3)
    if arr.shape != (3,):
        raise InputError(f"{name} must be one number or three numbers, got shape {arr.shape}")
    return tuple(float(v) for v in arr)


@dataclass(frozen=True, init=False)
class Grid:
    """A uniform, axis-aligned 3D grid of nodes.

    Parameters
    ----------
    shape : tuple of 3 int
        Number of nodes along x, y and z; at least 3 along each axis.
    spacing : float or sequence of 3 float
        Distance between neighbouring nodes, Å (one value or one per axis).
    origin : sequence of 3 float, optional
        Position of the centre of node ``[0, 0, 0]``, Å. Default ``(0, 0, 0)``.
    max_points : int, optional
        Refuse grids with more nodes than this (default :data:`MAX_POINTS`).

    Raises
    ------
    InputError
        On a shape that is not three integers ≥ 3, a non-positive or non-finite spacing, a
        non-finite origin, or more than ``max_points`` nodes.

    Examples
    --------
    >>> g = Grid(shape=(33, 33, 33), spacing=0.5, origin=(-8.0, -8.0, -8.0))
    >>> g.center
    (0.0, 0.0, 0.0)
    """

    shape: tuple[int, int, int]
    spacing: tuple[float, float, float]
    origin: tuple[float, float, float]
    _repr_html_ = _display.grid_html

    def __init__(self, shape, spacing=1.0, origin=(0.0, 0.0, 0.0), *, max_points=MAX_POINTS):
        try:
            shape_t = tuple(operator_index(n) for n in shape)
        except TypeError as exc:
            raise InputError(f"grid shape must be three integers, got {shape!r}") from exc
        if len(shape_t) != 3:
            raise InputError(f"grid shape must have 3 entries (nx, ny, nz), got {shape_t!r}")
        if min(shape_t) < MIN_NODES:
            raise InputError(f"grid shape {shape_t} has an axis with fewer than {MIN_NODES} nodes")
        check_points(
            shape_t, max_points, f"grid shape {shape_t}", " (raise max_points if you mean it)"
        )
        spacing_t = _as_triple(spacing, "spacing")
        if not all(math.isfinite(h) and h > 0 for h in spacing_t):
            raise InputError(f"spacing must be finite and > 0 Å, got {spacing_t}")
        origin_t = _as_triple(origin, "origin")
        if not all(math.isfinite(o) for o in origin_t):
            raise InputError(f"origin must be finite, got {origin_t}")
        object.__setattr__(self, "shape", shape_t)
        object.__setattr__(self, "spacing", spacing_t)
        object.__setattr__(self, "origin", origin_t)

    # ------------------------------------------------------------------ derived geometry
    @property
    def size(self) -> int:
        """Number of nodes."""
        return math.prod(self.shape)

    @property
    def lengths(self) -> tuple[float, float, float]:
        """Distance from the first to the last node along each axis, Å."""
        return tuple((n - 1) * h for n, h in zip(self.shape, self.spacing, strict=True))

    @property
    def center(self) -> tuple[float, float, float]:
        """Midpoint of the grid, Å."""
        return tuple(o + 0.5 * length for o, length in zip(self.origin, self.lengths, strict=True))

    def axes(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Node coordinates along x, y and z (three 1-D float64 arrays, Å)."""
        return tuple(
            o + h * np.arange(n)
            for o, h, n in zip(self.origin, self.spacing, self.shape, strict=True)
        )

    def coordinates(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Broadcastable x, y, z coordinate arrays of shapes (nx,1,1), (1,ny,1), (1,1,nz)."""
        x, y, z = self.axes()
        return x[:, None, None], y[None, :, None], z[None, None, :]

    def __repr__(self) -> str:
        sp = self.spacing
        sp_text = f"{sp[0]:g}" if sp[0] == sp[1] == sp[2] else "({:g}, {:g}, {:g})".format(*sp)
        return (
            f"Grid(shape={self.shape}, spacing={sp_text}, origin=({{:g}}, {{:g}}, {{:g}}))".format(
                *self.origin
            )
        )


def check_points(shape, max_points: int, what: str, hint: str = "") -> int:
    """The node count of ``shape``; :class:`~pbsolver.InputError` when above ``max_points``.

    Grids and file readers call it before allocating anything, so an absurd declared shape is
    refused with ``<what> has N nodes, more than the limit of M<hint>``.
    """
    npoints = math.prod(int(n) for n in shape)
    if npoints > max_points:
        raise InputError(
            f"{what} has {npoints:,} nodes, more than the limit of {max_points:,}{hint}"
        )
    return npoints


def operator_index(value) -> int:
    """Return ``value`` as a Python int if it is integral (numpy ints included)."""
    if isinstance(value, bool):
        raise TypeError("bool is not a grid size")
    if isinstance(value, float | np.floating):
        if not float(value).is_integer():
            raise TypeError(f"{value!r} is not an integer")
        return int(value)
    import operator

    return operator.index(value)
