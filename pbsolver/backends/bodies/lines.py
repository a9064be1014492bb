"""Plain-Python bodies of the grid-line interval arithmetic, compiled by each kernel set.

The CPU map kernels (``numba.njit``; they bin with these, and merge with an argsort), the CUDA
map kernels (``cuda.jit(device=True)``) and the stacked frame kernels (both) compile these same
functions instead of keeping a copy each (:func:`compile_lines`). Importing this module imports
no numba.
"""

from __future__ import annotations

import math

#: Chords shorter than this fraction of the radius on each side of the centre's projection (a
#: line tangent to a sphere up to rounding) move no force: their share of an edge is < 1e-6 and
#: their slope ∝ 1/w means nothing.
GRAZE = 1e-6


def insert_sorted_body(keys, vals, n, key, val):
    """Insert (key, val) into the first n entries of ``keys``/``vals``, kept sorted by key.

    Equal keys keep their order of insertion.
    """
    j = n - 1
    while j >= 0 and keys[j] > key:
        keys[j + 1] = keys[j]
        vals[j + 1] = vals[j]
        j -= 1
    keys[j + 1] = key
    vals[j + 1] = val


def sort_merge_body(starts, ends, n):
    """Sort n intervals by start and merge them in place; returns the merged count.

    A Shell sort (Knuth's gaps): the intervals come in bin order, far from sorted, where an
    insertion sort makes about n²/4 moves. Any order of equal starts merges to the same
    union, so the result does not depend on the sort.
    """
    gap = 1
    while gap < n // 3:
        gap = 3 * gap + 1
    while gap >= 1:
        for i in range(gap, n):
            ks = starts[i]
            ke = ends[i]
            j = i
            while j >= gap and starts[j - gap] > ks:
                starts[j] = starts[j - gap]
                ends[j] = ends[j - gap]
                j -= gap
            starts[j] = ks
            ends[j] = ke
        gap //= 3
    if n == 0:
        return 0
    m = 0
    cs, ce = starts[0], ends[0]
    for i in range(1, n):
        if starts[i] <= ce:
            if ends[i] > ce:
                ce = ends[i]
        else:
            starts[m] = cs
            ends[m] = ce
            m += 1
            cs, ce = starts[i], ends[i]
    starts[m] = cs
    ends[m] = ce
    return m + 1


def sort_merge_owned_body(starts, ends, own, end_own, n):
    """:func:`sort_merge_body` that also says which interval gave each merged end.

    ``own[:n]`` names the n intervals' owners (increasing: their order of cutting). A stable
    insertion sort by start (the intervals come nearly sorted: few moves), then the merge in
    place: merged interval s runs from ``starts[s]`` to ``ends[s]``, its start that of owner
    ``own[s]`` and its end that of ``end_own[s]``, each the first owner, in their order, whose
    interval has that end. Returns the merged count.
    """
    for i in range(1, n):
        ks, ke, ko = starts[i], ends[i], own[i]
        j = i
        while j > 0 and starts[j - 1] > ks:
            starts[j] = starts[j - 1]
            ends[j] = ends[j - 1]
            own[j] = own[j - 1]
            j -= 1
        starts[j] = ks
        ends[j] = ke
        own[j] = ko
    if n == 0:
        return 0
    m = 0
    cs, ce, so, eo = starts[0], ends[0], own[0], own[0]
    for i in range(1, n):
        if starts[i] <= ce:
            if ends[i] > ce or (ends[i] == ce and own[i] < eo):
                ce, eo = ends[i], own[i]
        else:
            starts[m], ends[m], own[m], end_own[m] = cs, ce, so, eo
            m += 1
            cs, ce, so, eo = starts[i], ends[i], own[i], own[i]
    starts[m], ends[m], own[m], end_own[m] = cs, ce, so, eo
    return m + 1


def accumulate_range_body(out, axis, row, iu, iv, s, e, t0, h, k_lo, k_hi):
    """Add the covered share of the edges (or cells) ``k_lo ≤ k < k_hi`` of the line to ``out``.

    Every bin's share is computed as for the whole line, so a line written in pieces of bins
    (one thread a piece) gets the same values, and no piece touches another's bins.
    """
    if e <= s:
        return
    k0 = max(k_lo, int(math.floor((s - t0) / h)))
    k1 = min(k_hi - 1, int(math.floor((e - t0) / h)))
    for k in range(k0, k1 + 1):
        lo = t0 + k * h
        hi = lo + h
        a = s if s > lo else lo
        b = e if e < hi else hi
        if b > a:
            if axis == 0:
                out[row + k, iu, iv] += (b - a) / h
            elif axis == 1:
                out[row + iu, k, iv] += (b - a) / h
            else:
                out[row + iu, iv, k] += (b - a) / h


def record_range_body(out, axis, row, iu, iv, s, e, t0, h, k_lo, k_hi):
    """Record the part of [s, e] over the edges ``k_lo ≤ k < k_hi`` instead of adding it to bins.

    ``out[iu, iv, 0, 0]`` counts the line's intervals (all of them, also those past the
    capacity ``out.shape[2] − 1``, so a caller can tell an overflow and redo the line);
    ``out[iu, iv, n, :]`` (n ≥ 1) holds (s, e) clipped to [t0 + k_lo h, t0 + k_hi h]. Empty
    intervals are skipped, as :func:`accumulate_range_body` skips them. The other arguments
    are that body's. A line recorded in pieces (each piece its own ``iv`` slot) thus records
    an interval across a piece's end as two that meet exactly there, at ``t0 + k h`` for the
    same k on both sides; the forces' end bodies treat such an end as moving nothing
    (:func:`pbsolver.backends.bodies.line_ends.cancelled_body`), and an end clipped to the
    line's ends as outside the grid (:func:`~pbsolver.backends.bodies.line_ends.edge_of_body`).
    """
    t_lo = t0 + k_lo * h
    t_hi = t0 + k_hi * h
    s = s if s > t_lo else t_lo
    e = e if e < t_hi else t_hi
    if e <= s:
        return
    n = int(out[iu, iv, 0, 0]) + 1
    if n < out.shape[2]:
        out[iu, iv, n, 0] = s
        out[iu, iv, n, 1] = e
    out[iu, iv, 0, 0] = n


def make_accumulate_and_record(accumulate_range, record_range):
    """A range body that adds an interval's share to the bins and records it, in one pass.

    Built on the compiled :func:`accumulate_range_body` and :func:`record_range_body`. Its
    ``out`` is a tuple ``(bins, record, slot)``: ``bins`` is what ``accumulate_range`` adds to
    (from plane ``row``); ``record`` is a frame's record array as ``record_range`` fills it
    (planes from 0), with this line's intervals in ``record[iu, slot]``. The bins get exactly
    what ``accumulate_range`` alone gives them, and the record what ``record_range`` alone
    writes. So a map that will be differentiated records its own ends while it is built,
    instead of a second pass over its lines.
    """

    def accumulate_and_record_range_body(out, axis, row, iu, iv, s, e, t0, h, k_lo, k_hi):
        accumulate_range(out[0], axis, row, iu, iv, s, e, t0, h, k_lo, k_hi)
        record_range(out[1], axis, 0, iu, out[2], s, e, t0, h, k_lo, k_hi)

    return accumulate_and_record_range_body


def join_pieces_body(line, rec, pieces, out):
    """Line ``line``'s intervals recorded in ``pieces`` pieces, in piece order, into ``out``.

    ``rec`` holds piece p of line (iu, iv) in slot ``iv·pieces + p`` (as
    :func:`record_range_body` leaves it, every count within the capacity); ``out[iu, iv]``
    gets their intervals one after another and their count, as one whole-line record.
    """
    nv = out.shape[1]
    iu = line // nv
    iv = line - iu * nv
    n = 0
    for p in range(pieces):
        slot = iv * pieces + p
        for m in range(1, int(rec[iu, slot, 0, 0]) + 1):
            n += 1
            out[iu, iv, n, 0] = rec[iu, slot, m, 0]
            out[iu, iv, n, 1] = rec[iu, slot, m, 1]
    out[iu, iv, 0, 0] = n


def make_accumulate(accumulate_range):
    """The whole-line accumulate body on a compiled :func:`accumulate_range_body`."""

    def accumulate_body(out, axis, row, iu, iv, s, e, t0, h, nbins):
        """Add the covered share of each edge (or cell) of the line to ``out``."""
        accumulate_range(out, axis, row, iu, iv, s, e, t0, h, 0, nbins)

    return accumulate_body


def compile_lines(jit, range_body=accumulate_range_body):
    """``(sort_merge, accumulate)``: the line bodies compiled by ``jit``.

    ``accumulate`` hands each interval to ``range_body`` (the bins' accumulation, or
    :func:`record_range_body`).
    """
    return (jit(sort_merge_body),
            jit(make_accumulate(jit(range_body))))  # fmt: skip
