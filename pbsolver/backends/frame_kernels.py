"""Kernels of the stacked frame engine (:mod:`pbsolver.md.engine`): B frames' maps in one launch.

Every per-line and per-node body is written once, as plain Python
(:mod:`pbsolver.backends.bodies.frame_maps`), and compiled twice: by ``numba.njit`` for the CPU
kernels (:mod:`pbsolver.backends.cpu.frame_maps`, ``prange`` over the work items, cached on
disk) and by ``numba.cuda.jit(device=True)`` for the CUDA kernels (one thread per work item).
The two sets therefore run the same arithmetic (except the direct sums φ_c and the boundary
values: their CUDA kernels stage atoms in shared memory, the same float32 terms summed per tile
of 128); tests compare the CPU set with the general map builders of
:mod:`pbsolver.molecule.maps` and the CUDA set with the CPU set (under the simulator in CI).
The engine's CPU set maps φ_c with the general path's sum instead (``coulomb_map``: the
multilevel sum, far cheaper than the direct one on a CPU) and the "mdh" values from it
(``boundary_map``; :mod:`pbsolver.backends.cpu.frame_coulomb`).

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
from types import SimpleNamespace

import numpy as np

from pbsolver.backends.bodies import maps as maps_bodies
from pbsolver.backends.bodies.frame_maps import CAP, make_frame_bodies
from pbsolver.backends.launch_sizes import THREADS, simulated

#: numba.cuda, imported by :func:`cuda_kernels` (numba-cuda is optional: the CPU kernels must
#: import without it). A module global, because the simulator swaps it inside kernels.
cuda = None

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
#: ... and from this many frames a call, COULOMB_NODES_WIDE: fewer, longer threads (the faster
#: choice on each side of it on the H200: ``benchmarks/coulomb_kernel.py``, BENCHMARKS.md).
COULOMB_WIDE_FROM = 8
COULOMB_NODES_WIDE = 8


def coulomb_nodes(frames: int) -> int:
    """Nodes a thread of the CUDA φ_c kernel for a call of ``frames`` frames."""
    return COULOMB_NODES_WIDE if frames >= COULOMB_WIDE_FROM else COULOMB_NODES


#: Threads a block of the per-line kernels: few lines per block, so that small batches still
#: spread over all the multiprocessors (4,225 lines of a 65³ frame fill 33 blocks of 128).
LINE_THREADS = 32
#: None, or the blocks of LINE_THREADS the CUDA SES line kernel is compiled to fit on one
#: multiprocessor at once (its launch bounds: fewer registers a thread, more warps to hide
#: latency, and spills where the registers do not suffice; BENCHMARKS.md, nineteenth session)
LINE_MIN_BLOCKS = 24


def _kernel_set(edges, ion, coulomb, boundary, assemble, sample, flags, coulomb_for,
                on_nodes=None, coulomb_map=None, boundary_map=None, ion_end_sums=None,
                **extra):  # fmt: skip
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
    ``boundary``'s full sum. ``ion_end_sums``: None, or the kernel that sums the ion-accessible
    lines' chord ends of B frames into per-atom slopes as the ``ion`` kernel cuts them (the
    exact forces' ionic term; without it the forces record each frame's lines themselves).
    """
    return SimpleNamespace(
        edges=edges, ion=ion, coulomb=coulomb, boundary=boundary, assemble=assemble,
        sample=sample, flags=flags, coulomb_for=coulomb_for, on_nodes=on_nodes,
        coulomb_map=coulomb_map, boundary_map=boundary_map, ion_end_sums=ion_end_sums,
        **extra,
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
    """The CPU kernel set, without the φ_c map's method (module-level kernels cached on disk)."""
    global _CPU
    if _CPU is not None:
        return _CPU
    from pbsolver.backends.cpu import frame_maps, frame_ses

    K = frame_maps
    _CPU = _kernel_set(K.edges, K.ion, K.coulomb, K.boundary, K.assemble, K.sample, flags=False,
                       coulomb_for=lambda nf: (K.coulomb, 1), ses=frame_ses.KERNELS)  # fmt: skip
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

    @cuda.jit(device=True)
    def atomic_add(a, row, col, value):
        cuda.atomic.add(a, (row, col), value)

    B = make_frame_bodies(cuda.jit(device=True), cuda.jit(device=True, fastmath=True),
                          add=atomic_add)  # fmt: skip
    # φ_c and the boundary sum have their own tiled kernels below (the latter on dh_term)
    lines_of, edge_line, ion_column = B.lines_of, B.edge_line, B.ion_column
    ion_column_ends = B.ion_column_ends
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

    def with_column_scratch(column_body):
        """``column_body(*args)`` given fresh local scratch (chord starts, ends, candidates)."""

        @cuda.jit(device=True)
        def scratched(*args):
            starts = cuda.local.array(CAP, dtype=np.float64)
            ends = cuda.local.array(CAP, dtype=np.float64)
            cand = cuda.local.array(CAP, dtype=np.int32)
            return column_body(*args, starts, ends, cand)

        return scratched

    ion_column = with_column_scratch(ion_column)

    @cuda.jit(device=True)
    def with_chords(*args):  # after the column's scratch, its merged ends' chords and sums
        return ion_column_ends(*args, cuda.local.array(CAP, np.int32),
                               cuda.local.array(CAP, np.int32),
                               cuda.local.array((CAP, 3), np.float64))  # fmt: skip

    ion_column_ends_scratched = with_column_scratch(with_chords)

    @cuda.jit
    def ion(cov, pos, rad, nx, ny, nz, stride, origin, h, subs, bad):
        item = cuda.grid(1)
        if item < pos.shape[0] * nx * ny and ion_column(cov, pos, rad, item, nx, ny, nz, stride,
                                                        origin, h, subs):  # fmt: skip
            bad[0] = 1

    @cuda.jit
    def ion_end_sums(grad, sens, pos, rad, nx, ny, nz, stride, origin, h, subs, bad):
        # the ion kernel's columns again, their chord ends summed (the exact forces' ionic term)
        item = cuda.grid(1)
        if item < pos.shape[0] * nx * ny and ion_column_ends_scratched(
            grad, sens, pos, rad, item, nx, ny, nz, stride, origin, h, subs
        ):
            bad[0] = 1

    from pbsolver.backends.cuda.coulomb_tiles import rsqrt32, tiled_coulomb_kernel

    def coulomb_kernel(nodes: int):
        """The tiled float32 φ_c kernel with ``nodes`` nodes a thread (compiled once per count).

        Atoms in shared memory, no branch a pair (:mod:`pbsolver.backends.cuda.coulomb_tiles`;
        the untiled form with 3-D global indexing measured 10x slower on the H200); the nodes
        within the on-node distance of an atom are made ±inf by ``on_nodes`` after it.
        """
        return tiled_coulomb_kernel(np.float32, nodes, rsqrt32)

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
        # the node's coordinates as the φ_c kernel forms them (coulomb_tiles: (i, j, k) · h)
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
    def sample(phi, pos, nx, ny, nz, stride, origin, h, cubic, out):
        item = cuda.grid(1)
        if item < pos.shape[0] * pos.shape[1]:
            sample_point(phi, pos, item, nx, ny, nz, stride, origin, h, cubic, out)

    ses_edge_line, neighbour_count = B.ses.ses_edge_line, B.ses.neighbour_count
    ses_caps, line_cost, work_line = B.ses.ses_caps, B.ses.line_cost, B.ses.work_line
    neighbour_fill = B.ses.neighbour_fill
    smooth_node = B.ses.smooth_node
    # an atom's arcs and a circle's geometry do not depend on the frame (the B frames' atoms
    # are rows of one array): the map kernels' own; so is the line body's local scratch
    from pbsolver.backends.cuda.maps import (
        count_arcs_kernel,
        fill_circles_kernel,
        with_line_scratch,
    )

    ses_edge_line = with_line_scratch(ses_edge_line, SES_SPHERES, SES_CANDIDATES)
    ses_edge_record_line = with_line_scratch(B.ses.ses_edge_record_line, SES_SPHERES,
                                             SES_CANDIDATES)  # fmt: skip

    @cuda.jit
    def line_costs(cost, axis, nx, ny, nz, origin, h, maxacc, maxreach, bins, bstart, ebins,
                   ebstart, only):  # fmt: skip
        # one (frame, line) a thread: its sort key (B.ses.line_cost; −1: nothing to do)
        line = cuda.grid(1)
        if line >= cost.shape[0]:
            return
        if only.shape[0] != 0 and not only[line]:
            cost[line] = -1
            return
        cap, ecap = ses_caps(line, axis, nx, ny, nz, origin, h, maxacc, maxreach, bins, ebins,
                             bstart, ebstart)  # fmt: skip
        cost[line] = line_cost(cap, ecap)

    # launch bounds on the GPU only: numba's simulator takes no such option
    bounds = {}
    if LINE_MIN_BLOCKS is not None and not simulated():
        bounds = {"launch_bounds": (LINE_THREADS, LINE_MIN_BLOCKS)}

    def make_ses_edges(edge_line):
        def ses_edges(out, rec, pieces, axis, nx, ny, nz, stride, origin, h, pos, vdw, acc,
                      probe, step, nbisect, maxacc, maxreach, bins, bstart, border, ebins,
                      ebstart, eborder, nb_start, nb_index, circ_start, geom, arc_start, arcs,
                      only, order, bad):  # fmt: skip
            # ``order`` (empty: the natural order) names the (frame, line) of each group of
            # ``pieces`` consecutive work items; ``rec``: where the recording kernel records
            item = cuda.grid(1)
            if item >= origin.shape[0] * lines_of(axis, nx, ny, nz) * pieces:
                return
            line, piece = work_line(item, pieces, order, only)
            if line < 0:
                return
            item = line * pieces + piece
            if edge_line(out, rec, item, pieces, axis, nx, ny, nz, stride, origin, h, pos, vdw,
                         acc, probe, step, nbisect, maxacc, maxreach, bins, bstart, border,
                         ebins, ebstart, eborder, nb_start, nb_index, circ_start, geom,
                         arc_start, arcs):  # fmt: skip
                bad[0] = 1

        return cuda.jit(**bounds)(ses_edges)

    # the fractions (``rec`` unused), and the fractions with the intervals recorded in ``rec``
    ses_edges = make_ses_edges(ses_edge_line)
    ses_edges_recorded = make_ses_edges(ses_edge_record_line)

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

    # the forces' recording of the same lines (record, join the pieces, slopes)
    from pbsolver.backends.cuda.line_ends import (
        frame_join_pieces_kernel,
        frame_ses_slopes_kernel,
        make_frame_ses_record_kernel,
    )

    # the recorder runs the edge kernel's line body: its launch bounds too
    record_ends = SimpleNamespace(edges=ses_edges_recorded,
                                  record=make_frame_ses_record_kernel(**bounds),
                                  join=frame_join_pieces_kernel,
                                  slopes=frame_ses_slopes_kernel)  # fmt: skip
    ses = SimpleNamespace(edges=ses_edges, line_costs=line_costs,
                          neighbour_counts=neighbour_counts,
                          neighbour_fills=neighbour_fills, count_arcs=count_arcs_kernel,
                          fill_circles=fill_circles_kernel, smooth=smooth,
                          pieces=maps_bodies.line_pieces, record_ends=record_ends)  # fmt: skip
    _CUDA = _kernel_set(
        edges, ion, coulomb, boundary, assemble, sample, flags=True, on_nodes=on_nodes, ses=ses,
        ion_end_sums=ion_end_sums,
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
    "LINE_MIN_BLOCKS",
    "LINE_THREADS",
    "THREADS",
    "blocks",
    "cpu_kernels",
    "cuda_kernels",
]
