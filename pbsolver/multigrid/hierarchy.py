"""Geometric multigrid for the 7-point reaction-field operator, written against the backend API.

Two methods register themselves in :data:`pbsolver.solver.METHODS`:

``"multigrid"``
    F- (default), V- or W-cycles with red–black Gauss–Seidel smoothing, one cycle an iteration.
``"mgcg"``
    Conjugate gradients preconditioned with one symmetric cycle (for the hardest maps).

Both run on a :class:`Hierarchy`, built once per solve. The cycle (:meth:`Hierarchy.cycle`)
calls nothing but backend kernels on buffers allocated at set-up — no allocation and no host
synchronisation — so a GPU backend may capture it once as a graph and replay it.

Coarsening (any grid size)
--------------------------
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

Transfers and coarse operators
------------------------------
Prolongation ``P`` is trilinear interpolation; restriction is ``Pᵀ``. The coarse operators are
7-point, built from the fine face coefficients in float64 once at set-up, approximating the
Galerkin product ``Pᵀ A P`` (so they carry its scaling and the cycle stays symmetric):

* a coarse face along axis ``a`` joins two coarse nodes one or two fine faces apart: the fine
  faces along each fine line are added in series (harmonic: ``1 / Σ 1/c``), since flux crosses
  them one after the other — this is what keeps the coarse operator right across an ε 1:80
  interface;
* those line conductances are then added in parallel across the two other axes with the
  restriction weights (1 on the line through the coarse node, ½ on midpoint lines) — the
  Alcouffe / APBS style "harmonic along, arithmetic across" averaging;
* κ̄² is lumped: ``κ̄²_H = Pᵀ κ̄²``.

Coarsening stops at the first level with at most ``coarsest_nodes`` (512) nodes, e.g. 129³ →
65³ → 33³ → 17³ → 9³ → 5³; that level is solved exactly by a dense inverse (pseudo-inverse for a
singular periodic operator) computed in float64 at set-up and applied as one matrix–vector
product (``Backend.dense_solve``). Symmetric Gauss–Seidel sweeps are the fallback when
``max_levels`` leaves a coarsest grid too large for that.

Convergence (measured, ε 2 sphere in ε 80 with off-centre charges, float64, rtol 1e-6)
----------------------------------------------------------------------------------------
Residual reduction a cycle, 33³ / 65³ / 129³: F(2,2) 0.25 / 0.28 / 0.29 (8 / 9 / 10 cycles),
W(2,2) about the same, V(2,2) 0.34 / 0.41 / 0.45 (10 / 12 / 14 cycles), MG-CG with a V(2,2)
preconditioner 0.10 / 0.13 / 0.16 (7 / 8 / 9 iterations). The V-cycle's factor creeps up with
the number of levels because each 7-point coarse operator only approximates ``Pᵀ A P`` near
the interface; the F- and W-cycles solve the coarse problems accurately enough to make the
factor level-independent, and MG-CG removes the remaining slow modes. Face maps whose axes
describe different geometries (locally anisotropic media, up to 80:1) defeat point smoothing:
use ``"mgcg"`` there (about 15 iterations where plain cycles need 50).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from pbsolver.arrays import array_module
from pbsolver.backends import Backend, Stencil, Transfer
from pbsolver.exceptions import InputError
from pbsolver.problem import Problem
from pbsolver.solve.solver import METHODS, require_even_periodic

#: Cycle shapes: the number of coarse-grid visits per level (F: one F-cycle then one V-cycle).
CYCLES = {"V": 1, "W": 2, "F": 2}

#: Largest coarsest grid (nodes) solved with a dense inverse.
DENSE_MAX_NODES = 4096

#: Axes whose spacing exceeds this multiple of the finest spacing wait (semi-coarsening).
ANISOTROPY_LIMIT = math.sqrt(2.0) * (1 + 1e-9)


# ---------------------------------------------------------------------- coarsening plans
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


# ---------------------------------------------------------------------- coarse operators
def _take(a, idx, axis, xp):
    return xp.take(a, xp.asarray(idx), axis=axis)


def _expand(v, axis, xp):
    shape = [1, 1, 1]
    shape[axis] = -1
    return xp.asarray(v).reshape(shape)


def aggregate(a, ax: AxisCoarsening, axis: int, xp=np):
    """``Pᵀ`` along one axis: ``out[I] = Σ_d w_d[I] a[pos[I] + d]``, ``d ∈ {-1, 0, 1}``."""
    w = ax.weights
    n = ax.n_fine
    out = _take(a, ax.pos, axis, xp)
    for col, d in ((0, -1), (2, 1)):
        if w[:, col].any():
            out = out + _expand(w[:, col], axis, xp) * _take(a, (ax.pos + d) % n, axis, xp)
    return out


def series(c, ax: AxisCoarsening, axis: int, xp=np):
    """Fine faces between consecutive coarse nodes along ``axis`` combined in series."""
    n = ax.n_fine
    inv = 1.0 / c
    s = _take(inv, ax.pos, axis, xp)
    two = ax.gap == 2
    if two.any():
        # where, not a 0/1 weight: a zero face (inv = inf) beyond a one-interval gap must not
        # turn into 0·inf = nan (stacked blocks have zero faces between them)
        second = _take(inv, (ax.pos + 1) % n, axis, xp)
        s = s + xp.where(_expand(two, axis, xp), second, 0.0)
    return 1.0 / s


def restrict_field(a, axes, xp=np):
    """``Pᵀ a`` in all three axes (used for κ̄²; a NumPy/CuPy reference of the kernel)."""
    for axis, ax in enumerate(axes):
        a = aggregate(a, ax, axis, xp)
    return a


def coarse_coefficients(cx, cy, cz, kappa2, axes, xp=np):
    """Coarse face coefficients and κ̄² approximating ``Pᵀ A P`` with a 7-point stencil.

    Parameters
    ----------
    cx, cy, cz : arrays (fine shape), float64
        Fine face coefficients.
    kappa2 : array or None
        Fine κ̄² (None: no salt).
    axes : tuple of 3 AxisCoarsening

    Returns
    -------
    (cx, cy, cz, kappa2) on the coarse shape
    """
    out = []
    for axis, c in enumerate((cx, cy, cz)):
        c = series(c, axes[axis], axis, xp)
        for other in range(3):
            if other != axis:
                c = aggregate(c, axes[other], other, xp)
        out.append(c)
    k2 = None if kappa2 is None else restrict_field(kappa2, axes, xp)
    return (*out, k2)


def _diagonal(cx, cy, cz, kappa2, periodic, xp):
    d = cx + xp.roll(cx, 1, axis=0) + cy + xp.roll(cy, 1, axis=1) + cz + xp.roll(cz, 1, axis=2)
    if kappa2 is not None:
        d = d + kappa2
    if not periodic:
        d[0], d[-1] = 1.0, 1.0
        d[:, 0], d[:, -1] = 1.0, 1.0
        d[:, :, 0], d[:, :, -1] = 1.0, 1.0
    return d


def dense_inverse(cx, cy, cz, kappa2, periodic, singular):
    """The coarsest operator's inverse as a dense (N, N) NumPy matrix over all N nodes.

    Rows and columns of fixed (Dirichlet) nodes are zero, so ``x = M b`` leaves them at zero;
    a singular (periodic, salt-free) operator gets its pseudo-inverse, whose solution has zero
    mean. Float64, from float64 coefficients.
    """
    cx, cy, cz = (np.asarray(_host(c), dtype=np.float64) for c in (cx, cy, cz))
    shape = cx.shape
    n = math.prod(shape)
    index = np.arange(n).reshape(shape)
    A = np.zeros((n, n))
    for axis, c in enumerate((cx, cy, cz)):
        nxt = np.roll(index, -1, axis=axis)
        keep = np.ones(shape, dtype=bool)
        if not periodic:  # the last layer's faces wrap: not part of a Dirichlet stencil
            sl = [slice(None)] * 3
            sl[axis] = -1
            keep[tuple(sl)] = False
        s, t, w = index[keep], nxt[keep], c[keep]
        np.add.at(A, (s, s), w)
        np.add.at(A, (t, t), w)
        np.add.at(A, (s, t), -w)
        np.add.at(A, (t, s), -w)
    if kappa2 is not None:
        A[np.diag_indices(n)] += np.asarray(_host(kappa2), dtype=np.float64).ravel()
    unknowns = np.zeros(shape, dtype=bool)
    if periodic:
        unknowns[...] = True
    else:
        unknowns[1:-1, 1:-1, 1:-1] = True
    u = unknowns.ravel()
    Au = A[np.ix_(u, u)]
    M = np.zeros((n, n))
    if u.any():
        M[np.ix_(u, u)] = np.linalg.pinv(Au, hermitian=True) if singular else np.linalg.inv(Au)
    return M


def _host(a):
    return a.get() if hasattr(a, "get") and not isinstance(a, np.ndarray) else a


# ---------------------------------------------------------------------- the hierarchy
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
    """A multigrid hierarchy for one problem on one backend (the PyAMG-style object).

    Parameters
    ----------
    backend : Backend
    st : Stencil
        The finest level's stencil (coefficients in the solve's dtype).
    problem : Problem
        Source of the float64 coefficients the coarse operators are built from.
    cycle : {"V", "W", "F"}
        Coarse-grid visits per level: V one, W two, F one F-cycle then one V-cycle.
    presmooth, postsmooth : int
        Red–black Gauss–Seidel sweeps before and after the coarse-grid correction (equal
        counts make V and W cycles symmetric operators, as MG-CG needs).
    omega : float
        Smoother relaxation (1: Gauss–Seidel).
    max_levels : int, optional
        Cap on the number of levels (default: coarsen until the coarsest grid has at most
        ``coarsest_nodes`` nodes).
    coarsest_nodes : int
        Stop coarsening at this many nodes; the coarsest level is then solved exactly with a
        dense (pseudo-)inverse computed at set-up (``backend.dense_solve``).
    coarse_sweeps : int
        Symmetric Gauss–Seidel sweeps on the coarsest level when it is too large for the dense
        solve (more than :data:`DENSE_MAX_NODES` nodes, only with ``max_levels``).

    Notes
    -----
    All buffers are allocated here; :meth:`cycle` only calls backend kernels, so it can be
    captured once (``backend.capture``) and replayed.
    """

    def __init__(
        self,
        backend: Backend,
        st: Stencil,
        problem: Problem,
        *,
        cycle: str = "V",
        presmooth: int = 2,
        postsmooth: int = 2,
        omega: float = 1.0,
        max_levels: int | None = None,
        coarsest_nodes: int = 512,
        coarse_sweeps: int = 8,
    ):
        if max_levels is not None and (not isinstance(max_levels, int) or max_levels < 1):
            raise InputError(f"max_levels must be a positive integer, got {max_levels!r}")
        if not isinstance(coarsest_nodes, int | np.integer) or coarsest_nodes < 0:
            raise InputError(f"coarsest_nodes must be an integer >= 0, got {coarsest_nodes!r}")
        if coarsest_nodes > DENSE_MAX_NODES:
            raise InputError(f"coarsest_nodes must be at most {DENSE_MAX_NODES}")
        require_even_periodic(st, "multigrid")
        self._set_cycle(backend, st, cycle, presmooth, postsmooth, omega, coarse_sweeps)
        self.coarsest_nodes = int(coarsest_nodes)
        self.levels = self._build(st, problem, max_levels)

    # ------------------------------------------------------------------ set-up
    def _set_cycle(self, backend, st, cycle, presmooth, postsmooth, omega, coarse_sweeps):
        """Check and keep the cycle options (shared with the stacked hierarchy)."""
        if cycle not in CYCLES:
            raise InputError(f"cycle must be one of {sorted(CYCLES)}, got {cycle!r}")
        for name, value in (("presmooth", presmooth), ("postsmooth", postsmooth)):
            if not isinstance(value, int | np.integer) or value < 0:
                raise InputError(f"{name} must be a non-negative integer, got {value!r}")
        if not isinstance(coarse_sweeps, int | np.integer) or coarse_sweeps < 1:
            raise InputError(f"coarse_sweeps must be a positive integer, got {coarse_sweeps!r}")
        if not 0.0 < float(omega) < 2.0:
            raise InputError(f"omega must be in (0, 2), got {omega}")
        self.backend = backend
        self.cycle_type = cycle
        self.presmooth, self.postsmooth = int(presmooth), int(postsmooth)
        self.omega = float(omega)
        self.coarse_sweeps = int(coarse_sweeps)
        self.dtype = st.dtype
        self.coarse_inverse = None

    def _build(self, st, problem, max_levels):
        be, dtype = self.backend, st.dtype
        periodic = st.periodic
        # The coarse operators are built from the finest level's stored coefficients (float32
        # rounding is irrelevant to a coarse-grid correction) and the problem's κ̄², in float64,
        # in the array library of the stencil (NumPy on the CPU, CuPy on the GPU).
        xp = array_module(st.cx)
        cx, cy, cz = (xp.asarray(c, dtype=np.float64) for c in (st.cx, st.cy, st.cz))
        k2 = None if problem.kappa2 is None else xp.asarray(problem.kappa2, dtype=np.float64)
        plans = plan_coarsening(
            st.shape, problem.grid.spacing, periodic, max_levels, self.coarsest_nodes
        )
        levels = [Level(st, None, None, None, tuple(problem.grid.spacing))]
        for axes, spacing in plans:
            cx, cy, cz, k2 = coarse_coefficients(cx, cy, cz, k2, axes, xp)
            diag = _diagonal(cx, cy, cz, k2, periodic, xp)
            shape = tuple(a.n_coarse for a in axes)
            coarse = Stencil(
                cx=be.asarray(cx, dtype),
                cy=be.asarray(cy, dtype),
                cz=be.asarray(cz, dtype),
                diag=be.asarray(diag, dtype),
                b=be.zeros(shape, dtype),
                periodic=periodic,
                singular=st.singular,
            )
            add_level(be, levels, axes, coarse, spacing)
        if len(levels) > 1 and math.prod(levels[-1].stencil.shape) <= DENSE_MAX_NODES:
            inverse = dense_inverse(cx, cy, cz, k2, periodic, st.singular)
            self.coarse_inverse = be.asarray(inverse, dtype)
        return levels

    # ------------------------------------------------------------------ the cycle
    def bind(self, st: Stencil, x) -> None:
        """Make ``(st, x)`` the finest level's stencil and iterate for the following cycles.

        ``st.b`` is the right-hand side the cycles reduce the residual of.
        """
        fine = self.levels[0]
        fine.stencil, fine.x = st, x

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
        for _ in range(self.presmooth):
            be.rb_sor_color(st, x, 0, self.omega)
            be.rb_sor_color(st, x, 1, self.omega)
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
        for _ in range(self.postsmooth):
            be.rb_sor_color(st, x, 1, self.omega)
            be.rb_sor_color(st, x, 0, self.omega)

    # ------------------------------------------------------------------ display
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


def add_level(backend, levels: list, axes, coarse: Stencil, spacing) -> None:
    """Append the level of ``coarse`` below ``levels[-1]``.

    The level above gets its residual buffer and its transfer (``axes``: the coarsening from
    it); the new level gets its correction buffer.
    """
    be, fine, dtype = backend, levels[-1], coarse.dtype
    fine.r = be.zeros(fine.stencil.shape, dtype)
    fine.transfer = Transfer(
        pos=tuple(be.asarray(a.pos, np.int32) for a in axes),
        lo=tuple(be.asarray(a.lo, np.int32) for a in axes),
        hi=tuple(be.asarray(a.hi, np.int32) for a in axes),
        periodic=coarse.periodic,
        fine_shape=fine.stencil.shape,
        coarse_shape=coarse.shape,
    )
    levels.append(Level(coarse, be.zeros(coarse.shape, dtype), None, None, spacing))


def _runner(backend, fn):
    """``fn`` itself, or the backend's captured replay of it (``backend.capture(fn)``)."""
    capture = getattr(backend, "capture", None)
    return capture(fn) if capture is not None else fn


# ---------------------------------------------------------------------- methods
class Multigrid:
    """Geometric multigrid cycles as a :class:`~pbsolver.Solver` method (``"multigrid"``).

    Parameters
    ----------
    cycle : {"F", "V", "W"}
        Cycle shape. "F" (default) converges like "W" (about 0.3 per cycle on ε 1:40 sphere
        maps whatever the grid size; a V-cycle's factor creeps up with the number of levels,
        0.34 → 0.45 from 33³ to 129³) for less work and far fewer coarse-level visits
        (n_levels² / 2 against 2^n_levels).
    presmooth, postsmooth : int
        Red–black Gauss–Seidel sweeps before / after the coarse-grid correction (default 2, 2).
    omega : float, optional
        Smoother relaxation factor (default 1: Gauss–Seidel).
    max_levels : int, optional
        Cap on the number of levels.
    coarsest_nodes : int
        Coarsen until a level has at most this many nodes (default 512); it is solved exactly.
    coarse_sweeps : int
        Symmetric Gauss–Seidel sweeps on a coarsest grid too large for the exact solve.

    Notes
    -----
    One iteration is one cycle. See the module docstring for coarsening and coarse operators.
    """

    name = "multigrid"
    check_every = 1
    default_cycle = "F"
    cycles = ("F", "V", "W")

    def __init__(
        self,
        cycle=None,
        presmooth=2,
        postsmooth=2,
        omega=None,
        max_levels=None,
        coarsest_nodes=512,
        coarse_sweeps=8,
    ):
        cycle = self.default_cycle if cycle is None else cycle
        if cycle not in self.cycles:  # fail at construction, not at solve
            raise InputError(
                f"method {self.name!r}: cycle must be one of {self.cycles}, got {cycle!r}"
            )
        self.options = {
            "cycle": cycle,
            "presmooth": presmooth,
            "postsmooth": postsmooth,
            "omega": 1.0 if omega is None else float(omega),
            "max_levels": max_levels,
            "coarsest_nodes": coarsest_nodes,
            "coarse_sweeps": coarse_sweeps,
        }
        self.omega = self.options["omega"]

    def setup(self, backend, st, problem):
        self.backend = backend
        self.hierarchy = Hierarchy(backend, st, problem, **self.options)

    def start(self, st, x):
        self.hierarchy.bind(st, x)
        self._run = _runner(self.backend, self.hierarchy.cycle)

    def step(self, count):
        for _ in range(count):
            self._run()

    def default_maxiter(self, shape):
        return 100


class MGCG(Multigrid):
    """Conjugate gradients preconditioned with one symmetric multigrid cycle (``"mgcg"``).

    Same options as :class:`Multigrid`, except that the cycle must be a symmetric operator:
    "V" (default) or "W", with ``presmooth == postsmooth``. Each iteration costs one cycle, one
    operator application, two dot products (each a host synchronisation) and three vector
    updates.
    """

    name = "mgcg"
    default_cycle = "V"
    cycles = ("V", "W")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.options["presmooth"] != self.options["postsmooth"]:
            raise InputError(
                "method 'mgcg' needs a symmetric preconditioner: presmooth == postsmooth, got "
                f"{self.options['presmooth']} and {self.options['postsmooth']}"
            )

    def setup(self, backend, st, problem):
        super().setup(backend, st, problem)
        be, shape, dtype = backend, st.shape, st.dtype
        self.r, self.z, self.p, self.q = (be.zeros(shape, dtype) for _ in range(4))
        self._zero_b = dataclasses.replace(st, b=be.zeros(shape, dtype))
        # the preconditioner: one cycle for A z = r from z = 0, on fixed buffers
        self.hierarchy.bind(dataclasses.replace(st, b=self.r), self.z)
        self._precondition = _runner(backend, self._cycle_from_zero)

    def _cycle_from_zero(self):
        self.backend.fill(self.z, 0.0)
        self.hierarchy.cycle()

    def start(self, st, x):
        be = self.backend
        self.st, self.x = st, x
        be.residual(st, x, self.r)
        self._precondition()
        be.fill(self.p, 0.0)
        be.axpy(self.p, self.z, 1.0)
        self.rz = be.dot(self.r, self.z)

    def step(self, count):
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


METHODS["multigrid"] = Multigrid
METHODS["mgcg"] = MGCG

__all__ = [
    "AxisCoarsening",
    "Hierarchy",
    "Level",
    "MGCG",
    "Multigrid",
    "coarse_coefficients",
    "coarsen_axis",
    "plan_coarsening",
    "restrict_field",
]
