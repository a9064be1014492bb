"""The multigrid hierarchy: a list of levels and one cycle over them.

PyAMG's ``MultilevelSolver`` is the model: one object holds the levels (operator, transfer to
the next coarser level, work buffers) and runs the cycle; builders
(:mod:`pbsolver.multigrid.builders`) make it for one grid or for a stack of independent blocks,
and the methods (:mod:`pbsolver.multigrid.methods`) drive it. The cycle calls nothing but
backend kernels on buffers allocated by the builder — no allocation and no host
synchronisation — so :meth:`Hierarchy.runner` can hand it to ``backend.capture`` to be
recorded once and replayed (a CUDA graph on the GPU).

Cycles: V (one coarse-grid visit a level), W (two) and F (one F-cycle then one V-cycle a
level), with red–black Gauss–Seidel or SOR smoothing (``omega``). The coarsest level is solved
exactly: by a dense (pseudo-)inverse computed in float64 from the coarsest float64
coefficients (one grid), or by symmetric Gauss–Seidel sweeps (a stack's coarsest level has one
unknown a block, for which one sweep is exact; or a grid whose coarsest level is too large for
a dense inverse).

The coarse operators are built by the backend (:meth:`pbsolver.backends.Backend.coarse_operators`,
described in :mod:`pbsolver.backends.coarse`) in float64 from the face coefficients and κ̄² in
:attr:`Hierarchy.inputs`; :meth:`Hierarchy.rebuild` rebuilds them in place when the finest
level changes (a new batch of blocks), so captured cycles stay valid.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from pbsolver.arrays import array_module
from pbsolver.backends import CoarseLevel, Stencil, Transfer

#: Cycle shapes: the number of coarse-grid visits per level (F: one F-cycle then one V-cycle).
CYCLES = {"V": 1, "W": 2, "F": 2}

#: Largest coarsest grid (nodes) solved with a dense inverse.
DENSE_MAX_NODES = 4096


@dataclass
class Level:
    """One level of a :class:`Hierarchy`.

    Attributes
    ----------
    stencil : Stencil
        The level's operator; ``stencil.b`` is its right-hand side buffer (on the finest level:
        the current phase's right-hand side).
    x : array
        Iterate (finest level: the caller's) or coarse-grid correction.
    r : array or None
        Residual buffer (None on the coarsest level).
    transfer : Transfer or None
        Transfer to the next coarser level (None on the coarsest).
    spacing : tuple of 3 float
        Nominal spacing (Å; coarse levels may be slightly non-uniform).
    """

    stencil: Stencil
    x: object
    r: object
    transfer: Transfer | None
    spacing: tuple


class Hierarchy:
    """A multigrid hierarchy on one backend: levels, coarse operators and the cycle.

    Made by :func:`pbsolver.multigrid.builders.grid_hierarchy` (one grid) or
    :func:`~pbsolver.multigrid.builders.stack_hierarchy` (a stack of independent blocks).

    Parameters
    ----------
    backend : Backend
    levels : list of Level
        Finest first; the finest level's stencil and iterate are bound by :meth:`bind`.
    coarse : list of CoarseLevel
        What the backend rebuilds the coarse levels from (one entry per coarse level).
    inputs : 4 arrays
        Finest faces (x, y, z) and κ̄² (None: no salt) the coarse operators come from (float32
        or float64; one grid's are its own stencil's faces and the problem's κ̄², no copies).
    cycle : {"V", "W", "F"}
    presmooth, postsmooth : int
        Red–black sweeps before and after the coarse-grid correction (equal counts make V and
        W cycles symmetric operators, as MG-CG needs).
    omega : float
        Smoother relaxation (1: Gauss–Seidel).
    coarse_sweeps : int
        Symmetric Gauss–Seidel sweeps on the coarsest level when it has no dense inverse.
    dense : bool
        Solve the coarsest level with a dense inverse (recomputed by :meth:`rebuild`).
    singular : bool
        The operator is singular (periodic, no salt): the dense solve is a pseudo-inverse.
    """

    def __init__(
        self,
        backend,
        levels,
        coarse,
        inputs,
        *,
        cycle: str,
        presmooth: int,
        postsmooth: int,
        omega: float,
        coarse_sweeps: int,
        dense: bool,
        singular: bool = False,
    ):
        self.backend = backend
        self.levels = levels
        self.coarse = coarse
        self.inputs = tuple(inputs)
        self.cycle_type = cycle
        self.presmooth, self.postsmooth = int(presmooth), int(postsmooth)
        self.omega = float(omega)
        self.coarse_sweeps = int(coarse_sweeps)
        self.dtype = levels[0].stencil.dtype
        self.dense = bool(dense)
        self.singular = bool(singular)
        self.coarse_inverse = None

    # ------------------------------------------------------------------ set-up
    def rebuild(self) -> None:
        """Rebuild every coarse operator (and the dense coarsest inverse) from :attr:`inputs`."""
        coarsest = self.backend.coarse_operators(self.inputs, self.coarse)
        if self.dense:
            periodic = self.levels[-1].stencil.periodic
            with self.backend.stream_context():  # array code ordered with the kernels
                inverse = dense_inverse(*coarsest, periodic, self.singular)
                if self.coarse_inverse is None:
                    self.coarse_inverse = self.backend.asarray(inverse, self.dtype)
                else:  # in place: a cycle captured on its address stays valid
                    self.backend.set_values(self.coarse_inverse, inverse)

    # ------------------------------------------------------------------ the cycle
    def bind(self, st: Stencil, x) -> None:
        """Make ``(st, x)`` the finest level's stencil and iterate for the following cycles.

        ``st.b`` is the right-hand side the cycles reduce the residual of.
        """
        fine = self.levels[0]
        fine.stencil, fine.x = st, x

    def runner(self, st: Stencil, x, *, keep: bool = False, from_zero: bool = False):
        """Bind ``(st, x)`` and return a callable running one cycle, captured by the backend.

        ``keep``: the buffers outlive this call (a kept workspace), so the captured cycle is
        filed under a key of every buffer address and cycle parameter and found again by a
        later runner on the same buffers; otherwise it belongs to this runner alone.
        ``from_zero``: each call first sets ``x`` to zero (a preconditioner's cycle).
        """
        self.bind(st, x)

        def run():
            if from_zero:
                self.backend.fill(x, 0.0)
            self.cycle()

        key = None
        if keep:
            key = (
                "multigrid-cycle",
                from_zero,
                self.cycle_type,
                self.presmooth,
                self.postsmooth,
                self.omega,
                self.coarse_sweeps,
                self.backend.buffer_key(st.cx, st.cy, st.cz, st.diag, st.b, x, *self.buffers()),
            )
        return self.backend.capture(run, key=key)

    def cycle(self) -> None:
        """One cycle on the bound finest level, in place (backend kernels only, no sync)."""
        self._visit(0, self.cycle_type)

    def _visit(self, level, shape):
        be = self.backend
        lev = self.levels[level]
        st, x = lev.stencil, lev.x
        if level == len(self.levels) - 1:
            if self.coarse_inverse is not None:
                be.dense_solve(self.coarse_inverse, st.b, x)
                return
            # symmetric Gauss–Seidel: colours R B R B … R (a palindrome)
            be.rb_sor_color(st, x, 0, 1.0)
            for _ in range(self.coarse_sweeps):
                be.rb_sor_color(st, x, 1, 1.0)
                be.rb_sor_color(st, x, 0, 1.0)
            return
        # the level's residual buffer is free while it smooths: a backend may sweep through it
        be.rb_sor_sweeps(st, x, 0, self.omega, self.presmooth, work=lev.r)
        nxt = self.levels[level + 1]
        be.residual(st, x, lev.r)
        be.restrict(lev.transfer, lev.r, nxt.stencil.b)
        be.fill(nxt.x, 0.0)
        if level + 1 == len(self.levels) - 1:
            # the coarsest level is solved exactly: a second visit would change nothing
            self._visit(level + 1, "V")
        elif shape == "F":
            self._visit(level + 1, "F")
            self._visit(level + 1, "V")
        else:
            for _ in range(CYCLES[shape]):
                self._visit(level + 1, shape)
        be.prolong_add(lev.transfer, nxt.x, x)
        be.rb_sor_sweeps(st, x, 1, self.omega, self.postsmooth, work=lev.r)

    # ------------------------------------------------------------------ inspection
    def buffers(self) -> list:
        """Every array the cycle touches besides the bound finest stencil and iterate."""
        out = []
        for i, lev in enumerate(self.levels):
            if i > 0:
                st = lev.stencil
                out += [st.cx, st.cy, st.cz, st.diag, st.b, lev.x]
            if lev.r is not None:
                out.append(lev.r)
            if lev.transfer is not None:
                out += [*lev.transfer.pos, *lev.transfer.lo, *lev.transfer.hi]
        if self.coarse_inverse is not None:
            out.append(self.coarse_inverse)
        return out

    @property
    def shapes(self):
        """Grid shape of every level, finest first."""
        return [lev.stencil.shape for lev in self.levels]

    def nbytes(self) -> int:
        """Bytes held by the coarse levels and buffers (the finest level's own arrays excluded)."""
        total = 0
        for i, lev in enumerate(self.levels):
            arrays = [lev.r] if i == 0 else [lev.x, lev.r, lev.stencil.b, lev.stencil.diag]
            if i > 0:
                arrays += [lev.stencil.cx, lev.stencil.cy, lev.stencil.cz]
            total += sum(int(np.prod(a.shape)) * a.dtype.itemsize for a in arrays if a is not None)
        for c in self.coarse:
            own = (c.stencil.cx, c.stencil.cy, c.stencil.cz)
            for a in c.work or ():
                if not any(a is b for b in own):  # a grid's work faces are its stencil's
                    total += int(np.prod(a.shape)) * a.dtype.itemsize
        if self.coarse_inverse is not None:
            total += int(np.prod(self.coarse_inverse.shape)) * self.coarse_inverse.dtype.itemsize
        return total

    def __repr__(self) -> str:
        lines = [
            f"Multigrid hierarchy: {len(self.levels)} levels, {self.cycle_type}"
            f"({self.presmooth},{self.postsmooth})-cycle, red-black GS, "
            f"{self.backend.name}, {np.dtype(self.dtype).name}, "
            f"{self.nbytes() / 2**20:.1f} MiB extra",
            " level  shape              spacing (Å)              unknowns",
        ]
        for i, lev in enumerate(self.levels):
            shape = lev.stencil.shape
            unknowns = math.prod(shape if lev.stencil.periodic else (n - 2 for n in shape))
            spacing = ", ".join(f"{h:.3g}" for h in lev.spacing)
            lines.append(f" {i:>5}  {str(shape):<18} ({spacing}){'':<5} {unknowns:>10,}")
        return "\n".join(lines)


def add_level(backend, levels: list, plan, coarse: Stencil) -> CoarseLevel:
    """Append the level of ``coarse`` (made by ``plan``) below ``levels[-1]``.

    The level above gets its residual buffer and its transfer; the new level gets its
    correction buffer. Returns the level's :class:`~pbsolver.backends.CoarseLevel`.
    """
    be, fine, dtype = backend, levels[-1], coarse.dtype
    fine.r = be.zeros(fine.stencil.shape, dtype)
    fine.transfer = Transfer(
        pos=tuple(be.asarray(a.pos, np.int32) for a in plan.axes),
        lo=tuple(be.asarray(a.lo, np.int32) for a in plan.axes),
        hi=tuple(be.asarray(a.hi, np.int32) for a in plan.axes),
        periodic=coarse.periodic,
        fine_shape=fine.stencil.shape,
        coarse_shape=coarse.shape,
    )
    levels.append(Level(coarse, be.zeros(coarse.shape, dtype), None, None, plan.spacing))
    return CoarseLevel(plan, coarse, fine.transfer)


def dense_inverse(cx, cy, cz, kappa2, periodic, singular):
    """The coarsest operator's inverse as a dense (N, N) matrix over all N nodes.

    Rows and columns of fixed (Dirichlet) nodes are zero, so ``x = M b`` leaves them at zero;
    a singular (periodic, salt-free) operator gets its pseudo-inverse, whose solution has zero
    mean. Float64, from float64 coefficients, assembled and inverted in the coefficients' own
    array library (on the device for CuPy arrays: a nonlinear solve rebuilds it every Newton
    step, and a round trip through the host would cost more than the inversion), except the
    pseudo-inverse, which NumPy computes.
    """
    xp = array_module(cx) if not singular else np
    if xp is np:
        cx, cy, cz = (_host(c) for c in (cx, cy, cz))
        kappa2 = None if kappa2 is None else _host(kappa2)
    cx, cy, cz = (xp.asarray(c, dtype=np.float64) for c in (cx, cy, cz))
    shape = cx.shape
    n = math.prod(shape)
    index = np.arange(n).reshape(shape)
    A = xp.zeros((n, n))
    flat = A.reshape(-1)
    for axis, c in enumerate((cx, cy, cz)):
        nxt = np.roll(index, -1, axis=axis)
        keep = np.ones(shape, dtype=bool)
        if not periodic:  # the last layer's faces wrap: not part of a Dirichlet stencil
            sl = [slice(None)] * 3
            sl[axis] = -1
            keep[tuple(sl)] = False
        s, t = index[keep], nxt[keep]
        w = c[xp.asarray(keep)]
        # each of the four index sets is free of repeats, so a plain indexed add is exact
        for rows, cols, sign in ((s, s, 1.0), (t, t, 1.0), (s, t, -1.0), (t, s, -1.0)):
            flat[xp.asarray(rows * n + cols)] += sign * w
    if kappa2 is not None:
        diag = xp.arange(n) * (n + 1)
        flat[diag] += xp.asarray(kappa2, dtype=np.float64).ravel()
    unknowns = np.zeros(shape, dtype=bool)
    if periodic:
        unknowns[...] = True
    else:
        unknowns[1:-1, 1:-1, 1:-1] = True
    u = xp.asarray(np.flatnonzero(unknowns))
    M = xp.zeros((n, n))
    if u.size:
        Au = A[u[:, None], u[None, :]]
        M[u[:, None], u[None, :]] = (
            np.linalg.pinv(Au, hermitian=True) if singular else xp.linalg.inv(Au)
        )
    return M


def _host(a):
    return a.get() if hasattr(a, "get") and not isinstance(a, np.ndarray) else a


__all__ = ["CYCLES", "DENSE_MAX_NODES", "Hierarchy", "Level", "add_level", "dense_inverse"]
