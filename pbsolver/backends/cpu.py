"""The CPU backend: NumPy arrays and the numba kernels of :mod:`.cpu_kernels`."""

from __future__ import annotations

import numpy as np

from .._arrays import to_numpy
from . import Backend, Stencil
from . import cpu_kernels as K


class CPUBackend(Backend):
    """Numba ``@njit(parallel=True)`` kernels on NumPy arrays."""

    name = "cpu"

    # --- data movement -----------------------------------------------------------------
    def asarray(self, a, dtype):
        return np.array(to_numpy(a), dtype=dtype, order="C", copy=True)

    def to_caller(self, a, like):
        from .._arrays import array_module

        xp = array_module(like)
        return a if xp is np else xp.asarray(a)

    def copy(self, a):
        return a.copy()

    def zeros(self, shape, dtype):
        return np.zeros(shape, dtype=dtype)

    # --- setup -------------------------------------------------------------------------
    def stencil(self, problem, dtype) -> Stencil:
        from ..operator import coefficients

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
        w = x.dtype.type(omega)
        for _ in range(count):
            for color in (0, 1):
                K.rb_sor_color(x, st.b, st.cx, st.cy, st.cz, st.diag, color, w, st.periodic)

    def jacobi_sweeps(self, st, x, work, omega, count):
        w = x.dtype.type(omega)
        src, dst = x, work
        for _ in range(count):
            K.jacobi_step(src, dst, st.b, st.cx, st.cy, st.cz, st.diag, w, st.periodic)
            src, dst = dst, src
        if src is not x:
            x[...] = src

    def residual(self, st, x, out):
        K.residual(x, st.b, st.cx, st.cy, st.cz, st.diag, out, st.periodic)

    def residual_norm(self, st, x):
        return float(np.sqrt(K.residual_sumsq(x, st.b, st.cx, st.cy, st.cz, st.diag, st.periodic)))

    def axpy(self, y, x, a):
        K.axpy(y, x, a)

    def remove_mean(self, x):
        K.add_scalar(x, x.dtype.type(-K.plane_sums(x).sum() / x.size))


def _set_outer_layer(a, value):
    a[0], a[-1] = value, value
    a[:, 0], a[:, -1] = value, value
    a[:, :, 0], a[:, :, -1] = value, value
