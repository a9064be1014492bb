"""Coarse multigrid operators from fine face coefficients: the array code every backend can run.

A coarse level's operator is 7-point, built in float64 from the level above, approximating the
Galerkin product ``Pᵀ A P`` (so it carries its scaling and the cycle stays symmetric):

* a coarse face along axis ``a`` joins two coarse nodes one or two fine faces apart: the fine
  faces along each fine line are added in series (harmonic: ``1 / Σ 1/c``), since flux crosses
  them one after the other — this is what keeps the coarse operator right across an ε 1:80
  interface;
* those line conductances are then added in parallel across the two other axes with the
  restriction weights (1 on the line through the coarse node, ½ on midpoint lines) — the
  Alcouffe / APBS style "harmonic along, arithmetic across" averaging;
* κ̄² is lumped: ``κ̄²_H = Pᵀ κ̄²``.

A zero fine face in series gives a zero coarse face, so the blocks of a stack (whose faces
between blocks are zero) stay apart on every level. Fixed nodes of a stack's coarse level
(every block's outer layer and padding planes) get the diagonal :data:`PENALTY`: the smoother
then leaves their correction at ``r/PENALTY`` ≈ 0, while the faces joining them to the block's
unknowns still count in the unknowns' diagonals, as the Dirichlet boundary requires.

The functions work on NumPy and CuPy arrays alike (``xp``); :func:`rebuild_levels` is the
default of :meth:`pbsolver.backends.Backend.coarse_operators`.
"""

from __future__ import annotations

import numpy as np

from pbsolver.arrays import array_module

#: Diagonal of a stack's coarse fixed nodes (block outer layers and padding): large enough that
#: the smoother leaves their correction at ~1e-30 of their residual, small enough for float32.
PENALTY = 1e30


def _take(a, idx, axis, xp):
    return xp.take(a, xp.asarray(idx), axis=axis)


def _expand(v, axis, xp):
    shape = [1, 1, 1]
    shape[axis] = -1
    return xp.asarray(v).reshape(shape)


def _take64(a, idx, axis, xp):
    """The planes ``idx`` of ``a`` along ``axis``, in float64.

    Taken before any arithmetic, and converted after: a float32 fine level (the solve's own
    faces) is never copied whole to float64, while every value is the same as if it had been.
    """
    return xp.asarray(_take(a, idx, axis, xp), dtype=xp.float64)


def aggregate(a, ax, axis: int, xp=np):
    """``Pᵀ`` along one axis: ``out[I] = Σ_d w_d[I] a[pos[I] + d]``, ``d ∈ {-1, 0, 1}``.

    ``a`` may be float32 or float64; the result is float64. Computed in place on the taken
    planes (at most two arrays of the result's size at a time).
    """
    w = ax.weights
    n = ax.n_fine
    out = _take64(a, ax.pos, axis, xp)
    for col, d in ((0, -1), (2, 1)):
        if w[:, col].any():
            term = _take64(a, (ax.pos + d) % n, axis, xp)
            term *= _expand(w[:, col], axis, xp)
            out += term
            del term
    return out


def series(c, ax, axis: int, xp=np):
    """Fine faces between consecutive coarse nodes along ``axis`` combined in series.

    ``c`` may be float32 or float64; the sum of inverses is formed in float64 from the planes
    it needs, in place (at most two arrays of the result's size at a time).
    """
    n = ax.n_fine
    s = _take64(c, ax.pos, axis, xp)
    xp.divide(1.0, s, out=s)
    two = ax.gap == 2
    if two.any():
        second = _take64(c, (ax.pos + 1) % n, axis, xp)
        xp.divide(1.0, second, out=second)
        if not two.all():
            # zeroed, not weighted by 0/1: a zero face (inverse inf) beyond a one-interval gap
            # must not turn into 0·inf = nan (stacked blocks have zero faces between them)
            planes = [slice(None)] * 3
            planes[axis] = xp.asarray(np.flatnonzero(~two))
            second[tuple(planes)] = 0.0
        s += second
        del second
    xp.divide(1.0, s, out=s)
    return s


def restrict_field(a, axes, xp=np):
    """``Pᵀ a`` in all three axes (used for κ̄²; a NumPy/CuPy reference of the kernel)."""
    for axis, ax in enumerate(axes):
        a = aggregate(a, ax, axis, xp)
    return a


def coarse_coefficients(cx, cy, cz, kappa2, axes, xp=np):
    """Coarse face coefficients and κ̄² approximating ``Pᵀ A P`` with a 7-point stencil.

    Parameters
    ----------
    cx, cy, cz : arrays (fine shape), float32 or float64
        Fine face coefficients (float32 ones are converted plane by plane, as needed).
    kappa2 : array or None
        Fine κ̄² (None: no salt).
    axes : tuple of 3 AxisCoarsening

    Returns
    -------
    (cx, cy, cz, kappa2) on the coarse shape
    """
    out = []
    for axis, c in enumerate((cx, cy, cz)):
        c = series(c, axes[axis], axis, xp)
        for other in range(3):
            if other != axis:
                c = aggregate(c, axes[other], other, xp)
        out.append(c)
    k2 = None if kappa2 is None else restrict_field(kappa2, axes, xp)
    return (*out, k2)


def diagonal(cx, cy, cz, kappa2, periodic, xp):
    d = cx + xp.roll(cx, 1, axis=0) + cy + xp.roll(cy, 1, axis=1) + cz + xp.roll(cz, 1, axis=2)
    if kappa2 is not None:
        d = d + kappa2
    if not periodic:
        d[0], d[-1] = 1.0, 1.0
        d[:, 0], d[:, -1] = 1.0, 1.0
        d[:, :, 0], d[:, :, -1] = 1.0, 1.0
    return d


def fixed_nodes(shape, nx: int, stride: int, xp=np):
    """Boolean mask of a stack's fixed nodes: every block's outer layer and padding planes."""
    total, ny, nz = shape
    local = xp.arange(total) % stride
    fixed_x = (local == 0) | (local >= nx - 1)
    mask = xp.zeros(shape, dtype=bool)
    mask |= fixed_x[:, None, None]
    mask[:, 0, :] = mask[:, -1, :] = True
    mask[:, :, 0] = mask[:, :, -1] = True
    return mask


def rebuild_levels(inputs, levels):
    """Write every coarse level's (cx, cy, cz, diag) from the fine float64 ``inputs``.

    Parameters
    ----------
    inputs : 4 arrays
        The finest level's face coefficients (x, y, z) and κ̄² (or None), float32 or float64
        (the coarse levels are computed in float64 either way).
    levels : sequence of CoarseLevel
        From the finest coarse level down (see :class:`pbsolver.backends.CoarseLevel`).

    Returns
    -------
    tuple of 4 arrays
        The coarsest level's float64 (cx, cy, cz, κ̄² or None).
    """
    cx, cy, cz, k2 = inputs
    xp = array_module(cx)
    for level in levels:
        plan = level.plan
        with np.errstate(divide="ignore"):  # a zero face in series gives a zero face
            cx, cy, cz, k2 = coarse_coefficients(cx, cy, cz, k2, plan.axes, xp)
        diag = diagonal(cx, cy, cz, k2, plan.periodic, xp)
        if plan.blocks is not None:
            diag[fixed_nodes(diag.shape, *plan.blocks, xp)] = PENALTY
        st = level.stencil
        for dst, src in zip((st.cx, st.cy, st.cz, st.diag), (cx, cy, cz, diag), strict=True):
            if isinstance(dst, xp.ndarray):
                xp.copyto(dst, src, casting="unsafe")  # one conversion and copy
            else:  # numba device arrays (the CUDA simulator's layer)
                dst[...] = src.astype(dst.dtype)
    return cx, cy, cz, k2


def build_with_kernels(inputs, levels, kernels, view, launch):
    """Write every coarse level with the per-node kernels, level by level; the last's work.

    The kernel path of :meth:`pbsolver.backends.Backend.coarse_operators` (backends whose
    ``COARSE_KERNELS`` is set give each level ``work`` arrays and ``two`` flags).

    Parameters
    ----------
    inputs : 4 arrays
        The finest level's faces (x, y, z) and κ̄² (or None).
    levels : sequence of CoarseLevel
        From the finest coarse level down, with ``work`` and ``two``.
    kernels : module
        ``coarse_faces``, ``coarse_diagonal`` and ``grid_diagonal`` (the CUDA kernels of
        :mod:`pbsolver.backends.cuda.coarse_kernels` or the CPU's of
        :mod:`pbsolver.backends.cpu.coarse_kernels`: one signature).
    view : callable
        An array as the kernels take it (flat, C-ordered).
    launch : callable
        ``launch(kernel, items, *args)``: run ``kernel`` over ``items`` coarse nodes.

    Returns
    -------
    tuple of 4 arrays
        The coarsest level's ``work`` (cx, cy, cz, κ̄²).
    """
    fine = inputs
    for lv in levels:
        tr, st = lv.transfer, lv.stencil
        n = int(np.prod(st.shape))
        per_axis = []
        for a in range(3):
            per_axis += [view(tr.pos[a]), view(tr.lo[a]), view(tr.hi[a]), view(lv.two[a])]
        has_k2 = fine[3] is not None  # no salt: a stand-in the kernel does not read
        k2 = fine[3] if has_k2 else lv.work[3]
        launch(
            kernels.coarse_faces, n, *(view(a) for a in fine[:3]), view(k2), int(has_k2),
            tuple(view(a) for a in lv.work), (view(st.cx), view(st.cy), view(st.cz)), *per_axis,
            tr.fine_shape, tr.coarse_shape,
        )  # fmt: skip
        work = tuple(view(a) for a in lv.work)
        if lv.plan.blocks is not None:
            launch(kernels.coarse_diagonal, n, *work, view(st.diag), st.shape, *lv.plan.blocks,
                   PENALTY)  # fmt: skip
        else:
            launch(kernels.grid_diagonal, n, *work, view(st.diag), st.shape, int(st.periodic))
        fine = lv.work
    return levels[-1].work


__all__ = [
    "PENALTY",
    "aggregate",
    "build_with_kernels",
    "coarse_coefficients",
    "diagonal",
    "fixed_nodes",
    "rebuild_levels",
    "restrict_field",
    "series",
]
