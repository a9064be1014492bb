"""Per-item bodies of the stacked frame engine's map, assembly and sampling kernels.

Plain Python functions compiled twice, by ``numba.njit`` for the CPU kernels
(:mod:`pbsolver.backends.cpu.frame_maps`) and by ``numba.cuda.jit(device=True)`` for the CUDA
kernels (:func:`pbsolver.backends.frame_kernels.cuda_kernels`): one work item each (a frame's
grid line, ion-accessibility column, node or atom) in the stacked layout of
:mod:`pbsolver.backends.frame_kernels`.
"""

from __future__ import annotations

from types import SimpleNamespace

from pbsolver.backends.bodies import line_ends as line_end_bodies
from pbsolver.backends.bodies import maps as maps_bodies
from pbsolver.backends.bodies.frames import make_frame_ses
from pbsolver.backends.bodies.lines import GRAZE, compile_lines, sort_merge_owned_body
from pbsolver.backends.bodies.sampling import make_sample

#: Intervals one grid line (or ion-accessibility column) may hold.
CAP = 256


def make_frame_bodies(jit, fast, add=None):
    """The shared bodies compiled by ``jit`` (numba.njit or cuda.jit(device=True)).

    ``fast`` is the same compiler with fast-math, for the float32 direct sums. ``add(a, row,
    col, value)``, an atomic add of the device, also makes ``ion_column_ends`` (else None).
    """
    sort_merge, accumulate = compile_lines(jit)
    chord = jit(maps_bodies.chord_body)
    face_eps = jit(maps_bodies.face_eps_body)
    sums = maps_bodies.make_point_sums(jit, fast)
    coulomb_node, dh_term = sums["coulomb_node"], sums["dh_term"]
    debye_huckel_point = sums["debye_huckel_node"]
    on_node = jit(maps_bodies.on_node_tol2)
    sample = make_sample(jit)
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
    def sample_point(phi, pos, item, nx, ny, nz, stride, origin, h, cubic, out):
        """φ and ∇φ at work item ``item`` = (frame f, atom a) into ``out[f, a]``."""
        na = pos.shape[1]
        f = item // na
        a = item - f * na
        sample(phi, f * stride, nx, ny, nz, h[0], h[1], h[2], (pos[f, a, 0] - origin[f, 0]) / h[0],
               (pos[f, a, 1] - origin[f, 1]) / h[1], (pos[f, a, 2] - origin[f, 2]) / h[2], False,
               cubic, out[f, a])  # fmt: skip

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
    def column_place(item, nx, ny, origin, h):
        """Work item ``item`` = (frame f, column (i, j)) as (f, i, j, x, y): the column's line."""
        nl = nx * ny
        f = item // nl
        c = item - f * nl
        i = c // ny
        j = c - i * ny
        return f, i, j, origin[f, 0] + i * h[0], origin[f, 1] + j * h[1]

    @jit
    def column_candidates(pos, rad, f, x, y, h, cand):
        """Frame f's atoms whose disc reaches the cell of column (x, y), into ``cand``.

        In the order of their z (ties in atom order), so that the chords of each of the
        column's lines come nearly sorted by start and their sort moves little. Returns their
        count, −1 when ``cand`` cannot hold them.
        """
        m = 0
        for a in range(rad.shape[0]):
            dx = abs(pos[f, a, 0] - x) - 0.5 * h[0]
            dy = abs(pos[f, a, 1] - y) - 0.5 * h[1]
            dx = dx if dx > 0.0 else 0.0
            dy = dy if dy > 0.0 else 0.0
            r = rad[a]
            if dx * dx + dy * dy < r * r:
                if m >= cand.shape[0]:
                    return -1
                z = pos[f, a, 2]
                p = m
                while p > 0 and pos[f, cand[p - 1], 2] > z:
                    cand[p] = cand[p - 1]
                    p -= 1
                cand[p] = a
                m += 1
        return m

    @jit
    def column_line(pos, rad, f, x, y, sa, sb, subs, h, cand, m, starts, ends):
        """Line (sa, sb) of the column's subs² lines along z: (u, v, count of merged chords).

        The union of the candidates' chords, merged, in ``starts``/``ends`` (they hold as many
        as ``cand``, so they cannot overflow).
        """
        u, v = column_line_place(x, y, sa, sb, subs, h)
        n = 0
        for c in range(m):
            a = cand[c]
            n = chord(starts, ends, n, pos[f, a, 0] - u, pos[f, a, 1] - v, pos[f, a, 2], rad[a])
        return u, v, sort_merge(starts, ends, n)

    @jit
    def column_line_place(x, y, sa, sb, subs, h):
        """(u, v) of line (sa, sb) of the subs² lines of column (x, y)."""
        return x + ((sa + 0.5) / subs - 0.5) * h[0], y + ((sb + 0.5) / subs - 0.5) * h[1]

    @jit
    def ion_column(cov, pos, rad, item, nx, ny, nz, stride, origin, h, subs, starts, ends, cand):
        """Covered share of each cell of work item ``item`` = (frame f, column (i, j)).

        Sampled at subs² lines along z; returns 1 on overflow.
        """
        f, i, j, x, y = column_place(item, nx, ny, origin, h)
        m = column_candidates(pos, rad, f, x, y, h, cand)
        if m < 0:
            return 1
        t0 = origin[f, 2] - 0.5 * h[2]
        for sa in range(subs):
            for sb in range(subs):
                _u, _v, n = column_line(pos, rad, f, x, y, sa, sb, subs, h, cand, m, starts, ends)
                for s in range(n):
                    accumulate(cov, 2, f * stride, i, j, starts[s], ends[s], t0, h[2], nz)
        return 0

    ion_column_ends = None
    if add is not None:
        # the forces' line-end bodies: which edge an end lies in, which chord it ends
        edge_of = jit(line_end_bodies.edge_of_body)
        chord_half = jit(line_end_bodies.chord_half_body)
        sort_merge_owned = jit(sort_merge_owned_body)

        @jit
        def column_line_owned(pos, rad, f, x, y, sa, sb, subs, h, cand, m, starts, ends, own,
                              end_own):  # fmt: skip
            """:func:`column_line` with each merged end's chord: (u, v, merged count).

            Merged interval s starts where the chord of candidate ``cand[own[s]]`` starts and
            ends where that of ``cand[end_own[s]]`` ends (of the chords with that end, the
            first in the candidates' order:
            :func:`pbsolver.backends.bodies.lines.sort_merge_owned_body`).
            """
            u, v = column_line_place(x, y, sa, sb, subs, h)
            n = 0
            for c in range(m):
                a = cand[c]
                grown = chord(starts, ends, n, pos[f, a, 0] - u, pos[f, a, 1] - v, pos[f, a, 2],
                              rad[a])  # fmt: skip
                if grown > n:
                    own[n] = c  # the candidate, not the atom
                n = grown
            return u, v, sort_merge_owned(starts, ends, own, end_own, n)

        @jit
        def ion_column_ends(grad, sens, pos, rad, item, nx, ny, nz, stride, origin, h, subs,
                            starts, ends, cand, own, end_own, acc):  # fmt: skip
            """Σ sens[cell]/h_z · (slope of the cell's covered length) of ``item``'s chord ends.

            The lines, chords and merged intervals of :func:`ion_column`; each end inside the
            grid (:func:`~pbsolver.backends.bodies.line_ends.edge_of_body`) moves with the chord
            of that side that ends there (the first in the candidates' order:
            :func:`column_line_owned`), as
            :func:`pbsolver.backends.bodies.line_ends.sphere_end_body` gives its slope (a
            grazing chord, w ≤ GRAZE·r, has none). Summed a candidate at a time in ``acc``
            (CAP × 3 scratch) and added with ``add`` to row f·N + atom of ``grad`` (B·N, 3) once
            a candidate, after the column's lines: one atomic add a (column, atom), not one an
            end. ``sens`` is the stack's (frame f on planes f·stride …). Returns 1 on overflow.
            """
            f, i, j, x, y = column_place(item, nx, ny, origin, h)
            m = column_candidates(pos, rad, f, x, y, h, cand)
            if m < 0:
                return 1
            hz = h[2]
            t0 = origin[f, 2] - 0.5 * hz
            row0 = f * pos.shape[1]
            for c in range(m):  # the column's sums a candidate, added once at the end
                acc[c, 0] = 0.0
                acc[c, 1] = 0.0
                acc[c, 2] = 0.0
            for sa in range(subs):
                for sb in range(subs):
                    u, v, n = column_line_owned(pos, rad, f, x, y, sa, sb, subs, h, cand, m,
                                                starts, ends, own, end_own)  # fmt: skip
                    for q in range(2 * n):
                        side = q % 2
                        t = ends[q // 2] if side == 1 else starts[q // 2]
                        k = edge_of(t, t0, hz, nz)
                        if k < 0:
                            continue
                        c = end_own[q // 2] if side == 1 else own[q // 2]
                        a = cand[c]
                        du = pos[f, a, 0] - u
                        dv = pos[f, a, 1] - v
                        w = chord_half(du, dv, rad[a])
                        if w > GRAZE * rad[a]:
                            s = sens[f * stride + i, j, k] / hz
                            acc[c, 0] -= s * du / w
                            acc[c, 1] -= s * dv / w
                            acc[c, 2] += s * (2.0 * side - 1.0)
            for c in range(m):
                if acc[c, 0] != 0.0 or acc[c, 1] != 0.0 or acc[c, 2] != 0.0:
                    add(grad, row0 + cand[c], 0, acc[c, 0])
                    add(grad, row0 + cand[c], 1, acc[c, 1])
                    add(grad, row0 + cand[c], 2, acc[c, 2])
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
        ion_column_ends=ion_column_ends,
        coulomb_node=coulomb_node,
        debye_huckel_point=debye_huckel_point,
        dh_term=dh_term,
        assemble_node=assemble_node,
        stack_node=stack_node,
        sample_point=sample_point,
        ses=ses,
    )


__all__ = ["CAP", "make_frame_bodies"]
