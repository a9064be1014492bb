"""CPU kernels of the stacked engine's SES step (:mod:`pbsolver.md.ses`): ``prange`` loops.

The per-item bodies are those of :mod:`pbsolver.backends.bodies.frames`; these kernels only
loop over the work items and size each item's scratch buffers (from the bins, as the map kernels'
``ses_lines``), so no item overflows. Module-level functions with ``cache=True``: numba keeps
them on disk (the SES bodies take minutes to compile on two cores; kernels made inside a
function, as the other frame kernels are, are compiled again in every process). As for every
cached numba kernel, the cache follows this file's time stamp, not the bodies': clear
``__pycache__`` after editing only the bodies.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
from numba import njit, prange

from pbsolver.backends.bodies.frames import make_frame_ses
from pbsolver.backends.bodies.lines import compile_lines
from pbsolver.backends.bodies.maps import ARC_COLUMNS

_JIT = {"cache": True, "nogil": True}
_PAR = {"cache": True, "nogil": True, "parallel": True}
_jit = njit(**_JIT)
_B = make_frame_ses(_jit, *compile_lines(_jit))
_lines_of, _ses_caps, _ses_edge_line = _B.lines_of, _B.ses_caps, _B.ses_edge_line
_work_line = _B.work_line
_neighbour_count, _neighbour_fill = _B.neighbour_count, _B.neighbour_fill
_count_arcs_body, _fill_circle, _smooth_node = _B.count_arcs, _B.fill_circle, _B.smooth_node


@njit(**_PAR)
def ses_edges(out, rec, pieces, axis, nx, ny, nz, stride, origin, h, pos, vdw, acc, probe, step,
              nbisect, maxacc, maxreach, bins, bstart, border, ebins, ebstart, eborder,
              nb_start, nb_index, circ_start, geom, arc_start, arcs, only, order):  # fmt: skip
    # ``rec`` is unused (the CUDA kernels' signature; the recording one records into it);
    # scratch sized from the bins, as the map kernels' ses_lines: no line overflows; a
    # non-empty ``only`` (a flag per (frame, line)) leaves out the lines it does not name; a
    # non-empty ``order`` names the (frame, line) of each group of ``pieces`` items (as CUDA's)
    bad = 0
    for item in prange(origin.shape[0] * _lines_of(axis, nx, ny, nz) * pieces):
        line, piece = _work_line(item, pieces, order, only)
        if line < 0:
            continue
        cap, ecap = _ses_caps(line, axis, nx, ny, nz, origin, h, maxacc, maxreach,
                              bins, ebins, bstart, ebstart)  # fmt: skip
        if cap == 0:
            continue
        ecap = max(1, ecap)
        bad += _ses_edge_line(
            out, rec, line * pieces + piece, pieces, axis, nx, ny, nz, stride, origin, h, pos, vdw,
            acc, probe, step, nbisect, maxacc, maxreach, bins, bstart, border, ebins, ebstart,
            eborder, nb_start, nb_index, circ_start, geom, arc_start, arcs, np.empty(cap),
            np.empty(cap), np.empty(cap), np.empty(cap), np.empty(ecap, dtype=np.int64),
            np.empty(ecap), np.zeros(4),
        )  # fmt: skip
    return bad


@njit(**_PAR)
def neighbour_counts(pos, rad, na, counts):
    for g in prange(pos.shape[0]):
        counts[g + 1] = _neighbour_count(pos, rad, g, na)
    return 0


@njit(**_PAR)
def neighbour_fills(pos, rad, na, start, index):
    for g in prange(pos.shape[0]):
        _neighbour_fill(pos, rad, g, na, start, index)
    return 0


@njit(**_PAR)
def count_arcs(pos, rad, nb_start, nb_index, nfree, nested, inter):
    for i in prange(pos.shape[0]):
        deg = nb_start[i + 1] - nb_start[i]
        nest, ninter, _ = _count_arcs_body(pos, rad, i, nb_start, nb_index, nfree,
                                          np.empty(13), np.empty(2 * deg + 2),
                                          np.empty(2 * deg + 2),
                                          np.empty((1, ARC_COLUMNS)))  # fmt: skip
        nested[i] = nest
        inter[i] = ninter
    return 0


@njit(**_PAR)
def fill_circles(pos, rad, circ_i, circ_j, nb_start, nb_index, arc_start, geom, arcs):
    for c in prange(circ_i.shape[0]):
        i = circ_i[c]
        deg = nb_start[i + 1] - nb_start[i]
        _fill_circle(pos, rad, c, i, circ_j[c], nb_start, nb_index, arc_start, geom, arcs,
                    np.empty(13), np.empty(2 * deg + 2), np.empty(2 * deg + 2))  # fmt: skip


@njit(**_PAR)
def smooth(fx, fy, fz, ox, oy, oz, nf, nx, ny, nz, stride):
    for row in prange(nf * stride):
        f = row // stride
        i = row - f * stride
        if i < nx:
            for j in range(ny):
                for k in range(nz):
                    _smooth_node(fx, fy, fz, ox, oy, oz, f * stride, i, j, k, nx, ny, nz)


#: What :func:`pbsolver.backends.frame_kernels.cpu_kernels` hands the engine as ``ses``.
#: ``pieces(nbins, lines)``: work items a line of ``ses_edges`` (one: the loop is over whole
#: lines).
#: ``line_costs`` None: no reordering of the lines (prange splits the items evenly between
#: the threads in their order, so a sort by cost would give one thread all the costly lines)
#: ``record_ends`` None: the forces record each frame's SES lines themselves
#: (:mod:`pbsolver.backends.cpu.line_ends`, one frame at a time)
KERNELS = SimpleNamespace(edges=ses_edges, line_costs=None, neighbour_counts=neighbour_counts,
                          neighbour_fills=neighbour_fills, count_arcs=count_arcs,
                          fill_circles=fill_circles, smooth=smooth,
                          pieces=lambda nbins, lines: 1, record_ends=None)  # fmt: skip
