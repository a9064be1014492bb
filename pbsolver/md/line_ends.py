"""Line ends of B frames for the exact forces: per-frame bins, recording, slopes.

The stacked engine's frames (:mod:`pbsolver.md.engine`) are rows of one ``(B·N, 3)`` array on
one device. Their covered intervals along grid lines, and how each end moves with its atoms,
are what the forces' surface and ionic terms sum (:mod:`pbsolver.forces.lines`,
:mod:`pbsolver.forces.ses`, :mod:`pbsolver.forces.ionic`); here they are recorded for all B
frames in one launch a line set, by the recorder kernels of the engine's kernel set
(:mod:`pbsolver.backends.cuda.line_ends`), as one set of ends on the engine's stack (frame f's
planes moved by f·stride, its atoms rows of all B frames'): the SES's lines, through
:meth:`pbsolver.md.ses.FrameSES.interval_ends`. (The ion-accessible lines' ends are not
recorded: the engine's column kernel sums them where it cuts them,
:meth:`pbsolver.md.engine.StackedFrames.ion_end_sums`.)
"""

from __future__ import annotations

import numpy as np


def frame_bins(xp, pos2, origin, nf, na, axis, reach, subset, shape, spacing):
    """2D bins of the rows across ``axis``, per frame: (bins (B, 5), starts (B, nb+1), order).

    The bins of :func:`pbsolver.molecule.maps` (side max(reach/2, 0.25) Å, from ``reach +
    side`` before the frame's first grid line of the grid ``shape``, ``spacing`` at
    ``origin[f]``); ``bins[f]`` = (u0, v0, side, nbu, nbv), ``starts[f]`` the CSR starts of
    frame f's bins into ``order`` (row indices of ``pos2``, the B frames' ``na`` atoms each).
    ``subset`` (a boolean per row, or None) keeps only those rows.
    """
    a1, a2 = [a for a in range(3) if a != axis]
    size = max(0.5 * reach, 0.25)
    span = [(shape[a] - 1) * spacing[a] + 2.0 * reach + size for a in (a1, a2)]
    nbu, nbv = (int(s / size) + 2 for s in span)
    nb = nbu * nbv
    u0 = origin[:, a1] - reach - size
    v0 = origin[:, a2] - reach - size
    frame = xp.arange(nf * na) // na
    bu = xp.clip(xp.floor((pos2[:, a1] - u0[frame]) / size).astype(np.int64), 0, nbu - 1)
    bv = xp.clip(xp.floor((pos2[:, a2] - v0[frame]) / size).astype(np.int64), 0, nbv - 1)
    key = frame * nb + bu * nbv + bv
    if subset is not None:  # the others sort after every frame's bins
        key = xp.where(subset, key, nf * nb)
    order = xp.argsort(key, kind="stable") if xp is np else xp.argsort(key)
    counts = xp.bincount(key, minlength=nf * nb + 1)[: nf * nb]
    ends = xp.cumsum(counts).reshape(nf, nb)
    starts = xp.zeros((nf, nb + 1), dtype=np.int64)
    starts[:, 1:] = ends
    starts[1:, 0] = ends[:-1, -1]
    bins = xp.stack([u0, v0, xp.full(nf, size), xp.full(nf, float(nbu)),
                     xp.full(nf, float(nbv))], axis=1)  # fmt: skip
    return bins, starts, order.astype(np.int64)


#: Intervals a piece's record keeps beyond the most any piece had, when a line outgrew the
#: record and the lines are recorded again: the next frames' lines (the molecule moving) then
#: seldom outgrow that record's room, which costs a second pass over every line of an axis.
GROWTH_SLACK = 2


def record_capacity(room, pieces=1) -> int:
    """Intervals a piece's record holds for ``room`` intervals a line in ``pieces`` pieces.

    ⌈room / pieces⌉ + 4: a line's intervals seldom fall evenly into its pieces.
    """
    return -(-int(room) // pieces) + 4


def frame_line_ends(backend, nf, nu, nv, record, slopes, *, width, first, axis, stride, pieces=1,
                    join=None, recorded=None):  # fmt: skip
    """Record the (frame, line) pairs of B frames, say how each end moves: one set on the stack.

    ``record(rec, bad)`` launches a recorder into ``rec`` (B, nu, nv·pieces, capacity + 1, 2)
    (:func:`pbsolver.backends.bodies.lines.record_range_body`'s layout, piece p of line
    (iu, iv) in slot iv·pieces + p), raising ``bad`` on a line its local buffers cannot hold;
    a line with more intervals than the capacity (at first :func:`record_capacity` of
    ``first``) is recorded again with room for them and :data:`GROWTH_SLACK` more.
    ``recorded``: such a record already made (by the map's own pass), used as the first.
    ``join(rec, pieces, out)`` joins the pieces into whole lines.
    ``slopes(rec, offsets, busy, out_bin, out_atoms, out_slopes, unmatched, bad)`` launches the
    end bodies (:mod:`pbsolver.backends.bodies.line_ends`) over the lines ``busy`` (the indices
    of those that hold an interval; the others have no end), ``width`` atoms an end. Called inside
    the backend's ``stream_context()`` (its arrays are made on the kernels' stream).

    The lines run along ``axis``; (iu, iv) are indices of the other two axes' lines (one a grid
    plane), and frame f's grid is planes f·``stride`` … of the engine's stack.

    Returns
    -------
    tuple or None
        ``(lines, bins, atoms, slopes, unmatched)``: the kept ends of every frame
        (:func:`pbsolver.backends.cpu.line_ends.kept_ends`' form, arrays of the backend: on a
        GPU they stay there) on the stack: an x index (the bins along x, else the lines' first
        index) moves by f·stride, and ``atoms`` are rows of the B frames' atoms (−1 in unused
        columns); ``unmatched`` the frames' unmatched ends. None when ``bad`` was raised (the
        caller then records each frame itself).
    """
    xp = backend.array_module()
    nl = nu * nv
    capacity = record_capacity(first, pieces)
    bad = xp.zeros(1, dtype=np.int64)
    rec = recorded
    while True:
        if rec is None:
            rec = xp.zeros((nf, nu, nv * pieces, capacity + 1, 2))
            record(rec, bad)
        capacity = int(rec.shape[3]) - 1
        counts = rec[:, :, :, 0, 0].astype(np.int64)  # per piece
        whole = counts.reshape(nf, nu, nv, pieces).sum(axis=3) if pieces > 1 else counts
        # one read a recording: the flag, the fullest piece and line, the intervals in all
        raised, fullest, longest, total = (int(v) for v in backend.to_host(
            xp.stack([bad[0], counts.max(), whole.max(), whole.sum()])))  # fmt: skip
        if raised:
            return None
        if fullest <= capacity:
            break
        capacity, rec = fullest + GROWTH_SLACK, None
    if pieces > 1:
        joined = xp.zeros((nf, nu, nv, longest + 1, 2))
        join(rec, pieces, joined)
        rec = joined
    # slot_offsets on the device: line l owns slots offsets[l] … offsets[l + 1]
    offsets = xp.zeros(nf * nl + 1, dtype=np.int64)
    offsets[1:] = xp.cumsum(2 * whole.reshape(-1))
    n = max(1, 2 * total)
    out = (xp.full(n, -1, dtype=np.int64), xp.full((n, width), -1, dtype=np.int64),
           xp.zeros((n, width, 3)))  # fmt: skip
    unmatched = xp.zeros(nf * nl, dtype=np.int64)
    busy = xp.flatnonzero(whole.reshape(-1))  # int64 indices (intp), as the kernel reads them
    slopes(rec, offsets, busy, *out, unmatched, bad)
    raised, missed = (int(v) for v in backend.to_host(xp.stack([bad[0], unmatched.sum()])))
    if raised:
        return None
    lines, kbins, atoms, kslopes = _kept(xp, offsets, nv, *out)
    frame = lines[:, 0] // nu  # the first line index: f·nu + iu
    lines[:, 0] -= frame * nu
    if axis == 0:
        kbins += frame * int(stride)
    else:
        lines[:, 0] += frame * int(stride)
    return lines, kbins, atoms, kslopes, missed


def _kept(xp, offsets, nv, out_bin, out_atoms, out_slopes):
    """:func:`pbsolver.backends.cpu.line_ends.kept_ends` in array code of ``xp``.

    The slots' ends that move, in slot order, left where the kernels wrote them (on a GPU:
    there): (lines (m, 2) of the kept_ends' form, bins, atoms, slopes).
    """
    slot = xp.flatnonzero(out_bin >= 0)
    line = xp.searchsorted(offsets, slot, side="right") - 1
    lines = xp.stack([line // nv, line % nv], axis=1)
    return lines, out_bin[slot], out_atoms[slot], out_slopes[slot]


__all__ = ["frame_bins", "frame_line_ends"]
