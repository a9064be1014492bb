"""numba-cuda kernels of the forces' surface terms: how each covered interval end of a line moves.

The CUDA twins of :func:`pbsolver.backends.cpu.line_ends.sphere_end_slopes` (the ion-accessible
map's term and the "vdw" surface's) and :func:`~pbsolver.backends.cpu.line_ends.interval_end_slopes`
(the SES's, for "mol" and "smol"). The maps' line bodies run with a recorder in place of the
bins (one thread a line; for the SES a piece of a line, as the map kernel cuts them), then a
second kernel says how each end moves (bodies :mod:`pbsolver.backends.bodies.line_ends`, the
CPU loops' own). The ends are the CUDA map kernels' ends; the results are the CPU functions',
in NumPy arrays. A line that meets more than
:data:`pbsolver.backends.cuda.maps.MAX_SPHERES` spheres or
:data:`~pbsolver.backends.cuda.maps.MAX_CANDIDATES` probe candidates raises
:class:`~pbsolver.backends.bodies.maps.LineCapacityError`, as the map kernels do.
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from pbsolver.backends.bodies import maps as B
from pbsolver.backends.bodies.frames import make_frame_ses
from pbsolver.backends.bodies.line_ends import compile_line_ends
from pbsolver.backends.bodies.lines import compile_lines, join_pieces_body, record_range_body

# the first room a line gets, as on the CPU (module globals here, so a test can shrink them)
from pbsolver.backends.cpu.line_ends import (
    FIRST_CAPACITY,
    FIRST_UNION_CAPACITY,
    kept_ends,
    slot_offsets,
)
from pbsolver.backends.cuda.device import launch_on_legacy_stream as launch
from pbsolver.backends.cuda.maps import (
    MAX_CANDIDATES,
    blocks,
    check_overflow,
    device_copy,
    device_zeros,
    host_copy,
    make_ses_lines_kernel,
    make_union_lines_kernel,
    one_set,
    with_line_scratch,
)
from pbsolver.backends.launch_sizes import THREADS

_dev = cuda.jit(device=True)
_S = B.make_ses(_dev, *compile_lines(_dev, record_range_body), range_body=record_range_body)
_union_line_slopes, _ses_line_slopes = compile_line_ends(_dev, _S)

_k_union_record = make_union_lines_kernel(_S["union_line"])
_k_ses_record = make_ses_lines_kernel(_S["ses_line"], record_pieces=True)
_join_pieces = _dev(join_pieces_body)
#: The SES lines are recorded in pieces of at least this many edges (one thread a piece, as
#: the map kernel cuts them; a module global, so a test can shrink it).
RECORD_PIECE_EDGES = B.SES_PIECE_EDGES


# the stacked engine's (frame, line) work items: its frame bodies' indexing, compiled here;
# kernels call module-level names (numba types no dict lookup inside a kernel)
_F = make_frame_ses(_dev, *compile_lines(_dev, record_range_body))
_line_place, _work_line, _lines_of = _F.line_place, _F.work_line, _F.lines_of
_record_ses_line = with_line_scratch(_S["ses_line"])


@cuda.jit
def _k_join_pieces(rec, pieces, out):
    line = cuda.grid(1)
    if line < out.shape[0] * out.shape[1]:
        _join_pieces(line, rec, pieces, out)


@cuda.jit
def _k_union_slopes(
    rec, offsets, axis, us, vs, t0, h, nbins, pos, rad, maxr, u0, v0, bsize, nbu, nbv, bstart,
    border, out_bin, out_atoms, out_slopes,
):  # fmt: skip
    line = cuda.grid(1)
    if line >= us.shape[0] * vs.shape[0]:
        return
    _union_line_slopes(line, rec, offsets, axis, us, vs, t0, h, nbins, pos, rad, maxr, u0, v0,
                       bsize, nbu, nbv, bstart, border, out_bin, out_atoms,
                       out_slopes)  # fmt: skip


@cuda.jit(device=True)
def _ses_slopes_with_scratch(
    line, rec, offsets, axis, us, vs, t0, h, nbins, pos, vdw, acc, probe, tol, maxacc, maxreach,
    u0, v0, bsize, nbu, nbv, bstart, border,
    e_u0, e_v0, e_bsize, e_nbu, e_nbv, e_bstart, e_border,
    nb_start, nb_index, circ_start, circ_j, geom, arc_start, arcs,
    out_bin, out_atoms, out_slopes, unmatched, overflow, item,
):  # fmt: skip
    """The SES line-end body of one line with fresh local scratch (as the CPU loop's).

    Its unmatched ends go to ``unmatched[item]``; a line with more exposed candidates than the
    scratch holds raises ``overflow``.
    """
    cand = cuda.local.array(MAX_CANDIDATES, dtype=np.int64)
    ckey = cuda.local.array(MAX_CANDIDATES, dtype=np.float64)
    feat = cuda.local.array(4, dtype=np.float64)
    atoms = cuda.local.array(3, dtype=np.int64)
    slopes = cuda.local.array((3, 3), dtype=np.float64)
    g = cuda.local.array((3, 3), dtype=np.float64)
    b = cuda.local.array(3, dtype=np.float64)
    for a in range(3):
        atoms[a] = -1
        b[a] = 0.0
        for c in range(3):
            slopes[a, c] = 0.0
            g[a, c] = 0.0
    for a in range(4):
        feat[a] = 0.0
    misses = _ses_line_slopes(
        line, rec, offsets, axis, us, vs, t0, h, nbins, pos, vdw, acc, probe, tol, maxacc,
        maxreach, u0, v0, bsize, nbu, nbv, bstart, border,
        e_u0, e_v0, e_bsize, e_nbu, e_nbv, e_bstart, e_border,
        nb_start, nb_index, circ_start, circ_j, geom, arc_start, arcs,
        out_bin, out_atoms, out_slopes, cand, ckey, feat, atoms, slopes, g, b,
    )  # fmt: skip
    if misses < 0:
        overflow[0] = 1
    else:
        unmatched[item] = misses


@cuda.jit
def _k_ses_slopes(
    rec, offsets, axis, us, vs, t0, h, nbins, pos, vdw, acc, probe, tol, maxacc, maxreach,
    u0, v0, bsize, nbu, nbv, bstart, border,
    e_u0, e_v0, e_bsize, e_nbu, e_nbv, e_bstart, e_border,
    nb_start, nb_index, circ_start, circ_j, geom, arc_start, arcs,
    out_bin, out_atoms, out_slopes, unmatched, overflow,
):  # fmt: skip
    line = cuda.grid(1)
    if line >= us.shape[0] * vs.shape[0]:
        return
    _ses_slopes_with_scratch(
        line, rec, offsets, axis, us, vs, t0, h, nbins, pos, vdw, acc, probe, tol, maxacc,
        maxreach, u0, v0, bsize, nbu, nbv, bstart, border,
        e_u0, e_v0, e_bsize, e_nbu, e_nbv, e_bstart, e_border,
        nb_start, nb_index, circ_start, circ_j, geom, arc_start, arcs,
        out_bin, out_atoms, out_slopes, unmatched, overflow, line,
    )  # fmt: skip


def _frame_ses_record(
    rec, pieces, axis, nx, ny, nz, origin, h, pos, vdw, acc, probe, step, nbisect, maxacc,
    maxreach, bins, bstart, border, ebins, ebstart, eborder, nb_start, nb_index, circ_start,
    geom, arc_start, arcs, order, only, overflow,
):  # fmt: skip
    """The stacked engine's SES lines recorded: one thread a piece of a (frame, line).

    The frame edge kernel's work items (:func:`pbsolver.backends.frame_kernels.cuda_kernels`,
    ``ses.edges``: ``order`` names the (frame, line) of each group of ``pieces`` items, ``only``
    is empty: every line) and
    geometry (:class:`pbsolver.md.ses.FrameSES`), with the recorder in place of the bins:
    piece p of frame f's line (iu, iv) records into ``rec[f, iu, iv·pieces + p]``.
    """
    item = cuda.grid(1)
    if item >= origin.shape[0] * _lines_of(axis, nx, ny, nz) * pieces:
        return
    line, piece = _work_line(item, pieces, order, only)
    f, iu, iv, u, v, nbins = _line_place(line, axis, nx, ny, nz, origin, h)
    k_lo = piece * nbins // pieces
    k_hi = (piece + 1) * nbins // pieces
    if _record_ses_line(
        rec[f], axis, 0, iu, iv * pieces + piece, u, v, origin[f, axis], h[axis], nbins, k_lo,
        k_hi, pos, vdw, acc, probe, step, nbisect, maxacc, maxreach, bins[f, 0], bins[f, 1],
        bins[f, 2], int(bins[f, 3]), int(bins[f, 4]), bstart[f], border, ebins[f, 0],
        ebins[f, 1], ebins[f, 2], int(ebins[f, 3]), int(ebins[f, 4]), ebstart[f], eborder,
        nb_start, nb_index, circ_start, geom, arc_start, arcs,
    ):  # fmt: skip
        overflow[0] = 1


def make_frame_ses_record_kernel(**options):
    """The frame SES recorder compiled with ``cuda.jit`` ``options``.

    The engine compiles it with its SES map kernel's launch bounds
    (:data:`pbsolver.backends.frame_kernels.LINE_MIN_BLOCKS`): the same line body, the same
    register budget.
    """
    return cuda.jit(**options)(_frame_ses_record)


#: :func:`make_frame_ses_record_kernel` without launch bounds (numba's simulator takes none).
frame_ses_record_kernel = make_frame_ses_record_kernel()


@cuda.jit
def frame_join_pieces_kernel(rec, pieces, out):
    """:func:`~pbsolver.backends.bodies.lines.join_pieces_body` of every (frame, line)."""
    item = cuda.grid(1)
    nl = out.shape[1] * out.shape[2]
    if item < out.shape[0] * nl:
        f = item // nl
        _join_pieces(item - f * nl, rec[f], pieces, out[f])


@cuda.jit
def frame_ses_slopes_kernel(
    rec, offsets, busy, axis, us, vs, origin, h, nbins, pos, vdw, acc, probe, tol, maxacc,
    maxreach, bins, bstart, border, ebins, ebstart, eborder, nb_start, nb_index, circ_start,
    circ_j, geom, arc_start, arcs, out_bin, out_atoms, out_slopes, unmatched, overflow,
):  # fmt: skip
    """How each recorded end of the (frame, line) pairs ``busy`` moves: one thread a pair.

    :func:`_k_ses_slopes` per frame. ``rec`` (B, nu, nv, ·, 2) holds whole lines; ``us``,
    ``vs`` (B, ·) the frames' line coordinates; ``offsets`` the slots of the B·nu·nv lines in
    that order; ``busy`` the indices (in that order) of the lines that hold an interval: a
    thread a line with ends, so that a warp's threads are not idled by the many empty lines;
    atoms are rows of the B frames' ``pos``.
    """
    item = cuda.grid(1)
    if item >= busy.shape[0]:
        return
    line = busy[item]
    nl = us.shape[1] * vs.shape[1]
    f = line // nl
    _ses_slopes_with_scratch(
        line - f * nl, rec[f], offsets[f * nl :], axis, us[f], vs[f], origin[f, axis], h, nbins,
        pos, vdw, acc, probe, tol, maxacc, maxreach, bins[f, 0], bins[f, 1], bins[f, 2],
        int(bins[f, 3]), int(bins[f, 4]), bstart[f], border, ebins[f, 0], ebins[f, 1],
        ebins[f, 2], int(ebins[f, 3]), int(ebins[f, 4]), ebstart[f], eborder, nb_start,
        nb_index, circ_start, circ_j, geom, arc_start, arcs, out_bin, out_atoms, out_slopes,
        unmatched, overflow, line,
    )  # fmt: skip


def _bins_args(bins):
    """A plane's 2D bins (:func:`pbsolver.molecule.maps.line_bins`) as kernel arguments."""
    u0, v0, bsize, nbu, nbv, bstart, border = bins
    return (float(u0), float(v0), float(bsize), int(nbu), int(nbv), device_copy(bstart),
            device_copy(border))  # fmt: skip


def _recorded(kernel, size, *args, as_set=False, pieces=1):
    """Run a recording line kernel: the records (on the device) and the slots' offsets (host).

    ``size`` is (lines along u, lines along v, intervals a line, or a piece, has room for at
    first); ``kernel(rec, *args, overflow)``, with ``as_set`` a set kernel given ``rec`` as its
    one set. Lines are redone with room for all their intervals when one had more. With
    ``pieces`` > 1 the kernel records each piece of a line in a slot of its own
    (:func:`~pbsolver.backends.cuda.maps.make_ses_lines_kernel`), joined here into one record a
    line.
    """
    nu, nv, capacity = size
    while True:
        rec = device_zeros((nu, nv * pieces, capacity + 1, 2))  # the counts start at 0
        overflow = device_zeros(1, np.int64)
        out = one_set(rec) if as_set else rec
        launch(kernel, blocks(nu * nv * pieces), THREADS, out, *args, overflow)
        check_overflow(overflow, "a grid line meets more spheres")
        counts = host_copy(rec[:, :, 0, 0]).astype(np.int64)
        if counts.max(initial=0) <= capacity:
            break
        capacity = int(counts.max())
    if pieces > 1:
        counts = counts.reshape(nu, nv, pieces).sum(axis=2)
        joined = device_zeros((nu, nv, int(counts.max(initial=0)) + 1, 2))
        launch(_k_join_pieces, blocks(nu * nv), THREADS, rec, pieces, joined)
        rec = joined
    return rec, slot_offsets(counts)


def _slots(total, width):
    """Device slots of the slope kernels: (bins, atoms, slopes) for ``total`` ends."""
    n = max(1, total)
    return (device_copy(np.full(n, -1, dtype=np.int64)),
            device_copy(np.full((n, width), -1, dtype=np.int64)),
            device_zeros((n, width, 3)))  # fmt: skip


def _host_ends(offsets, nv, out):
    total = int(offsets[-1])
    return kept_ends(offsets, nv, *(host_copy(a)[:total] for a in out))


def sphere_end_slopes(axis, us, vs, t0, h, nbins, pos, radius, bins):
    """CUDA :func:`pbsolver.backends.cpu.line_ends.sphere_end_slopes`, in NumPy arrays.

    Same arguments; ``(lines, bins, atoms, slopes)`` with one atom an end (``atoms`` (m, 1),
    ``slopes`` (m, 1, 3): the CPU result's used columns).
    """
    nu, nv = len(us), len(vs)
    maxr = float(radius.max()) if radius.size else 0.0
    us_d, vs_d = device_copy(us), device_copy(vs)
    rest = (float(t0), float(h), int(nbins), device_copy(pos), device_copy(radius), maxr,
            *_bins_args(bins))  # fmt: skip
    rec, offsets = _recorded(_k_union_record, (nu, nv, FIRST_UNION_CAPACITY), axis,
                             one_set(us_d), one_set(vs_d), *rest, as_set=True)  # fmt: skip
    args = (axis, us_d, vs_d, *rest)
    # one atom an end (the union's ends move with one sphere): the CPU's (m, 3) and (m, 3, 3)
    # less their unused columns, a third of the bytes to copy back
    out = _slots(int(offsets[-1]), 1)
    launch(_k_union_slopes, blocks(nu * nv), THREADS, rec, device_copy(offsets), *args, *out)
    return _host_ends(offsets, nv, out)


def interval_end_slopes(axis, us, vs, t0, h, nbins, pos, vdw, acc, probe, step, nbisect,
                        bins, ebins, features, nb):  # fmt: skip
    """CUDA :func:`pbsolver.backends.cpu.line_ends.interval_end_slopes`, in NumPy arrays.

    Same arguments and results, but each line's ends in another order: the lines are recorded
    in pieces, as the map kernel cuts them (:data:`RECORD_PIECE_EDGES`), and an interval across
    two pieces is recorded as two that meet at the pieces' common node, an end that moves
    nothing.
    """
    _exposed, circ_start, circ_j, geom, arc_start, arcs = features
    geom = geom if len(geom) else np.zeros((1, 13))
    arcs = arcs if len(arcs) else np.zeros((1, B.ARC_COLUMNS))
    nu, nv = len(us), len(vs)
    maxacc = float(acc.max())
    maxreach = maxacc + float(probe)
    d = device_copy
    line = (axis, d(us), d(vs), float(t0), float(h), int(nbins))
    atoms = (d(pos), d(vdw), d(acc), float(probe))
    reach = (maxacc, maxreach, *_bins_args(bins), *_bins_args(ebins), d(nb[0]), d(nb[1]))
    circ_start, geom, arc_start, arcs = d(circ_start), d(geom), d(arc_start), d(arcs)
    pieces = B.line_pieces(int(nbins), nu * nv, RECORD_PIECE_EDGES)
    rec, offsets = _recorded(
        _k_ses_record, (nu, nv, -(-FIRST_CAPACITY // pieces) + 4), *line, pieces,
        *atoms, float(step), int(nbisect), *reach, circ_start, geom, arc_start, arcs,
        pieces=pieces,
    )  # fmt: skip
    out = _slots(int(offsets[-1]), 3)
    unmatched = device_zeros(nu * nv, np.int64)
    overflow = device_zeros(1, np.int64)
    tol = float(step) * 2.0 ** (-int(nbisect)) + 1e-9
    launch(_k_ses_slopes, blocks(nu * nv), THREADS,
        rec, d(offsets), *line, *atoms, tol, *reach, circ_start, d(circ_j), geom, arc_start,
        arcs, *out, unmatched, overflow,
    )  # fmt: skip
    check_overflow(overflow, "a grid line has more exposed probe candidates")
    return (*_host_ends(offsets, nv, out), int(host_copy(unmatched).sum()))
