"""The CPU backend: NumPy arrays and the numba kernels of :mod:`.kernels` and :mod:`.mg_kernels`."""

from __future__ import annotations

import numba
import numpy as np

from pbsolver.arrays import to_numpy
from pbsolver.backends import Backend, ProblemOperator, Stencil
from pbsolver.backends.bodies.operator import ARITHMETIC, FACE_MAPS, HARMONIC
from pbsolver.backends.cpu import kernels as K
from pbsolver.backends.cpu import mg_kernels as MG
from pbsolver.backends.cpu import operator_kernels as OK
from pbsolver.exceptions import InputError


class CPUBackend(Backend):
    """Numba ``@njit(parallel=True)`` kernels on NumPy arrays.

    Parameters
    ----------
    coulomb : {"auto", "direct", "fast"}
        How its map kernels sum φ_c (:func:`pbsolver.backends.cpu.maps.coulomb_sum`): the
        direct sum, the multilevel sum of :mod:`pbsolver.backends.cpu.coulomb_fast`, or the
        latter where it pays (without a periodic box).
    """

    name = "cpu"
    COARSE_KERNELS = True
    #: How φ_c is summed (a class default too, for subclasses that keep their own __init__).
    coulomb = "auto"

    def __init__(self, coulomb: str = "auto"):
        from pbsolver.backends.cpu.coulomb_fast import check_method

        self.coulomb = check_method(coulomb)

    # --- data movement -----------------------------------------------------------------
    def asarray(self, a, dtype):
        return np.array(to_numpy(a), dtype=dtype, order="C", copy=True)

    def take(self, a, dtype):
        if isinstance(a, np.ndarray) and a.dtype == dtype and a.flags.c_contiguous:
            return a
        return self.asarray(a, dtype)

    def to_caller(self, a, like):
        from pbsolver.arrays import array_module

        xp = array_module(like)
        return a if xp is np else xp.asarray(a)

    def copy(self, a):
        return a.copy()

    def zeros(self, shape, dtype):
        return np.zeros(shape, dtype=dtype)

    def empty(self, shape, dtype):
        return np.empty(shape, dtype=dtype)

    def map_kernels(self):
        from pbsolver.backends.cpu.maps import kernels

        return kernels(self.coulomb)

    def line_recorders(self):
        from pbsolver.backends.cpu import line_ends

        return line_ends

    def frame_kernels(self):
        # the frame engine's φ_c is the map kernels' sum, by this backend's method
        from pbsolver.backends.frame_kernels import cpu_kernels

        return cpu_kernels(self.coulomb)

    # --- setup -------------------------------------------------------------------------
    def stencil(self, problem, dtype) -> Stencil:
        return self._stencil_and_b(problem, dtype)[0]

    def refined_system(self, problem, dtype, into=None):
        st, b = self._stencil_and_b(problem, dtype, into)
        return st, self._operator(problem, b)

    def _stencil_and_b(self, problem, dtype, into=None):
        """The stencil in ``dtype`` and the float64 b its own b is rounded from.

        ``into``: a stencil of this shape and dtype whose arrays are written instead of new ones.
        """
        # one pass over the maps: faces formed node by node (no whole-grid float64 faces,
        # coefficients or diagonal), b in float64 (its mean removed there when singular)
        dtype = np.dtype(dtype)
        shape = problem.grid.shape
        b = np.empty(shape, dtype=np.float64)
        if into is not None and (into.shape != shape or into.dtype != dtype):
            raise InputError("into: a stencil of another shape or dtype than the problem's")
        if into is not None:
            cx, cy, cz, diag = into.cx, into.cy, into.cz, into.diag
        else:
            cx, cy, cz, diag = (np.empty(shape, dtype=dtype) for _ in range(4))
        self._assemble(problem, b, (cx, cy, cz, diag))
        if dtype == np.float64:
            st_b = b
        elif into is not None:
            st_b = into.b
            st_b[...] = b
        else:
            st_b = b.astype(dtype)
        periodic = problem.boundary == "periodic"
        return Stencil(cx, cy, cz, diag, st_b, periodic, problem.is_singular), b

    def operator64(self, problem) -> ProblemOperator:
        b = np.empty(problem.grid.shape, dtype=np.float64)
        self._assemble(problem, b, None)
        return self._operator(problem, b)

    def _operator(self, problem, b) -> ProblemOperator:
        """The ProblemOperator of ``problem`` with its float64 right-hand side ``b``."""
        eps, mode = _eps_source(problem)
        k2 = None if problem.kappa2 is None else np.asarray(to_numpy(problem.kappa2))
        h2 = tuple(h * h for h in problem.grid.spacing)
        return ProblemOperator(eps, mode, k2, h2, b, problem.boundary == "periodic",
                               problem.is_singular)  # fmt: skip

    def _assemble(self, problem, b, stencil):
        """b (float64) and, given ``(cx, cy, cz, diag)`` arrays, the stencil, from the maps."""
        eps, mode = _eps_source(problem)
        has_k2 = problem.kappa2 is not None
        k2 = np.asarray(to_numpy(problem.kappa2)) if has_k2 else np.zeros((1, 1, 1))
        phi_c = np.asarray(to_numpy(problem.phi_coulomb))
        hx2, hy2, hz2 = (h * h for h in problem.grid.spacing)
        dummy = np.zeros((1, 1, 1), dtype=b.dtype)
        out = stencil if stencil is not None else (dummy,) * 4
        with np.errstate(invalid="ignore"):
            OK.assemble(phi_c, *eps, mode, k2, has_k2, problem.eps_cavity, hx2, hy2, hz2,
                        problem.boundary == "periodic", b, stencil is not None, *out)  # fmt: skip
        if problem.is_singular:
            K.add_scalar(b, -K.plane_sums(b).sum() / b.size)

    # --- kernels -----------------------------------------------------------------------
    def sor_sweeps(self, st, x, omega, count):
        # one sweep kernel for SOR and the multigrid smoother (the z-vectorised one)
        for _ in range(count):
            self.rb_sor_sweep(st, x, 0, omega)

    def jacobi_sweeps(self, st, x, work, omega, count):
        w = x.dtype.type(omega)
        src, dst = x, work
        for _ in range(count):
            K.jacobi_step(src, dst, st.b, st.cx, st.cy, st.cz, st.diag, w, st.periodic)
            src, dst = dst, src
        if src is not x:
            x[...] = src

    def residual(self, st, x, out):
        if isinstance(st, ProblemOperator):
            OK.residual(x, st.b, *st.eps, st.mode, *_kappa2(st), *st.spacing2, out, st.periodic)
            return
        _launch(x.size, MG.residual, x, st.b, st.cx, st.cy, st.cz, st.diag, out, st.periodic)

    def residual_norm(self, st, x):
        if isinstance(st, ProblemOperator):
            return float(np.sqrt(OK.residual_sumsq(x, st.b, *st.eps, st.mode, *_kappa2(st),
                                                   *st.spacing2, st.periodic)))  # fmt: skip
        total = _launch(
            x.size, MG.residual_sumsq, x, st.b, st.cx, st.cy, st.cz, st.diag, st.periodic
        )
        return float(np.sqrt(total))

    def residual_and_norm(self, st, x, out):
        if not isinstance(st, ProblemOperator):
            return super().residual_and_norm(st, x, out)
        total = OK.residual_and_sumsq(x, st.b, *st.eps, st.mode, *_kappa2(st), *st.spacing2, out,
                                      st.periodic)  # fmt: skip
        return float(np.sqrt(total))

    def axpy(self, y, x, a):
        K.axpy(y, x, a)

    def remove_mean(self, x):
        K.add_scalar(x, x.dtype.type(-K.plane_sums(x).sum() / x.size))

    # --- multigrid kernels (one thread on small grids: see mg_kernels) --------------------
    def rb_sor_color(self, st, x, color, omega):
        w = x.dtype.type(omega)
        args = (x, st.b, st.cx, st.cy, st.cz, st.diag, color, w, st.periodic)
        _launch(x.size, MG.rb_sor_color, *args)

    def rb_sor_sweep(self, st, x, first, omega):
        w = x.dtype.type(omega)
        threads = numba.get_num_threads() if x.size >= MG.SERIAL_BELOW else 1
        args = (x, st.b, st.cx, st.cy, st.cz, st.diag, first, w, st.periodic, threads)
        _launch(x.size, MG.rb_sor_sweep, *args)

    def restrict(self, tr, fine, coarse):
        (px, py, pz), (lx, ly, lz), (hx, hy, hz) = tr.pos, tr.lo, tr.hi
        args = (fine, coarse, px, lx, hx, py, ly, hy, pz, lz, hz, tr.periodic)
        _launch(fine.size, MG.restrict, *args)

    def prolong_add(self, tr, coarse, fine):
        (lx, ly, lz), (hx, hy, hz) = tr.lo, tr.hi
        _launch(fine.size, MG.prolong_add, coarse, fine, lx, hx, ly, hy, lz, hz, tr.periodic)

    def coarse_operators(self, inputs, levels):
        """The coarse levels by the numba kernels of :mod:`.coarse_kernels`, level by level."""
        from pbsolver.backends.coarse import build_with_kernels
        from pbsolver.backends.cpu import coarse_kernels

        if not levels or any(lv.work is None for lv in levels):
            return super().coarse_operators(inputs, levels)

        def launch(kernel, items, *args):
            _launch(items, kernel, *args)

        return build_with_kernels(inputs, levels, coarse_kernels, _flat, launch)

    def fill(self, x, value):
        _launch(x.size, MG.fill, x, x.dtype.type(value))

    def axpby(self, y, x, a, b):
        MG.axpby(y, x, y.dtype.type(a), y.dtype.type(b))

    def dot(self, x, y):
        return float(MG.dot(x, y))


def _eps_source(problem):
    """(e0, e1, e2), mode: the problem's face maps, or its node map thrice and its face rule."""
    if problem.epsilon_faces is not None:
        return tuple(np.asarray(to_numpy(f)) for f in problem.epsilon_faces), FACE_MAPS
    eps = np.asarray(to_numpy(problem.epsilon))
    mode = HARMONIC if problem.face_rule == "harmonic" else ARITHMETIC
    return (eps, eps, eps), mode


_NO_KAPPA2 = np.zeros((1, 1, 1))


def _kappa2(op):
    """(κ̄² or a dummy, whether there is salt) of a ProblemOperator."""
    return (_NO_KAPPA2, False) if op.kappa2 is None else (op.kappa2, True)


def _flat(a):
    """The flat, C-ordered view of a contiguous array (the coarse kernels' indexing)."""
    return a.reshape(-1)


def _launch(size, kernel, *args):
    """``kernel(*args)`` on every numba thread, or on the calling thread alone for small grids.

    One thread below ``MG.SERIAL_BELOW`` points (see :mod:`pbsolver.backends.cpu.mg_kernels`);
    numba's thread count belongs to the calling thread, so other threads' kernels keep theirs.
    """
    if size >= MG.SERIAL_BELOW:
        return kernel(*args)
    old = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        return kernel(*args)
    finally:
        numba.set_num_threads(old)
