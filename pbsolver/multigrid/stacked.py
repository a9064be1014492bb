"""Multigrid for a stack of independent Dirichlet blocks (the frame engine's lifted system).

:mod:`pbsolver.batched` and :mod:`pbsolver.frames` solve B problems of one grid shape as one
block-diagonal system on a ``(B·stride, ny, nz)`` grid: each block holds one problem's nodes
(``nx`` planes, plus one padding plane when ``nx`` is odd), the faces that touch a block's outer
layer are zero and the outer layer's diagonal is 1, so the blocks never see each other. SOR
sweeps such a stack as it is; a multigrid hierarchy built for the whole stack by
:class:`~pbsolver.multigrid.Hierarchy` would not, because its coarse levels would coarsen across
block boundaries. This module builds the hierarchy block by block:

* **Coarsening.** Each block is coarsened as its own grid would be
  (:func:`~pbsolver.multigrid.plan_coarsening` on the block shape, down to 3 nodes an axis:
  one unknown a block); along the stacked axis the coarse nodes are every block's coarse nodes
  plus its padding plane, so a coarse block keeps its outer layer and padding, and no
  prolongation or restriction weight ever joins two blocks.
* **Coarse operators.** Built exactly as :class:`~pbsolver.multigrid.Hierarchy` builds them
  (series along, parallel across; κ̄² lumped), but from each block's *unlifted* face
  coefficients — with the faces to its outer layer, which the lifted fine stencil has zeroed —
  so a coarse block sees its Dirichlet boundary as its own problem's hierarchy would. The
  faces crossing from one block into the next are zero, so the coarse blocks stay apart.
* **Fixed nodes on coarse levels.** The outer layer of every coarse block must carry a zero
  correction, but on the stacked grid those nodes are relaxed by the same kernels as the
  unknowns. They get a penalty diagonal (:data:`PENALTY`): the smoother then leaves them at
  ``r/PENALTY`` ≈ 0, and the faces joining them to the block's unknowns still count in the
  unknowns' diagonals, as the Dirichlet boundary requires. Their residuals only ever restrict
  onto other fixed nodes (they are never midpoints along the stacked axis).
* **Coarsest level.** One unknown a block, solved exactly by one symmetric Gauss–Seidel sweep.

The hierarchy's buffers are allocated once; :meth:`StackedHierarchy.update` rewrites the coarse
operators in place for a new batch of blocks, so a GPU backend replays the cycle's captured
graph from one batch to the next.
"""

from __future__ import annotations

import numpy as np

from pbsolver.arrays import array_module
from pbsolver.backends import Stencil
from pbsolver.exceptions import InputError
from pbsolver.multigrid.hierarchy import (
    AxisCoarsening,
    Hierarchy,
    Level,
    _diagonal,
    add_level,
    coarse_coefficients,
    plan_coarsening,
)

#: The default cycle of a stack: V(3,3) with red–black SOR ω = 1.15 as smoother. On colipase
#: (1,252 atoms, 65³ at 0.8 Å, vdW, rtol 1e-6, warm batches of 8) it needs 5 cycles (about 39
#: fine-grid sweeps' worth of work) where V(2,2) ω 1 needs 8–9 (47), F(2,2) ω 1.15 7–8 (47) and
#: SOR 130 sweeps (``python benchmarks/stacked_mg_cycles.py``).
STACK_CYCLE = {"cycle": "V", "presmooth": 3, "postsmooth": 3, "omega": 1.15}
#: Multigrid options a stack's hierarchy takes (besides those of STACK_CYCLE).
STACK_OPTIONS = (*STACK_CYCLE, "coarse_sweeps")


def stack_cycle_options(method_options: dict, omega=None) -> dict:
    """:data:`STACK_CYCLE` updated with a solver's multigrid options (and its ``omega``).

    Raises
    ------
    InputError
        For options a stack's hierarchy does not take (``max_levels``, ``coarsest_nodes``: a
        stack always coarsens to one unknown a block).
    """
    opts = dict(STACK_CYCLE)
    for key, value in method_options.items():
        if key not in STACK_OPTIONS:
            raise InputError(
                f"multigrid option {key!r} does not apply to a stack of blocks (it takes "
                f"{', '.join(STACK_OPTIONS)})"
            )
        if value is not None:
            opts[key] = value
    if omega is not None:
        opts["omega"] = float(omega)
    return opts


#: Diagonal of a coarse level's fixed nodes (block outer layers and padding): large enough that
#: the smoother leaves their correction at ~1e-30 of their residual, small enough for float32.
PENALTY = 1e30


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


def fixed_nodes(shape, nx: int, stride: int, xp=np):
    """Boolean mask of a stack's fixed nodes: every block's outer layer and padding planes."""
    total, ny, nz = shape
    local = xp.arange(total) % stride
    fixed_x = (local == 0) | (local >= nx - 1)
    mask = xp.zeros(shape, dtype=bool)
    mask |= fixed_x[:, None, None]
    mask[:, 0, :] = mask[:, -1, :] = True
    mask[:, :, 0] = mask[:, :, -1] = True
    return mask


class StackedHierarchy(Hierarchy):
    """A multigrid hierarchy for a stack of independent blocks (see the module docstring).

    Parameters
    ----------
    backend : Backend
    st : Stencil
        The stack's finest (lifted) stencil in the solve's dtype; only its shape and dtype are
        used here (:meth:`bind` gives the cycle the stencil it works on).
    block_shape : 3 ints
    spacing : 3 floats
    stride : int
        Planes a block occupies along x.
    cycle, presmooth, postsmooth, omega
        As for :class:`~pbsolver.multigrid.Hierarchy`; defaults :data:`STACK_CYCLE`.
    coarse_sweeps : int
        Symmetric Gauss–Seidel sweeps on the coarsest level (one unknown a block: one is exact).
    inputs : 4 arrays (stack shape), float64, optional
        Buffers to read the unlifted faces and κ̄² from (the frame engine's assembly writes
        them); default: the hierarchy's own, filled by :meth:`update`.

    Notes
    -----
    Call :meth:`update` with the blocks' unlifted face coefficients before the first cycle and
    whenever the blocks change.
    """

    def __init__(
        self,
        backend,
        st: Stencil,
        block_shape,
        spacing,
        stride: int,
        *,
        cycle: str = STACK_CYCLE["cycle"],
        presmooth: int = STACK_CYCLE["presmooth"],
        postsmooth: int = STACK_CYCLE["postsmooth"],
        omega: float = STACK_CYCLE["omega"],
        coarse_sweeps: int = 1,
        inputs=None,
    ):
        if st.periodic:
            raise InputError("a stack of blocks is a Dirichlet system")
        total = st.shape[0]
        if total % stride:
            raise InputError(f"the stack's {total} planes are not a multiple of stride {stride}")
        self._set_cycle(backend, st, cycle, presmooth, postsmooth, omega, coarse_sweeps)
        self.coarsest_nodes = 0
        self.block_shape = tuple(int(n) for n in block_shape)
        self.n_blocks = total // stride
        self.plans = stacked_plan(self.block_shape, spacing, self.n_blocks, stride)
        self.levels = [Level(st, None, None, None, tuple(float(h) for h in spacing))]
        self._fixed = []
        be, dtype = backend, st.dtype
        #: float64 inputs of :meth:`rebuild`: the blocks' unlifted faces (x, y, z) and κ̄²
        if inputs is None:
            inputs = tuple(be.zeros(st.shape, np.float64) for _ in range(4))
        elif len(inputs) != 4 or any(tuple(a.shape) != st.shape for a in inputs):
            raise InputError(f"inputs must be four arrays of the stack's shape {st.shape}")
        self.inputs = tuple(inputs)
        self._work = []  # per coarse level: float64 (cx, cy, cz, κ̄²)
        self._two = []  # per coarse level: int32 "interval spans two fine ones", per axis
        for axes, coarse_spacing, nx, coarse_stride in self.plans:
            shape = tuple(a.n_coarse for a in axes)
            coarse = Stencil(*(be.zeros(shape, dtype) for _ in range(5)), False, False)
            add_level(be, self.levels, axes, coarse, coarse_spacing)
            self._fixed.append((nx, coarse_stride))
            self._work.append(tuple(be.zeros(shape, np.float64) for _ in range(4)))
            self._two.append(tuple(be.asarray((a.gap == 2).astype(np.int32), np.int32)
                                   for a in axes))  # fmt: skip
        if len(self.levels) < 2:
            raise InputError(f"blocks of shape {self.block_shape} are too small for multigrid")

    def update(self, faces, kappa2=None) -> None:
        """Copy the blocks' unlifted faces (and κ̄²) into :attr:`inputs`, then :meth:`rebuild`.

        Parameters
        ----------
        faces : 3 arrays (stack shape)
            ``ε_face/h²`` of every face whose two nodes lie in one block, including the faces
            to the block's outer layer; zero for faces leaving a block.
        kappa2 : array (stack shape) or None
            κ̄² of every node (None: no salt).
        """
        be = self.backend
        for dst, src in zip(self.inputs[:3], faces, strict=True):
            dst[...] = be.asarray(src, np.float64)
        if kappa2 is None:
            self.inputs[3].fill(0.0)
        else:
            self.inputs[3][...] = be.asarray(kappa2, np.float64)
        self.rebuild()

    def rebuild(self) -> None:
        """Rebuild every coarse operator, in place, from :attr:`inputs`.

        On CUDA two kernels a level (:mod:`pbsolver.backends.cuda.coarse_kernels`), replayed as
        one CUDA graph from the second call on; elsewhere the array code of
        :func:`~pbsolver.multigrid.coarse_coefficients`.
        """
        be = self.backend
        if be.name != "cuda":
            self._rebuild_arrays()
            return
        dev = be.dev
        arrays = [*self.inputs, *self.buffers()]
        for work, two in zip(self._work, self._two, strict=True):
            arrays += [*work, *two]
        key = ("stacked-multigrid-rebuild", tuple(dev.key(a) for a in arrays))
        be.capture(self._rebuild_cuda, key=key)()

    def _rebuild_arrays(self):
        cx, cy, cz, k2 = self.inputs
        xp = array_module(cx)
        for (axes, _, nx, stride), level in zip(self.plans, self.levels[1:], strict=True):
            with np.errstate(divide="ignore"):  # a zero face in series gives a zero face
                cx, cy, cz, k2 = coarse_coefficients(cx, cy, cz, k2, axes, xp)
            diag = _diagonal(cx, cy, cz, k2, False, xp)
            diag[fixed_nodes(diag.shape, nx, stride, xp)] = PENALTY
            st = level.stencil
            for dst, src in zip((st.cx, st.cy, st.cz, st.diag), (cx, cy, cz, diag), strict=True):
                dst[...] = src.astype(dst.dtype, copy=False)

    def _rebuild_cuda(self):
        from pbsolver.backends.cuda import coarse_kernels as CK
        from pbsolver.backends.cuda.device import grid_for

        be = self.backend
        v = be.dev.flat
        fine = self.inputs
        threads = 128
        for i, ((_, _, nx, stride), level) in enumerate(
            zip(self.plans, self.levels[1:], strict=True)
        ):
            tr = self.levels[i].transfer
            st = level.stencil
            work, two = self._work[i], self._two[i]
            n = int(np.prod(st.shape))
            per_axis = []
            for a in range(3):
                per_axis += [v(tr.pos[a]), v(tr.lo[a]), v(tr.hi[a]), v(two[a])]
            be.dev.launch(
                CK.coarse_faces, grid_for(n, threads), threads,
                *(v(a) for a in fine), tuple(v(a) for a in work), (v(st.cx), v(st.cy), v(st.cz)),
                *per_axis, tr.fine_shape, tr.coarse_shape,
            )  # fmt: skip
            be.dev.launch(
                CK.coarse_diagonal, grid_for(n, threads), threads,
                *(v(a) for a in work), v(st.diag), st.shape, nx, stride, PENALTY,
            )  # fmt: skip
            fine = work

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
        return out


class StackedMultigrid:
    """Multigrid cycles on a :class:`StackedHierarchy`, as a method of the solver's loop.

    One iteration is one cycle. On a backend that captures graphs, the cycle's graph is keyed
    by every buffer address it holds and by its shape and smoothing counts, so a later call on
    the same buffers replays it and a call on any other buffers captures its own.
    """

    name = "multigrid"
    check_every = 1

    def __init__(self, hierarchy: StackedHierarchy):
        self.hierarchy = hierarchy
        self.backend = hierarchy.backend
        self.omega = None

    def setup(self, backend, st, problem):
        """Nothing to do: the hierarchy is built and updated by its owner."""

    def start(self, st, x):
        h = self.hierarchy
        h.bind(st, x)
        dev = getattr(self.backend, "dev", None)
        if dev is None:  # a backend without graphs: the cycle itself
            self._run = h.cycle
            return
        arrays = (st.cx, st.cy, st.cz, st.diag, st.b, x, *h.buffers())
        key = (
            "stacked-multigrid",
            h.cycle_type,
            h.presmooth,
            h.postsmooth,
            h.omega,
            h.coarse_sweeps,
            tuple(dev.key(a) for a in arrays),
        )
        self._run = self.backend.capture(h.cycle, key=key)

    def step(self, count):
        for _ in range(count):
            self._run()

    def default_maxiter(self, shape):
        return 100


__all__ = [
    "PENALTY",
    "STACK_CYCLE",
    "STACK_OPTIONS",
    "stack_cycle_options",
    "StackedHierarchy",
    "StackedMultigrid",
    "fixed_nodes",
    "stacked_plan",
]
