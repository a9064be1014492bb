"""The solvent-excluded surface of B frames, for the stacked engine (:mod:`pbsolver.md.engine`).

The same geometry as :func:`pbsolver.molecule.maps.face_fractions` with ``surface="mol"``, on the
same bodies (:mod:`pbsolver.backends.bodies.maps`: free arcs, probe test, reentrant-zone
sampling and bisection), batched over frames: the B frames' atoms are the rows of one
``(B·N, 3)`` array, and every per-atom structure (neighbour lists, exposed atoms, intersection
circles and their free arcs) is built once for all of them, indexed by those rows; a neighbour
of an atom is always in its own frame. In order, each a launch over all frames or array code on
the engine's device (NumPy or CuPy):

1. neighbour lists (overlapping accessible spheres, nearest first): a count per atom, a prefix
   sum, a fill per atom (a scan of the atom's frame, which at MD sizes is cheaper than cell
   lists);
2. features: free-arc counts per atom, the compaction of
   :func:`~pbsolver.backends.bodies.maps.compact_circles`, each circle's geometry and arcs;
3. 2D bins of the atoms across each axis, per frame (one counting sort over all frames), for
   all atoms and for the exposed ones;
4. the lines: one launch per axis over (frame, grid line, piece) triples writes every
   frame's edge fractions, snapped like :func:`~pbsolver.molecule.maps.snap_fractions`, into
   the stacked layout (on CUDA a line is cut into pieces of at least
   :data:`~pbsolver.backends.bodies.maps.SES_PIECE_EDGES` edges while a launch has few work
   items, :func:`~pbsolver.backends.bodies.maps.line_pieces`, each a thread; on the CPU a
   work item is a whole line). On CUDA the lines run costliest first (a cost launch and a
   sort; ``order_lines``): the work of a line varies widely (empty, buried, many reentrant
   zones), and one warp's threads wait for its costliest line. For an exact-forces frame the
   CUDA pass also records each line's intervals (``run(record=True)``), the ends the forces
   then match (:meth:`FrameSES.interval_ends`).

The sizes of steps 1–2 (pairs, circles, arcs) are read back to the host to allocate (a few
synchronisations a call on CUDA); the data stay on the device. Since these sizes change from
call to call, this step is not part of the engine's captured CUDA graph.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from pbsolver.backends.bodies.maps import ARC_COLUMNS, compact_circles
from pbsolver.backends.frame_kernels import LINE_THREADS, SES_CANDIDATES, SES_NEIGHBOURS
from pbsolver.exceptions import InputError
from pbsolver.md.line_ends import frame_bins, frame_line_ends, record_capacity
from pbsolver.molecule.maps import ses_bisections, ses_sampling_step
from pbsolver.molecule.part_surface import LINE_SLACK, changed_lines

#: Intervals a line's record has room for at first (more: the lines are recorded again with
#: room for the most any line had).
FIRST_RECORDS = 16


class FrameSES:
    """SES edge fractions of B frames of one solute on one grid shape.

    Parameters
    ----------
    backend : Backend
        The engine's backend (its kernels and array library).
    radii : array (N,)
        vdW radii, Å.
    probe : float
        Probe radius, Å (> 0; a zero probe is the vdW surface, which the engine maps itself).
    shape, spacing : 3 ints, 3 floats
        The grid of every frame (nodes; Å).
    ses_step : float, optional
        Sampling interval of the reentrant zone, Å (default min(h/2, 0.25) per axis, as
        :func:`~pbsolver.molecule.maps.face_fractions`).
    nbisect : int
        Bisection steps locating each change of side.
    order_lines : bool
        Where the kernels can (CUDA), run the lines costliest first: sorted by
        :func:`~pbsolver.backends.bodies.frames.make_frame_ses`'s ``line_cost``, so that the
        lines of one warp need about as many point tests (the fractions do not change).
    """

    def __init__(self, backend, radii, probe, shape, spacing, ses_step=None, nbisect=14,
                 order_lines=True):  # fmt: skip
        self.backend = backend
        self.xp = backend.array_module()
        self.kernels = backend.frame_kernels().ses
        self.flags = backend.frame_kernels().flags
        self.shape = tuple(int(n) for n in shape)
        self.spacing = tuple(float(h) for h in spacing)
        self.probe = float(probe)
        radii = np.ascontiguousarray(radii, dtype=np.float64)
        self.radii = radii
        self.maxacc = float((radii + self.probe).max())
        self.maxreach = self.maxacc + self.probe
        self.steps = [ses_sampling_step(h, ses_step) for h in self.spacing]
        self.nbisect = ses_bisections(nbisect)
        self._tiled = {}  # frames in a call → (vdW radii, accessible radii) of the B·N rows
        self._every_line = self.xp.zeros(0, dtype=np.bool_)  # the kernels' "no line left out"
        #: per axis, intervals a line's record has room for when the map records them (grown
        #: to the most a line has needed, so that a record seldom has to be made again)
        self._room = [FIRST_RECORDS] * 3
        self._natural = self.xp.zeros(0, dtype=np.int64)  # the kernels' "lines in their order"
        # the plain edge kernel's ``rec`` (unused; an array of its own: a kernel given one array
        # twice from the host gets two copies, and the second copied back undoes the first)
        self._no_record = self.xp.zeros((1, 1, 1, 1, 2))
        self.order_lines = bool(order_lines) and self.kernels.line_costs is not None

    def run(self, out, pos, origin, stride, part_of=None, record=False) -> None:
        """Write the frames' SES edge fractions into ``out`` (three stacked arrays, zeroed here).

        ``pos`` (B, N, 3) and ``origin`` (B, 3) are device arrays (Å); frame f's node
        (i, j, k) is row ``f·stride + i`` of ``out``.

        ``part_of`` = (whole, removed positions (B, M, 3), removed radii (M,)) says that these
        atoms are a molecule less M atoms, and ``whole`` (three stacked arrays) the molecule's
        fractions on the same grids, computed by a FrameSES of the same probe, steps and
        bisections. Then only the lines within R + r_p of a changed atom are computed, the rest
        copied from ``whole`` (:mod:`pbsolver.molecule.part_surface` says which lines can
        change, and why).

        ``record``: the exact forces will want these lines' interval ends
        (:meth:`interval_ends`). Where the kernels can (CUDA), the map's own pass records each
        line's intervals as it adds them to the edges (the same fractions), instead of a second
        pass over the lines later; not with ``part_of``, whose copied lines are not computed.

        Raises
        ------
        InputError
            On CUDA, when an atom has more neighbours or a line more spheres than the kernels'
            local buffers hold (the CPU kernels size theirs per item).
        """
        xp, K = self.xp, self.kernels
        nf, na = int(pos.shape[0]), int(pos.shape[1])
        m = nf * na
        nx, ny, nz = self.shape
        only = [self._every_line] * 3
        if part_of is None:
            for a in out:
                a.fill(0)
        else:
            only = self._changed_lines(pos, origin, *part_of[1:])
            for axis, (a, whole) in enumerate(zip(out, part_of[0], strict=True)):
                a[...] = whole
                xp.copyto(self._frame_rows(a, nf, stride), 0.0,
                          where=self._line_flags(only[axis], axis, nf, stride))  # fmt: skip
        pos2 = pos.reshape(m, 3)
        vdw, acc = self._radii(nf)
        bad = xp.zeros(1, dtype=np.int64)
        flag = [bad] if self.flags else []
        # 1. neighbour lists
        counts = xp.zeros(m + 1, dtype=np.int64)
        self._launch(K.neighbour_counts, m, pos2, acc, na, counts)
        nb_start = xp.cumsum(counts)
        npair = int(nb_start[-1])
        nb_index = xp.zeros(max(npair, 1), dtype=np.int64)
        self._launch(K.neighbour_fills, m, pos2, acc, na, nb_start, nb_index)
        # 2. features
        nfree = xp.zeros(max(npair, 1), dtype=np.int64)
        nested = xp.zeros(m, dtype=np.bool_)
        inter = xp.zeros(m, dtype=np.int64)
        # on CUDA one work item a pair (the CPU kernel loops over atoms)
        self._launch(K.count_arcs, max(npair, 1), pos2, acc, nb_start, nb_index, nfree, nested,
                     inter, *flag)  # fmt: skip
        exposed, circ_start, circ_i, circ_j, arc_start = compact_circles(
            nb_start, nb_index[:npair], nfree[:npair], nested, inter, xp
        )
        nc, narcs = int(circ_i.shape[0]), int(arc_start[-1])
        geom = xp.zeros((max(nc, 1), 13))
        arcs = xp.zeros((max(narcs, 1), ARC_COLUMNS))
        if nc:
            self._launch(K.fill_circles, nc, pos2, acc, circ_i, circ_j, nb_start, nb_index,
                         arc_start, geom, arcs)  # fmt: skip
        # 3.–4. bins and lines, axis by axis
        h = xp.asarray(np.asarray(self.spacing))
        lines = (ny * nz, nx * nz, nx * ny)
        # what the forces' recording of the same lines needs (interval_ends)
        self._last = SimpleNamespace(
            nf=nf, na=na, stride=stride, pos=pos2, origin=origin, h=h, vdw=vdw, acc=acc,
            nb_start=nb_start,
            nb_index=nb_index, circ_start=circ_start, circ_j=circ_j, geom=geom,
            arc_start=arc_start, arcs=arcs, axes=[], records=[None] * 3,
        )  # fmt: skip
        R = self.kernels.record_ends
        recording = bool(record) and part_of is None and getattr(R, "edges", None) is not None
        for axis in range(3):
            bins, bstart, border = self._bins(pos2, origin, nf, na, axis, self.maxacc, None)
            ebins, ebstart, eborder = self._bins(pos2, origin, nf, na, axis, self.maxreach,
                                                 exposed)  # fmt: skip
            order = self._natural
            if self.order_lines:
                cost = xp.empty(nf * lines[axis], dtype=np.int64)
                self._launch(K.line_costs, nf * lines[axis], cost, axis, nx, ny, nz, origin, h,
                             self.maxacc, self.maxreach, bins, bstart, ebins, ebstart,
                             only[axis])  # fmt: skip
                order = xp.argsort(-cost)
            self._last.axes.append((bins, bstart, border, ebins, ebstart, eborder, order))
            # work items a line (pieces of its edges)
            pieces = K.pieces(self.shape[axis], nf * lines[axis])
            kernel, rec = K.edges, self._no_record
            if recording:
                a1, a2 = [a for a in range(3) if a != axis]
                room = record_capacity(self._room[axis], pieces)
                rec = xp.zeros((nf, self.shape[a1], self.shape[a2] * pieces, room + 1, 2))
                kernel = R.edges
                self._last.records[axis] = rec
            self._launch(
                kernel, nf * lines[axis] * pieces, out[axis], rec, pieces, axis, nx, ny, nz,
                stride, origin, h, pos2, vdw, acc, self.probe, self.steps[axis], self.nbisect,
                self.maxacc, self.maxreach, bins, bstart, border, ebins, ebstart, eborder,
                nb_start, nb_index, circ_start, geom, arc_start, arcs, only[axis], order, *flag,
                threads=LINE_THREADS,
            )  # fmt: skip
        if self.flags and int(self.backend.to_host(bad)[0]):
            raise InputError(
                f"an atom has more than {SES_NEIGHBOURS} overlapping neighbours or a grid line "
                f"more than {SES_CANDIDATES} spheres near it: the stacked SES kernels cannot map "
                "this solute (use engine='general')"
            )

    def interval_ends(self):
        """The SES interval ends of the last :meth:`run`'s frames and how each moves.

        The intervals the map recorded as it cut them (:meth:`run` with ``record``), or else
        the lines of that call recorded again, with its geometry, bins and line order, by the
        kernels' recorder (all B frames in one launch an axis; the frames' ends are those the
        maps cut); a line with more intervals than the map's record had room for has its axis
        recorded again, with room for them (and the next calls' maps with it). Then each end
        matched to its vdW chord or reentrant crossing
        (:mod:`pbsolver.backends.bodies.line_ends`). What :func:`pbsolver.forces.ses.ses_gradient`
        computes for one frame, here for all of them at once.

        Returns
        -------
        list or None
            Per axis, ``(lines, bins, atoms, slopes, unmatched)`` of every frame on the
            engine's stack (:func:`pbsolver.md.line_ends.frame_line_ends`: device arrays, frame
            f's x indices moved by f·stride, ``atoms`` rows of all B frames' atoms). None where
            the kernel set has no recorder (the CPU's: the forces then record each frame's
            lines themselves) or where a line holds more spheres or probe candidates than the
            CUDA kernels do (the same fallback).
        """
        last = getattr(self, "_last", None)
        if self.kernels.record_ends is None or last is None:
            return None
        ends = []
        # the kernels run on the backend's stream: the arrays made here must be too
        with self.backend.stream_context():
            for axis in range(3):
                got = self._axis_ends(last, axis)
                if got is None:
                    return None
                ends.append(got)
        return ends

    def _axis_ends(self, last, axis):
        """:meth:`interval_ends` of the lines along ``axis``, or None."""
        R, xp, shape = self.kernels.record_ends, self.xp, self.shape
        a1, a2 = [a for a in range(3) if a != axis]
        nu, nv, nbins = shape[a1], shape[a2], shape[axis]
        bins, bstart, border, ebins, ebstart, eborder, order = last.axes[axis]
        geometry = (last.pos, last.vdw, last.acc, self.probe)
        reach = (self.maxacc, self.maxreach, bins, bstart, border, ebins, ebstart, eborder,
                 last.nb_start, last.nb_index, last.circ_start)  # fmt: skip
        step = self.steps[axis]
        pieces = self.kernels.pieces(nbins, last.nf * nu * nv)
        us = last.origin[:, a1, None] + xp.arange(nu) * self.spacing[a1]
        vs = last.origin[:, a2, None] + xp.arange(nv) * self.spacing[a2]

        def items(a):  # work items of a (frame, u, v…) array: its first three axes
            return a.shape[0] * a.shape[1] * a.shape[2]

        def record(rec, bad):
            # the room whose record_capacity is this record's (more than the last only where a
            # line outgrew the last), for the next calls' maps
            self._room[axis] = max(self._room[axis], (rec.shape[3] - 5) * pieces)
            self._launch(R.record, items(rec), rec, pieces, axis, *shape, last.origin, last.h,
                         *geometry, step, self.nbisect, *reach, last.geom, last.arc_start,
                         last.arcs, order, self._every_line, bad,
                         threads=LINE_THREADS)  # fmt: skip

        def join(rec, p, out):
            self._launch(R.join, items(out), rec, p, out)

        def slopes(rec, offsets, busy, *out):
            tol = step * 2.0 ** (-self.nbisect) + 1e-9
            self._launch(R.slopes, len(busy), rec, offsets, busy, axis, us, vs, last.origin,
                         self.spacing[axis], nbins, *geometry, tol, *reach, last.circ_j,
                         last.geom, last.arc_start, last.arcs, *out,
                         threads=LINE_THREADS)  # fmt: skip

        # the map's record is used once: let it go, not held through the adjoint and the next
        # call's map (a later call of this method records the lines again)
        recorded, last.records[axis] = last.records[axis], None
        return frame_line_ends(self.backend, last.nf, nu, nv, record, slopes, width=3,
                               first=self._room[axis], axis=axis, stride=last.stride,
                               pieces=pieces, join=join, recorded=recorded)  # fmt: skip

    # ------------------------------------------------------------------ helpers
    def _changed_lines(self, pos, origin, removed, removed_radii):
        """Per axis, a flag per (frame, line): the lines within R + r_p of a changed atom.

        The changed atoms of a frame are the removed ones and those of ``pos`` whose accessible
        sphere meets a removed one's (as :func:`pbsolver.molecule.part_surface.changed_atoms`,
        here for all frames at once on the engine's device).
        """
        xp, probe = self.xp, self.probe
        nf = int(pos.shape[0])
        removed = xp.asarray(removed, dtype=np.float64)
        racc = xp.asarray(np.asarray(removed_radii, dtype=np.float64) + probe)
        acc = self._radii(1)[1]
        meets = xp.zeros(pos.shape[:2], dtype=np.bool_)
        # (B, N, chunk) distances at a time: a large removed part stays within ~2²² pairs
        chunk = max(1, (1 << 22) // max(1, nf * int(pos.shape[1])))
        for j0 in range(0, int(removed.shape[1]), chunk):
            d = pos[:, :, None, :] - removed[:, None, j0 : j0 + chunk, :]
            reach = acc[:, None] + racc[None, j0 : j0 + chunk]
            meets |= ((d * d).sum(axis=-1) < reach * reach).any(axis=-1)
        frame, atom = xp.nonzero(meets)
        frame = xp.concatenate([frame, xp.repeat(xp.arange(nf), int(removed.shape[1]))])
        centres = xp.concatenate([pos[meets], removed.reshape(-1, 3)])
        reach = xp.concatenate([acc[atom], xp.tile(racc, nf)]) + probe + LINE_SLACK
        return changed_lines(xp, self.shape, self.spacing, origin, frame, centres, reach)

    def _frame_rows(self, a, nf, stride):
        """``a``'s first B frames as (B, stride, ny, nz)."""
        return a[: nf * stride].reshape(nf, stride, *self.shape[1:])

    def _line_flags(self, flag, axis, nf, stride):
        """A flag per (frame, line along ``axis``) broadcast to :meth:`_frame_rows`'s shape."""
        nx, ny, nz = self.shape
        if axis == 0:
            return flag.reshape(nf, 1, ny, nz)
        rows = self.xp.zeros((nf, stride, nz if axis == 1 else ny), dtype=np.bool_)
        rows[:, :nx] = flag.reshape(nf, nx, -1)
        return rows[:, :, None, :] if axis == 1 else rows[:, :, :, None]

    def _radii(self, nf):
        """vdW and accessible radii of the B·N rows (made once per frame count)."""
        got = self._tiled.get(nf)
        if got is None:
            vdw = np.tile(self.radii, nf)
            got = (self.xp.asarray(vdw), self.xp.asarray(vdw + self.probe))
            self._tiled[nf] = got
        return got

    def _bins(self, pos2, origin, nf, na, axis, reach, subset):
        return frame_bins(self.xp, pos2, origin, nf, na, axis, reach, subset, self.shape,
                          self.spacing)  # fmt: skip

    def _launch(self, kernel, items, *args, threads=None):
        return self.backend.launch_items(kernel, items, *args, threads=threads)


__all__ = ["FrameSES"]
