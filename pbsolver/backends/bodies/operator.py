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


#: The bodies in dependency order (a body may call those before it).
BODIES = (wrap, neighbours, midpoint_weight, stencil_sum, diagonal_sum, relax, residual, face_rule,
          face_term, rhs_node)  # fmt: skip


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
