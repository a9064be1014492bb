"""A direct solve for constant-coefficient Dirichlet systems by the discrete sine transform.

Where ε is the same on every face of a Dirichlet grid and κ̄² is zero or the same on every
node (a homogeneous medium: the reference calculations of solvation energies, APBS inputs with
``pdie`` = ``sdie``), the operator on the unknowns is the same 7-point stencil everywhere,

    (A u)_ijk = D u_ijk − Σ_a c_a (u at +1 along a + u at −1 along a),

with one face coefficient c_a = ε/h_a² per axis and one diagonal D (2 Σ_a c_a + κ̄²). The
products of sines sin(π p i/(m_x + 1)) sin(π q j/(m_y + 1)) sin(π r k/(m_z + 1)) over the
m_x × m_y × m_z unknowns are its eigenvectors, with eigenvalues

    λ_pqr = D − 2 Σ_a c_a cos(π p_a/(m_a + 1)),    p_a = 1 … m_a,

so A u = f is solved exactly by a type-I discrete sine transform of f along the three axes,
a division by λ and the inverse transform: O(N log N), no iteration. The Dirichlet values on
the outer layer enter the rows next to it as c_a · (boundary value) on the right-hand side.

As a method of the iteration loop (:mod:`pbsolver.solving.methods`) one step is one exact solve
of the loop's system; under float64 refinement the float32 correction systems are solved the
same way, so a solve takes one step a refinement phase. The transforms are SciPy's on NumPy
arrays and an FFT of the odd extension (``xp.fft``) on CuPy arrays.
"""

from __future__ import annotations

import numpy as np

from pbsolver.arrays import array_module
from pbsolver.exceptions import InputError

#: The interior of a grid (the unknowns of a Dirichlet problem).
INNER = (slice(1, -1), slice(1, -1), slice(1, -1))


def constant_coefficients(st):
    """``(c_x, c_y, c_z, D)`` of a Dirichlet stencil whose rows are all alike, else None.

    Only the faces and diagonal entries that the unknowns' rows read are compared: the faces
    between two nodes of which one at least is an unknown, along each axis. A stencil without
    a diagonal array (the CUDA sweep stencil) has ``D = 2 Σ c_a`` plus its uniform ``shift``.
    """
    if st.periodic:
        return None
    xp = array_module(st.cx)
    rows = [
        (st.cx, (slice(0, -1), slice(1, -1), slice(1, -1))),
        (st.cy, (slice(1, -1), slice(0, -1), slice(1, -1))),
        (st.cz, (slice(1, -1), slice(1, -1), slice(0, -1))),
    ]
    faces = []
    for a, where in rows:
        value = _uniform(a[where], xp)
        if value is None:
            return None
        faces.append(value)
    if st.diag is not None:
        diag = _uniform(st.diag[INNER], xp)
    else:  # the diagonal the CUDA kernels recompute: the faces plus κ̄² ("shift")
        shift = getattr(st, "shift", None)
        extra = 0.0 if shift is None else _uniform(shift[INNER], xp)
        diag = None if extra is None else 2.0 * sum(faces) + extra
    if diag is None:
        return None
    return (*faces, diag)


#: Values of an array compared with its first before the whole of it is (see :func:`_uniform`).
SAMPLES = 1024


def _uniform(a, xp):
    """The single value of ``a`` (a float), or None where it holds more than one.

    A strided sample and the middle plane are compared first: "auto" asks this of every
    problem it solves, and a molecule's map differs within them (the grid is placed around the
    molecule, whose middle plane crosses it even where the sample falls all in the solvent), so
    that most problems pay no pass over the grid.
    """
    if a.size == 0:
        return None
    flat = a.reshape(-1)
    sample = flat[:: max(1, flat.size // SAMPLES)]
    if bool((sample != sample[0]).any()):
        return None
    if a.ndim == 3 and bool((a[a.shape[0] // 2] != sample[0]).any()):
        return None
    lo, hi = float(xp.min(a)), float(xp.max(a))
    return lo if lo == hi else None


def eigenvalues(shape, coefficients, xp=np):
    """λ_pqr of the constant-coefficient operator on the interior of a grid of ``shape``."""
    *c, diag = coefficients
    lam = xp.full(tuple(n - 2 for n in shape), float(diag))
    for axis, (n, ca) in enumerate(zip(shape, c, strict=True)):
        m = n - 2
        cos = xp.cos(np.pi * xp.arange(1, m + 1) / (m + 1))
        lam -= (2.0 * ca * cos).reshape([-1 if a == axis else 1 for a in range(3)])
    return lam


def dst1(a, axis, xp):
    """Type-I discrete sine transform along ``axis``: Σ_n a_n sin(π k n/(m + 1)), k, n = 1 … m.

    SciPy's transform on NumPy arrays, :func:`dst1_fft` on others (CuPy).
    """
    if xp is np:
        from scipy import fft

        return 0.5 * fft.dst(a, type=1, axis=axis, workers=-1)
    return dst1_fft(a, axis, xp)


def dst1_fft(a, axis, xp):
    """:func:`dst1` by an FFT of ``xp`` (any array library with NumPy's ``fft``).

    The odd extension [0, a, 0, −a reversed], of length 2(m + 1), has the FFT −2i × the
    transform.
    """
    m = a.shape[axis]
    pad = list(a.shape)
    pad[axis] = 1
    zero = xp.zeros(pad, dtype=a.dtype)
    ext = xp.concatenate([zero, a, zero, -xp.flip(a, axis=axis)], axis=axis)
    spectrum = xp.fft.fft(ext, axis=axis)
    return -0.5 * xp.take(spectrum, xp.arange(1, m + 1), axis=axis).imag


def solve_constant(rhs, lam, xp):
    """The interior solution u of A u = rhs (the boundary's share already in ``rhs``)."""
    u = rhs
    for axis in range(3):
        u = dst1(u, axis, xp)
    u = u / lam
    for axis in range(3):
        u = dst1(u, axis, xp) * (2.0 / (rhs.shape[axis] + 1))
    return u


def boundary_rhs(st, x, coefficients, xp):
    """``b`` on the unknowns plus the Dirichlet values' share (c_a × x on the outer layer)."""
    rhs = xp.asarray(st.b[INNER], dtype=xp.float64).copy()
    x64 = xp.asarray(x, dtype=xp.float64)
    for axis, ca in enumerate(coefficients[:3]):
        for end, inner_end in ((0, 0), (-1, -1)):
            face = [slice(1, -1)] * 3
            face[axis] = end
            target = [slice(None)] * 3
            target[axis] = inner_end
            rhs[tuple(target)] += ca * x64[tuple(face)]
    return rhs


class Spectral:
    """Direct solve by the discrete sine transform (constant-coefficient Dirichlet systems).

    Refused (:class:`~pbsolver.InputError`) where the faces or the diagonal vary, on periodic
    grids and on stacks of blocks. ``method="auto"`` picks it for such problems
    (:func:`applies`).
    """

    name = "spectral"
    check_every = 1
    options = ()
    omega = None

    def setup(self, system) -> None:
        if system.problem is None:
            raise InputError("method 'spectral' solves one problem, not a stack of blocks")
        xp = array_module(system.st.cx)
        if not isinstance(system.st.cx, xp.ndarray):
            raise InputError(
                f"method 'spectral' runs on NumPy or CuPy arrays, not {type(system.st.cx).__name__}"
            )
        self.backend = system.backend
        self.coefficients = constant_coefficients(system.st)
        if self.coefficients is None:
            raise InputError(
                "method 'spectral' needs a constant-coefficient Dirichlet system: the same "
                "permittivity on every face (no dielectric boundary) and no salt or the same "
                "κ̄² everywhere; use 'multigrid' or 'auto'"
            )
        self.xp = xp
        self.lam = eigenvalues(system.st.shape, self.coefficients, self.xp)

    def start(self, st, x) -> None:
        self.st, self.x = st, x

    def step(self, count: int) -> None:
        """One exact solve of the current system into ``x`` (``count`` is not needed)."""
        xp = self.xp
        rhs = boundary_rhs(self.st, self.x, self.coefficients, xp)
        self.x[INNER] = solve_constant(rhs, self.lam, xp).astype(self.x.dtype, copy=False)

    def default_maxiter(self, shape) -> int:
        return 8


def applies(problem) -> bool:
    """Whether :class:`Spectral` solves ``problem``: Dirichlet, uniform ε and κ̄² (or none)."""
    if problem.boundary != "dirichlet":
        return False
    xp = array_module(problem.phi_coulomb)
    if problem.epsilon_faces is not None:
        values = [_uniform(f, xp) for f in problem.epsilon_faces]
        if any(v is None for v in values) or len(set(values)) != 1:
            return False
    elif _uniform(problem.epsilon, xp) is None:
        return False
    return problem.kappa2 is None or _uniform(problem.kappa2, xp) is not None


__all__ = [
    "Spectral",
    "applies",
    "constant_coefficients",
    "dst1",
    "dst1_fft",
    "eigenvalues",
    "solve_constant",
]
