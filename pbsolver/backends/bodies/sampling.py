"""Plain-Python bodies of field sampling: φ and ∇φ at a point of a node field.

Two interpolations, chosen by the caller (``cubic``):

* **linear** (trilinear weights on the point's cell): the value is the trilinear interpolant of
  the node values; the gradient is the trilinear interpolant of the node gradients, central
  differences (one-sided on the outer layer of a Dirichlet grid, as :func:`numpy.gradient`;
  wrapped on a periodic one). The interpolant is continuous but its slope jumps where the point
  crosses a plane of nodes.
* **cubic** (Keys' cubic convolution, a = −½, on the 4×4×4 nodes around the point's cell): an
  interpolating, continuously differentiable (C¹) kernel, exact for quadratics; the gradient is
  the exact derivative of the interpolant. On a Dirichlet grid the nodes beyond the outer layer
  repeat it; on a periodic grid they wrap.

The CPU compiles these bodies with ``numba.njit`` (:mod:`pbsolver.backends.cpu.sampling`); the
stacked engine's kernels and :mod:`pbsolver.backends.cuda.sampling` compile the same functions
with ``cuda.jit(device=True)`` (:func:`make_sample`, and :func:`tensor_lerp_node` for a coarse
potential at a finer grid's nodes). :func:`cubic_weights` and :func:`cubic_slopes` are plain
arithmetic, so the array code of :mod:`pbsolver.forces.interpolation` calls them on NumPy or
CuPy arrays too.
Importing this module imports no numba.
"""

from __future__ import annotations

import math


def cubic_weights(t):
    """Keys' cubic-convolution weights (a = −½) of the nodes at offsets −1, 0, 1, 2 from a cell.

    ``t`` in [0, 1] is the point's place in its cell (a float or an array). The weights sum
    to one, reproduce quadratics, and are continuous with continuous slopes as ``t`` crosses
    a node (C¹).
    """
    t2 = t * t
    t3 = t2 * t
    return (
        -0.5 * t3 + t2 - 0.5 * t,
        1.5 * t3 - 2.5 * t2 + 1.0,
        -1.5 * t3 + 2.0 * t2 + 0.5 * t,
        0.5 * t3 - 0.5 * t2,
    )


def cubic_slopes(t):
    """d/dt of :func:`cubic_weights` (per node unit)."""
    t2 = t * t
    return (
        -1.5 * t2 + 2.0 * t - 0.5,
        4.5 * t2 - 5.0 * t,
        -4.5 * t2 + 4.0 * t + 0.5,
        1.5 * t2 - t,
    )


def tensor_lerp_node(f, i0, tx, j0, ty, k0, tz):
    """``f`` trilinearly at the place ``t`` of the cell from node (i0, j0, k0), per axis.

    The cell's upper node is clamped to the grid (``min(i0 + 1, n − 1)``). The operations are
    those of three separable passes ``lo·(1 − t) + hi·t`` along x, then y, then z, in order, so
    a tensor grid of points gets the same bits as those passes.
    """
    nx, ny, nz = f.shape
    i1 = min(i0 + 1, nx - 1)
    j1 = min(j0 + 1, ny - 1)
    k1 = min(k0 + 1, nz - 1)
    v00 = f[i0, j0, k0] * (1.0 - tx) + f[i1, j0, k0] * tx
    v10 = f[i0, j1, k0] * (1.0 - tx) + f[i1, j1, k0] * tx
    v01 = f[i0, j0, k1] * (1.0 - tx) + f[i1, j0, k1] * tx
    v11 = f[i0, j1, k1] * (1.0 - tx) + f[i1, j1, k1] * tx
    w0 = v00 * (1.0 - ty) + v10 * ty
    w1 = v01 * (1.0 - ty) + v11 * ty
    return w0 * (1.0 - tz) + w1 * tz


def make_sample(jit):
    """The sampling bodies compiled by ``jit`` (``numba.njit`` or ``cuda.jit(device=True)``).

    Returns ``sample(phi, row, nx, ny, nz, hx, hy, hz, s0, s1, s2, periodic, cubic, out)``,
    which writes φ, ∂φ/∂x, ∂φ/∂y, ∂φ/∂z at one point into ``out[0:4]``:

    phi : array (rows, ny, nz)
        Node values; the grid's block starts at ``phi[row]`` (0 for a single grid; the block's
        first row in a stack of grids along the first axis).
    nx, ny, nz : int
        Nodes of the grid.
    hx, hy, hz : float
        Node spacing, Å.
    s0, s1, s2 : float
        The point in node units, ``(p − origin) / h`` per axis. A Dirichlet grid clamps them to
        the grid (callers check that points lie inside); a periodic grid wraps them.
    periodic : bool
        Wrap indices around.
    cubic : bool
        Keys' cubic convolution instead of trilinear weights (module docstring).

    Nodes of zero weight (and zero slope) are skipped, so that a node value of ±inf (a charge
    on a node) next to a point does not turn the result into NaN.
    """
    weights = jit(cubic_weights)
    slopes = jit(cubic_slopes)

    @jit
    def cell_of(s, n, periodic):
        """Node coordinate ``s`` on an axis of ``n`` nodes → (cell's first node, place t in it)."""
        if periodic:
            s = s % n
            i0 = min(int(math.floor(s)), n - 1)
        else:
            s = min(max(s, 0.0), n - 1.0)
            i0 = min(int(math.floor(s)), n - 2)
        return i0, s - i0

    @jit
    def node(i, n, periodic):
        """Node ``i`` of an axis of ``n``: wrapped, or the nearest node of a Dirichlet grid."""
        if periodic:
            return i % n
        return min(max(i, 0), n - 1)

    @jit
    def linear(phi, row, nx, ny, nz, hx, hy, hz, s0, s1, s2, periodic, out):
        """Trilinear φ, and the trilinear interpolant of the central-difference ∇φ."""
        i0, w0 = cell_of(s0, nx, periodic)
        j0, w1 = cell_of(s1, ny, periodic)
        k0, w2 = cell_of(s2, nz, periodic)
        val = 0.0
        gx = 0.0
        gy = 0.0
        gz = 0.0
        for ci in range(2):
            wi = w0 if ci == 1 else 1.0 - w0
            for cj in range(2):
                wj = w1 if cj == 1 else 1.0 - w1
                for ck in range(2):
                    wk = w2 if ck == 1 else 1.0 - w2
                    w = wi * wj * wk
                    if w == 0.0:
                        continue
                    i = node(i0 + ci, nx, periodic)
                    j = node(j0 + cj, ny, periodic)
                    k = node(k0 + ck, nz, periodic)
                    iu, id_ = node(i + 1, nx, periodic), node(i - 1, nx, periodic)
                    ju, jd = node(j + 1, ny, periodic), node(j - 1, ny, periodic)
                    ku, kd = node(k + 1, nz, periodic), node(k - 1, nz, periodic)
                    if periodic:
                        du, dv, dw = 2.0 * hx, 2.0 * hy, 2.0 * hz
                    else:  # one-sided on the outer layer
                        du, dv, dw = hx * (iu - id_), hy * (ju - jd), hz * (ku - kd)
                    val += w * phi[row + i, j, k]
                    gx += w * (phi[row + iu, j, k] - phi[row + id_, j, k]) / du
                    gy += w * (phi[row + i, ju, k] - phi[row + i, jd, k]) / dv
                    gz += w * (phi[row + i, j, ku] - phi[row + i, j, kd]) / dw
        out[0] = val
        out[1] = gx
        out[2] = gy
        out[3] = gz

    @jit
    def cubic(phi, row, nx, ny, nz, hx, hy, hz, s0, s1, s2, periodic, out):
        """Cubic-convolution φ and the exact gradient of that interpolant."""
        i0, t0 = cell_of(s0, nx, periodic)
        j0, t1 = cell_of(s1, ny, periodic)
        k0, t2 = cell_of(s2, nz, periodic)
        wx, wy, wz = weights(t0), weights(t1), weights(t2)
        dx, dy, dz = slopes(t0), slopes(t1), slopes(t2)
        val = 0.0
        gx = 0.0
        gy = 0.0
        gz = 0.0
        for a in range(4):
            i = node(i0 - 1 + a, nx, periodic)
            for b in range(4):
                j = node(j0 - 1 + b, ny, periodic)
                for c in range(4):
                    w = wx[a] * wy[b] * wz[c]
                    sx = dx[a] * wy[b] * wz[c]
                    sy = wx[a] * dy[b] * wz[c]
                    sz = wx[a] * wy[b] * dz[c]
                    if w == 0.0 and sx == 0.0 and sy == 0.0 and sz == 0.0:
                        continue
                    f = phi[row + i, j, node(k0 - 1 + c, nz, periodic)]
                    val += w * f
                    gx += sx * f
                    gy += sy * f
                    gz += sz * f
        out[0] = val
        out[1] = gx / hx
        out[2] = gy / hy
        out[3] = gz / hz

    @jit
    def sample(phi, row, nx, ny, nz, hx, hy, hz, s0, s1, s2, periodic, use_cubic, out):
        if use_cubic:
            cubic(phi, row, nx, ny, nz, hx, hy, hz, s0, s1, s2, periodic, out)
        else:
            linear(phi, row, nx, ny, nz, hx, hy, hz, s0, s1, s2, periodic, out)

    return sample
