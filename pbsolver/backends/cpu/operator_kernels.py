"""Numba CPU kernels that read a problem's operator from its own maps (no stored float64 stencil).

A :class:`~pbsolver.backends.ProblemOperator` keeps the problem's permittivities (three face
maps, or the node map with its face rule) and κ̄²; these kernels form each node's six face
coefficients ``ε_face·(1/h²)`` and its diagonal on the fly, in float64, in the order the float64
stencil is built (:mod:`pbsolver.operator`), so that their residuals equal those of the stored
float64 stencil (``ε_face/h²``) to rounding: a product where six float64 divisions a node made
the residual kernels compute-bound (the CUDA operator kernels do the same). The same face source
assembles the right-hand side and the sweep stencil in one pass, without whole-grid float64
temporaries.

``e0, e1, e2`` are the face maps (x, y, z) for ``mode == FACE_MAPS``, else the node map (the
same array three times) and ``mode`` the face rule; ``k2`` is κ̄² when ``has_k2`` (else any
1×1×1 array). Determinism as in :mod:`pbsolver.backends.cpu.kernels`.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from pbsolver.backends.bodies.operator import FACE_MAPS
from pbsolver.backends.cpu.kernels import B, ordered_sum

_JIT = {"cache": True, "nogil": True, "boundscheck": False}


@njit(**_JIT, inline="always")
def faces_at(e0, e1, e2, mode, i, j, k, im, ip, jm, jp, km, kp):
    """The six face permittivities (−x, +x, −y, +y, −z, +z) of node (i, j, k), in float64."""
    if mode == FACE_MAPS:
        return (
            np.float64(e0[im, j, k]), np.float64(e0[i, j, k]),
            np.float64(e1[i, jm, k]), np.float64(e1[i, j, k]),
            np.float64(e2[i, j, km]), np.float64(e2[i, j, k]),
        )  # fmt: skip
    s = np.float64(e0[i, j, k])
    fxm = B.face_rule(np.float64(e0[im, j, k]), s, mode)
    fxp = B.face_rule(s, np.float64(e0[ip, j, k]), mode)
    fym = B.face_rule(np.float64(e0[i, jm, k]), s, mode)
    fyp = B.face_rule(s, np.float64(e0[i, jp, k]), mode)
    fzm = B.face_rule(np.float64(e0[i, j, km]), s, mode)
    fzp = B.face_rule(s, np.float64(e0[i, j, kp]), mode)
    return fxm, fxp, fym, fyp, fzm, fzp


@njit(**_JIT, inline="always")
def residual_at(x, b, e0, e1, e2, mode, k2, has_k2, hx2, hy2, hz2, i, j, k, im, ip, jm, jp, km,
                kp):  # fmt: skip
    """``b − A x`` at unknown (i, j, k) in float64, A's coefficients formed here."""
    fxm, fxp, fym, fyp, fzm, fzp = faces_at(e0, e1, e2, mode, i, j, k, im, ip, jm, jp, km, kp)
    ix, iy, iz = 1.0 / hx2, 1.0 / hy2, 1.0 / hz2
    cxm, cxp, cym, cyp, czm, czp = fxm * ix, fxp * ix, fym * iy, fyp * iy, fzm * iz, fzp * iz
    s = B.stencil_sum(
        np.float64(b[i, j, k]),
        cxm, np.float64(x[im, j, k]), cxp, np.float64(x[ip, j, k]),
        cym, np.float64(x[i, jm, k]), cyp, np.float64(x[i, jp, k]),
        czm, np.float64(x[i, j, km]), czp, np.float64(x[i, j, kp]),
    )  # fmt: skip
    d = B.diagonal_sum(cxm, cxp, cym, cyp, czm, czp)
    if has_k2:
        d += np.float64(k2[i, j, k])
    return B.residual(s, d, np.float64(x[i, j, k]))


@njit(**_JIT, inline="always")
def _residual_row(x, b, e0, e1, e2, mode, k2, has_k2, hx2, hy2, hz2, i, j, periodic, row):
    """``row[k]`` = b − A x at node (i, j, k) of an unknown row, 0 on its fixed ends.

    The inner nodes get their neighbours k ± 1 without a wrap, so that the loop vectorises;
    the two ends are wrapped (periodic) or fixed (Dirichlet).
    """
    nx, ny, nz = x.shape
    im, ip = B.neighbours(i, nx)
    jm, jp = B.neighbours(j, ny)
    for k in range(1, nz - 1):
        row[k] = residual_at(x, b, e0, e1, e2, mode, k2, has_k2, hx2, hy2, hz2, i, j, k, im,
                             ip, jm, jp, k - 1, k + 1)  # fmt: skip
    for k in (0, nz - 1):
        if periodic:
            km, kp = B.neighbours(k, nz)
            row[k] = residual_at(x, b, e0, e1, e2, mode, k2, has_k2, hx2, hy2, hz2, i, j, k,
                                 im, ip, jm, jp, km, kp)  # fmt: skip
        else:
            row[k] = 0.0


@njit(**_JIT, parallel=True)
def residual_and_sumsq(x, b, e0, e1, e2, mode, k2, has_k2, hx2, hy2, hz2, out, periodic):
    """``out = b − A x`` on the unknowns (zero on fixed nodes) and :func:`residual_sumsq`'s total.

    The squares are of the float64 residual (before ``out``'s rounding), added plane by plane
    in the order :func:`residual_sumsq` adds them: the same total, bit for bit.
    """
    nx, ny, nz = x.shape
    lo = 0 if periodic else 1
    partial = np.zeros(nx, dtype=np.float64)
    for i in prange(nx):
        row = np.empty(nz)
        acc = 0.0
        for j in range(ny):
            if not (lo <= i < nx - lo and lo <= j < ny - lo):
                for k in range(nz):
                    out[i, j, k] = 0
                continue
            _residual_row(x, b, e0, e1, e2, mode, k2, has_k2, hx2, hy2, hz2, i, j, periodic,
                          row)  # fmt: skip
            for k in range(nz):
                out[i, j, k] = row[k]
            for k in range(nz):  # in k order (a fixed end adds 0.0: no change)
                acc += row[k] * row[k]
        partial[i] = acc
    return ordered_sum(partial)


@njit(**_JIT)
def residual(x, b, e0, e1, e2, mode, k2, has_k2, hx2, hy2, hz2, out, periodic):
    """``out = b − A x`` on the unknowns (float64 arithmetic), zero on fixed nodes.

    :func:`residual_and_sumsq` without its total (the squares cost little beside the faces).
    """
    residual_and_sumsq(x, b, e0, e1, e2, mode, k2, has_k2, hx2, hy2, hz2, out, periodic)


@njit(**_JIT, parallel=True)
def residual_sumsq(x, b, e0, e1, e2, mode, k2, has_k2, hx2, hy2, hz2, periodic):
    """Σ (b − A x)² over the unknowns in float64 (one partial per plane, fixed-order sum)."""
    nx, ny, nz = x.shape
    lo = 0 if periodic else 1
    partial = np.zeros(nx, dtype=np.float64)
    for i in prange(lo, nx - lo):
        row = np.empty(nz)
        acc = 0.0
        for j in range(lo, ny - lo):
            _residual_row(x, b, e0, e1, e2, mode, k2, has_k2, hx2, hy2, hz2, i, j, periodic,
                          row)  # fmt: skip
            for k in range(nz):
                acc += row[k] * row[k]
        partial[i] = acc
    return ordered_sum(partial)


@njit(**_JIT, inline="always")
def _assemble_node(phi_c, e0, e1, e2, mode, k2, has_k2, eps_c, hx2, hy2, hz2, b, stencil, cx, cy,
                   cz, diag, i, j, k, im, ip, jm, jp, km, kp, inside):  # fmt: skip
    """:func:`assemble` at node (i, j, k), its neighbours given (``inside``: an unknown)."""
    fxm, fxp, fym, fyp, fzm, fzp = faces_at(e0, e1, e2, mode, i, j, k, im, ip, jm, jp, km, kp)
    if stencil:
        cxp, cyp, czp = fxp / hx2, fyp / hy2, fzp / hz2
        cx[i, j, k] = cxp
        cy[i, j, k] = cyp
        cz[i, j, k] = czp
        if inside:
            d = B.diagonal_sum(fxm / hx2, cxp, fym / hy2, cyp, fzm / hz2, czp)
            if has_k2:
                d += np.float64(k2[i, j, k])
            diag[i, j, k] = d
        else:
            diag[i, j, k] = 1.0
    if not inside:
        b[i, j, k] = 0.0
        return
    kk = np.float64(k2[i, j, k]) if has_k2 else 0.0
    b[i, j, k] = B.rhs_node(
        np.float64(phi_c[i, j, k]), eps_c,
        fxm, np.float64(phi_c[im, j, k]), fxp, np.float64(phi_c[ip, j, k]),
        fym, np.float64(phi_c[i, jm, k]), fyp, np.float64(phi_c[i, jp, k]),
        fzm, np.float64(phi_c[i, j, km]), fzp, np.float64(phi_c[i, j, kp]),
        hx2, hy2, hz2, kk,
    )  # fmt: skip


@njit(**_JIT, parallel=True)
def assemble(phi_c, e0, e1, e2, mode, k2, has_k2, eps_c, hx2, hy2, hz2, periodic, b, stencil,
             cx, cy, cz, diag):  # fmt: skip
    """The float64 right-hand side into ``b`` and, with ``stencil``, the faces and diagonal.

    ``b`` gets :func:`~pbsolver.backends.bodies.operator.rhs_node` on the unknowns, zero on
    fixed nodes. With ``stencil``: ``cx, cy, cz`` (any float dtype) get each node's +x, +y,
    +z face coefficient on every node, ``diag`` the float64 sum of the six plus κ̄² rounded
    once to its dtype on the unknowns, 1 on fixed nodes. A row's inner nodes get their
    neighbours k ± 1 without a wrap (so that the loop vectorises), its two ends wrapped.
    """
    nx, ny, nz = phi_c.shape
    lo = 0 if periodic else 1
    for i in prange(nx):
        im, ip = B.neighbours(i, nx)
        for j in range(ny):
            jm, jp = B.neighbours(j, ny)
            row_inside = lo <= i < nx - lo and lo <= j < ny - lo
            for k in range(1, nz - 1):
                _assemble_node(phi_c, e0, e1, e2, mode, k2, has_k2, eps_c, hx2, hy2, hz2, b,
                               stencil, cx, cy, cz, diag, i, j, k, im, ip, jm, jp, k - 1, k + 1,
                               row_inside)  # fmt: skip
            ends_inside = row_inside and periodic
            for k in (0, nz - 1):
                km, kp = B.neighbours(k, nz)
                _assemble_node(phi_c, e0, e1, e2, mode, k2, has_k2, eps_c, hx2, hy2, hz2, b,
                               stencil, cx, cy, cz, diag, i, j, k, im, ip, jm, jp, km, kp,
                               ends_inside)  # fmt: skip
