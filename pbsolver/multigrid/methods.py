"""Multigrid as iterative methods of the solve loop: ``"multigrid"`` and ``"mgcg"``.

``"multigrid"``
    One cycle an iteration (V(3,3) by default, on one grid as on a stack).
``"mgcg"``
    Conjugate gradients preconditioned with one symmetric cycle (V or W with
    ``presmooth == postsmooth``), for the hardest maps: face maps whose axes describe different
    geometries (locally anisotropic media) defeat point smoothing, and CG removes the modes the
    cycle leaves behind.

A method gets its hierarchy from the linear system it runs on
(:meth:`pbsolver.solving.system.LinearSystem.hierarchy`), which builds it for one grid or for a
stack of blocks; the method only drives it.
"""

from __future__ import annotations

import dataclasses
import math

from pbsolver.exceptions import InputError

#: The options a multigrid method takes (None: the system's default for that option).
OPTIONS = (
    "cycle",
    "presmooth",
    "postsmooth",
    "omega",
    "max_levels",
    "coarsest_nodes",
    "coarse_sweeps",
)


class Multigrid:
    """Geometric multigrid cycles as a solver method (``"multigrid"``).

    Parameters
    ----------
    cycle : {"F", "V", "W"}, optional
        Cycle shape (default "V"). "F" converges like "W" at a rate that does not grow with
        the number of levels, for less work and far fewer coarse-level visits than "W"; a
        V-cycle's rate creeps up with the number of levels, but with three sweeps each side
        it took less time than F(2,2) on the proteins of ``benchmarks/grid_mg_omega.py
        --cycles`` and on a random 193³ problem (BENCHMARKS.md).
    presmooth, postsmooth : int, optional
        Red–black sweeps before / after the coarse-grid correction (default 3, 3 on one grid,
        as on a stack).
    omega : float, optional
        Smoother relaxation factor (default 1.2 on one grid: red–black SOR).
    max_levels : int, optional
        Cap on the number of levels (one grid only).
    coarsest_nodes : int, optional
        Coarsen until a level has at most this many nodes (default 512; one grid only); it is
        solved exactly.
    coarse_sweeps : int, optional
        Symmetric Gauss–Seidel sweeps on a coarsest level without an exact solve.

    Notes
    -----
    One iteration is one cycle. Options left as None take the defaults of the system's
    hierarchy builder (:mod:`pbsolver.multigrid.builders`: ``GRID_CYCLE`` with this method's
    cycle shape for one grid, ``STACK_CYCLE`` for a stack).
    """

    name = "multigrid"
    check_every = 1
    options = OPTIONS
    #: The options of this method's cycle on one grid (the rest: ``GRID_CYCLE``'s).
    grid_defaults = {"cycle": "V", "presmooth": 3, "postsmooth": 3}
    cycles = ("F", "V", "W")

    def __init__(
        self,
        cycle=None,
        presmooth=None,
        postsmooth=None,
        omega=None,
        max_levels=None,
        coarsest_nodes=None,
        coarse_sweeps=None,
    ):
        values = (cycle, presmooth, postsmooth, omega, max_levels, coarsest_nodes, coarse_sweeps)
        #: the options given (the rest are the hierarchy builder's defaults)
        self.given = {k: v for k, v in zip(OPTIONS, values, strict=True) if v is not None}
        if cycle is not None and cycle not in self.cycles:  # fail at construction, not at solve
            raise InputError(
                f"method {self.name!r}: cycle must be one of {self.cycles}, got {cycle!r}"
            )
        if omega is not None:
            self.given["omega"] = float(omega)
        self.omega = self.given.get("omega")

    def setup(self, system) -> None:
        """Get the system's hierarchy (built, or rebuilt for the system's current blocks)."""
        self.backend = system.backend
        self.keep = system.kept
        self.hierarchy = system.hierarchy(self.given, self.grid_defaults)
        self.omega = self.hierarchy.omega

    def start(self, st, x) -> None:
        self._run = self.hierarchy.runner(st, x, keep=self.keep)

    def step(self, count: int) -> None:
        for _ in range(count):
            self._run()

    def default_maxiter(self, shape) -> int:
        return 100


class MGCG(Multigrid):
    """Conjugate gradients preconditioned with one symmetric multigrid cycle (``"mgcg"``).

    Same options as :class:`Multigrid`, except that the cycle must be a symmetric operator:
    "V" (default) or "W", with ``presmooth == postsmooth``. Each iteration costs one cycle, one
    operator application, two dot products (each a host synchronisation) and three vector
    updates; the loop measures a refinement phase by the recurrence residual
    (:meth:`residual_norm`, one more dot product) instead of another operator application.
    """

    name = "mgcg"
    #: MG-CG's preconditioner: a V(2,2) cycle (three sweeps a side cost more than they gain).
    grid_defaults = {"cycle": "V"}
    cycles = ("V", "W")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        pre, post = self.given.get("presmooth"), self.given.get("postsmooth")
        if pre is not None and post is not None and pre != post:
            raise InputError(
                "method 'mgcg' needs a symmetric preconditioner: presmooth == postsmooth, got "
                f"{pre} and {post}"
            )

    def setup(self, system) -> None:
        super().setup(system)
        h = self.hierarchy
        if h.presmooth != h.postsmooth:
            raise InputError(
                "method 'mgcg' needs a symmetric preconditioner: presmooth == postsmooth, got "
                f"{h.presmooth} and {h.postsmooth}"
            )
        st = system.st
        self.r, self.z, self.p, self.q = system.scratch("mgcg", 4, st.dtype)
        self._zero_b = dataclasses.replace(st, b=system.scratch("mgcg-zero", 1, st.dtype)[0])
        # the preconditioner: one cycle for A z = r from z = 0, on fixed buffers
        self._precondition = h.runner(
            dataclasses.replace(st, b=self.r), self.z, keep=self.keep, from_zero=True
        )

    def start(self, st, x) -> None:
        be = self.backend
        self.st, self.x = st, x
        be.residual(st, x, self.r)
        self._precondition()
        be.fill(self.p, 0.0)
        be.axpy(self.p, self.z, 1.0)
        self.rz = be.dot(self.r, self.z)

    def step(self, count: int) -> None:
        be = self.backend
        for _ in range(count):
            if not self.rz > 0.0:  # r = 0 (solved) or a breakdown: nothing left to do
                return
            be.residual(self._zero_b, self.p, self.q)  # q = −A p
            pap = -be.dot(self.p, self.q)
            if not pap > 0.0:
                return
            alpha = self.rz / pap
            be.axpy(self.x, self.p, alpha)
            be.axpy(self.r, self.q, alpha)  # r −= α A p
            self._precondition()
            rz = be.dot(self.r, self.z)
            beta = rz / self.rz
            self.rz = rz
            be.axpby(self.p, self.z, 1.0, beta)

    def residual_norm(self) -> float:
        """‖r‖ of the recurrence residual r = b − A x (kept by the iteration; synchronises)."""
        return math.sqrt(max(self.backend.dot(self.r, self.r), 0.0))


__all__ = ["MGCG", "OPTIONS", "Multigrid"]
