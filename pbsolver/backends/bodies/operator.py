"""Plain-Python bodies of the operator's per-node formulas, compiled by each kernel set.

The CPU kernels (``numba.njit``) and the CUDA kernels (``numba.cuda.jit(device=True)``) call
these functions, compiled by :func:`compile_bodies`, instead of keeping a copy each; the
kernels keep only their indexing (3D indices on the CPU, flat indices on the GPU) and their
loops or launches. Bodies take the loaded values as scalars, so that each compiles, inlined,
to the arithmetic its kernel spelled out before.

The operator (see :mod:`pbsolver.operator`): at an unknown node ``s`` with neighbours ``n``,

* ``A x = diag·x_s − Σ_n c_{s,n} x_n`` with face coefficients ``c = ε_face/h²``;
* the stencil sum ``b_s + Σ_n c_{s,n} x_n``, added in the order −x, +x, −y, +y, −z, +z;
* the over-relaxed update ``x_s ← x_s + ω (sum/diag − x_s)`` (SOR colour passes, Jacobi);
* the residual ``sum − diag·x_s``;
* the right-hand side ``b_s = Σ_n (ε_{s,n} − ε_c)(φc_n − φc_s)/h² − κ̄²_s φc_s``;
* a face permittivity from the node map (arithmetic or harmonic rule).

Importing this module imports no numba. The bodies run as plain Python too (the tests call
them so).
"""

from __future__ import annotations

import types

import numpy as np


def wrap(i, n):
    """``i`` in ``[-1, n]`` moved into ``[0, n)``: a branch, not a modulo (emulated on GPUs)."""
    if i < 0:
        return i + n
    if i >= n:
        return i - n
    return i


def neighbours(i, n):
    """``(i − 1, i + 1)`` on an axis of ``n`` nodes, wrapping."""
    return wrap(i - 1, n), wrap(i + 1, n)


def midpoint_weight(lo, hi, i):
    """Restriction weight of fine node ``i`` beside a coarse node: ½ at a midpoint, else 0.

    ``lo[i]``, ``hi[i]`` are the coarse nodes fine node ``i`` interpolates from (equal where
    ``i`` is a coarse node itself).
    """
    return 0.5 if lo[i] != hi[i] else 0.0


def stencil_sum(b, cxm, xxm, cxp, xxp, cym, xym, cyp, xyp, czm, xzm, czp, xzp):
    """``b + Σ c·x_n`` over the six neighbours (−x, +x, −y, +y, −z, +z), in that order."""
    return b + cxm * xxm + cxp * xxp + cym * xym + cyp * xyp + czm * xzm + czp * xzp


def diagonal_sum(cxm, cxp, cym, cyp, czm, czp):
    """The diagonal ``Σ c`` of the six faces (+x first, as the operator adds them)."""
    return cxp + cxm + cyp + cym + czp + czm


def relax(old, s, diag, omega):
    """The over-relaxed update of a node: ``old + ω (s/diag − old)``."""
    return old + omega * (s / diag - old)


def residual(s, diag, x):
    """The residual ``b − A x`` of a node from its stencil sum ``s``: ``s − diag·x``."""
    return s - diag * x


#: How a :class:`~pbsolver.backends.ProblemOperator` reads its permittivities: three face maps,
#: or the node map with the arithmetic or the harmonic face rule.
FACE_MAPS, ARITHMETIC, HARMONIC = 0, 1, 2


def face_rule(lo, hi, mode):
    """The face between nodes of permittivity ``lo`` (lower index) and ``hi``, in float64.

    ``mode`` :data:`ARITHMETIC`: ``½(lo + hi)``; :data:`HARMONIC`: ``2 lo hi / (lo + hi)``,
    evaluated in the order :meth:`pbsolver.Problem.face_permittivities` does (same bits).
    """
    if mode == HARMONIC:
        return 2.0 * lo * hi / (lo + hi)
    return 0.5 * (lo + hi)


def face_term(eps_face, eps_c, phi_n, phi_s):
    """``(ε_face − ε_c)(φc_n − φc_s)``; zero, never 0·inf, where the face equals ε_c."""
    w = eps_face - eps_c
    if w == 0.0:
        return 0.0
    return w * (phi_n - phi_s)


def rhs_node(ps, eps_c, exm, pxm, exp_, pxp, eym, pym, eyp, pyp, ezm, pzm, ezp, pzp, hx2, hy2,
             hz2, k2):  # fmt: skip
    """The right-hand side of an unknown node (faces ``e*``, neighbour φ_c ``p*``, own ``ps``).

    Added in float64 from zero in the stencil's order; the κ̄² term only where κ̄² ≠ 0 (a
    charge on a node has φ_c = ±inf).
    """
    acc = 0.0
    acc += face_term(exm, eps_c, pxm, ps) / hx2
    acc += face_term(exp_, eps_c, pxp, ps) / hx2
    acc += face_term(eym, eps_c, pym, ps) / hy2
    acc += face_term(eyp, eps_c, pyp, ps) / hy2
    acc += face_term(ezm, eps_c, pzm, ps) / hz2
    acc += face_term(ezp, eps_c, pzp, ps) / hz2
    if k2 != 0.0:
        acc -= k2 * ps
    return acc


def faces_in_series(c, p, step, two):
    """Faces ``c[p]`` (and ``c[p + step]`` when ``two``) in series, ``1/Σ 1/c``; 0 if any is 0.

    In float64 whatever ``c``'s dtype: a coarse face from the fine faces along its axis. Two
    faces as ``ab/(a + b)``: one division instead of three (they are float64 divisions, many
    instructions each on a GPU, and the costliest part of a coarse node on the CPU).
    """
    a = np.float64(c[p])  # (numba types float() of a float32 as float32)
    if a == 0.0 or not two:
        return a
    b = np.float64(c[p + step])
    if b == 0.0:
        return 0.0
    return a * b / (a + b)


def restriction_weight(lo, hi, n, i):
    """Restriction weight of fine node ``i`` (in ``[-1, n]``, wrapped) beside a coarse node."""
    return midpoint_weight(lo, hi, wrap(i, n))


def coarse_node(cx, cy, cz, k2, has_k2, pi, pj, pk, two_x, two_y, two_z, lo_x, hi_x, lo_y,
                hi_y, lo_z, hi_z, nx, ny, nz):  # fmt: skip
    """``(cx, cy, cz, κ̄²)`` of the coarse node on fine node ``(pi, pj, pk)``, in float64.

    Flat C-ordered fine arrays of shape ``(nx, ny, nz)``. Each face: the fine faces along its
    axis in series (two where ``two_*`` says the coarse interval spans two fine ones), added
    across the two other axes with the restriction weights (1 on the line through the coarse
    node, ½ on midpoint lines); κ̄²: ``Pᵀ κ̄²`` (0 without salt, ``has_k2`` false).
    """
    sx, sy, sz, kk = 0.0, 0.0, 0.0, 0.0
    for dx in range(-1, 2):
        wx = 1.0 if dx == 0 else restriction_weight(lo_x, hi_x, nx, pi + dx)
        if wx == 0.0:
            continue
        i = wrap(pi + dx, nx)
        for dy in range(-1, 2):
            wy = 1.0 if dy == 0 else restriction_weight(lo_y, hi_y, ny, pj + dy)
            if wy == 0.0:
                continue
            j = wrap(pj + dy, ny)
            for dz in range(-1, 2):
                wz = 1.0 if dz == 0 else restriction_weight(lo_z, hi_z, nz, pk + dz)
                if wz == 0.0:
                    continue
                k = wrap(pk + dz, nz)
                p = (i * ny + j) * nz + k
                if has_k2:
                    kk += wx * wy * wz * k2[p]
                # a face along x lies on the line through (j, k): only dx = 0 carries it
                if dx == 0:
                    sx += wy * wz * faces_in_series(cx, p, ny * nz, two_x)
                if dy == 0:
                    sy += wx * wz * faces_in_series(cy, p, nz, two_y)
                if dz == 0:
                    sz += wx * wy * faces_in_series(cz, p, 1, two_z)
    return sx, sy, sz, kk


def stack_diagonal(cx, cy, cz, k2, q, I, J, K, my, mz, nx_block, stride, penalty):
    """Diagonal of coarse node ``q`` = (I, J, K) of a stack: ``penalty`` on a fixed node.

    Fixed: every block's outer layer and padding planes (``nx_block`` nodes of a block along x,
    ``stride`` planes a block); elsewhere ``Σ faces + κ̄²``.
    """
    local = I % stride
    if local == 0 or local >= nx_block - 1 or J == 0 or J == my - 1 or K == 0 or K == mz - 1:
        return penalty
    # the sum in float64 whatever the faces' dtype (numba types float() of a float32 as float32)
    faces = diagonal_sum(cx[q - mz * my], np.float64(cx[q]), cy[q - mz], cy[q], cz[q - 1], cz[q])
    return faces + k2[q]


def grid_diagonal(cx, cy, cz, k2, q, I, J, K, mx, my, mz, periodic):
    """Diagonal of coarse node ``q`` = (I, J, K) of one grid: 1 on a Dirichlet outer layer."""
    if not periodic and (I == 0 or I == mx - 1 or J == 0 or J == my - 1 or K == 0 or K == mz - 1):
        return 1.0
    xm = (wrap(I - 1, mx) * my + J) * mz + K
    ym = (I * my + wrap(J - 1, my)) * mz + K
    zm = (I * my + J) * mz + wrap(K - 1, mz)
    faces = diagonal_sum(cx[xm], np.float64(cx[q]), cy[ym], cy[q], cz[zm], cz[q])
    return faces + k2[q]


#: The bodies in dependency order (a body may call those before it).
BODIES = (wrap, neighbours, midpoint_weight, stencil_sum, diagonal_sum, relax, residual, face_rule,
          face_term, rhs_node, faces_in_series, restriction_weight, coarse_node, stack_diagonal,
          grid_diagonal)  # fmt: skip


def compile_bodies(jit):
    """Every body compiled by ``jit`` (``numba.njit(...)`` or ``cuda.jit(device=True)``).

    A body that calls another calls the other's compiled version: each is compiled from a copy
    of its code whose globals name the compiled bodies before it.

    Returns
    -------
    types.ModuleType
        The compiled bodies by name (a module, so that numba resolves ``B.relax`` in a kernel
        at compile time).
    """
    done = {}
    for body in BODIES:
        scope = dict(body.__globals__)
        scope.update(done)
        fn = types.FunctionType(body.__code__, scope, body.__name__, body.__defaults__)
        fn.__qualname__, fn.__doc__ = body.__qualname__, body.__doc__
        done[body.__name__] = jit(fn)
    compiled = types.ModuleType(f"{__name__}.compiled")
    compiled.__dict__.update(done)
    return compiled
