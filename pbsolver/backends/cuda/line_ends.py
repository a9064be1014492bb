"""numba-cuda kernels of the forces' sphere-union terms: how each merged chord end moves.

The CUDA twin of :func:`pbsolver.backends.cpu.line_ends.sphere_end_slopes` (the ion-accessible
map's term and the "vdw" surface's): the sphere-union line body of the maps runs with a
recorder in place of the bins, one thread a line, then a second kernel matches every end to
its sphere (bodies :mod:`pbsolver.backends.bodies.line_ends`, the CPU loops' own). The ends are
the CUDA map kernels' ends; the result is the CPU function's, in NumPy arrays. A line that
meets more than :data:`pbsolver.backends.cuda.maps.MAX_SPHERES` spheres raises
:class:`~pbsolver.backends.bodies.maps.LineCapacityError`, as the map kernels do.
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from pbsolver.backends.bodies import maps as B
from pbsolver.backends.bodies.line_ends import compile_line_ends
from pbsolver.backends.bodies.lines import compile_lines, record_range_body
from pbsolver.backends.cuda.maps import (
    blocks,
    check_overflow,
    device_copy,
    device_zeros,
    host_copy,
    make_union_lines_kernel,
)
from pbsolver.backends.launch_sizes import THREADS

_dev = cuda.jit(device=True)
_S = B.make_ses(_dev, *compile_lines(_dev, record_range_body), range_body=record_range_body)
_union_line = _S["union_line"]
_union_line_slopes = compile_line_ends(_dev, _S)[3]

#: Intervals a line records before the lines are redone with room for all of them.
FIRST_UNION_CAPACITY = 8


_k_union_record = make_union_lines_kernel(_union_line)


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


def sphere_end_slopes(axis, us, vs, t0, h, nbins, pos, radius, bins):
    """CUDA :func:`pbsolver.backends.cpu.line_ends.sphere_end_slopes`, in NumPy arrays.

    Same arguments; ``(lines, bins, atoms, slopes)`` with one atom an end (``atoms`` (m, 1),
    ``slopes`` (m, 1, 3): the CPU result's used columns).
    """
    nu, nv = len(us), len(vs)
    u0, v0, bsize, nbu, nbv, bstart, border = bins
    maxr = float(radius.max()) if radius.size else 0.0
    geometry = (axis, device_copy(us), device_copy(vs), float(t0), float(h), int(nbins),
                device_copy(pos), device_copy(radius), maxr, float(u0), float(v0), float(bsize),
                int(nbu), int(nbv), device_copy(bstart), device_copy(border))  # fmt: skip
    capacity = FIRST_UNION_CAPACITY
    while True:
        rec = device_zeros((nu, nv, capacity + 1, 2))  # the counts start at 0
        overflow = device_zeros(1, np.int64)
        _k_union_record[blocks(nu * nv), THREADS](rec, *geometry, overflow)
        check_overflow(overflow, "a grid line meets more spheres")
        counts = host_copy(rec[:, :, 0, 0]).astype(np.int64)
        if counts.max(initial=0) <= capacity:
            break
        capacity = int(counts.max())  # redo the lines with room for all
    offsets = np.concatenate([[0], np.cumsum(2 * counts.ravel())]).astype(np.int64)
    total = max(1, int(offsets[-1]))
    # one atom an end (the union's ends move with one sphere): the CPU's (m, 3) and (m, 3, 3)
    # less their unused columns, a third of the bytes to copy back
    out_bin = device_copy(np.full(total, -1, dtype=np.int64))
    out_atoms = device_copy(np.full((total, 1), -1, dtype=np.int64))
    out_slopes = device_zeros((total, 1, 3))
    _k_union_slopes[blocks(nu * nv), THREADS](rec, device_copy(offsets), *geometry, out_bin,
                                              out_atoms, out_slopes)  # fmt: skip
    out_bin = host_copy(out_bin)[: offsets[-1]]
    keep = np.flatnonzero(out_bin >= 0)
    line = np.searchsorted(offsets, keep, side="right") - 1
    lines = np.column_stack([line // nv, line % nv])
    return lines, out_bin[keep], host_copy(out_atoms)[keep], host_copy(out_slopes)[keep]
