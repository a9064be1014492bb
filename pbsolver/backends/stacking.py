"""B Dirichlet problems of one shape as one block-diagonal system: the array reference.

Block ``k`` occupies planes ``k·stride … k·stride + nx − 1`` along x of a ``(B·stride, ny, nz)``
grid. Each problem's fixed Dirichlet values are moved to its right-hand side ("lifting":
``b ← b − A φ₀`` on the unknowns), every face that touches a fixed node is set to zero and the
diagonal is stored, so the former boundary nodes are decoupled (their equation is ``1·x = 0``)
and neighbouring blocks never see each other. ``stride = nx`` rounded up to an even count (one
decoupled padding plane when ``nx`` is odd) keeps every block's red–black colouring identical
to its own grid's, so a block is swept exactly as its problem alone would be.

:func:`stack_problems` is the reference (NumPy or CuPy array code) and the default of
:meth:`pbsolver.backends.Backend.assemble_stack`; the CUDA backend assembles on the device.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from pbsolver.arrays import array_module, to_numpy
from pbsolver.exceptions import InputError


@dataclasses.dataclass
class StackedSystem:
    """B Dirichlet problems as one block-diagonal system, as arrays (see the module docstring).

    Attributes
    ----------
    cx, cy, cz, diag, b : ndarray (B·stride, ny, nz), float64
        Lifted face coefficients, stored diagonal (1 on decoupled nodes) and right-hand side,
        in the problems' array library.
    x : ndarray (B·stride, ny, nz), float64
        Initial guess (interior values of each x0, zero elsewhere).
    stride : int
        Planes per block along x (``nx`` rounded up to even).
    bnorms : list of float
        ‖b_k − A_k φ₀_k‖₂ of each problem (its relative residual's denominator).
    fixed : list of arrays
        φ₀_k: each problem's boundary values on its outer layer, zero inside.
    faces : tuple of 3 arrays or None
        With ``unlifted=True``: every block's face coefficients *including* those to its
        outer layer (zero for faces leaving a block) — what a stacked multigrid hierarchy
        builds its coarse operators from.
    kappa2 : array or None
        With ``unlifted=True``: κ̄² of every node (zero without salt).
    guessed : list of bool
        Whether each block started from a given x0 (else from zero).
    """

    cx: object
    cy: object
    cz: object
    diag: object
    b: object
    x: object
    stride: int
    bnorms: list
    fixed: list
    faces: tuple | None = None
    kappa2: object = None
    guessed: list = dataclasses.field(default_factory=list)

    def block(self, k: int, nx: int):
        """Slice of block ``k``'s nodes along x."""
        return slice(k * self.stride, k * self.stride + nx)


def stack_problems(problems, x0=None, unlifted=False) -> StackedSystem:
    """Assemble the block-diagonal system of Dirichlet problems of one shape and spacing.

    Parameters
    ----------
    problems : sequence of Problem
    x0 : sequence of arrays or None, optional
    unlifted : bool
        Also keep the blocks' unlifted faces and κ̄² (for a stacked multigrid hierarchy).

    Returns
    -------
    StackedSystem
    """
    from pbsolver.operator import apply, coefficients, fixed_values, interior_mask, rhs

    p0 = problems[0]
    shape, spacing = p0.grid.shape, p0.grid.spacing
    for i, p in enumerate(problems):
        if p.boundary != "dirichlet":
            raise InputError(f"problem {i} is periodic: only Dirichlet problems can be stacked")
        if p.grid.shape != shape or p.grid.spacing != spacing:
            raise InputError(
                f"problem {i} has shape {p.grid.shape} and spacing {p.grid.spacing}; the stack "
                f"needs {shape} and {spacing}"
            )
    libs = {array_module(p.phi_coulomb) for p in problems}
    xp = libs.pop() if len(libs) == 1 else np
    nx, ny, nz = shape
    stride = stride_for(nx)
    big = (len(problems) * stride, ny, nz)
    cx, cy, cz, b, x = (xp.zeros(big) for _ in range(5))
    diag = xp.ones(big)
    faces = tuple(xp.zeros(big) for _ in range(3)) if unlifted else None
    kappa2 = xp.zeros(big) if unlifted else None
    guessed = []
    inner = interior_mask(shape, False, xp)
    face_masks = [inner & xp.roll(inner, -1, axis=a) for a in range(3)]
    bnorms, fixed = [], []
    x0 = [None] * len(problems) if x0 is None else list(x0)
    for k, p in enumerate(problems):
        if xp is np and array_module(p.phi_coulomb) is not np:
            p = p.to(np)
        coef = coefficients(p, np.float64)
        g = fixed_values(p, np.float64)
        lifted = rhs(p) - apply(coef, g)  # zero on the outer layer (apply and rhs both are)
        blk = slice(k * stride, k * stride + nx)
        for dst, c, m in zip((cx, cy, cz), (coef.cx, coef.cy, coef.cz), face_masks, strict=True):
            dst[blk] = xp.where(m, c, 0.0)
        diag[blk] = xp.where(inner, coef.diagonal(), 1.0)
        b[blk] = lifted
        if unlifted:
            for dst, c in zip(faces, (coef.cx, coef.cy, coef.cz), strict=True):
                dst[blk] = c
            # the last layer's faces lead out of the block (on a Dirichlet grid, nowhere)
            faces[0][k * stride + nx - 1] = 0.0
            faces[1][blk][:, -1] = 0.0
            faces[2][blk][:, :, -1] = 0.0
            if p.kappa2 is not None:
                kappa2[blk] = p.kappa2
        guessed.append(x0[k] is not None)
        if x0[k] is not None:
            guess = xp.asarray(to_numpy(x0[k]) if xp is np else x0[k], dtype=np.float64)
            if tuple(guess.shape) != shape:
                raise InputError(f"x0[{k}] has shape {tuple(guess.shape)}, the grid needs {shape}")
            if not bool(xp.isfinite(guess).all()):
                raise InputError(f"x0[{k}] must be finite")
            x[blk] = xp.where(inner, guess, 0.0)
        bnorms.append(float(xp.sqrt(xp.sum(lifted * lifted))))
        fixed.append(g)
    return StackedSystem(cx, cy, cz, diag, b, x, stride, bnorms, fixed, faces, kappa2, guessed)


def stride_for(nx: int) -> int:
    """Planes a block of ``nx`` planes occupies in a stack: ``nx`` rounded up to even."""
    return nx + nx % 2


__all__ = ["StackedSystem", "stack_problems", "stride_for"]
