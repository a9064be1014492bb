"""φ_c and the "mdh" boundary values of the stacked frame engine on the CPU.

The CUDA frame kernels sum φ_c directly (atoms × nodes float32 pair terms, tiled in shared
memory), which the GPU does in a fraction of a millisecond. On the CPU that direct sum is the
engine's dearest map, so here each frame's φ_c is the map builders' own sum,
:func:`pbsolver.backends.cpu.maps.coulomb_sum` (the multilevel sum of
:mod:`pbsolver.backends.cpu.coulomb_fast` where it pays, in float64), written into the frame's
block of the stack: the engine's φ_c is then the general path's, value for value.

The Debye–Hückel boundary values reuse that φ_c as the general path's
:func:`pbsolver.molecule.maps.boundary_values` does: without salt the "mdh" sum is
(ε_c/ε_out − 1) φ_c on the outer layer (no sum at all); with salt it is the screened sum alone
(the float32 terms of the engine's boundary kernel with 1/ε_c = 0, over the charged atoms only,
the atoms in the outer loop so that all but the exponential vectorises) minus φ_c.

Module-level functions with ``cache=True``, like :mod:`pbsolver.backends.cpu.frame_ses`: numba
keeps them on disk.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from pbsolver.backends.bodies import maps as B
from pbsolver.backends.cpu import maps as CM

#: Fast-math that keeps IEEE infinities (those of the engine's direct sums).
_FM = {"reassoc", "contract", "nsz", "arcp", "afn"}
#: The "numpy" error model: an atom on a boundary node divides by zero into ±inf.
_PAR = {"cache": True, "nogil": True, "parallel": True, "error_model": "numpy", "fastmath": _FM}
_dh_term = B.make_point_sums(
    njit(cache=True, nogil=True), njit(cache=True, nogil=True, fastmath=_FM, error_model="numpy")
)["dh_term"]


def coulomb_frames(phic, pos, origin, q, scale, shape, spacing, stride, method="auto"):
    """φ_c of every frame into its block of the stack, by the map builders' sum.

    Parameters
    ----------
    phic : ndarray (B·stride, ny, nz)
        The stacked φ_c (kJ mol⁻¹ e⁻¹); frame f's node (i, j, k) is ``phic[f·stride + i, j, k]``.
        Padding planes are left as they are.
    pos : ndarray (B, N, 3)
        Atom positions, Å.
    origin : ndarray (B, 3)
        Each frame's grid origin, Å.
    q : ndarray (N,)
        Charges, e.
    scale : float
        k/ε_c (kJ mol⁻¹ Å e⁻²): φ_c = scale · Σ q_a / r_a.
    shape, spacing : 3 ints, 3 floats
        Every frame's grid (nodes; Å).
    stride : int
        Planes a frame in the stack.
    method : {"auto", "direct", "fast"}
        How :func:`~pbsolver.backends.cpu.maps.coulomb_sum` sums (the backend's option).
    """
    keep = np.asarray(q) != 0.0  # the direct pair term is 0/0 on a node for an uncharged atom
    qk = np.ascontiguousarray(q[keep], dtype=np.float64)
    nx = int(shape[0])
    for f in range(pos.shape[0]):
        if qk.size == 0:
            phic[f * stride : f * stride + nx] = 0.0
            continue
        phic[f * stride : f * stride + nx] = CM.coulomb_sum(
            shape, origin[f], spacing, np.ascontiguousarray(pos[f][keep]), qk, scale,
            method=method,
        )  # fmt: skip


def boundary_from_coulomb(out, phic, pos, origin, q, radii, nodes, kappa, eps_out, eps_c, scale,
                          stride, h):  # fmt: skip
    """The "mdh" values on the outer-layer ``nodes`` of every frame, from the stack's φ_c.

    Writes ``out[f·stride + i, j, k]`` for each node (i, j, k) of ``nodes`` (M, 3) and frame
    f: without salt (``kappa`` = 0) (ε_c/ε_out − 1) φ_c, with salt
    ``scale`` · Σ_a q_a e^{−κ(r − a_a)} / (ε_out (1 + κ a_a) r) − φ_c.

    Parameters
    ----------
    out, phic : ndarray (B·stride, ny, nz)
        The stacked boundary values and φ_c (kJ mol⁻¹ e⁻¹); ``phic`` with ε_c = ``eps_c``.
    pos, origin : ndarray (B, N, 3), (B, 3)
        Atom positions and each frame's grid origin, Å.
    q, radii : ndarray (N,)
        Charges (e) and the atoms' radii of closest approach a_a (Å, vdW plus ion radius).
    kappa, eps_out, eps_c, scale : float
        κ (Å⁻¹), ε_out, ε_c and k (kJ mol⁻¹ Å e⁻²).
    stride : int
        Planes a frame in the stack.
    h : ndarray (3,)
        Grid spacing, Å.
    """
    if kappa == 0.0:  # no sum: the positions are not read
        rel, qc, rc = np.zeros((pos.shape[0], 0, 3), np.float32), np.zeros(0, np.float32), None
    else:
        # only the charged atoms have terms; float32 positions relative to the frame's origin,
        # as the engine's other float32 sums
        keep = np.flatnonzero(np.asarray(q) != 0.0)
        rel = (pos[:, keep] - origin[:, None, :]).astype(np.float32)
        qc = np.asarray(q)[keep].astype(np.float32)
        rc = np.asarray(radii)[keep].astype(np.float32)
    _boundary(out, phic, rel, qc, qc if rc is None else rc, nodes, float(kappa), float(eps_out),
              float(eps_c), float(scale), int(stride), h)  # fmt: skip


#: Boundary nodes a work item of the screened sum: the atoms run outside, these nodes inside
#: (contiguous float32 coordinates, so that all but the exponential vectorises).
NODE_BLOCK = 256


@njit(**_PAR)
def _boundary(out, phic, rel, q, radii, nodes, kappa, eps_out, eps_c, scale, stride, h):
    nf = rel.shape[0]
    nb = nodes.shape[0]
    if kappa == 0.0:
        ratio = eps_c / eps_out - 1.0  # float64, as the general path's
        for item in prange(nf * nb):
            f = item // nb
            p = item - f * nb
            row = f * stride + nodes[p, 0]
            out[row, nodes[p, 1], nodes[p, 2]] = ratio * phic[row, nodes[p, 1], nodes[p, 2]]
        return
    # the screened sum in float32 terms (float64 sums); 1/ε_c = 0 leaves the screened terms
    k32, e32, zero, one = np.float32(kappa), np.float32(eps_out), np.float32(0.0), np.float32(1.0)
    nblk = (nb + NODE_BLOCK - 1) // NODE_BLOCK
    for item in prange(nf * nblk):
        f = item // nblk
        lo = (item - f * nblk) * NODE_BLOCK
        n = min(nb, lo + NODE_BLOCK) - lo
        xs = np.empty(n, dtype=np.float32)
        ys = np.empty(n, dtype=np.float32)
        zs = np.empty(n, dtype=np.float32)
        acc = np.zeros(n)
        for s in range(n):
            xs[s] = np.float32(nodes[lo + s, 0] * h[0])
            ys[s] = np.float32(nodes[lo + s, 1] * h[1])
            zs[s] = np.float32(nodes[lo + s, 2] * h[2])
        for a in range(q.shape[0]):
            ax, ay, az, qa, ra = rel[f, a, 0], rel[f, a, 1], rel[f, a, 2], q[a], radii[a]
            for s in range(n):
                acc[s] += _dh_term(xs[s] - ax, ys[s] - ay, zs[s] - az, qa, ra, k32, e32, zero,
                                   one)  # fmt: skip
        for s in range(n):
            i, j, k = nodes[lo + s, 0], nodes[lo + s, 1], nodes[lo + s, 2]
            row = f * stride + i
            out[row, j, k] = scale * acc[s] - phic[row, j, k]


__all__ = ["boundary_from_coulomb", "coulomb_frames"]
