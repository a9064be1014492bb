"""The CPU backend: NumPy arrays and the numba kernels of :mod:`.kernels` and :mod:`.mg_kernels`."""

from __future__ import annotations

import numpy as np

from pbsolver.arrays import to_numpy
from pbsolver.backends import Backend, Stencil
from pbsolver.backends.cpu import kernels as K
from pbsolver.backends.cpu import mg_kernels as MG


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
    #: How φ_c is summed (a class default too, for subclasses that keep their own __init__).
    coulomb = "auto"

    def __init__(self, coulomb: str = "auto"):
        from pbsolver.backends.cpu.coulomb_fast import check_method

        self.coulomb = check_method(coulomb)

    # --- data movement -----------------------------------------------------------------
    def asarray(self, a, dtype):
        return np.array(to_numpy(a), dtype=dtype, order="C", copy=True)

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

    # --- setup -------------------------------------------------------------------------
    def stencil(self, problem, dtype) -> Stencil:
        from pbsolver.operator import coefficients

        coef = coefficients(problem, np.float64)
        faces = [self.asarray(f, np.float64) for f in problem.face_permittivities(np.float64)]
        phi_c = self.asarray(problem.phi_coulomb, np.float64)
        periodic = problem.boundary == "periodic"
        has_k2 = problem.kappa2 is not None
        kappa2 = self.asarray(problem.kappa2, np.float64) if has_k2 else np.zeros((1, 1, 1))
        b = np.empty(problem.grid.shape, dtype=np.float64)
        hx2, hy2, hz2 = (h * h for h in problem.grid.spacing)
        with np.errstate(invalid="ignore"):
            K.assemble_rhs(
                phi_c, *faces, kappa2, has_k2, problem.eps_cavity, hx2, hy2, hz2, b, periodic
            )
        if problem.is_singular:
            K.add_scalar(b, -K.plane_sums(b).sum() / b.size)
        diag = to_numpy(coef.diagonal())
        if not periodic:
            _set_outer_layer(diag, 1.0)
        return Stencil(
            cx=self.asarray(coef.cx, dtype),
            cy=self.asarray(coef.cy, dtype),
            cz=self.asarray(coef.cz, dtype),
            diag=diag.astype(dtype),
            b=b.astype(dtype),
            periodic=periodic,
            singular=problem.is_singular,
        )

    # --- kernels -----------------------------------------------------------------------
    def sor_sweeps(self, st, x, omega, count):
        # one colour-sweep kernel for SOR and the multigrid smoother (the z-vectorised one)
        for _ in range(count):
            for color in (0, 1):
                self.rb_sor_color(st, x, color, omega)

    def jacobi_sweeps(self, st, x, work, omega, count):
        w = x.dtype.type(omega)
        src, dst = x, work
        for _ in range(count):
            K.jacobi_step(src, dst, st.b, st.cx, st.cy, st.cz, st.diag, w, st.periodic)
            src, dst = dst, src
        if src is not x:
            x[...] = src

    def residual(self, st, x, out):
        kernel = MG.residual_serial if x.size < MG.SERIAL_BELOW else MG.residual
        kernel(x, st.b, st.cx, st.cy, st.cz, st.diag, out, st.periodic)

    def residual_norm(self, st, x):
        kernel = MG.residual_sumsq_serial if x.size < MG.SERIAL_BELOW else K.residual_sumsq
        return float(np.sqrt(kernel(x, st.b, st.cx, st.cy, st.cz, st.diag, st.periodic)))

    def axpy(self, y, x, a):
        K.axpy(y, x, a)

    def remove_mean(self, x):
        K.add_scalar(x, x.dtype.type(-K.plane_sums(x).sum() / x.size))

    # --- multigrid kernels (serial twins on small grids: see mg_kernels) -----------------
    def rb_sor_color(self, st, x, color, omega):
        kernel = MG.rb_sor_color_serial if x.size < MG.SERIAL_BELOW else MG.rb_sor_color
        kernel(x, st.b, st.cx, st.cy, st.cz, st.diag, color, x.dtype.type(omega), st.periodic)

    def restrict(self, tr, fine, coarse):
        kernel = MG.restrict_serial if fine.size < MG.SERIAL_BELOW else MG.restrict
        (px, py, pz), (lx, ly, lz), (hx, hy, hz) = tr.pos, tr.lo, tr.hi
        kernel(fine, coarse, px, lx, hx, py, ly, hy, pz, lz, hz, tr.periodic)

    def prolong_add(self, tr, coarse, fine):
        kernel = MG.prolong_add_serial if fine.size < MG.SERIAL_BELOW else MG.prolong_add
        (lx, ly, lz), (hx, hy, hz) = tr.lo, tr.hi
        kernel(coarse, fine, lx, hx, ly, hy, lz, hz, tr.periodic)

    def fill(self, x, value):
        kernel = MG.fill_serial if x.size < MG.SERIAL_BELOW else MG.fill
        kernel(x, x.dtype.type(value))

    def axpby(self, y, x, a, b):
        MG.axpby(y, x, y.dtype.type(a), y.dtype.type(b))

    def dot(self, x, y):
        return float(MG.dot(x, y))


def _set_outer_layer(a, value):
    a[0], a[-1] = value, value
    a[:, 0], a[:, -1] = value, value
    a[:, :, 0], a[:, :, -1] = value, value
