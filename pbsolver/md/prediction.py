"""A field's next value along a trajectory, predicted from its last two (warm starts of solves).

A solve along a trajectory starts from the last frame's solution. When the atoms move steadily,
the last two solutions predict the next one better: with x the positions and u(x) the field,

    u(x₀) ≈ u(x₁) + α (u(x₁) − u(x₂)),    α = ⟨x₀ − x₁, x₁ − x₂⟩ / ‖x₁ − x₂‖²,

the first-order change of u along the step x₀ − x₁, written with the only derivative at hand,
the last step's difference, and α the least-squares multiple of the last step that the new step
is. α is held to [0, 1]: 0 (the last solution alone) when the atoms turn back or stop, 1 (a
linear extrapolation) at constant velocity. Unrelated frames (a conformational scan) give α near
0, so the guess is then the plain warm start.

The prediction is only a starting point: the solve still iterates to its tolerance, so the
result does not depend on it (beyond that tolerance).
"""

from __future__ import annotations

import numpy as np

from pbsolver.arrays import array_module


class FieldHistory:
    """The last two (positions, grid, field) of a trajectory, and the next field's prediction.

    Fields are arrays of any array library (NumPy or CuPy); positions are host (n, 3) arrays.
    """

    def __init__(self):
        self._last = None  # (positions, grid, field) of the last frame
        self._before = None  # of the frame before it

    def clear(self) -> None:
        """Forget every frame (the next prediction is None)."""
        self._last = self._before = None

    def record(self, positions, grid, field) -> None:
        """Add a frame's solution (kept by reference: the caller does not modify it)."""
        self._before = self._last
        self._last = (np.array(positions, dtype=np.float64), grid, field)

    @property
    def last(self):
        """(field, grid) of the last frame, or (None, None)."""
        return (None, None) if self._last is None else (self._last[2], self._last[1])

    def predict(self, positions, grid):
        """The predicted field at ``positions`` on ``grid``, or None.

        None when the last two frames are not both on ``grid`` (the caller then moves the
        last solution to ``grid`` itself) or when the atoms' motion gives α = 0.
        """
        if self._last is None or self._before is None:
            return None
        x1, g1, u1 = self._last
        x2, g2, u2 = self._before
        if g1 != grid or g2 != grid:
            return None
        alpha = step_ratio(np.asarray(positions, dtype=np.float64), x1, x2)
        if alpha == 0.0:
            return None
        xp = array_module(u1)
        out = u1 - u2  # u1 + α (u1 − u2) in one new array (in place after the difference)
        out *= xp.asarray(alpha, dtype=u1.dtype)
        out += u1
        return out


def step_ratio(x0, x1, x2) -> float:
    """α = ⟨x₀ − x₁, x₁ − x₂⟩ / ‖x₁ − x₂‖², held to [0, 1] (0 when the atoms did not move)."""
    last_step = x1 - x2
    norm2 = float(np.sum(last_step * last_step))
    if norm2 == 0.0:
        return 0.0
    alpha = float(np.sum((x0 - x1) * last_step)) / norm2
    return min(max(alpha, 0.0), 1.0)
