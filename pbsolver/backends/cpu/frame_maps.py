"""CPU kernels of the stacked frame engine's maps, assembly and sampling: ``prange`` loops.

The per-item bodies are those of :mod:`pbsolver.backends.bodies.frame_maps` (the CUDA kernels
of :func:`pbsolver.backends.frame_kernels.cuda_kernels` compile the same ones); these kernels
only loop over the work items. Module-level functions with ``cache=True``, as
:mod:`pbsolver.backends.cpu.frame_ses`: numba keeps them on disk (they took half a minute to
compile in every process when they were made inside a function). As for every cached numba
kernel, the cache follows this file's time stamp, not the bodies': clear ``__pycache__`` after
editing only the bodies.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from pbsolver.backends.bodies.frame_maps import CAP, make_frame_bodies

#: CPU fast-math flags of the direct sums: reassociation and FMAs, IEEE infinities kept
#: (with "ninf"/"nnan", LLVM dropped the infinity of an atom on a node and left a finite value).
KEEP_INFINITIES = {"reassoc", "contract", "nsz", "arcp", "afn"}
_JIT = {"cache": True, "nogil": True}
_PAR = {"cache": True, "nogil": True, "parallel": True}
# "numpy" error model: q / 0 = ±inf in the shared φ_c pair body, as on the GPU
_B = make_frame_bodies(njit(**_JIT), njit(**_JIT, fastmath=KEEP_INFINITIES, error_model="numpy"))
_lines_of, _edge_line, _ion_column, _coulomb_node, _on_node = (
    _B.lines_of,
    _B.edge_line,
    _B.ion_column,
    _B.coulomb_node,
    _B.on_node,
)
_debye_huckel_point, _assemble_node, _sample_point = (
    _B.debye_huckel_point,
    _B.assemble_node,
    _B.sample_point,
)


@njit(**_PAR)
def edges(out, pos, rad, axis, nx, ny, nz, stride, origin, h):
    """Edge fractions of the union of spheres on every (frame, line) along ``axis``; overflows."""
    bad = 0
    for item in prange(pos.shape[0] * _lines_of(axis, nx, ny, nz)):
        starts = np.empty(CAP)
        ends = np.empty(CAP)
        bad += _edge_line(out, pos, rad, item, axis, nx, ny, nz, stride, origin, h, starts,
                         ends)  # fmt: skip
    return bad


@njit(**_PAR)
def ion(cov, pos, rad, nx, ny, nz, stride, origin, h, subs):
    """Covered sub-line counts of every (frame, column) for the ion accessibility; overflows."""
    bad = 0
    for item in prange(pos.shape[0] * nx * ny):
        starts = np.empty(CAP)
        ends = np.empty(CAP)
        cand = np.empty(CAP, dtype=np.int32)
        bad += _ion_column(cov, pos, rad, item, nx, ny, nz, stride, origin, h, subs, starts,
                          ends, cand)  # fmt: skip
    return bad


@njit(**_PAR)
def coulomb(out, rel, q, scale, nx, ny, nz, stride, h):
    """The direct float32 φ_c sum (kJ mol⁻¹ e⁻¹) at every node of every frame."""
    nf = rel.shape[0]
    nn = nx * ny * nz
    tol2 = np.float32(_on_node(h))
    for item in prange(nf * nn):
        f = item // nn
        c = item - f * nn
        i = c // (ny * nz)
        j = (c // nz) % ny
        k = c % nz
        x, y, z = np.float32(i * h[0]), np.float32(j * h[1]), np.float32(k * h[2])
        out[f * stride + i, j, k] = scale * _coulomb_node(rel, q, f, x, y, z, None, tol2)


@njit(**_PAR)
def boundary(out, rel, q, radii, nodes, kappa, eps_out, eps_c, scale, stride, h):
    """The direct float32 "mdh" sum at the listed ``nodes`` of every frame (kJ mol⁻¹ e⁻¹)."""
    nf = rel.shape[0]
    nb = nodes.shape[0]
    for item in prange(nf * nb):
        f = item // nb
        p = item - f * nb
        i, j, k = nodes[p, 0], nodes[p, 1], nodes[p, 2]
        x, y, z = np.float32(i * h[0]), np.float32(j * h[1]), np.float32(k * h[2])
        v = _debye_huckel_point(rel, q, radii, f, x, y, z, kappa, eps_out, eps_c,
                               np.float32(1.0))  # fmt: skip
        out[f * stride + i, j, k] = scale * v


@njit(**_PAR)
def assemble(fx, fy, fz, phic, cov, g, nf, nx, ny, nz, stride, p, out, out32, unl):
    """The lifted stacked stencil (float64 and float32) and the unlifted faces, node by node."""
    _, ny_, nz_ = fx.shape
    for row in prange(nf * stride):
        f = row // stride
        i = row - f * stride
        for j in range(ny_):
            for k in range(nz_):
                _assemble_node(fx, fy, fz, phic, cov, g, row, f, i, j, k, nx, ny, nz, p,
                                out, out32, unl)  # fmt: skip


@njit(**_PAR)
def sample(phi, pos, nx, ny, nz, stride, origin, h, cubic, out):
    """φ and ∇φ at every (frame, atom) into ``out`` (``cubic``: cubic convolution)."""
    for item in prange(pos.shape[0] * pos.shape[1]):
        _sample_point(phi, pos, item, nx, ny, nz, stride, origin, h, cubic, out)


__all__ = ["KEEP_INFINITIES", "assemble", "boundary", "coulomb", "edges", "ion", "sample"]
