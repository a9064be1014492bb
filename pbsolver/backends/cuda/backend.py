"""The CUDA backend: the :class:`~pbsolver.backends.Backend` interface on numba-cuda kernels.

See the package docstring (:mod:`pbsolver.backends.cuda`) for the launching, the byte counts
and the :meth:`CUDABackend.capture` contract.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from pbsolver.backends import LARGE_METHODS, Backend, ProblemOperator, Stencil
from pbsolver.backends.bodies.operator import ARITHMETIC, FACE_MAPS, HARMONIC
from pbsolver.backends.cuda import fused_sweep, transfers
from pbsolver.backends.cuda import kernels as K
from pbsolver.backends.cuda.device import (
    VIEW_CACHE,
    CuPyDevice,
    LRUCache,
    NumbaDevice,
    grid_for,
    numba_view,
)
from pbsolver.backends.launch_sizes import FINISH_THREADS, simulated
from pbsolver.exceptions import InputError

#: Bytes a full red–black sweep must move per node through device memory, for a stencil
#: without salt (κ̄² adds 4 B per pass): two colour passes, each streaming x, three faces and b
#: and writing x (memory sectors hold both colours).
SWEEP_BYTES = 48


@dataclass
class CUDAStencil(Stencil):
    """A :class:`Stencil` on the device that also knows κ̄² (``shift``, or None without salt).

    The sweeps recompute the diagonal from the six faces they load anyway (plus ``shift``), so
    ``diag`` is kept for the interface but never read by them: 4 bytes a node saved per pass
    (and :meth:`CUDABackend.sweep_stencil` leaves it out: None).
    """

    shift: object = None


@dataclass(frozen=True)
class KernelConfig:
    """Launch shapes (the defaults suit Hopper GPUs; the simulator tests use smaller ones).

    Attributes
    ----------
    point_block : (int, int, int)
        Threads over (z pairs, y, x) for the red–black colour passes.
    jacobi_block : (int, int, int)
        Threads over (z, y, x) for Jacobi, residual and set-up kernels.
    reduce_block, reduce_chunk :
        Threads over (z, y) (a power of two in total) and x-planes per block for reductions.
    flat_threads : int
        Threads per block of the flat (elementwise) kernels.
    """

    point_block: tuple = (32, 4, 2)
    jacobi_block: tuple = (32, 4, 2)
    reduce_block: tuple = (32, 8)
    reduce_chunk: int = 16
    flat_threads: int = 256


def _ceil(a, b):
    return -(-a // b)


class CUDABackend(Backend):
    """numba-cuda kernels on device arrays (CuPy on a GPU; numba arrays in the simulator).

    Each batch of sweeps (and each residual norm) is captured once as a CUDA graph and replayed
    (see the package docstring).

    Parameters
    ----------
    device : {"cupy", "numba"}, optional
        Array layer; default CuPy, or numba device arrays under ``NUMBA_ENABLE_CUDASIM=1``.
    config : KernelConfig, optional
        Launch shapes.
    """

    name = "cuda"
    # graph-replayed SOR beats multigrid's launch-bound set-up and coarse levels on small grids
    SOR_BELOW_NODES = 190**3
    LARGE_METHOD = LARGE_METHODS["cuda"]
    STACK_SOR_BELOW_BLOCKS = 8
    STACKS_BATCHES = True
    COARSE_KERNELS = True
    CAPTURES = True

    def __init__(self, *, device=None, config=None):
        if device is None:
            device = "numba" if simulated() else "cupy"
        if device == "cupy":
            self.dev = CuPyDevice()
        elif device == "numba":
            self.dev = NumbaDevice()
        else:
            raise InputError(f"device must be 'cupy' or 'numba', got {device!r}")
        self.config = config or KernelConfig()
        self._dummies = {}
        self._stage = {}  # assemble_stack's input staging buffers, by slot
        self._partials = {}
        self._views = LRUCache(VIEW_CACHE)  # launch_items' shaped views, by (pointer, shape, dtype)
        self._sums = self.dev.empty((8,), np.float64)
        self._multiprocessors = None  # the fused sweep's wave size, read when first needed

    def __repr__(self):
        return f"CUDABackend(device={self.dev.name!r})"

    @property
    def array_library(self) -> str:
        """The array library: "cupy" on the CuPy layer, "numpy" on the numba one (simulator)."""
        return "cupy" if self.dev.name == "cupy" else "numpy"

    @property
    def stream(self):
        """The backend's CuPy stream (None on the numba layer)."""
        return getattr(self.dev, "stream", None)

    # --- data movement -----------------------------------------------------------------
    def asarray(self, a, dtype):
        with self.dev.io():
            return self.dev.asarray(a, dtype)

    def to_caller(self, a, like):
        with self.dev.io():
            return self.dev.to_caller(a, like)

    def copy(self, a):
        with self.dev.io():
            out = self.dev.empty(a.shape, a.dtype)
            self._flat(K.copy, out, a)
            return out

    def zeros(self, shape, dtype):
        with self.dev.io():
            out = self.dev.empty(shape, dtype)
            self._fill(out, 0.0)
            return out

    def empty(self, shape, dtype):
        with self.dev.io():
            return self.dev.empty(shape, dtype)

    def synchronize(self):
        self.dev.synchronize()

    def peak_bytes(self, call) -> int:
        """Growth of CuPy's memory pool during ``call()`` (emptied of free blocks first)."""
        if self.array_library != "cupy":  # the numba layer allocates outside any pool
            raise NotImplementedError("peak_bytes measures CuPy's pool; this backend has none")
        import cupy as cp

        pool = cp.get_default_memory_pool()
        pool.free_all_blocks()
        before = pool.total_bytes()
        call()
        self.synchronize()
        return int(pool.total_bytes() - before)

    def set_values(self, dst, values):
        with self.dev.io():
            self.dev.copy_into(dst.reshape(-1) if dst.ndim != 1 else dst, values)

    # --- helpers -------------------------------------------------------------------------
    def _v(self, a):
        return self.dev.flat(a)

    def _flat(self, kernel, out, *arrays_then_scalars):
        """Launch an elementwise kernel ``kernel(out, *args, n)`` over ``out``."""
        n = out.size
        t = self.config.flat_threads
        args = [self._v(a) if self.dev.is_array(a) else a for a in arrays_then_scalars]
        self.dev.launch(kernel, grid_for(n, t), t, self._v(out), *args, n)

    def _fill(self, x, value):
        cp = getattr(self.dev, "cp", None)
        plus_zero = value == 0 and math.copysign(1.0, value) > 0
        if plus_zero and cp is not None and isinstance(x, cp.ndarray) and x.flags.c_contiguous:
            # zero bytes are +0.0, as the kernel writes; a memset runs at the write bandwidth
            # (the multigrid cycle zeroes every level's iterate before it smooths)
            cp.cuda.runtime.memsetAsync(x.data.ptr, 0, x.nbytes, self.dev.stream.ptr)
            return
        self._flat(K.fill, x, x.dtype.type(value))

    def _dummy(self, dtype):
        dtype = np.dtype(dtype)
        if dtype not in self._dummies:
            self._dummies[dtype] = self.dev.empty((1,), dtype)
        return self._dummies[dtype]

    def _diagonal_of(self, st):
        """``(d, dmode)``: what a sweep reads for the diagonal, and how (see ``kernels``).

        ``d`` is a one-element dummy where the faces alone give the diagonal.
        """
        if isinstance(st, CUDAStencil):
            if st.shift is None:
                return self._dummy(st.cx.dtype), K.DIAG_FACES
            return st.shift, K.DIAG_FACES_SHIFT
        return st.diag, K.DIAG_STORED

    def _stencil_args(self, st):
        """(b, cx, cy, cz, d, dmode) flat views; see kernels' module docstring for dmode."""
        d, dmode = self._diagonal_of(st)
        v = self._v
        return v(st.b), v(st.cx), v(st.cy), v(st.cz), v(d), dmode

    def _key(self, *items):
        """A graph-cache key: pointers, shapes and dtypes of arrays, and scalars."""
        dev = self.dev
        return tuple(dev.key(a) if dev.is_array(a) else a for a in items)

    def _st_items(self, st):
        extra = st.shift if isinstance(st, CUDAStencil) else st.diag
        return (st.b, st.cx, st.cy, st.cz, extra, isinstance(st, CUDAStencil), st.periodic)

    def _grid3(self, shape, block, counts):
        return tuple(_ceil(c, b) for c, b in zip(counts, block, strict=True))

    def _full_grid(self, shape):
        nx, ny, nz = shape
        return self._grid3(shape, self.config.jacobi_block, (nz, ny, nx))

    def _colour_grid(self, shape, periodic, block):
        """Blocks of a colour pass: over (z pairs, y, x) of the unknowns."""
        lo = 0 if periodic else 1
        nx, ny, nz = (n - 2 * lo for n in shape)
        return self._grid3(shape, block, (_ceil(nz, 2), ny, nx))

    def map_kernels(self):
        from pbsolver.backends.cuda.maps import KERNELS

        return KERNELS

    # --- setup -------------------------------------------------------------------------
    def stencil(self, problem, dtype) -> Stencil:
        return self._stencil(problem, dtype, True)

    def sweep_stencil(self, problem, dtype) -> Stencil:
        """:meth:`stencil` without the diagonal (None).

        The kernels recompute it from the faces and ``shift`` (:class:`CUDAStencil`), so it
        would never be read: one grid array fewer for the whole solve.
        """
        return self._stencil(problem, dtype, False)

    def _stencil(self, problem, dtype, diagonal) -> Stencil:
        return self._stencil_and_b(problem, dtype, diagonal)[0]

    def refined_system(self, problem, dtype, into=None) -> tuple:
        """The sweep stencil and the float64 operator from one pass over the maps.

        The operator's b is the float64 b the stencil's own is rounded from (as
        :meth:`operator64` would make it). ``into``: a sweep stencil of an earlier call, for a
        problem of the same grid, boundary and salt (a kept workspace): its arrays are
        overwritten, so work captured on them replays.
        """
        st, b64 = self._stencil_and_b(problem, dtype, False, into)
        eps, mode, k2 = self._maps(problem)
        h2 = tuple(h * h for h in problem.grid.spacing)
        periodic = problem.boundary == "periodic"
        return st, ProblemOperator(eps, mode, k2, h2, b64, periodic, problem.is_singular)

    def _stencil_and_b(self, problem, dtype, diagonal, into=None) -> tuple:
        """(the stencil in ``dtype``, the float64 b its own b is rounded from).

        ``into``: a stencil whose arrays are written (its shape, dtype and salt those of this
        problem's); in float64 its b is not used (the stencil's b is the float64 b itself).
        """
        dtype = np.dtype(dtype)
        if dtype not in (np.float32, np.float64):
            raise InputError(f"dtype must be float32 or float64, got {dtype}")
        shape = problem.grid.shape
        nx, ny, nz = shape
        periodic = problem.boundary == "periodic"
        eps, mode, k2 = self._maps(problem)
        h2 = tuple(h * h for h in problem.grid.spacing)
        dev = self.dev
        if into is not None and not _fits(into, shape, dtype, diagonal, k2 is not None):
            raise InputError("into: a stencil of another shape, dtype or salt than the problem's")
        with dev.io():
            phi_c = self._resident(problem.phi_coulomb)
            b64 = dev.empty(shape, np.float64)
            if into is not None:
                coef, diag, shift = [into.cx, into.cy, into.cz], into.diag, into.shift
                b = b64 if dtype == np.float64 else into.b
            else:
                coef = [dev.empty(shape, dtype) for _ in range(3)]
                # the full diagonal, for the interface (users, the nonlinear equation); the
                # kernels recompute it
                diag = dev.empty(shape, dtype) if diagonal else None
                shift = dev.empty(shape, dtype) if k2 is not None else None
                b = b64 if dtype == np.float64 else dev.empty(shape, dtype)
            k2v = self._v(k2 if k2 is not None else self._dummy(np.float64))
            dev.launch(
                K.operator_stencil, self._full_grid(shape), self.config.jacobi_block,
                self._v(phi_c), *(self._v(a) for a in eps), mode, k2v, k2 is not None,
                problem.eps_cavity, *h2, self._v(b64), True, *(self._v(c) for c in coef),
                self._v(diag if diagonal else self._dummy(dtype)), diagonal,
                self._v(shift if shift is not None else self._dummy(dtype)),
                nx, ny, nz, periodic,
            )  # fmt: skip
            del phi_c
            if problem.is_singular:
                self._subtract_mean(b64)
            if b is not b64:
                self._flat(K.copy, b, b64)
            st = CUDAStencil(cx=coef[0], cy=coef[1], cz=coef[2], diag=diag, b=b,
                             periodic=periodic, singular=problem.is_singular,
                             shift=shift)  # fmt: skip
            return st, b64

    def operator64(self, problem) -> ProblemOperator:
        """The problem's maps on the device, and b from :func:`~.kernels.operator_stencil`.

        The maps are the problem's own arrays where they are C-ordered CuPy arrays (else
        device copies in their dtype); b is the one float64 grid array made here.
        """
        shape = problem.grid.shape
        nx, ny, nz = shape
        periodic = problem.boundary == "periodic"
        eps, mode, k2 = self._maps(problem)
        h2 = tuple(h * h for h in problem.grid.spacing)
        with self.dev.io():
            phi_c = self._resident(problem.phi_coulomb)
            b = self.dev.empty(shape, np.float64)
            k2v = self._v(k2 if k2 is not None else self._dummy(np.float64))
            none = self._v(self._dummy(np.float64))  # no stencil written
            self.dev.launch(
                K.operator_stencil, self._full_grid(shape), self.config.jacobi_block,
                self._v(phi_c), *(self._v(a) for a in eps), mode, k2v, k2 is not None,
                problem.eps_cavity, *h2, self._v(b), False, none, none, none, none, False, none,
                nx, ny, nz, periodic,
            )  # fmt: skip
            del phi_c
            if problem.is_singular:
                self._subtract_mean(b)
        return ProblemOperator(eps, mode, k2, h2, b, periodic, problem.is_singular)

    def _maps(self, problem):
        """((e0, e1, e2), mode, κ̄² or None) of ``problem`` on the device (see operator64)."""
        if problem.epsilon_faces is not None:
            eps = tuple(self._resident(f) for f in problem.epsilon_faces)
            mode = FACE_MAPS
        else:
            e = self._resident(problem.epsilon)
            eps = (e, e, e)
            mode = HARMONIC if problem.face_rule == "harmonic" else ARITHMETIC
        k2 = None if problem.kappa2 is None else self._resident(problem.kappa2)
        return eps, mode, k2

    def _resident(self, a):
        """A problem's array on the device: itself if a C-ordered CuPy array, else a copy.

        The copy keeps the array's dtype (the operator's kernels read it as float64).
        """
        dev = self.dev
        if dev.name == "cupy" and isinstance(a, dev.cp.ndarray) and a.flags.c_contiguous:
            return a
        with dev.io():
            return dev.asarray(a, a.dtype)

    def _op_args(self, op):
        """Flat views and scalars of a ProblemOperator after ``b`` (its kernels' order)."""
        v = self._v
        k2 = op.kappa2 if op.kappa2 is not None else self._dummy(np.float64)
        return (*(v(a) for a in op.eps), op.mode, v(k2), op.kappa2 is not None, *op.spacing2)

    def _op_items(self, op):
        k2 = op.kappa2 if op.kappa2 is not None else self._dummy(np.float64)
        return (op.b, *op.eps, op.mode, k2, *op.spacing2, op.periodic)

    # --- stacks of problems --------------------------------------------------------------
    def assemble_stack(self, problems, x0, stride, out, out32, unlifted, fixed, x):
        """Stage the problems' grids, then one :func:`~.stack_kernels.stack_blocks` launch."""
        from pbsolver.backends.cuda import stack_kernels as SK

        f64 = np.float64
        p0 = problems[0]
        shape = tuple(p0.grid.shape)
        nx, ny, nz = shape
        n, count = nx * ny * nz, len(problems)
        if unlifted is not None and len(unlifted) != 4:
            raise InputError("unlifted must be four arrays (faces x, y, z and kappa2)")
        x0 = [None] * count if x0 is None else list(x0)
        for k, guess in enumerate(x0):
            if guess is not None and tuple(guess.shape) != shape:
                raise InputError(f"x0[{k}] has shape {tuple(guess.shape)}, the grid needs {shape}")
        flags = np.zeros((count, SK.NFLAGS), np.int32)
        eps_c = np.array([float(p.eps_cavity) for p in problems])
        sources = [[None] * count for _ in range(8)]  # slot → the grid of each problem
        for k, (p, guess) in enumerate(zip(problems, x0, strict=True)):
            flags[k] = (p.epsilon is not None, p.face_rule == "harmonic", p.kappa2 is not None,
                        p.boundary_values is not None, guess is not None)  # fmt: skip
            grids = {SK.PHIC: p.phi_coulomb, SK.K2: p.kappa2, SK.G: p.boundary_values,
                     SK.X0: guess}  # fmt: skip
            if p.epsilon is not None:
                grids[SK.EPS] = p.epsilon
            else:
                grids.update(zip((SK.EX, SK.EY, SK.EZ), p.epsilon_faces, strict=True))
            for slot, grid in grids.items():
                sources[slot][k] = grid
        v = self._v
        dummy = v(self._dummy(f64))
        with self.dev.io():
            staged = []
            for slot, grids in enumerate(sources):
                if all(grid is None for grid in grids):
                    staged.append(dummy)
                    continue
                buf = self._staging(slot, count * n)
                for k, grid in enumerate(grids):
                    if grid is not None:
                        self.dev.copy_into(buf[k * n : (k + 1) * n], grid)
                staged.append(v(buf))
            threads = self.config.flat_threads
            unl_v = tuple(map(v, unlifted)) if unlifted is not None else (dummy,) * 4
            # named, so that they live until the launch is queued: a view holds no reference,
            # and a freed buffer was handed to the next allocation (flags read as ε_c: NaNs)
            flags_dev = self.dev.asarray(flags.ravel(), np.int32)
            eps_c_dev = self.dev.asarray(eps_c, f64)
            self.dev.launch(
                SK.stack_blocks, grid_for(count * stride * ny * nz, threads), threads,
                tuple(staged), v(flags_dev), v(eps_c_dev),
                tuple(float(h * h) for h in p0.grid.spacing), shape, stride,
                tuple(map(v, out)), tuple(map(v, out32)), unl_v, unlifted is not None,
                v(fixed), v(x),
            )  # fmt: skip
        if any(guess is not None for guess in x0):
            self._require_finite_guesses(x, x0, stride)

    def _staging(self, slot, size):
        """A float64 staging buffer of ``size`` for input ``slot`` (kept for the next call)."""
        buf = self._stage.get(slot)
        if buf is None or buf.size != size:
            buf = self.dev.empty((size,), np.float64)
            self._stage[slot] = buf
        return buf

    def _require_finite_guesses(self, x, x0, stride):
        """Raise InputError naming the first guessed block whose values are not all finite."""
        host = None
        if self.dev.name == "cupy":
            with self.dev.io():
                if bool(self.dev.cp.isfinite(x).all()):
                    return
                host = self.dev.to_numpy(x)
        else:
            host = x.copy_to_host()
        blocks = host.reshape(len(x0), stride, *host.shape[1:])
        for k, guess in enumerate(x0):
            if guess is not None and not np.isfinite(blocks[k]).all():
                raise InputError(f"x0[{k}] must be finite")

    def unstack(self, x, fixed, shape, stride, n_blocks):
        """One :func:`~.stack_kernels.unstack` launch (see the interface)."""
        from pbsolver.backends.cuda import stack_kernels as SK

        shape = tuple(int(n) for n in shape)
        with self.dev.io():
            out = self.dev.empty((n_blocks, *shape), x.dtype)
            threads = self.config.flat_threads
            self.dev.launch(
                SK.unstack, grid_for(out.size, threads), threads, self._v(x), self._v(fixed),
                shape, stride, self._v(out),
            )  # fmt: skip
        return out

    # --- sweeps --------------------------------------------------------------------------
    def sor_sweeps(self, st, x, omega, count):
        if count <= 0:
            return
        w = x.dtype.type(omega)
        key = self._key("sor", x, *self._st_items(st), float(w), count)
        with self.dev.io():
            self.dev.run(key, lambda: self._sor(st, x, w, count))

    def _sor(self, st, x, w, count):
        for _ in range(count):
            self._colour(st, x, 0, w)
            self._colour(st, x, 1, w)

    def _colour(self, st, x, color, w):
        nx, ny, nz = st.shape
        block = self.config.point_block
        grid = self._colour_grid(st.shape, st.periodic, block)
        self.dev.launch(
            K.rb_point, grid, block, self._v(x), *self._stencil_args(st), nx, ny, nz, color, w,
            st.periodic,
        )  # fmt: skip

    def jacobi_sweeps(self, st, x, work, omega, count):
        if count <= 0:
            return
        w = x.dtype.type(omega)
        key = self._key("jacobi", x, work, *self._st_items(st), float(w), count)
        with self.dev.io():
            self.dev.run(key, lambda: self._jacobi(st, x, work, w, count))

    def _jacobi(self, st, x, work, w, count):
        nx, ny, nz = st.shape
        grid, block = self._full_grid(st.shape), self.config.jacobi_block
        args = self._stencil_args(st)
        src, dst = x, work
        for _ in range(count):
            self.dev.launch(
                K.jacobi_point, grid, block, self._v(src), self._v(dst), *args,
                nx, ny, nz, w, st.periodic,
            )  # fmt: skip
            src, dst = dst, src
        if src is not x:
            self._flat(K.copy, x, src)

    # --- residuals -----------------------------------------------------------------------
    def residual(self, st, x, out):
        if isinstance(st, ProblemOperator):
            key = self._key("op-residual", x, out, *self._op_items(st))
        else:
            key = self._key("residual", x, out, *self._st_items(st))
        with self.dev.io():
            self.dev.run(key, lambda: self._residual(st, x, out))

    def _residual(self, st, x, out):
        nx, ny, nz = st.shape
        if isinstance(st, ProblemOperator):
            self.dev.launch(
                K.operator_residual_point, self._full_grid(st.shape), self.config.jacobi_block,
                self._v(x), self._v(st.b), *self._op_args(st), nx, ny, nz, self._v(out),
                st.periodic,
            )  # fmt: skip
            return
        self.dev.launch(
            K.residual_point, self._full_grid(st.shape), self.config.jacobi_block, self._v(x),
            *self._stencil_args(st), nx, ny, nz, self._v(out), st.periodic,
        )  # fmt: skip

    def residual_norm(self, st, x):
        if isinstance(st, ProblemOperator):
            key = self._key("op-resnorm", x, *self._op_items(st))
        else:
            key = self._key("resnorm", x, *self._st_items(st))
        with self.dev.io():
            self.dev.run(key, lambda: self.enqueue_residual_sumsq(st, x))
            value = self.dev.read_scalar(self._sums, 0)
        return math.sqrt(value) if value >= 0 else math.nan

    def residual_and_norm(self, st, x, out):
        """One pass for a problem's operator (the refinement's checks); two for a stencil."""
        if not isinstance(st, ProblemOperator):
            return super().residual_and_norm(st, x, out)
        key = self._key("op-resandnorm", x, out, *self._op_items(st))
        with self.dev.io():
            self.dev.run(key, lambda: self.enqueue_residual_sumsq(st, x, out=out))
            value = self.dev.read_scalar(self._sums, 0)
        return math.sqrt(value) if value >= 0 else math.nan

    def block_residual_norm(self, st, x, r, n_blocks, weights):
        """Residual, per-block sums and their weighted maximum as one graph; one scalar read."""
        per = r.size // n_blocks
        chunks = max(1, min(32, per // 8192))
        key = self._key("blocknorm", x, r, weights, *self._st_items(st), n_blocks)
        buf = self._stage.get("block partials")
        if buf is None or buf.size < n_blocks * chunks:
            buf = self.dev.empty((n_blocks * chunks,), np.float64)
            self._stage["block partials"] = buf

        def enqueue():
            self._residual(st, x, r)
            self.dev.launch(K.block_sumsq, (chunks, n_blocks), FINISH_THREADS, self._v(r),
                            per, chunks, self._v(buf))  # fmt: skip
            self.dev.launch(K.weighted_block_max, 1, FINISH_THREADS, self._v(buf), chunks,
                            self._v(weights), n_blocks, self._v(self._sums), 3)  # fmt: skip
            self.dev.copy_to_host_async(self._sums, 3)

        with self.dev.io():
            self.dev.run(key + (id(buf),), enqueue)
            value = self.dev.read_scalar(self._sums, 3)
        return math.sqrt(value) if value >= 0 else math.nan

    def _reduce_launch(self, shape):
        cfg = self.config
        bk, bj = cfg.reduce_block
        nx, ny, nz = shape
        grid = (_ceil(nz, bk), _ceil(ny, bj), _ceil(nx, cfg.reduce_chunk))
        n = grid[0] * grid[1] * grid[2]
        partials = self._partials.get(n)
        if partials is None:
            partials = self.dev.empty((n,), np.float64)
            self._partials[n] = partials
        return grid, (bk, bj, 1), partials, n

    def enqueue_residual_sumsq(self, st, x, copy=True, out=None):
        """Enqueue ``sums[0] = ‖b − A x‖²`` and (``copy``) its copy to pinned host memory.

        ``out`` (a problem's operator only): the residual is written there in the same pass.
        """
        nx, ny, nz = st.shape
        grid, block, partials, n = self._reduce_launch(st.shape)
        if isinstance(st, ProblemOperator):
            sumsq, residual_sumsq = K.operator_reduction(*self.config.reduce_block)
            written = () if out is None else (self._v(out),)
            self.dev.launch(
                sumsq if out is None else residual_sumsq, grid, block, self._v(x),
                self._v(st.b), *self._op_args(st), nx, ny, nz, st.periodic,
                self.config.reduce_chunk, *written, self._v(partials),
            )  # fmt: skip
        elif out is not None:
            raise ValueError("enqueue_residual_sumsq writes the residual of a ProblemOperator only")
        else:
            resid, _ = K.reductions(*self.config.reduce_block)
            self.dev.launch(
                resid, grid, block, self._v(x), *self._stencil_args(st), nx, ny, nz, st.periodic,
                self.config.reduce_chunk, self._v(partials),
            )  # fmt: skip
        self.dev.launch(
            K.finish_sum, 1, FINISH_THREADS, self._v(partials), n, self._v(self._sums), 0
        )
        if copy:
            self.dev.copy_to_host_async(self._sums, 0)

    def _subtract_mean(self, x):
        """``x -= mean(x)`` with the mean computed and applied on the device."""
        nx, ny, nz = x.shape
        grid, block, partials, n = self._reduce_launch(x.shape)
        _, sums = K.reductions(*self.config.reduce_block)
        self.dev.launch(
            sums, grid, block, self._v(x), nx, ny, nz, self.config.reduce_chunk, self._v(partials)
        )
        self.dev.launch(
            K.finish_sum, 1, FINISH_THREADS, self._v(partials), n, self._v(self._sums), 1
        )
        self._flat(K.subtract_mean, x, self._sums, 1)

    def remove_mean(self, x):
        key = self._key("mean", x)
        with self.dev.io():
            self.dev.run(key, lambda: self._subtract_mean(x))

    def axpy(self, y, x, a):
        key = self._key("axpy", y, x, float(a).hex())  # hex: −0.0 is not +0.0
        with self.dev.io():
            self.dev.run(key, lambda: self._flat(K.axpy, y, x, np.float64(a)))

    # --- multigrid kernels ---------------------------------------------------------------
    def rb_sor_color(self, st, x, color, omega):
        w = x.dtype.type(omega)
        key = self._key("colour", x, *self._st_items(st), int(color), float(w))
        with self.dev.io():
            self.dev.run(key, lambda: self._colour(st, x, int(color), w))

    def rb_sor_sweeps(self, st, x, first, omega, count, work=None):
        if count <= 0:
            return
        fused = (work is not None and self.dev.name == "cupy" and work.dtype == x.dtype
                 and work.shape == x.shape and fused_sweep.applies(st.shape, x.dtype))  # fmt: skip
        if not fused:
            super().rb_sor_sweeps(st, x, first, omega, count)
            return
        w = x.dtype.type(omega)
        key = self._key("fused", x, work, *self._st_items(st), int(first), float(w), count)
        with self.dev.io():
            self.dev.run(key, lambda: self._fused_sweeps(st, x, work, int(first), w, count))

    def _fused_sweeps(self, st, x, work, first, w, count):
        """``count`` sweeps of :mod:`~pbsolver.backends.cuda.fused_sweep`, ``x`` ↔ ``work``."""
        cp = self.dev.cp
        d, dmode = self._diagonal_of(st)
        shape = None if st.periodic else tuple(int(n) for n in st.shape)  # constant strides
        kernel = fused_sweep.kernel(np.dtype(x.dtype), bool(st.periodic), int(dmode), shape=shape)
        if self._multiprocessors is None:
            self._multiprocessors = int(cp.cuda.Device().attributes["MultiProcessorCount"])
        chunk = fused_sweep.chunk_for(st.shape, self._multiprocessors)
        grid = fused_sweep.launch_grid(st.shape, chunk)
        nx, ny, nz = (np.int32(n) for n in st.shape)
        src, dst = x, work
        block = (*fused_sweep.BLOCK, 1)
        for _ in range(count):
            args = (src, dst, st.b, st.cx, st.cy, st.cz, d, nx, ny, nz, np.int32(first), w,
                    np.int32(chunk))  # fmt: skip
            kernel(grid, block, args, stream=self.dev.stream)
            src, dst = dst, src
        if src is not x:  # an odd count ends in ``work``
            self._flat(K.copy, x, src)

    def fill(self, x, value):
        key = self._key("fill", x, float(value).hex())  # hex: −0.0 is not +0.0
        with self.dev.io():
            self.dev.run(key, lambda: self._fill(x, value))

    def restrict(self, tr, fine, coarse):
        maps = (*tr.pos, *tr.lo, *tr.hi)
        self._transfer("restrict", maps, self._restrict_c, self._restrict_numba, tr, fine, coarse)

    def prolong_add(self, tr, coarse, fine):
        maps = (*tr.lo, *tr.hi)
        self._transfer("prolong", maps, self._prolong_c, self._prolong_numba, tr, coarse, fine)

    def _transfer(self, name, maps, compiled, numba, tr, src, dst):
        """Run a transfer ``src`` → ``dst`` with the CUDA C kernel where it applies."""
        key = self._key(name, src, dst, *maps, tr.periodic)
        launch = compiled if self._compiled_transfers(tr) else numba
        with self.dev.io():
            self.dev.run(key, lambda: launch(tr, src, dst))

    def _compiled_transfers(self, tr) -> bool:
        """Whether a transfer runs the CUDA C kernels, not the numba ones (the simulator's).

        The CUDA C kernels (:mod:`pbsolver.backends.cuda.transfers`) run on a GPU, on levels
        within their 32-bit indices.
        """
        return self.dev.name == "cupy" and transfers.applies(tr.fine_shape)

    def _restrict_c(self, tr, fine, coarse):
        transfers.restrict(tr, fine, coarse, self.dev.stream)

    def _prolong_c(self, tr, coarse, fine):
        transfers.prolong_add(tr, coarse, fine, self.dev.stream)

    def _restrict_numba(self, tr, fine, coarse):
        v = self._v
        mx, my, mz = tr.coarse_shape
        grid = self._grid3(None, self.config.jacobi_block, (mz, my, mx))
        self.dev.launch(
            K.restrict, grid, self.config.jacobi_block, v(fine), v(coarse),
            v(tr.pos[0]), v(tr.lo[0]), v(tr.hi[0]), v(tr.pos[1]), v(tr.lo[1]), v(tr.hi[1]),
            v(tr.pos[2]), v(tr.lo[2]), v(tr.hi[2]),
            tuple(tr.fine_shape), tuple(tr.coarse_shape), tr.periodic,
        )  # fmt: skip

    def _prolong_numba(self, tr, coarse, fine):
        v = self._v
        self.dev.launch(
            K.prolong_add, self._full_grid(tr.fine_shape), self.config.jacobi_block, v(coarse),
            v(fine), v(tr.lo[0]), v(tr.hi[0]), v(tr.lo[1]), v(tr.hi[1]), v(tr.lo[2]),
            v(tr.hi[2]), tuple(tr.fine_shape), tuple(tr.coarse_shape), tr.periodic,
        )  # fmt: skip

    def dense_solve(self, inverse, b, x):
        # the interface's default uses cuBLAS (xp.dot), which cannot be graph-captured
        key = self._key("dense", inverse, b, x)
        with self.dev.io():
            self.dev.run(key, lambda: self._flat(K.dense_matvec, x, inverse, b))

    def axpby(self, y, x, a, b):
        key = self._key("axpby", y, x, float(a).hex(), float(b).hex())
        with self.dev.io():
            t = y.dtype.type
            self.dev.run(key, lambda: self._flat(K.axpby, y, x, t(a), t(b)))

    def dot(self, x, y):
        t = FINISH_THREADS  # the block size of dot_partials' shared array
        n = x.size
        nblocks = min(1024, grid_for(n, t))
        key = self._key("dot", x, y)
        with self.dev.io():
            partials = self._partials.get(("dot", nblocks))
            if partials is None:
                partials = self.dev.empty((nblocks,), np.float64)
                self._partials[("dot", nblocks)] = partials

            def enqueue():
                self.dev.launch(
                    K.dot_partials, nblocks, t, self._v(x), self._v(y), n, self._v(partials)
                )
                self.dev.launch(
                    K.finish_sum, 1, t, self._v(partials), nblocks, self._v(self._sums), 2
                )
                self.dev.copy_to_host_async(self._sums, 2)

            self.dev.run(key, enqueue)
            return self.dev.read_scalar(self._sums, 2)

    # --- graphs --------------------------------------------------------------------------
    def capture(self, fn, key=None):
        """Return a runner that replays ``fn``'s device work as one CUDA graph.

        See the package docstring for the contract ``fn`` must meet. The first call of the
        runner runs ``fn`` eagerly, the second captures and launches it, later calls launch
        the graph (one launch of host time whatever the number of kernels).
        """
        token = ("capture", object() if key is None else key)

        def runner():
            with self.dev.io():
                self.dev.run(token, fn)

        return runner

    # --- verbs of the orchestration (the solve layer, multigrid, the MD engine) ------------
    def array_module(self):
        if self.array_library != "cupy":  # the numba layer has no array library of its own
            raise InputError("array code on the CUDA backend needs CuPy device arrays")
        return super().array_module()

    def frame_kernels(self):
        from pbsolver.backends.frame_kernels import cuda_kernels

        self.array_module()  # the engine's buffers are CuPy arrays
        return cuda_kernels()

    def buffer_key(self, *items):
        return self._key(*items)

    def stream_context(self):
        # not just ``with stream``: the backend's stream is non-blocking, so without the
        # device's waits a copy of the caller's arrays could run before the caller's own work
        # that fills them (positions stacked on the legacy stream read half-written)
        return self.dev.io()

    def to_host(self, a):
        with self.dev.io():
            return self.dev.to_numpy(a)

    def launch_items(self, kernel, items, *args, threads=None, groups=None):
        from pbsolver.backends.frame_kernels import THREADS, blocks

        t = threads or THREADS
        grid = blocks(items, t) if groups is None else (blocks(items // groups, t), groups)
        self.dev.launch(kernel, grid, t, *(self._shaped_view(a) for a in args))

    def _shaped_view(self, a):
        """numba view of a device array with its own shape, made once (tuples mapped)."""
        if isinstance(a, tuple):
            return tuple(self._shaped_view(x) for x in a)
        if not self.dev.is_array(a) or self.dev.name != "cupy":
            return a
        key = (a.data.ptr, a.shape, a.dtype.str)
        view = self._views.get(key)
        if view is None:
            # no owner: the view is looked up only for a live array at that address
            view = numba_view(a)
            self._views.put(key, view)
        return view

    def coarse_operators(self, inputs, levels):
        """Two kernels a level, replayed as one CUDA graph (levels without work: array code)."""
        if not levels or any(lv.work is None for lv in levels):
            return super().coarse_operators(inputs, levels)
        arrays = [a for a in inputs if a is not None] + [inputs[3] is None]
        for lv in levels:
            st = lv.stencil
            arrays += [st.cx, st.cy, st.cz, st.diag, *lv.work, *lv.two]
            arrays += [*lv.transfer.pos, *lv.transfer.lo, *lv.transfer.hi]
        key = ("coarse-operators", self._key(*arrays))
        self.capture(lambda: self._coarse_kernels(inputs, levels), key=key)()
        return levels[-1].work

    def _coarse_kernels(self, inputs, levels):
        from pbsolver.backends.coarse import build_with_kernels
        from pbsolver.backends.cuda import coarse_kernels

        def launch(kernel, items, *args):
            self.dev.launch(kernel, grid_for(items, 128), 128, *args)

        build_with_kernels(inputs, levels, coarse_kernels, self._v, launch)

    def block_norms(self, a, n_blocks):
        with self.dev.io():  # ordered after this backend's queued work
            return super().block_norms(a, n_blocks)

    def workers(self, count):
        """``count`` CUDA backends, each with its own stream and graph cache (kept across calls)."""
        while len(_WORKERS) < count:
            _WORKERS.append(CUDABackend())
        return _WORKERS[:count]


#: the backends of :meth:`CUDABackend.workers`, made once
_WORKERS: list = []


def _fits(st, shape, dtype, diagonal, salt) -> bool:
    """Whether the arrays of stencil ``st`` can hold a problem's of this shape, dtype, salt."""
    return (tuple(st.cx.shape) == tuple(shape) and st.cx.dtype == dtype
            and (st.diag is not None) == bool(diagonal)
            and (getattr(st, "shift", None) is not None) == bool(salt))  # fmt: skip
