"""Backends: the handful of kernels the solver loop and the multigrid cycle run on.

The orchestration (:mod:`pbsolver.solving`, :mod:`pbsolver.multigrid`) is written once against
:class:`Backend`; a backend owns its arrays (NumPy for ``"cpu"``, CuPy device memory for
``"cuda"``) and never decides anything about convergence.

Nothing here imports CUDA: ``"cuda"`` is imported on first use, and ``"auto"`` picks it only when
a device is usable.
"""

from __future__ import annotations

import functools
import os
import sys
from dataclasses import dataclass

from pbsolver.backends.launch_sizes import simulated
from pbsolver.exceptions import BackendUnavailableError, InputError

BACKENDS = ("auto", "cpu", "cuda")
#: Where each backend's arrays live ("host" or "gpu" memory), known without importing CUDA.
MEMORY = {"cpu": "host", "cuda": "gpu"}
#: The method "auto" takes on large grids, per backend (see :meth:`Backend.auto_method`).
LARGE_METHODS = {"cpu": "multigrid", "cuda": "mgcg"}


def may_use_gpus(name: str) -> bool:
    """Whether work asked for with backend ``name`` ("auto", "cpu", "cuda") may run on GPUs."""
    return MEMORY.get(name) != "host"


class _OnGrid:
    """What :class:`Stencil` and :class:`ProblemOperator` read from their right-hand side ``b``."""

    @property
    def shape(self) -> tuple[int, int, int]:
        """Grid shape."""
        return tuple(self.b.shape)

    @property
    def dtype(self):
        """The dtype of ``b``: a stencil's storage dtype, a problem operator's float64."""
        return self.b.dtype


@dataclass
class Stencil(_OnGrid):
    """The discrete operator and right-hand side of one problem, stored on a backend.

    Attributes
    ----------
    cx, cy, cz : arrays (nx, ny, nz)
        Face coefficients ε_face / h² (``cx[i]`` joins nodes i and i+1 along x).
    diag : array (nx, ny, nz)
        Σ of the six face coefficients plus κ̄² (1 on fixed boundary nodes).
    b : array (nx, ny, nz)
        Right-hand side (zero on fixed nodes; zero mean when the problem is singular).
    periodic : bool
        Periodic (all nodes unknown, wrap-around) or Dirichlet (outer layer fixed).
    singular : bool
        Periodic without salt: φ is defined up to a constant, fixed by a zero mean.
    """

    cx: object
    cy: object
    cz: object
    diag: object
    b: object
    periodic: bool
    singular: bool

    def check_red_black(self, method: str) -> None:
        """Refuse odd periodic axes for red–black ordering (``method`` names the caller).

        With an odd count two same-colour neighbours meet across the wrap and a sweep would race.
        """
        from pbsolver.exceptions import InputError

        if self.periodic and any(n % 2 for n in self.shape):
            raise InputError(
                f"method {method!r} uses red-black ordering, which needs an even number of nodes "
                f"along periodic axes; got shape {self.shape}: use an even grid or method='jacobi'"
            )


@dataclass
class ProblemOperator(_OnGrid):
    """One problem's float64 operator, read from the problem's own maps, and its float64 b.

    What decides convergence under float32 storage with float64 refinement: the residual
    ``b − A x`` of the float64 operator, with A's face coefficients formed node by node, in
    float64, from the permittivities the problem already holds (its node map with its face
    rule, or its face maps) and its κ̄², so that no float64 copy of the stencil is stored
    (8 bytes a node: b, against 40 for a float64 :class:`Stencil`). Made by
    :meth:`Backend.operator64`; :meth:`Backend.residual` and :meth:`Backend.residual_norm`
    take it wherever they take a stencil. The values are those of the float64 stencil of the
    same problem, bit for bit.

    Attributes
    ----------
    eps : tuple of 3 arrays (nx, ny, nz)
        The face maps (x, y, z), or the node map three times; float32 or float64 (read as
        float64), the backend's arrays (the problem's own where they already are).
    mode : int
        :data:`pbsolver.backends.bodies.operator.FACE_MAPS`, ``ARITHMETIC`` or ``HARMONIC``.
    kappa2 : array or None
        κ̄² (None: no salt).
    spacing2 : tuple of 3 float
        h² per axis, Å².
    b : array (nx, ny, nz), float64
        Right-hand side (zero on fixed nodes; zero mean when singular).
    periodic, singular : bool
        As for :class:`Stencil`.
    """

    eps: tuple
    mode: int
    kappa2: object
    spacing2: tuple
    b: object
    periodic: bool
    singular: bool


@dataclass
class Transfer:
    """Grid transfer between a fine level and the next coarser one (multigrid), on a backend.

    Coarse nodes are a subset of the fine nodes. Per axis ``a`` (x, y, z), three int32 arrays:

    Attributes
    ----------
    pos : tuple of 3 int32 arrays, lengths = coarse shape
        ``pos[a][I]`` is the fine index of coarse node ``I``.
    lo, hi : tuple of 3 int32 arrays, lengths = fine shape
        Fine node ``i`` interpolates from coarse nodes ``lo[a][i]`` and ``hi[a][i]`` with
        weight ½ each (``lo == hi`` on a coarse node, so the weight there is 1); a fine node
        with ``lo != hi`` is a midpoint and gives ½ of its value to each neighbour on
        restriction.
    periodic : bool
        Periodic levels wrap (every node an unknown); Dirichlet levels leave the outer layer
        alone (prolongation) or zero it (restriction).
    fine_shape, coarse_shape : tuple of 3 int
    """

    pos: tuple
    lo: tuple
    hi: tuple
    periodic: bool
    fine_shape: tuple[int, int, int]
    coarse_shape: tuple[int, int, int]


@dataclass
class CoarseLevel:
    """What :meth:`Backend.coarse_operators` needs to (re)build one coarse level.

    Attributes
    ----------
    plan : LevelPlan
        How the level is made from the one above (:class:`pbsolver.multigrid.coarsening.LevelPlan`:
        per-axis coarsenings, periodicity, and for a stack the coarse block's ``(nx, stride)``).
    stencil : Stencil
        The level's operator; its cx, cy, cz and diag are written in place.
    transfer : Transfer
        The transfer from the level above to this one.
    work : tuple of 4 arrays or None
        (cx, cy, cz, κ̄²) of this level, the next level's input, for backends that build level
        by level on the device (:attr:`Backend.COARSE_KERNELS`): float64 arrays of their own
        for a stack; for one grid the level's own stencil faces and a κ̄² of its dtype (the
        rounding is irrelevant to a coarse-grid correction). None where the array code is
        used.
    two : tuple of 3 int32 arrays or None
        Per axis, 1 where a coarse interval spans two fine ones (with ``work``).
    """

    plan: object
    stencil: Stencil
    transfer: Transfer
    work: tuple | None = None
    two: tuple | None = None


class Backend:
    """Interface every backend implements (the CPU backend is the reference implementation).

    Kernels work in place on the backend's own arrays and return nothing unless stated; only
    the methods returning a ``float`` synchronise with the host.
    """

    name: str = "abstract"
    #: "auto" method choice (:meth:`auto_method`): SOR below this many nodes, then LARGE_METHOD
    SOR_BELOW_NODES: int = 60**3
    LARGE_METHOD: str = LARGE_METHODS["cpu"]
    #: a stack of blocks is solved with SOR below this many blocks, else multigrid
    STACK_SOR_BELOW_BLOCKS: int = 0
    #: whether ``solve_batch(mode="auto")`` stacks problems here (where launches, not memory
    #: traffic, bound small grids); otherwise it loops
    STACKS_BATCHES: bool = False
    #: whether :meth:`coarse_operators` builds a grid's levels with kernels, level by level
    #: from each level's :attr:`CoarseLevel.work` (then a grid's hierarchy gives its levels
    #: work arrays); otherwise the array code builds them and ``work`` stays None
    COARSE_KERNELS: bool = False
    #: whether :meth:`capture` records device work for replay: buffers kept between solves
    #: (a kept workspace) let later solves find the recordings again
    CAPTURES: bool = False

    def workers(self, count: int) -> list:
        """Up to ``count`` backends that may run concurrently from threads.

        Each has its own stream and captured work. This default: the backend itself alone
        (numba's CPU kernels are not run from several threads at once).
        """
        return [self]

    def auto_method(self, nodes: int) -> str:
        """The method "auto" runs on one grid of ``nodes`` nodes on this backend.

        SOR where its sweeps are cheapest overall (small grids), multigrid or MG-CG where the
        number of sweeps SOR needs grows too large; the crossovers are measured per backend
        (BENCHMARKS.md).
        """
        return "sor" if nodes < self.SOR_BELOW_NODES else self.LARGE_METHOD

    def auto_stack_method(self, n_blocks: int) -> str:
        """The method "auto" runs on a stack of ``n_blocks`` blocks on this backend."""
        return "sor" if n_blocks < self.STACK_SOR_BELOW_BLOCKS else "multigrid"

    #: The array library ("numpy" or "cupy") that problems given to this backend are best built
    #: in: the backend uses their arrays without a copy between libraries.
    array_library: str = "numpy"

    # --- data movement -----------------------------------------------------------------
    def asarray(self, a, dtype):
        """Copy a NumPy/CuPy array into a new backend array of ``dtype``."""
        raise NotImplementedError

    def take(self, a, dtype):
        """A backend array of ``dtype`` with the values of ``a``, which the caller gives up.

        :meth:`asarray`, except that a backend may return ``a`` itself where it can serve as
        it is (a C-ordered host array of ``dtype`` on the CPU): no copy of a fresh array.
        """
        return self.asarray(a, dtype)

    def to_caller(self, a, like):
        """Return backend array ``a`` in the array library of ``like`` (NumPy or CuPy)."""
        raise NotImplementedError

    def copy(self, a):
        """A new backend array equal to ``a``."""
        raise NotImplementedError

    def zeros(self, shape, dtype):
        """A new backend array of zeros."""
        raise NotImplementedError

    def empty(self, shape, dtype):
        """A new backend array whose values are undefined (for arrays written before read)."""
        return self.zeros(shape, dtype)

    def set_values(self, dst, values) -> None:
        """Copy host ``values`` into the backend array ``dst`` in place (its address kept)."""
        dst[...] = values

    def to_host(self, a):
        """A NumPy copy (or view, on the CPU) of backend array ``a`` (synchronises)."""
        from pbsolver.arrays import to_numpy

        return to_numpy(a)

    def peak_bytes(self, call) -> int:
        """Peak bytes this backend's arrays take during ``call()`` above what they took before.

        The CPU: tracemalloc's peak (NumPy registers every array buffer with it). A device
        backend: its memory pool's growth.
        """
        import tracemalloc

        tracemalloc.start()
        try:
            base = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
            call()
            return int(tracemalloc.get_traced_memory()[1] - base)
        finally:
            tracemalloc.stop()

    def array_module(self):
        """The module of :attr:`array_library` (NumPy or CuPy), for array code."""
        import importlib

        return importlib.import_module(self.array_library)

    def frame_kernels(self):
        """The MD frame engine's kernels here (:mod:`pbsolver.backends.frame_kernels`)."""
        from pbsolver.backends.frame_kernels import cpu_kernels

        return cpu_kernels()

    # --- launching, graphs and streams ---------------------------------------------------
    def buffer_key(self, *items) -> tuple:
        """A hashable key of ``items``: arrays by address, shape and dtype; scalars as they are.

        Captured work (:meth:`capture`) bakes in addresses and scalars; a key built from all of
        them finds the same graph again for the same buffers and values. This default: the
        empty key, since a backend that captures nothing needs none.
        """
        return ()

    def stream_context(self):
        """A context in which array-library work is queued on the backend's stream.

        On a device with its own stream, the context orders that stream after the caller's
        current stream on entry (arrays the caller just made are complete before the backend
        reads them) and the caller's stream after it on exit (the backend's results are
        complete before the caller reads them). Both are device-side waits: the host does not
        block.
        """
        import contextlib

        return contextlib.nullcontext()

    def launch_items(self, kernel, items: int, *args, threads=None, groups=None):
        """Run ``kernel`` over ``items`` work items and return what it returns.

        On the CPU ``kernel`` is a numba function looping over its items itself (called as
        ``kernel(*args)``); a device backend launches it with one thread an item (``threads``
        a block; ``groups``: a second grid dimension of that many groups of ``items/groups``).
        """
        return kernel(*args)

    def coarse_operators(self, inputs, levels) -> tuple:
        """Rebuild every coarse level's operator, in place, from the finest level's faces.

        Parameters
        ----------
        inputs : 4 arrays (finest shape)
            Face coefficients (x, y, z) of the finest level, *including* the faces to a
            Dirichlet outer layer, and κ̄² (None: no salt); float64, or float32 where the
            array code converts the planes it reads (one grid's hierarchy passes its float32
            stencil's faces).
        levels : sequence of CoarseLevel
            From the finest coarse level down.

        Returns
        -------
        tuple of 4 arrays
            The coarsest level's float64 (cx, cy, cz, κ̄² or None) (its dense inverse's input).

        Notes
        -----
        This default is the array code of :mod:`pbsolver.backends.coarse` (NumPy or CuPy).
        """
        from pbsolver.backends.coarse import rebuild_levels

        return rebuild_levels(inputs, levels)

    # --- maps --------------------------------------------------------------------------
    def map_kernels(self):
        """The kernels that turn atoms into maps on this backend.

        A :class:`pbsolver.backends.bodies.maps.MapKernels`: the same methods on every backend
        (``plane_bins``, ``neighbour_lists``, ``ses_features``, ``sphere_union_lines``,
        ``sphere_union_sets``, ``ses_lines``, ``coulomb_sum``, ``coulomb_points``,
        ``debye_huckel_points``), NumPy
        arrays in and out; its ``device_results()`` gives those whose maps stay on the device
        (None where the backend has none: the CPU, numba's simulator).
        """
        raise NotImplementedError

    def line_recorders(self):
        """The map kernels that also keep their lines' intervals for the forces, or None.

        A namespace with ``ses_lines_recorded`` and ``union_cells_recorded`` (the CPU's,
        :mod:`pbsolver.backends.cpu.line_ends`), used by the maps within
        :func:`pbsolver.molecule.kept.recording_lines`; None (the default) where the backend
        has none: its forces then map those lines again.
        """
        return None

    # --- setup -------------------------------------------------------------------------
    def stencil(self, problem, dtype) -> Stencil:
        """Face coefficients, diagonal and right-hand side of ``problem`` in ``dtype``."""
        raise NotImplementedError

    def sweep_stencil(self, problem, dtype) -> Stencil:
        """The stencil a solve iterates on: :meth:`stencil`, less what the kernels recompute.

        A backend whose sweeps and residuals form the diagonal from the faces they load may
        leave ``diag`` out (None), one grid array fewer for the whole solve; this default is
        :meth:`stencil` itself. Only the kernels of this backend read it.
        """
        return self.stencil(problem, dtype)

    def refined_system(self, problem, dtype, into=None) -> tuple:
        """``(sweep stencil in dtype, float64 operator)`` of a refined solve of ``problem``.

        :meth:`sweep_stencil` and :meth:`operator64`; a backend may form both in one pass over
        the maps (their right-hand sides are one float64 array and its rounding). ``into``: the
        sweep stencil of an earlier call for a problem of the same grid, boundary and salt (a
        kept workspace); a backend may write its arrays instead of making new ones (this
        default makes new ones).
        """
        return self.sweep_stencil(problem, dtype), self.operator64(problem)

    def operator64(self, problem) -> ProblemOperator:
        """``problem``'s float64 operator on its own maps, with its float64 right-hand side.

        The refinement's ``checked`` system (:class:`ProblemOperator`): :meth:`residual` and
        :meth:`residual_norm` on it equal those on ``stencil(problem, float64)``, for the
        memory of one float64 grid array (b) instead of five.
        """
        raise NotImplementedError

    # --- stacks of problems (pbsolver.solving) ----------------------------------------
    def assemble_stack(self, problems, x0, stride, out, out32, unlifted, fixed, x) -> None:
        """Write the block-diagonal stack of Dirichlet problems into backend arrays.

        Block ``k`` (problem ``k``) occupies planes ``k·stride … k·stride + nx − 1`` along x of
        every stack array; see :class:`pbsolver.backends.stacking.StackedSystem` for what is stored.

        Parameters
        ----------
        problems : sequence of Problem
            Dirichlet problems of one shape and spacing (checked by the caller).
        x0 : sequence of arrays or None
            One initial guess (or None) per problem.
        stride : int
            Planes per block (``nx`` rounded up to even).
        out, out32 : 5 arrays each
            (cx, cy, cz, diag, b) of the checked and of the sweep stencil (the same arrays
            when they are one stencil).
        unlifted : 4 arrays or None
            The blocks' unlifted faces (x, y, z) and κ̄² (a stacked multigrid's inputs).
        fixed : array
            Receives each block's boundary values on its outer layer, zero elsewhere.
        x : array
            Receives each block's initial guess inside, zero elsewhere.

        Raises
        ------
        InputError
            An x0 of the wrong shape or not finite.

        Notes
        -----
        This default assembles on the host with the reference
        :func:`pbsolver.backends.stacking.stack_problems` and copies into NumPy arrays.
        """
        import numpy as np

        from pbsolver.backends.stacking import stack_problems

        system = stack_problems(problems, x0, unlifted=unlifted is not None)
        sources = (system.cx, system.cy, system.cz, system.diag, system.b)
        for dst, src in zip((*out, *out32), sources * 2, strict=True):
            dst[...] = src
        if unlifted is not None:
            for dst, src in zip(unlifted, (*system.faces, system.kappa2), strict=True):
                dst[...] = src
        x[...] = system.x
        fixed[...] = 0.0
        nx = problems[0].grid.shape[0]
        for k, g in enumerate(system.fixed):
            fixed[system.block(k, nx)] = np.asarray(g)

    def block_residual_norm(self, st, x, r, n_blocks, weights) -> float:
        """``max_k w_k ‖b_k − A_k x_k‖₂`` over the ``n_blocks`` blocks of a stack (synchronises).

        The stopping measure of a stack solved as one system: with ``w_k = t_min / t_k`` (each
        block's own threshold ``t_k``), "measure ≤ t_min" holds exactly when every block meets
        its own threshold. ``r`` is a float64 work array of the stack's shape (overwritten with
        the residual), ``weights`` a backend array of ``n_blocks`` floats. A NaN residual gives
        NaN. This default works on NumPy and CuPy arrays.
        """
        import math

        from pbsolver.arrays import array_module

        self.residual(st, x, r)
        xp = array_module(r)
        blocks = r.reshape(n_blocks, -1)
        norms = xp.sqrt(xp.sum(blocks * blocks, axis=1))
        w = xp.asarray(weights)
        value = float((xp.where(w != 0, w * norms, 0.0)).max())
        return value if not math.isnan(float(xp.sum(norms))) else math.nan

    def block_norms(self, a, n_blocks: int):
        """‖a_k‖₂ of each of the ``n_blocks`` equal blocks of ``a`` along x, as a NumPy array.

        Reduced where ``a`` lives (synchronises); this default works on NumPy and CuPy arrays.
        """
        import numpy as np

        from pbsolver.arrays import array_module, to_numpy

        xp = array_module(a)
        if xp is np and not isinstance(a, np.ndarray):  # a device array without CuPy
            a = to_numpy(a)
        blocks = a.reshape(n_blocks, -1).astype(np.float64, copy=False)
        sq = xp.sum(blocks * blocks, axis=1)
        return np.sqrt(np.asarray(to_numpy(sq), dtype=np.float64))

    def unstack(self, x, fixed, shape, stride, n_blocks):
        """Every block's solution inside its boundary values: a new ``(B, nx, ny, nz)`` array.

        This default works on NumPy arrays (the CPU backend).
        """
        from pbsolver.operator import interior_mask

        nx = shape[0]
        blocks = (n_blocks, stride, *shape[1:])
        out = x.reshape(blocks)[:, :nx].copy()
        outer = ~interior_mask(tuple(shape), False)
        out[:, outer] = fixed.reshape(blocks)[:, :nx][:, outer]
        return out

    # --- kernels -----------------------------------------------------------------------
    def sor_sweeps(self, st: Stencil, x, omega: float, count: int) -> None:
        """``count`` red–black SOR sweeps in place (red then black), race-free."""
        raise NotImplementedError

    def jacobi_sweeps(self, st: Stencil, x, work, omega: float, count: int) -> None:
        """``count`` weighted-Jacobi sweeps with two buffers; the result ends in ``x``."""
        raise NotImplementedError

    def residual(self, st: Stencil, x, out) -> None:
        """``out = b − A x`` on the unknowns, zero on fixed nodes.

        ``st`` is a :class:`Stencil` or a :class:`ProblemOperator` (float64 arithmetic).
        """
        raise NotImplementedError

    def residual_norm(self, st: Stencil, x) -> float:
        """‖b − A x‖₂ over the unknowns, accumulated in float64 (synchronises).

        ``st`` is a :class:`Stencil` or a :class:`ProblemOperator`.
        """
        raise NotImplementedError

    def residual_and_norm(self, st: Stencil, x, out) -> float:
        """:meth:`residual` into ``out`` and :meth:`residual_norm`'s value (synchronises).

        The norm is of the residual in the operator's own precision (before ``out``'s
        rounding); a backend may form both in one pass.
        """
        self.residual(st, x, out)
        return self.residual_norm(st, x)

    def axpy(self, y, x, a: float) -> None:
        """``y += a·x`` in place (``y`` may be float64 while ``x`` is float32)."""
        raise NotImplementedError

    def remove_mean(self, x) -> None:
        """Subtract the mean of ``x`` (float64 accumulation) in place."""
        raise NotImplementedError

    def synchronize(self) -> None:
        """Wait for queued work (a no-op on the CPU)."""

    def capture(self, fn, key=None):
        """Return a runner with the effect of ``fn()`` (here: ``fn`` itself).

        The CUDA backend replays ``fn``'s device work as one CUDA graph from the runner's second
        call on; see :mod:`pbsolver.backends.cuda` for what ``fn`` may do.
        """
        return fn

    # --- multigrid kernels (pbsolver.multigrid); none of them synchronises ------------------
    def rb_sor_color(self, st: Stencil, x, color: int, omega: float) -> None:
        """One colour of a red–black SOR sweep in place (``omega = 1``: Gauss–Seidel).

        Updates the unknowns with ``(i + j + k) % 2 == color`` from the other colour.
        """
        raise NotImplementedError

    def rb_sor_sweep(self, st: Stencil, x, first: int, omega: float) -> None:
        """A whole red–black SOR sweep: colour ``first``, then the other.

        Two :meth:`rb_sor_color` calls; a backend may do both in one pass, with the same values.
        """
        self.rb_sor_color(st, x, first, omega)
        self.rb_sor_color(st, x, 1 - first, omega)

    def rb_sor_sweeps(self, st: Stencil, x, first: int, omega: float, count: int, work=None):
        """``count`` :meth:`rb_sor_sweep` calls, the result in ``x``.

        ``work``: an array of ``x``'s shape and dtype whose values the sweeps may overwrite
        (a backend that sweeps from one buffer into another uses it; the values are the same).
        """
        for _ in range(count):
            self.rb_sor_sweep(st, x, first, omega)

    def restrict(self, tr: Transfer, fine, coarse) -> None:
        """``coarse = Pᵀ fine`` on the coarse unknowns, zero on fixed coarse nodes.

        ``coarse[I,J,K] = Σ w_x w_y w_z fine[pos_x[I]+dx, pos_y[J]+dy, pos_z[K]+dz]`` over
        ``d ∈ {-1, 0, 1}`` (indices wrapped), ``w = 1`` for ``d = 0`` and for ``d = ±1``
        ``w = ½`` if that fine node is a midpoint (``lo != hi``) else 0.
        """
        raise NotImplementedError

    def prolong_add(self, tr: Transfer, coarse, fine) -> None:
        """``fine += P coarse`` on the fine unknowns (fixed Dirichlet nodes untouched).

        ``(P e)[i,j,k] = ⅛ Σ e[a, b, c]``, ``a ∈ {lo_x[i], hi_x[i]}``, ``b ∈ {lo_y[j],
        hi_y[j]}``, ``c ∈ {lo_z[k], hi_z[k]}`` (trilinear interpolation).
        """
        raise NotImplementedError

    def fill(self, x, value: float) -> None:
        """``x[...] = value`` in place."""
        raise NotImplementedError

    def axpby(self, y, x, a: float, b: float) -> None:
        """``y = a·x + b·y`` in place."""
        raise NotImplementedError

    def dot(self, x, y) -> float:
        """Σ x·y over all nodes, accumulated in float64 (synchronises; used by MG-CG only)."""
        raise NotImplementedError

    def dense_solve(self, inverse, b, x) -> None:
        """``x.ravel()[:] = inverse @ b.ravel()`` (multigrid's exact coarsest-level solve).

        ``inverse`` is an (N, N) backend array, N = b.size ≤ a few thousand. This default
        works for NumPy and CuPy arrays alike (``xp.dot`` with ``out=``, no allocation).
        """
        from pbsolver.arrays import array_module

        xp = array_module(x)
        xp.dot(inverse, b.reshape(-1), out=x.reshape(-1))


def _no_cuda_driver() -> bool:
    """True when the CUDA driver library cannot be loaded: no device can be usable.

    A cheap test before importing numba.cuda (a third of a second), which a CPU-only machine
    would otherwise pay on every ``backend="auto"`` run. Where numba-cuda is told where the
    driver is (``NUMBA_CUDA_DRIVER``), or on a platform not named here, numba-cuda decides.
    """
    import ctypes

    name = {"linux": "libcuda.so.1", "win32": "nvcuda.dll"}.get(sys.platform)
    if name is None or os.environ.get("NUMBA_CUDA_DRIVER"):
        return False
    try:
        ctypes.CDLL(name)
    except OSError:
        return True
    return False


def cuda_available() -> bool:
    """True when numba-cuda and CuPy import and a CUDA device is usable (never raises)."""
    if simulated() or _no_cuda_driver():
        return False
    try:
        from numba import cuda

        if not cuda.is_available():
            return False
        import cupy  # noqa: F401
    except Exception:  # any import or driver failure means: not usable here
        return False
    return True


@functools.cache
def _load(name: str) -> Backend:
    if name == "cpu":
        from pbsolver.backends.cpu.backend import CPUBackend

        return CPUBackend()
    if name == "cuda":
        if not cuda_available():
            raise BackendUnavailableError(
                "backend='cuda' needs numba-cuda, CuPy and a usable NVIDIA GPU; none found here "
                "(install pbsolver[cuda12] or pbsolver[cuda13], or use backend='cpu')"
            )
        from pbsolver.backends.cuda import CUDABackend

        return CUDABackend()
    raise InputError(f"backend must be one of {BACKENDS}, got {name!r}")


def get_backend(name: str = "auto", like=None) -> Backend:
    """Return the backend called ``name``.

    Parameters
    ----------
    name : {"auto", "cpu", "cuda"}
        ``"auto"`` picks CUDA when a device is usable (or when ``like`` is a device array), else
        the CPU.
    like : array, optional
        An input array; a CuPy array makes ``"auto"`` choose CUDA.

    Raises
    ------
    InputError
        Unknown name.
    BackendUnavailableError
        ``"cuda"`` asked for where no GPU is usable.
    """
    if isinstance(name, Backend):
        return name
    if name not in BACKENDS:
        raise InputError(f"backend must be one of {BACKENDS}, got {name!r}")
    if name == "auto":
        from pbsolver.arrays import is_device_array

        if like is not None and is_device_array(like):
            return _load("cuda")
        return _load("cuda") if cuda_available() else _load("cpu")
    return _load(name)


__all__ = [
    "BACKENDS",
    "Backend",
    "CoarseLevel",
    "ProblemOperator",
    "Stencil",
    "Transfer",
    "cuda_available",
    "get_backend",
]
