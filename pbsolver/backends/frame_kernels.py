"""Kernels of the stacked frame engine (:mod:`pbsolver.md.engine`): B frames' maps in one launch.

Every per-line and per-node body is written once, as plain Python, and compiled twice: by
``numba.njit`` for the CPU kernels (``prange`` over the work items) and by
``numba.cuda.jit(device=True)`` for the CUDA kernels (one thread per work item). The two sets
therefore run the same arithmetic (except the direct sums φ_c and the boundary values: their
CUDA kernels stage atoms in shared memory, the same float32 terms summed per tile of 128);
tests compare the CPU set with the general map builders of :mod:`pbsolver.molecule.maps` and
the CUDA set with the CPU set (under the simulator in CI).

Layout: B frames of an ``(nx, ny, nz)`` grid are stacked along x with ``stride`` planes a frame
(``nx`` rounded up to even, so that every block's red–black colouring is its own grid's; see
:mod:`pbsolver.solving.batched`). Frame ``f``'s node ``(i, j, k)`` is stacked node
``(f·stride + i, j, k)``; its grid origin is ``origin[f]``. Positions are ``(B, N, 3)``.

Unlike the general builders, the vdW lines scan every atom instead of 2D bins: at MD sizes (a
thousand atoms, 65³) that is a few hundred thousand distance tests a frame, cheaper than
building bins. A line that meets more than ``CAP`` spheres sets the overflow flag and the engine
raises (no silent fallback). The SES kernels (``ses``: neighbour lists, SES features, lines over
(frame, line) pairs, smoothing; orchestrated by :mod:`pbsolver.md.ses`) do use per-frame 2D
bins, those of the general builder, so that their edge fractions are the general path's; their
CPU set is :mod:`pbsolver.backends.cpu.frame_ses`.
"""

from __future__ import annotations

import functools
import math
import os
from types import SimpleNamespace

import numpy as np

from pbsolver.backends.bodies import maps as maps_bodies
from pbsolver.backends.bodies.frames import make_frame_ses
from pbsolver.backends.bodies.lines import compile_lines
from pbsolver.backends.bodies.sampling import sample_body

#: numba.cuda, imported by :func:`cuda_kernels` (numba-cuda is optional: the CPU kernels must
#: import without it). A module global, because the simulator swaps it inside kernels.
cuda = None

#: Intervals one grid line (or ion-accessibility column) may hold.
CAP = 256
#: Threads a CUDA block.
THREADS = 128
#: Local capacities of the CUDA SES kernels (those of :mod:`pbsolver.backends.cuda.maps`'s,
#: whose SES line body they share): spheres a line meets, exposed probe candidates near a line,
#: and arc ends of a circle (2 × 192 neighbours + 2; the arc kernels are cuda.maps' own). The
#: CPU kernels size theirs per item.
SES_SPHERES = 384
SES_CANDIDATES = 384
SES_NEIGHBOURS = 192
SES_ARC_BUFFER = 2 * SES_NEIGHBOURS + 2
#: Nodes of the CUDA φ_c kernel a thread (THREADS apart): one shared-memory atom read serves
#: this many pairs.
COULOMB_NODES = 4
#: ... and from this many frames a call, COULOMB_NODES_WIDE: fewer, longer threads. On the H200
#: (``benchmarks/coulomb_kernel.py``, 1,252 atoms, 65³) 4 nodes were fastest for one frame
#: (0.236 ms against 0.255 with 8) and 8 for 64 frames (0.148 ms a frame against 0.176).
COULOMB_WIDE_FROM = 8
COULOMB_NODES_WIDE = 8


def coulomb_nodes(frames: int) -> int:
    """Nodes a thread of the CUDA φ_c kernel for a call of ``frames`` frames."""
    return COULOMB_NODES_WIDE if frames >= COULOMB_WIDE_FROM else COULOMB_NODES


#: CPU fast-math flags of the direct sums: reassociation and FMAs, IEEE infinities kept.
KEEP_INFINITIES = {"reassoc", "contract", "nsz", "arcp", "afn"}
#: Threads a block of the per-line kernels: few lines per block, so that small batches still
#: spread over all the multiprocessors (4,225 lines of a 65³ frame fill 33 blocks of 128).
LINE_THREADS = 32


def _bodies(jit, fast):
    """The shared bodies compiled by ``jit`` (numba.njit or cuda.jit(device=True)).

    ``fast`` is the same compiler with fast-math, for the float32 direct sums.
    """
    sort_merge, accumulate = compile_lines(jit)
    chord = jit(maps_bodies.chord_body)
    face_eps = jit(maps_bodies.face_eps_body)
    sums = maps_bodies.make_point_sums(jit, fast)
    coulomb_node, dh_term = sums["coulomb_node"], sums["dh_term"]
    debye_huckel_point = sums["debye_huckel_node"]
    on_node = jit(maps_bodies.on_node_tol2)
    sample = jit(sample_body)
    ses = make_frame_ses(jit, sort_merge, accumulate)
    lines_of = ses.lines_of
    line_place = ses.line_place

    @jit
    def stack_node(item, stride, ny_, nz_):
        """Work item ``item`` over a stack's nodes as (row, frame, frame's i, j, k)."""
        k = item % nz_
        j = (item // nz_) % ny_
        row = item // (ny_ * nz_)
        f = row // stride
        return row, f, row - f * stride, j, k

    @jit
    def sample_point(phi, pos, item, nx, ny, nz, stride, origin, h, out):
        """φ and ∇φ at work item ``item`` = (frame f, atom a) into ``out[f, a]``."""
        na = pos.shape[1]
        f = item // na
        a = item - f * na
        sample(phi, f * stride, nx, ny, nz, h[0], h[1], h[2], (pos[f, a, 0] - origin[f, 0]) / h[0],
               (pos[f, a, 1] - origin[f, 1]) / h[1], (pos[f, a, 2] - origin[f, 2]) / h[2], False,
               out[f, a])  # fmt: skip

    @jit
    def edge_line(out, pos, rad, item, axis, nx, ny, nz, stride, origin, h, starts, ends):
        """Union-of-spheres coverage of the edges of work item ``item`` = (frame, grid line).

        Returns 1 on overflow.
        """
        f, iu, iv, u, v, nbins = line_place(item, axis, nx, ny, nz, origin, h)
        a1 = 1 if axis == 0 else 0
        a2 = 1 if axis == 2 else 2
        n = 0
        for a in range(rad.shape[0]):
            n = chord(starts, ends, n, pos[f, a, a1] - u, pos[f, a, a2] - v, pos[f, a, axis],
                      rad[a])  # fmt: skip
            if n < 0:
                return 1
        n = sort_merge(starts, ends, n)
        for s in range(n):
            accumulate(out, axis, f * stride, iu, iv, starts[s], ends[s], origin[f, axis],
                       h[axis], nbins)  # fmt: skip
        return 0

    @jit
    def ion_column(cov, pos, rad, item, nx, ny, nz, stride, origin, h, subs, starts, ends, cand):
        """Covered share of each cell of work item ``item`` = (frame f, column (i, j)).

        Sampled at subs² lines along z; returns 1 on overflow.
        """
        nl = nx * ny
        f = item // nl
        c = item - f * nl
        i = c // ny
        j = c - i * ny
        x = origin[f, 0] + i * h[0]
        y = origin[f, 1] + j * h[1]
        m = 0
        for a in range(rad.shape[0]):  # atoms whose disc reaches the column's cell
            dx = abs(pos[f, a, 0] - x) - 0.5 * h[0]
            dy = abs(pos[f, a, 1] - y) - 0.5 * h[1]
            dx = dx if dx > 0.0 else 0.0
            dy = dy if dy > 0.0 else 0.0
            r = rad[a]
            if dx * dx + dy * dy < r * r:
                if m >= cand.shape[0]:
                    return 1
                cand[m] = a
                m += 1
        t0 = origin[f, 2] - 0.5 * h[2]
        for sa in range(subs):
            u = x + ((sa + 0.5) / subs - 0.5) * h[0]
            for sb in range(subs):
                v = y + ((sb + 0.5) / subs - 0.5) * h[1]
                n = 0
                for c in range(m):
                    a = cand[c]
                    n = chord(starts, ends, n, pos[f, a, 0] - u, pos[f, a, 1] - v, pos[f, a, 2],
                              rad[a])  # fmt: skip
                n = sort_merge(starts, ends, n)
                for s in range(n):
                    accumulate(cov, 2, f * stride, i, j, starts[s], ends[s], t0, h[2], nz)
        return 0

    @jit
    def flux(eps, eps_c, h2, pn, ps):
        """(ε − ε_c)(φc_n − φc_s)/h²; exactly zero where ε = ε_c (even with φc = ±inf)."""
        if eps == eps_c:
            return 0.0
        return (eps - eps_c) / h2 * (pn - ps)

    @jit
    def unlifted_node(fx, fy, fz, cov, row, i, j, k, nx, ny, nz, p, unl):
        """A block's own faces (those to its outer layer too) and κ̄² at one node, into ``unl``.

        What a stacked multigrid hierarchy builds its coarse operators from; zero on padding
        planes and for faces leaving the block.
        """
        if i >= nx:
            for a in range(4):
                unl[a][row, j, k] = 0.0
            return
        e_in, e_out = p[3], p[4]
        c0 = face_eps(min(max(fx[row, j, k], 0.0), 1.0), e_in, e_out) / p[0]
        c1 = face_eps(min(max(fy[row, j, k], 0.0), 1.0), e_in, e_out) / p[1]
        c2 = face_eps(min(max(fz[row, j, k], 0.0), 1.0), e_in, e_out) / p[2]
        unl[0][row, j, k] = c0 if i < nx - 1 else 0.0
        unl[1][row, j, k] = c1 if j < ny - 1 else 0.0
        unl[2][row, j, k] = c2 if k < nz - 1 else 0.0
        k2 = 0.0
        if p[8] != 0.0:
            k2 = p[6] * min(max(1.0 - cov[row, j, k] * p[7], 0.0), 1.0)
        unl[3][row, j, k] = k2

    @jit
    def assemble_node(fx, fy, fz, phic, cov, g, row, f, i, j, k, nx, ny, nz, p, out, out32, unl):
        """Lifted stacked stencil at one node: out[0..4] = cx, cy, cz, diag, b (and float32).

        ``p`` = (h²x, h²y, h²z, ε_in, ε_out, ε_c, κ̄²_bulk, 1/subs², has κ̄²). Also writes the
        node's unlifted faces and κ̄² into ``unl`` (:func:`unlifted_node`).
        """
        unlifted_node(fx, fy, fz, cov, row, i, j, k, nx, ny, nz, p, unl)
        cx, cy, cz, dg, bb = out[0], out[1], out[2], out[3], out[4]
        if i >= nx or i == 0 or i == nx - 1 or j == 0 or j == ny - 1 or k == 0 or k == nz - 1:
            cx[row, j, k] = 0.0
            cy[row, j, k] = 0.0
            cz[row, j, k] = 0.0
            dg[row, j, k] = 1.0
            bb[row, j, k] = 0.0
            out32[0][row, j, k] = 0.0
            out32[1][row, j, k] = 0.0
            out32[2][row, j, k] = 0.0
            out32[3][row, j, k] = 1.0
            out32[4][row, j, k] = 0.0
            return
        h2x, h2y, h2z, e_in, e_out, e_c = p[0], p[1], p[2], p[3], p[4], p[5]
        exp_ = face_eps(min(max(fx[row, j, k], 0.0), 1.0), e_in, e_out)
        exm = face_eps(min(max(fx[row - 1, j, k], 0.0), 1.0), e_in, e_out)
        eyp = face_eps(min(max(fy[row, j, k], 0.0), 1.0), e_in, e_out)
        eym = face_eps(min(max(fy[row, j - 1, k], 0.0), 1.0), e_in, e_out)
        ezp = face_eps(min(max(fz[row, j, k], 0.0), 1.0), e_in, e_out)
        ezm = face_eps(min(max(fz[row, j, k - 1], 0.0), 1.0), e_in, e_out)
        k2 = 0.0
        if p[8] != 0.0:
            acc = 1.0 - cov[row, j, k] * p[7]
            k2 = p[6] * min(max(acc, 0.0), 1.0)
        ps = phic[row, j, k]
        b = (
            flux(exp_, e_c, h2x, phic[row + 1, j, k], ps)
            + flux(exm, e_c, h2x, phic[row - 1, j, k], ps)
            + flux(eyp, e_c, h2y, phic[row, j + 1, k], ps)
            + flux(eym, e_c, h2y, phic[row, j - 1, k], ps)
            + flux(ezp, e_c, h2z, phic[row, j, k + 1], ps)
            + flux(ezm, e_c, h2z, phic[row, j, k - 1], ps)
        )
        if k2 != 0.0:
            b -= k2 * ps
        # fixed neighbours on the outer layer move to the right-hand side ("lifting")
        if i == nx - 2:
            b += exp_ / h2x * g[row + 1, j, k]
        if i == 1:
            b += exm / h2x * g[row - 1, j, k]
        if j == ny - 2:
            b += eyp / h2y * g[row, j + 1, k]
        if j == 1:
            b += eym / h2y * g[row, j - 1, k]
        if k == nz - 2:
            b += ezp / h2z * g[row, j, k + 1]
        if k == 1:
            b += ezm / h2z * g[row, j, k - 1]
        c0 = exp_ / h2x if i < nx - 2 else 0.0
        c1 = eyp / h2y if j < ny - 2 else 0.0
        c2 = ezp / h2z if k < nz - 2 else 0.0
        d = (exp_ + exm) / h2x + (eyp + eym) / h2y + (ezp + ezm) / h2z + k2
        cx[row, j, k] = c0
        cy[row, j, k] = c1
        cz[row, j, k] = c2
        dg[row, j, k] = d
        bb[row, j, k] = b
        out32[0][row, j, k] = c0
        out32[1][row, j, k] = c1
        out32[2][row, j, k] = c2
        out32[3][row, j, k] = d
        out32[4][row, j, k] = b

    return SimpleNamespace(
        on_node=on_node,
        lines_of=lines_of,
        edge_line=edge_line,
        ion_column=ion_column,
        coulomb_node=coulomb_node,
        debye_huckel_point=debye_huckel_point,
        dh_term=dh_term,
        assemble_node=assemble_node,
        stack_node=stack_node,
        sample_point=sample_point,
        ses=ses,
    )


def _kernel_set(edges, ion, coulomb, boundary, assemble, sample, flags, coulomb_for,
                on_nodes=None, coulomb_map=None, boundary_map=None, **extra):  # fmt: skip
    """One device's kernels, as the engine launches them.

    ``flags``: the line kernels raise an overflow flag (an extra argument) instead of returning
    a count; ``coulomb_for(nf)``: (the φ_c kernel, nodes a work item) for a call of nf frames;
    ``on_nodes``: None where the φ_c kernel itself makes a node within
    :data:`~pbsolver.backends.bodies.maps.ON_NODE` of an atom ±inf, else the kernel (one work
    item a frame's atom) that does so after it. ``coulomb_map``: None, or a host function that
    writes every frame's φ_c map itself instead of ``coulomb_for``'s kernel
    (:func:`pbsolver.backends.cpu.frame_coulomb.coulomb_frames`' arguments, the method bound);
    ``boundary_map``: None, or the "mdh" kernel that reads that φ_c
    (:func:`pbsolver.backends.cpu.frame_coulomb.boundary_from_coulomb`) instead of
    ``boundary``'s full sum.
    """
    return SimpleNamespace(
        edges=edges, ion=ion, coulomb=coulomb, boundary=boundary, assemble=assemble,
        sample=sample, flags=flags, coulomb_for=coulomb_for, on_nodes=on_nodes,
        coulomb_map=coulomb_map, boundary_map=boundary_map, **extra,
    )  # fmt: skip


# ---------------------------------------------------------------------- CPU kernels
_CPU = None
_CPU_BY_METHOD = {}


def cpu_kernels(coulomb: str = "auto"):
    """The CPU kernels (numba ``parallel`` loops over work items), compiled on first use.

    Each frame's φ_c map is the map builders' sum (``coulomb_map``, summed as ``coulomb``
    says: "auto", "direct" or "fast", :func:`pbsolver.backends.cpu.maps.coulomb_sum`), and the
    "mdh" boundary values are formed from it (``boundary_map``); the direct float32 kernels
    ``coulomb`` and ``boundary`` remain (the latter for warm-start estimates).
    """
    from pbsolver.backends.cpu.coulomb_fast import check_method

    check_method(coulomb)
    if coulomb not in _CPU_BY_METHOD:
        from pbsolver.backends.cpu import frame_coulomb

        base = vars(_cpu_base()).copy()
        base["coulomb_map"] = functools.partial(frame_coulomb.coulomb_frames, method=coulomb)
        base["boundary_map"] = frame_coulomb.boundary_from_coulomb
        _CPU_BY_METHOD[coulomb] = SimpleNamespace(**base)
    return _CPU_BY_METHOD[coulomb]


def _cpu_base():
    """The compiled CPU kernel set, without the φ_c map's method."""
    global _CPU
    if _CPU is not None:
        return _CPU
    import numba
    from numba import prange

    # fast-math without "ninf"/"nnan": an atom on a node must give ±inf (with them, LLVM
    # dropped that infinity and left a finite value)
    # "numpy" error model: q / 0 = ±inf in the shared φ_c pair body, as on the GPU
    fast = numba.njit(nogil=True, fastmath=KEEP_INFINITIES, error_model="numpy")
    B = _bodies(numba.njit(nogil=True), fast)
    lines_of, edge_line, ion_column, coulomb_node, on_node = (
        B.lines_of,
        B.edge_line,
        B.ion_column,
        B.coulomb_node,
        B.on_node,
    )
    debye_huckel_point, assemble_node, sample_point = (
        B.debye_huckel_point,
        B.assemble_node,
        B.sample_point,
    )
    par = numba.njit(parallel=True, nogil=True)

    @par
    def edges(out, pos, rad, axis, nx, ny, nz, stride, origin, h):
        bad = 0
        for item in prange(pos.shape[0] * lines_of(axis, nx, ny, nz)):
            starts = np.empty(CAP)
            ends = np.empty(CAP)
            bad += edge_line(out, pos, rad, item, axis, nx, ny, nz, stride, origin, h, starts,
                             ends)  # fmt: skip
        return bad

    @par
    def ion(cov, pos, rad, nx, ny, nz, stride, origin, h, subs):
        bad = 0
        for item in prange(pos.shape[0] * nx * ny):
            starts = np.empty(CAP)
            ends = np.empty(CAP)
            cand = np.empty(CAP, dtype=np.int32)
            bad += ion_column(cov, pos, rad, item, nx, ny, nz, stride, origin, h, subs, starts,
                              ends, cand)  # fmt: skip
        return bad

    @par
    def coulomb(out, rel, q, scale, nx, ny, nz, stride, h):
        nf = rel.shape[0]
        nn = nx * ny * nz
        tol2 = np.float32(on_node(h))
        for item in prange(nf * nn):
            f = item // nn
            c = item - f * nn
            i = c // (ny * nz)
            j = (c // nz) % ny
            k = c % nz
            x, y, z = np.float32(i * h[0]), np.float32(j * h[1]), np.float32(k * h[2])
            out[f * stride + i, j, k] = scale * coulomb_node(rel, q, f, x, y, z, None, tol2)

    @par
    def boundary(out, rel, q, radii, nodes, kappa, eps_out, eps_c, scale, stride, h):
        nf = rel.shape[0]
        nb = nodes.shape[0]
        for item in prange(nf * nb):
            f = item // nb
            p = item - f * nb
            i, j, k = nodes[p, 0], nodes[p, 1], nodes[p, 2]
            x, y, z = np.float32(i * h[0]), np.float32(j * h[1]), np.float32(k * h[2])
            v = debye_huckel_point(rel, q, radii, f, x, y, z, kappa, eps_out, eps_c,
                                   np.float32(1.0))  # fmt: skip
            out[f * stride + i, j, k] = scale * v

    @par
    def assemble(fx, fy, fz, phic, cov, g, nf, nx, ny, nz, stride, p, out, out32, unl):
        _, ny_, nz_ = fx.shape
        for row in prange(nf * stride):
            f = row // stride
            i = row - f * stride
            for j in range(ny_):
                for k in range(nz_):
                    assemble_node(fx, fy, fz, phic, cov, g, row, f, i, j, k, nx, ny, nz, p,
                                    out, out32, unl)  # fmt: skip

    @par
    def sample(phi, pos, nx, ny, nz, stride, origin, h, out):
        for item in prange(pos.shape[0] * pos.shape[1]):
            sample_point(phi, pos, item, nx, ny, nz, stride, origin, h, out)

    from pbsolver.backends.cpu import frame_ses

    _CPU = _kernel_set(edges, ion, coulomb, boundary, assemble, sample, flags=False,
                       coulomb_for=lambda nf: (coulomb, 1), ses=frame_ses.KERNELS)  # fmt: skip
    return _CPU


# ---------------------------------------------------------------------- CUDA kernels
_CUDA = None


def cuda_kernels():
    """The CUDA kernels (one thread per work item), compiled lazily by numba-cuda."""
    global _CUDA, cuda
    if _CUDA is not None:
        return _CUDA
    from numba import cuda as numba_cuda

    cuda = numba_cuda

    B = _bodies(cuda.jit(device=True), cuda.jit(device=True, fastmath=True))
    # φ_c and the boundary sum have their own tiled kernels below (the latter on dh_term)
    lines_of, edge_line, ion_column = B.lines_of, B.edge_line, B.ion_column
    dh_term, on_node = B.dh_term, B.on_node
    assemble_node, sample_point, stack_node = B.assemble_node, B.sample_point, B.stack_node

    @cuda.jit
    def edges(out, pos, rad, axis, nx, ny, nz, stride, origin, h, bad):
        item = cuda.grid(1)
        if item >= pos.shape[0] * lines_of(axis, nx, ny, nz):
            return
        starts = cuda.local.array(CAP, dtype=np.float64)
        ends = cuda.local.array(CAP, dtype=np.float64)
        if edge_line(out, pos, rad, item, axis, nx, ny, nz, stride, origin, h, starts, ends):
            bad[0] = 1

    @cuda.jit
    def ion(cov, pos, rad, nx, ny, nz, stride, origin, h, subs, bad):
        item = cuda.grid(1)
        if item >= pos.shape[0] * nx * ny:
            return
        starts = cuda.local.array(CAP, dtype=np.float64)
        ends = cuda.local.array(CAP, dtype=np.float64)
        cand = cuda.local.array(CAP, dtype=np.int32)
        if ion_column(cov, pos, rad, item, nx, ny, nz, stride, origin, h, subs, starts, ends,
                      cand):  # fmt: skip
            bad[0] = 1

    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":  # the simulator has no libdevice

        @cuda.jit(device=True)
        def rsqrt(x):  # rsqrt(0) = inf, rsqrt(inf) = 0, as the hardware's
            if x == 0.0:
                return np.float32(math.inf)
            return np.float32(1.0) / math.sqrt(x)

    else:
        from numba.cuda import libdevice

        rsqrt = libdevice.rsqrtf  # one rsqrt.approx: sqrt + divide were two slow-pipe ops

    @cuda.jit(device=True)
    def node_xyz(c, nn, ny, nz, h):
        a = c if c < nn else 0
        i, j, k = a // (ny * nz), (a // nz) % ny, a % nz
        return i, j, k, np.float32(i * h[0]), np.float32(j * h[1]), np.float32(k * h[2])

    @functools.cache
    def coulomb_kernel(nodes: int):
        """The tiled φ_c kernel with ``nodes`` nodes a thread (compiled once per count)."""

        # Tiled: grid (node blocks, frames); each block stages THREADS atoms of its frame in
        # shared memory, so the inner loop is a few float32 operations and one rsqrt instead
        # of 3-D global indexing (measured 10x slower on the H200 in the untiled form). Each
        # thread does `nodes` nodes, THREADS apart, so that one shared-memory read serves that
        # many pairs. The pair term has no branch: an atom on a node gives q·rsqrt(0) = ±inf
        # (the exact answer there; an atom a rounding error off a node is made ±inf by the
        # one-thread-an-atom kernel `on_nodes` after this one, not by a compare and select in
        # this loop, which runs atoms × nodes times) and an uncharged atom is staged at
        # x = +inf, so its distance is infinite and its term q·rsqrt(inf) = 0 (not 0·inf =
        # NaN). No fast-math
        # (numba-cuda's would let the compiler assume there are no infinities); NVVM still
        # contracts the squares into FMAs, and rsqrtf is the one-instruction approximation.
        @cuda.jit
        def coulomb(out, rel, q, scale, nx, ny, nz, stride, h):
            f = cuda.blockIdx.y
            tid = cuda.threadIdx.x
            c0 = cuda.blockIdx.x * nodes * THREADS + tid
            nn = nx * ny * nz
            xs = cuda.local.array(nodes, dtype=np.float32)
            ys = cuda.local.array(nodes, dtype=np.float32)
            zs = cuda.local.array(nodes, dtype=np.float32)
            acc = cuda.local.array(nodes, dtype=np.float64)
            part = cuda.local.array(nodes, dtype=np.float32)
            for n in range(nodes):
                _, _, _, xs[n], ys[n], zs[n] = node_xyz(c0 + n * THREADS, nn, ny, nz, h)
                acc[n] = 0.0
            tile = cuda.shared.array((THREADS, 4), dtype=np.float32)
            na = q.shape[0]
            for base in range(0, na, THREADS):
                a = base + tid
                if a < na:
                    qa = q[a]
                    tile[tid, 0] = rel[f, a, 0] if qa != np.float32(0.0) else np.float32(math.inf)
                    tile[tid, 1] = rel[f, a, 1]
                    tile[tid, 2] = rel[f, a, 2]
                    tile[tid, 3] = qa
                cuda.syncthreads()
                for n in range(nodes):
                    part[n] = np.float32(0.0)
                for t in range(min(THREADS, na - base)):
                    px, py, pz, qa = tile[t, 0], tile[t, 1], tile[t, 2], tile[t, 3]
                    for n in range(nodes):
                        dx, dy, dz = xs[n] - px, ys[n] - py, zs[n] - pz
                        part[n] += qa * rsqrt(dx * dx + dy * dy + dz * dz)
                # partial sums in float32 per tile, float64 across tiles
                for n in range(nodes):
                    acc[n] += part[n]
                cuda.syncthreads()
            for n in range(nodes):
                c = c0 + n * THREADS
                if c < nn:
                    i, j, k, _, _, _ = node_xyz(c, nn, ny, nz, h)
                    out[f * stride + i, j, k] = scale * acc[n]

        return coulomb

    coulomb = coulomb_kernel(COULOMB_NODES)

    @cuda.jit
    def on_nodes(out, rel, q, nx, ny, nz, stride, h):
        # work item (frame f, atom a): φ_c = ±inf at a's nearest node if a lies within
        # on_node's distance of it (the CPU's pair body decides the same per pair); atomic,
        # so that two opposite charges on one node give NaN, as their sum does
        na = q.shape[0]
        item = cuda.grid(1)
        if item >= rel.shape[0] * na:
            return
        f = item // na
        a = item - f * na
        qa = q[a]
        if qa == np.float32(0.0):
            return
        i = min(max(int(math.floor(rel[f, a, 0] / h[0] + 0.5)), 0), nx - 1)
        j = min(max(int(math.floor(rel[f, a, 1] / h[1] + 0.5)), 0), ny - 1)
        k = min(max(int(math.floor(rel[f, a, 2] / h[2] + 0.5)), 0), nz - 1)
        # the node's coordinates as the φ_c kernel forms them (node_xyz)
        dx = np.float32(i * h[0]) - rel[f, a, 0]
        dy = np.float32(j * h[1]) - rel[f, a, 1]
        dz = np.float32(k * h[2]) - rel[f, a, 2]
        if dx * dx + dy * dy + dz * dz <= np.float32(on_node(h)):
            cuda.atomic.add(out, (f * stride + i, j, k), math.inf if qa > 0 else -math.inf)

    @cuda.jit(fastmath=True)
    def boundary(out, rel, q, radii, nodes, kappa, eps_out, eps_c, scale, stride, h):
        # Tiled like coulomb: grid (node blocks, frames), atoms staged in shared memory; the
        # terms are debye_huckel_point's.
        f = cuda.blockIdx.y
        tid = cuda.threadIdx.x
        p = cuda.blockIdx.x * THREADS + tid
        nb = nodes.shape[0]
        inside = p < nb
        pp = p if inside else 0
        i, j, k = nodes[pp, 0], nodes[pp, 1], nodes[pp, 2]
        x, y, z = np.float32(i * h[0]), np.float32(j * h[1]), np.float32(k * h[2])
        tile = cuda.shared.array((THREADS, 5), dtype=np.float32)
        inv_c = np.float32(1.0) / eps_c
        na = q.shape[0]
        acc = 0.0
        for base in range(0, na, THREADS):
            a = base + tid
            if a < na:
                tile[tid, 0] = rel[f, a, 0]
                tile[tid, 1] = rel[f, a, 1]
                tile[tid, 2] = rel[f, a, 2]
                tile[tid, 3] = q[a]
                tile[tid, 4] = radii[a]
            cuda.syncthreads()
            for t in range(min(THREADS, na - base)):
                acc += dh_term(x - tile[t, 0], y - tile[t, 1], z - tile[t, 2], tile[t, 3],
                               tile[t, 4], kappa, eps_out, inv_c, np.float32(1.0))  # fmt: skip
            cuda.syncthreads()
        if inside:
            out[f * stride + i, j, k] = scale * acc

    @cuda.jit
    def assemble(fx, fy, fz, phic, cov, g, nf, nx, ny, nz, stride, p, out, out32, unl):
        item = cuda.grid(1)
        _, ny_, nz_ = fx.shape
        if item < nf * stride * ny_ * nz_:
            row, f, i, j, k = stack_node(item, stride, ny_, nz_)
            assemble_node(fx, fy, fz, phic, cov, g, row, f, i, j, k, nx, ny, nz, p, out, out32,
                          unl)  # fmt: skip

    @cuda.jit
    def sample(phi, pos, nx, ny, nz, stride, origin, h, out):
        item = cuda.grid(1)
        if item < pos.shape[0] * pos.shape[1]:
            sample_point(phi, pos, item, nx, ny, nz, stride, origin, h, out)

    ses_edge_line, neighbour_count = B.ses.ses_edge_line, B.ses.neighbour_count
    neighbour_fill = B.ses.neighbour_fill
    smooth_node = B.ses.smooth_node
    # an atom's arcs and a circle's geometry do not depend on the frame (the B frames' atoms
    # are rows of one array): the map kernels' own
    from pbsolver.backends.cuda.maps import count_arcs_kernel, fill_circles_kernel

    @cuda.jit
    def ses_edges(out, pieces, axis, nx, ny, nz, stride, origin, h, pos, vdw, acc, probe, step,
                  nbisect, maxacc, maxreach, bins, bstart, border, ebins, ebstart, eborder,
                  nb_start, nb_index, circ_start, geom, arc_start, arcs, bad):  # fmt: skip
        item = cuda.grid(1)
        if item >= origin.shape[0] * lines_of(axis, nx, ny, nz) * pieces:
            return
        vs_ = cuda.local.array(SES_SPHERES, dtype=np.float64)
        ve_ = cuda.local.array(SES_SPHERES, dtype=np.float64)
        ss_ = cuda.local.array(SES_SPHERES, dtype=np.float64)
        se_ = cuda.local.array(SES_SPHERES, dtype=np.float64)
        cand = cuda.local.array(SES_CANDIDATES, dtype=np.int64)
        ckey = cuda.local.array(SES_CANDIDATES, dtype=np.float64)
        hit = cuda.local.array(4, dtype=np.float64)
        if ses_edge_line(out, item, pieces, axis, nx, ny, nz, stride, origin, h, pos, vdw, acc,
                         probe, step, nbisect, maxacc, maxreach, bins, bstart, border, ebins,
                         ebstart, eborder, nb_start, nb_index, circ_start, geom, arc_start, arcs,
                         vs_, ve_, ss_, se_, cand, ckey, hit):  # fmt: skip
            bad[0] = 1

    @cuda.jit
    def neighbour_counts(pos, rad, na, counts):
        g = cuda.grid(1)
        if g < pos.shape[0]:
            counts[g + 1] = neighbour_count(pos, rad, g, na)

    @cuda.jit
    def neighbour_fills(pos, rad, na, start, index):
        g = cuda.grid(1)
        if g < pos.shape[0]:
            neighbour_fill(pos, rad, g, na, start, index)

    @cuda.jit
    def smooth(fx, fy, fz, ox, oy, oz, nf, nx, ny, nz, stride):
        item = cuda.grid(1)
        _, ny_, nz_ = fx.shape
        if item >= nf * stride * ny_ * nz_:
            return
        row, f, i, j, k = stack_node(item, stride, ny_, nz_)
        if i < nx:
            smooth_node(fx, fy, fz, ox, oy, oz, f * stride, i, j, k, nx, ny, nz)

    ses = SimpleNamespace(edges=ses_edges, neighbour_counts=neighbour_counts,
                          neighbour_fills=neighbour_fills, count_arcs=count_arcs_kernel,
                          fill_circles=fill_circles_kernel, smooth=smooth,
                          pieces=maps_bodies.line_pieces)  # fmt: skip
    _CUDA = _kernel_set(
        edges, ion, coulomb, boundary, assemble, sample, flags=True, on_nodes=on_nodes, ses=ses,
        coulomb_for=lambda nf: (coulomb_kernel(coulomb_nodes(nf)), coulomb_nodes(nf)),
        coulomb_kernel=coulomb_kernel,
    )  # fmt: skip
    return _CUDA


def blocks(n: int, threads: int = THREADS) -> int:
    """CUDA blocks of ``threads`` threads covering ``n`` work items."""
    return max(1, (int(n) + threads - 1) // threads)


__all__ = [
    "CAP",
    "SES_ARC_BUFFER",
    "SES_CANDIDATES",
    "SES_NEIGHBOURS",
    "SES_SPHERES",
    "COULOMB_NODES",
    "COULOMB_NODES_WIDE",
    "COULOMB_WIDE_FROM",
    "coulomb_nodes",
    "LINE_THREADS",
    "THREADS",
    "blocks",
    "cpu_kernels",
    "cuda_kernels",
]
