"""The discrete operator (README, *Design and conventions*) in NumPy (or CuPy), and its sparse form.

For each unknown node s with neighbours n (faces ε_{s,n}) along axis a of spacing h_a:

    (A φ)_s = Σ_n ε_{s,n} (φ_s − φ_n) / h_a² + κ̄²_s φ_s
    b_s     = Σ_n (ε_{s,n} − ε_c)(φc_n − φc_s) / h_a² − κ̄²_s φc_s

A term whose face equals ε_c is exactly zero, even where φ_c is infinite (a charge on a node).
The unknowns are every node (periodic) or the interior nodes (Dirichlet: the outer layer holds
fixed values g, which enter the residual through the stencil). Everything here is the reference
the fast kernels are tested against; it favours clarity over speed.

The relative residual used everywhere (CPU, GPU, reference) is ``‖b − Aφ‖₂ / ‖b − A φ₀‖₂``
over the unknowns, where φ₀ holds the boundary values and zero inside: the right-hand side of
the system over the unknowns once the fixed boundary values are moved to it.

The functions taking ``problem`` take a :class:`~pbsolver.Problem` (read through its attributes;
this module does not import it, so that the problem module may stand below or beside it).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pbsolver.arrays import array_module


@dataclass
class Coefficients:
    """Face coefficients ε_face / h² along each axis, κ̄², and the boundary kind.

    ``cx[i, j, k]`` couples nodes ``(i, j, k)`` and ``(i+1, j, k)`` (wrapping at the last layer).
    """

    cx: object
    cy: object
    cz: object
    kappa2: object  # array or None
    periodic: bool

    @property
    def shape(self):
        """Grid shape."""
        return tuple(self.cx.shape)

    def diagonal(self):
        """The operator's diagonal: sum of the six face coefficients plus κ̄²."""
        xp = array_module(self.cx)
        d = (
            self.cx
            + xp.roll(self.cx, 1, axis=0)
            + self.cy
            + xp.roll(self.cy, 1, axis=1)
            + self.cz
            + xp.roll(self.cz, 1, axis=2)
        )
        if self.kappa2 is not None:
            d = d + self.kappa2
        return d


def coefficients(problem, dtype=np.float64) -> Coefficients:
    """Face coefficients of ``problem`` (ε_face / h_a²) in its array library."""
    faces = problem.face_permittivities(np.float64)
    c = [f / (h * h) for f, h in zip(faces, problem.grid.spacing, strict=True)]
    kappa2 = None if problem.kappa2 is None else problem.kappa2.astype(dtype)
    return Coefficients(
        *(ci.astype(dtype, copy=False) for ci in c),
        kappa2=kappa2,
        periodic=problem.boundary == "periodic",
    )


def interior_mask(shape, periodic: bool, xp=np):
    """Boolean mask of the unknown nodes: all (periodic) or all but the outer layer."""
    mask = xp.zeros(shape, dtype=bool)
    if periodic:
        mask[...] = True
    else:
        mask[1:-1, 1:-1, 1:-1] = True
    return mask


def rhs(problem) -> np.ndarray:
    """The right-hand side b (float64, the problem's array library), zero on fixed nodes.

    For a periodic problem without salt, b's mean is removed (it is zero in exact arithmetic),
    making the semi-definite system consistent.
    """
    xp = problem.xp
    phi_c = problem.phi_coulomb.astype(np.float64)
    b = xp.zeros(problem.grid.shape, dtype=np.float64)
    faces = problem.face_permittivities(np.float64)
    with np.errstate(invalid="ignore"):  # inf − inf where a charge sits on a node: masked below
        _add_flux_terms(b, faces, phi_c, problem, xp)
    if problem.kappa2 is not None:
        k2 = problem.kappa2.astype(np.float64)
        b -= xp.where(k2 != 0, k2 * xp.where(k2 != 0, phi_c, 0.0), 0.0)
    if problem.boundary == "periodic":
        if problem.is_singular:
            b -= b.mean()
    else:
        zero_outer_layer(b)
    return b


def _add_flux_terms(b, faces, phi_c, problem, xp):
    eps_c = problem.eps_cavity
    for axis, (face, h) in enumerate(zip(faces, problem.grid.spacing, strict=True)):
        # Face `face[s]` joins s and s+1 along `axis`; its flux term enters both nodes.
        weight = (face - eps_c) / (h * h)
        diff = xp.roll(phi_c, -1, axis=axis) - phi_c  # φc_{s+1} − φc_s
        active = weight != 0
        term = xp.where(active, weight * xp.where(active, diff, 0.0), 0.0)
        b += term  # node s: (ε − ε_c)(φc_{s+1} − φc_s)
        b -= xp.roll(term, 1, axis=axis)  # node s+1: (ε − ε_c)(φc_s − φc_{s+1})


def fixed_values(problem, dtype=np.float64):
    """φ₀: the boundary values on the outer layer (Dirichlet) and zero elsewhere."""
    xp = problem.xp
    x = xp.zeros(problem.grid.shape, dtype=dtype)
    g = problem.boundary_values
    if g is not None:  # the six outer planes only (no whole-grid copy)
        x[0], x[-1] = g[0], g[-1]
        x[:, 0], x[:, -1] = g[:, 0], g[:, -1]
        x[:, :, 0], x[:, :, -1] = g[:, :, 0], g[:, :, -1]
    return x


def apply(coef: Coefficients, x):
    """A·x on the unknown nodes (zero on fixed nodes), reading fixed values from ``x``."""
    xp = array_module(x)
    y = xp.zeros_like(x)
    for axis, c in enumerate((coef.cx, coef.cy, coef.cz)):
        flux = c * (x - xp.roll(x, -1, axis=axis))  # ε (φ_s − φ_{s+1}) / h² on face s
        y += flux
        y -= xp.roll(flux, 1, axis=axis)
    if coef.kappa2 is not None:
        y += coef.kappa2 * x
    if not coef.periodic:
        zero_outer_layer(y)
    return y


def residual(coef: Coefficients, b, x):
    """r = b − A·x on the unknowns (zero on fixed nodes)."""
    return b - apply(coef, x)


def relative_residual(problem, phi) -> float:
    """‖b − Aφ‖₂ / ‖b − Aφ₀‖₂ computed in float64 (φ₀ = boundary values, zero inside)."""
    coef = coefficients(problem, np.float64)
    b = rhs(problem)
    phi64 = phi.astype(np.float64)
    r = residual(coef, b, phi64)
    r0 = residual(coef, b, fixed_values(problem))
    xp = array_module(r)
    bnorm = float(xp.linalg.norm(r0))
    rnorm = float(xp.linalg.norm(r))
    return rnorm / bnorm if bnorm > 0 else rnorm


def zero_outer_layer(a):
    """Set the six outer planes of ``a`` (a NumPy or CuPy array) to zero, in place."""
    a[0], a[-1] = 0, 0
    a[:, 0], a[:, -1] = 0, 0
    a[:, :, 0], a[:, :, -1] = 0, 0


# ---------------------------------------------------------------------- sparse float64 reference
def assemble_matrix(problem):
    """Assemble A over the unknowns and its right-hand side in float64 (NumPy/SciPy, host).

    Returns
    -------
    A : scipy.sparse.csr_matrix
        Symmetric, of size (number of unknowns)².
    rhs : ndarray
        b over the unknowns minus the coupling to fixed boundary values.
    unknowns : ndarray of bool, grid-shaped
        Which nodes are unknowns (C order matches A's rows).
    """
    from pbsolver.arrays import to_numpy

    coef = coefficients(problem, np.float64)
    coef = Coefficients(
        *(to_numpy(c) for c in (coef.cx, coef.cy, coef.cz)),
        kappa2=None if coef.kappa2 is None else to_numpy(coef.kappa2),
        periodic=coef.periodic,
    )
    shape = coef.shape
    n = int(np.prod(shape))
    index = np.arange(n).reshape(shape)
    rows, cols, vals = [], [], []
    diag = np.zeros(shape)
    for axis, c in enumerate((coef.cx, coef.cy, coef.cz)):
        nxt = np.roll(index, -1, axis=axis)
        rows += [index.ravel(), nxt.ravel()]
        cols += [nxt.ravel(), index.ravel()]
        vals += [-c.ravel(), -c.ravel()]
        diag += c + np.roll(c, 1, axis=axis)
        if not coef.periodic:
            # faces of the last layer wrap to the first: never part of a Dirichlet stencil
            last = [slice(None)] * 3
            last[axis] = -1
            keep = np.ones(shape, dtype=bool)
            keep[tuple(last)] = False
            for k in (-2, -1):
                rows[k] = rows[k][keep.ravel()]
                cols[k] = cols[k][keep.ravel()]
                vals[k] = vals[k][keep.ravel()]
    if coef.kappa2 is not None:
        diag += coef.kappa2
    rows.append(index.ravel())
    cols.append(index.ravel())
    vals.append(diag.ravel())
    import scipy.sparse as sp  # here: its import is a quarter of the package's import time

    full = sp.csr_matrix(
        (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(n, n)
    )
    unknowns = to_numpy(interior_mask(shape, coef.periodic))
    u = unknowns.ravel()
    b = to_numpy(rhs(problem)).ravel()
    A = full[u][:, u].tocsr()
    rhs_u = b[u]
    if not coef.periodic:
        g = to_numpy(fixed_values(problem)).ravel()
        rhs_u = rhs_u - full[u][:, ~u] @ g[~u]
    return A, rhs_u, unknowns


def reference_solve(problem) -> np.ndarray:
    """Solve the problem exactly in float64 with a sparse direct solver (tests, small grids).

    A periodic problem without salt is bordered with the zero-mean constraint.

    Returns
    -------
    ndarray
        φ_rf on the whole grid (boundary values on the fixed layer), float64, NumPy.
    """
    import scipy.sparse as sp
    from scipy.sparse.linalg import spsolve

    from pbsolver.arrays import to_numpy

    A, b, unknowns = assemble_matrix(problem)
    if problem.is_singular:
        m = A.shape[0]
        ones = sp.csr_matrix(np.ones((m, 1)))
        bordered = sp.bmat([[A, ones], [ones.T, None]], format="csc")
        x = spsolve(bordered, np.append(b, 0.0))[:m]
    else:
        x = spsolve(A.tocsc(), b)
    phi = to_numpy(fixed_values(problem))
    phi[unknowns] = x
    return phi
