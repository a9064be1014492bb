"""Plain-Python bodies of the stacked engine's SES step, compiled by each kernel set.

Work items are (frame, grid line) pairs and the B frames' atoms the rows of one ``(B·N, 3)``
array (:mod:`pbsolver.md.ses`); the geometry is the map kernels' own
(:func:`pbsolver.backends.bodies.maps.make_ses`). The CPU kernels
(:mod:`pbsolver.backends.cpu.frame_ses`) and the CUDA ones
(:func:`pbsolver.backends.frame_kernels.cuda_kernels`) compile these same functions. Importing
this module imports no numba.
"""

from __future__ import annotations

from types import SimpleNamespace

from pbsolver.backends.bodies import maps as maps_bodies
from pbsolver.backends.bodies.lines import (
    accumulate_range_body,
    make_accumulate_and_record,
    record_range_body,
)

#: :func:`line_cost` ranks lines by exposed candidates, then by spheres below this count
LINE_COST_SPHERES = 4096


def make_frame_ses(jit, sort_merge, accumulate):
    """The frame SES bodies compiled by ``jit`` on the compiled line bodies (a namespace)."""
    ses = maps_bodies.make_ses(jit, sort_merge, accumulate)
    ses_line, bin_count = ses["ses_line"], ses["bin_count"]

    def lines_of(axis, nx, ny, nz):
        """Grid lines along ``axis`` in one frame."""
        return (ny * nz) if axis == 0 else ((nx * nz) if axis == 1 else nx * ny)

    lines_of = jit(lines_of)

    def line_place(item, axis, nx, ny, nz, origin, h):
        """Work item ``item`` = (frame, grid line along ``axis``) as (f, iu, iv, u, v, nbins).

        (iu, iv) index the line in the other two axes (increasing order), (u, v) are its
        coordinates (Å) and ``nbins`` the edges along it.
        """
        nl = lines_of(axis, nx, ny, nz)
        f = item // nl
        line = item - f * nl
        if axis == 0:
            a1, a2, nv, nbins = 1, 2, nz, nx
        elif axis == 1:
            a1, a2, nv, nbins = 0, 2, nz, ny
        else:
            a1, a2, nv, nbins = 0, 1, ny, nz
        iu = line // nv
        iv = line - iu * nv
        return f, iu, iv, origin[f, a1] + iu * h[a1], origin[f, a2] + iv * h[a2], nbins

    line_place = jit(line_place)

    snap = jit(maps_bodies.snap_fraction_body)

    def snap_line(out, axis, row, iu, iv, k_lo, k_hi):
        """:func:`snap` the edges ``k_lo ≤ k < k_hi`` of one line (as ``snap_fractions`` does)."""
        for k in range(k_lo, k_hi):
            if axis == 0:
                out[row + k, iu, iv] = snap(out[row + k, iu, iv])
            elif axis == 1:
                out[row + iu, k, iv] = snap(out[row + iu, k, iv])
            else:
                out[row + iu, iv, k] = snap(out[row + iu, iv, k])

    snap_line = jit(snap_line)

    def ses_caps(item, axis, nx, ny, nz, origin, h, maxacc, maxreach, bins, ebins, bstart,
                 ebstart):  # fmt: skip
        """Upper bounds of the spheres and candidates the SES line of ``item`` meets."""
        f, _, _, u, v, _ = line_place(item, axis, nx, ny, nz, origin, h)
        cap = bin_count(u, v, maxacc, bins[f, 0], bins[f, 1], bins[f, 2], int(bins[f, 3]),
                        int(bins[f, 4]), bstart[f])  # fmt: skip
        ecap = bin_count(u, v, maxreach, ebins[f, 0], ebins[f, 1], ebins[f, 2],
                         int(ebins[f, 3]), int(ebins[f, 4]), ebstart[f])  # fmt: skip
        return cap, ecap

    ses_caps = jit(ses_caps)

    def work_line(item, pieces, order, only):
        """Work item ``item`` of a line kernel as (frame-line index, piece of that line).

        Each group of ``pieces`` consecutive items is one line: the line of that rank in
        ``order``, or the group's own rank where ``order`` is empty. The index is −1 where
        ``only`` (a flag per frame-line; empty: every line) leaves the line out.
        """
        line = item // pieces
        piece = item - line * pieces
        if order.shape[0] != 0:
            line = order[line]
        if only.shape[0] != 0 and not only[line]:
            return -1, piece
        return line, piece

    work_line = jit(work_line)

    def line_cost(cap, ecap):
        """A line's sort key for the order of the CUDA line kernel's work items.

        −1 for a line no sphere reaches (nothing to do), else larger for more exposed
        candidates, then more spheres. Lines of equal key then share warps, which diverge less.
        """
        if cap == 0:
            return -1
        return ecap * LINE_COST_SPHERES + min(cap, LINE_COST_SPHERES - 1)

    line_cost = jit(line_cost)

    def make_edge_line(line_body, target):
        """The per-work-item SES body on ``line_body``, its bins (and record) named by ``target``.

        ``target(out, rec, f, slot)`` gives the ``out`` that ``line_body`` hands each interval
        to: the bins alone, or the bins and frame f's record (slot ``iv·pieces + piece``).
        """

        def ses_edge_line(out, rec, item, pieces, axis, nx, ny, nz, stride, origin, h, pos, vdw,
                          acc, probe, step, nbisect, maxacc, maxreach, bins, bstart, border,
                          ebins, ebstart, eborder, nb_start, nb_index, circ_start, geom,
                          arc_start, arcs, vs_, ve_, ss_, se_, cand, ckey, hit):  # fmt: skip
            """SES fractions of work item ``item`` = (frame, grid line, piece), snapped.

            Each line is cut into ``pieces`` runs of edges as even as can be (1: the whole
            line); a piece writes only its own edges
            (:func:`~pbsolver.backends.bodies.maps.make_ses`'s ``ses_line``). The frame's atoms
            are rows of the flattened ``pos`` (B·N, 3) and the features are indexed by them;
            ``bins[f]`` = (u0, v0, size, nbu, nbv) of the frame's 2D bins, ``bstart[f]`` their
            CSR starts into ``border``. ``rec``: the frames' records (B, nu, nv·pieces,
            capacity + 1, 2) where ``target`` records
            (:func:`~pbsolver.backends.bodies.lines.record_range_body`'s layout), else unused.
            Returns 1 on overflow.
            """
            line = item // pieces
            piece = item - line * pieces
            f, iu, iv, u, v, nbins = line_place(line, axis, nx, ny, nz, origin, h)
            k_lo = piece * nbins // pieces
            k_hi = (piece + 1) * nbins // pieces
            bad = line_body(
                target(out, rec, f, iv * pieces + piece), axis, f * stride, iu, iv, u, v,
                origin[f, axis], h[axis], nbins, k_lo, k_hi, pos, vdw, acc, probe, step, nbisect,
                maxacc, maxreach, bins[f, 0], bins[f, 1], bins[f, 2], int(bins[f, 3]),
                int(bins[f, 4]), bstart[f], border, ebins[f, 0], ebins[f, 1], ebins[f, 2],
                int(ebins[f, 3]), int(ebins[f, 4]), ebstart[f], eborder, nb_start, nb_index,
                circ_start, geom, arc_start, arcs, vs_, ve_, ss_, se_, cand, ckey, hit,
            )  # fmt: skip
            snap_line(out, axis, f * stride, iu, iv, k_lo, k_hi)
            return bad

        return jit(ses_edge_line)

    def bins_only(out, rec, f, slot):
        return out

    def bins_and_record(out, rec, f, slot):
        return (out, rec[f], slot)

    #: (out, rec, item, …): the fractions alone (``rec`` unused: any array) …
    ses_edge_line = make_edge_line(ses_line, jit(bins_only))
    #: … or the fractions and, in ``rec``, the intervals that made them (the exact forces' ends)
    recording = maps_bodies.make_ses(
        jit, sort_merge, accumulate,
        range_body=make_accumulate_and_record(jit(accumulate_range_body), jit(record_range_body)),
    )  # fmt: skip
    ses_edge_record_line = make_edge_line(recording["ses_line"], jit(bins_and_record))

    def neighbour_count(pos, rad, g, na):
        """Atoms of atom g's frame (rows f·na … of ``pos``) whose sphere overlaps g's."""
        f0 = (g // na) * na
        m = 0
        for j in range(f0, f0 + na):
            dx = pos[j, 0] - pos[g, 0]
            dy = pos[j, 1] - pos[g, 1]
            dz = pos[j, 2] - pos[g, 2]
            rr = rad[g] + rad[j]
            if j != g and dx * dx + dy * dy + dz * dz < rr * rr:
                m += 1
        return m

    neighbour_count = jit(neighbour_count)

    def dist2(pos, g, j):
        dx = pos[j, 0] - pos[g, 0]
        dy = pos[j, 1] - pos[g, 1]
        dz = pos[j, 2] - pos[g, 2]
        return dx * dx + dy * dy + dz * dz

    dist2 = jit(dist2)

    def neighbour_fill(pos, rad, g, na, start, index):
        """Atom g's overlapping neighbours into ``index[start[g]:]``, nearest first.

        The lists of the map kernels' ``neighbour_lists`` (a burying neighbour is usually
        found within the first few), by a scan of the frame and an insertion sort.
        """
        f0 = (g // na) * na
        s0 = start[g]
        m = 0
        for j in range(f0, f0 + na):
            rr = rad[g] + rad[j]
            d2 = dist2(pos, g, j)
            if j != g and d2 < rr * rr:
                p = m - 1
                while p >= 0 and dist2(pos, g, index[s0 + p]) > d2:
                    index[s0 + p + 1] = index[s0 + p]
                    p -= 1
                index[s0 + p + 1] = j
                m += 1

    neighbour_fill = jit(neighbour_fill)

    def nine_point(own, b0, b_back, b_ahead, b_both, c0, c_back, c_ahead, c_both):
        """One face's smoothed value, summed in APBS's order, over 9.

        Itself, then each other orientation's four faces (at p, p − e_b, p + e_a, p + e_a − e_b).
        """
        s = own + b0
        s = s + b_back
        s = s + b_ahead
        s = s + b_both
        s = s + c0
        s = s + c_back
        s = s + c_ahead
        s = s + c_both
        return s / 9.0

    nine_point = jit(nine_point)

    def smooth_node(fx, fy, fz, ox, oy, oz, row, i, j, k, nx, ny, nz):
        """APBS' 9-point smoothing of the three faces at one node (``smooth_fractions``).

        Each face's value plus, per other orientation b (in axis order), the b-faces at p,
        p − e_b, p + e_a and p + e_a − e_b (:func:`nine_point`), each read through
        :func:`snap`; the grid wraps around (a block of ``nx`` planes from ``row``). The six
        neighbour indices are found once.
        """
        im = (i - 1 if i > 0 else nx - 1) + row
        ip = (i + 1 if i < nx - 1 else 0) + row
        jm = j - 1 if j > 0 else ny - 1
        jp = j + 1 if j < ny - 1 else 0
        km = k - 1 if k > 0 else nz - 1
        kp = k + 1 if k < nz - 1 else 0
        i = i + row
        x0 = snap(fx[i, j, k])
        y0 = snap(fy[i, j, k])
        z0 = snap(fz[i, j, k])
        ox[i, j, k] = nine_point(x0, y0, snap(fy[i, jm, k]), snap(fy[ip, j, k]),
                                 snap(fy[ip, jm, k]), z0, snap(fz[i, j, km]), snap(fz[ip, j, k]),
                                 snap(fz[ip, j, km]))  # fmt: skip
        oy[i, j, k] = nine_point(y0, x0, snap(fx[im, j, k]), snap(fx[i, jp, k]),
                                 snap(fx[im, jp, k]), z0, snap(fz[i, j, km]), snap(fz[i, jp, k]),
                                 snap(fz[i, jp, km]))  # fmt: skip
        oz[i, j, k] = nine_point(z0, x0, snap(fx[im, j, k]), snap(fx[i, j, kp]),
                                 snap(fx[im, j, kp]), y0, snap(fy[i, jm, k]), snap(fy[i, j, kp]),
                                 snap(fy[i, jm, kp]))  # fmt: skip

    smooth_node = jit(smooth_node)

    return SimpleNamespace(
        lines_of=lines_of,
        line_place=line_place,
        ses_caps=ses_caps,
        line_cost=line_cost,
        work_line=work_line,
        ses_edge_line=ses_edge_line,
        ses_edge_record_line=ses_edge_record_line,
        neighbour_count=neighbour_count,
        neighbour_fill=neighbour_fill,
        count_arcs=ses["count_arcs"],
        fill_circle=ses["fill_circle"],
        smooth_node=smooth_node,
    )


__all__ = ["LINE_COST_SPHERES", "make_frame_ses"]
