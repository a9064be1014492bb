"""numba-cuda map kernels (one thread per grid line, atom, circle or node).

The formulas are the bodies of :mod:`pbsolver.backends.bodies.maps`, compiled here with
``cuda.jit(device=True)`` (the CPU kernels of :mod:`pbsolver.backends.cpu.maps` compile the
same ones with ``numba.njit``); these kernels only index their work item and hold fixed-size
local buffers: a line may meet at most ``MAX_SPHERES`` atomic spheres and ``MAX_CANDIDATES``
exposed probe candidates, an atom have at most ``MAX_NEIGHBOURS`` neighbours. A work item that
needs more sets ``overflow[0]`` and the wrapper raises :class:`LineCapacityError` (the caller
then builds that map on the CPU). Each thread owns its line's bins, so no atomics are needed
and results do not depend on scheduling.

Compiled lazily on first launch; importing ``numba.cuda`` touches no driver. The neighbour
lists and the 2D bins are built by the CPU code and copied to the device; the wrappers take
and return NumPy arrays, as the CPU ones do.
"""

from __future__ import annotations

import functools
import math
import sys
from types import SimpleNamespace

import numpy as np
from numba import cuda

from pbsolver.backends.bodies import maps as B
from pbsolver.backends.bodies.frames import make_frame_ses
from pbsolver.backends.bodies.lines import compile_lines
from pbsolver.backends.bodies.maps import LineCapacityError
from pbsolver.backends.cpu.maps import neighbour_lists, plane_bins
from pbsolver.backends.cuda.coulomb_tiles import rsqrt64, tiled_coulomb_kernel
from pbsolver.backends.cuda.device import launch_on_legacy_stream as launch
from pbsolver.backends.launch_sizes import THREADS, simulated

MAX_SPHERES = 384
MAX_CANDIDATES = 384
MAX_NEIGHBOURS = 192
#: Arc-endpoint buffer per circle. A named constant, not an expression at the call: numba-cuda
#: needs a literal size for local arrays (the simulator accepts an expression, the GPU not).
ARC_BUFFER = 2 * MAX_NEIGHBOURS + 2

_dev = cuda.jit(device=True)
_S = B.make_ses(_dev, *compile_lines(_dev))
_P = B.make_point_sums(_dev, _dev)
_line, _union_line, _ses_line = _S["line"], _S["union_line"], _S["ses_line"]
_pair_arcs, _pair_owner, _fill_circle = _S["pair_arcs"], _S["pair_owner"], _S["fill_circle"]
#: A local array's shape must be a compile-time constant: a module global, not an attribute.
_ARC_COLUMNS = B.ARC_COLUMNS
_coulomb_node, _debye_huckel_node = _P["coulomb_node"], _P["debye_huckel_node"]
_grid_point = _P["grid_point"]


# ------------------------------------------------------------------ kernels
def with_union_scratch(union_line, spheres=MAX_SPHERES):
    """A device function: ``union_line(*args)`` given its two interval buffers (``spheres`` each).

    As :func:`with_line_scratch`, for the sphere-union line body (``union_line`` of
    :func:`pbsolver.backends.bodies.maps.make_ses`): the starts and ends of the chords it sorts.
    """

    @cuda.jit(device=True)
    def scratched(*args):
        starts = cuda.local.array(spheres, dtype=np.float64)
        ends = cuda.local.array(spheres, dtype=np.float64)
        return union_line(*args, starts, ends)

    return scratched


def with_line_scratch(ses_line, spheres=MAX_SPHERES, candidates=MAX_CANDIDATES):
    """A device function: ``ses_line(*args)`` given fresh local scratch as its last arguments.

    A compiled SES line body (:func:`pbsolver.backends.bodies.maps.make_ses`' ``ses_line`` or a
    body with its scratch arguments, e.g. the frame engine's ``ses_edge_line``) takes its
    buffers last: the sorted sphere intervals (vdW and accessible, ``spheres`` each) and the
    probe candidates (``candidates``). Every SES line kernel calls its body through this, so
    the buffers are declared once. The capacities are compile-time constants (closure values).
    """

    @cuda.jit(device=True)
    def scratched(*args):
        vs_ = cuda.local.array(spheres, dtype=np.float64)
        ve_ = cuda.local.array(spheres, dtype=np.float64)
        ss_ = cuda.local.array(spheres, dtype=np.float64)
        se_ = cuda.local.array(spheres, dtype=np.float64)
        cand = cuda.local.array(candidates, dtype=np.int64)
        ckey = cuda.local.array(candidates, dtype=np.float64)
        hit = cuda.local.array(4, dtype=np.float64)
        return ses_line(*args, vs_, ve_, ss_, se_, cand, ckey, hit)

    return scratched


@cuda.jit(device=True)
def set_line(item, sets, us, vs):
    """Work item ``item``'s set and line: ``(g, iu, iv, u, v)``, g = −1 past the last item.

    Items run over ``sets`` sets of ``us[g]`` × ``vs[g]`` lines (2-D arrays, a row a set), set
    by set; ``(iu, iv, u, v)`` as the line bodies' ``line``.
    """
    lines = us.shape[1] * vs.shape[1]
    if item >= sets * lines:
        return -1, 0, 0, 0.0, 0.0
    g = item // lines
    iu, iv, u, v = _line(item - g * lines, us[g], vs[g])
    return g, iu, iv, u, v


def make_union_lines_kernel(union_line):
    """The CUDA kernel of a compiled sphere-union line body, one thread a (set, line) pair.

    Set g's lines (``us[g]``, ``vs[g]``, 2-D arrays) go into ``out[g]``; one set is a leading
    axis of one (:func:`one_set`). The maps add each line's coverage to the bins (several
    sets into slots of their own, :func:`device_sphere_union_sets`); the forces
    (:mod:`pbsolver.backends.cuda.line_ends`) run the body compiled with a recorder.
    """
    union_line = with_union_scratch(union_line)

    @cuda.jit
    def union_lines_kernel(
        out, axis, us, vs, t0, h, nbins, pos, radius, maxr,
        u0, v0, bsize, nbu, nbv, bstart, border, overflow,
    ):  # fmt: skip
        g, iu, iv, u, v = set_line(cuda.grid(1), out.shape[0], us, vs)
        if g < 0:
            return
        if union_line(out[g], axis, iu, iv, u, v, t0, h, nbins, pos, radius, maxr,
                      u0, v0, bsize, nbu, nbv, bstart, border):  # fmt: skip
            overflow[0] = 1

    return union_lines_kernel


def one_set(a):
    """A device array as the only set of a set kernel: a leading axis of one (a view)."""
    return a.reshape((1, *a.shape))


_k_sphere_union_lines = make_union_lines_kernel(_union_line)


@cuda.jit
def _k_add_slots(out, slots):
    """``out`` += each slot in turn (flat arrays; the sets' order of the CPU's sum)."""
    n = cuda.grid(1)
    if n < out.shape[0]:
        acc = out[n]
        for g in range(slots.shape[0]):
            acc += slots[g, n]
        out[n] = acc


def make_ses_lines_kernel(ses_line, record_pieces=False):
    """The CUDA kernel of a compiled SES line body, one thread a piece of a line.

    The maps add each piece's solute share to its bins. The forces
    (:mod:`pbsolver.backends.cuda.line_ends`) run the body compiled with a recorder and
    ``record_pieces``: piece p of line (iu, iv) then records into ``out[iu, iv·pieces + p]``,
    a slot of its own (``out`` is ``(nu, nv·pieces, capacity + 1, 2)``).
    """
    ses_line = with_line_scratch(ses_line)

    @cuda.jit
    def ses_lines_kernel(
        out, axis, us, vs, t0, h, nbins, pieces, pos, vdw, acc, probe, step, nbisect, maxacc,
        maxreach, u0, v0, bsize, nbu, nbv, bstart, border,
        e_u0, e_v0, e_bsize, e_nbu, e_nbv, e_bstart, e_border,
        nb_start, nb_index, circ_start, geom, arc_start, arcs, overflow,
    ):  # fmt: skip
        # one thread a piece of a line (its edges k_lo ≤ k < k_hi; B.line_pieces)
        item = cuda.grid(1)
        if item >= us.shape[0] * vs.shape[0] * pieces:
            return
        line = item // pieces
        piece = item - line * pieces
        k_lo = piece * nbins // pieces
        k_hi = (piece + 1) * nbins // pieces
        iu, iv, u, v = _line(line, us, vs)
        slot = iv * pieces + piece if record_pieces else iv
        if ses_line(
            out, axis, 0, iu, slot, u, v, t0, h, nbins, k_lo, k_hi, pos, vdw, acc, probe, step,
            nbisect, maxacc, maxreach, u0, v0, bsize, nbu, nbv, bstart, border,
            e_u0, e_v0, e_bsize, e_nbu, e_nbv, e_bstart, e_border,
            nb_start, nb_index, circ_start, geom, arc_start, arcs,
        ):  # fmt: skip
            overflow[0] = 1

    return ses_lines_kernel


_k_ses_lines = make_ses_lines_kernel(_ses_line)


@cuda.jit
def _k_coulomb_periodic(out, origin, spacing, rel, q, scale, box, tol2):
    node = cuda.grid(1)
    nx, ny, nz = out.shape
    if node >= nx * ny * nz:
        return
    i, j, k, x, y, z = _grid_point(node, ny, nz, origin, spacing)
    out[i, j, k] = scale * _coulomb_node(rel, q, 0, x, y, z, box, tol2)


#: Nodes a thread of the open-boundary φ_c kernel
#: (:func:`pbsolver.backends.cuda.coulomb_tiles.tiled_coulomb_kernel`, float64).
COULOMB_NODES = 4


@cuda.jit
def _k_coulomb_on_nodes(out, origin, spacing, pos, q, tol2):
    # one thread an atom: ±inf at its nearest node if the atom lies within the on-node
    # distance of it (only the nearest node can: that distance is far below half a spacing);
    # atomic, so that opposite charges on one node give NaN, as their sum does on the CPU
    a = cuda.grid(1)
    if a >= q.shape[0] or q[a] == 0.0:
        return
    nx, ny, nz = out.shape
    i = min(max(int(math.floor((pos[a, 0] - origin[0]) / spacing[0] + 0.5)), 0), nx - 1)
    j = min(max(int(math.floor((pos[a, 1] - origin[1]) / spacing[1] + 0.5)), 0), ny - 1)
    k = min(max(int(math.floor((pos[a, 2] - origin[2]) / spacing[2] + 0.5)), 0), nz - 1)
    _, _, _, x, y, z = _grid_point((i * ny + j) * nz + k, ny, nz, origin, spacing)
    dx, dy, dz = x - pos[a, 0], y - pos[a, 1], z - pos[a, 2]
    if dx * dx + dy * dy + dz * dz <= tol2:
        cuda.atomic.add(out, (i, j, k), math.inf if q[a] > 0.0 else -math.inf)


@cuda.jit
def _k_coulomb_points(out, points, rel, q, scale, tol2):
    p = cuda.grid(1)
    if p < points.shape[0]:
        out[p] = scale * _coulomb_node(rel, q, 0, points[p, 0], points[p, 1], points[p, 2], None,
                                       tol2)  # fmt: skip


@cuda.jit
def _k_debye_huckel_points(out, points, rel, q, radii, kappa, coulomb, eps_out, eps_cavity):
    p = cuda.grid(1)
    if p >= points.shape[0]:
        return
    v = _debye_huckel_node(rel, q, radii, 0, points[p, 0], points[p, 1], points[p, 2], kappa,
                           eps_out, eps_cavity, 1.0)  # fmt: skip
    out[p] = coulomb * v


@cuda.jit
def count_arcs_kernel(pos, rad, nb_start, nb_index, nfree, nested, intersecting, overflow):
    """Free arcs of the circle of each neighbour pair (one thread a pair); the frame engine's too.

    ``nested`` and ``intersecting`` (per atom, zeroed by the caller) gather the pairs' flags
    and circle counts: an atom's pairs are spread over threads, so each pair adds its own.
    """
    s = cuda.grid(1)
    if s >= nb_index.shape[0] or s >= nb_start[nb_start.shape[0] - 1]:
        return
    g = cuda.local.array(13, dtype=np.float64)
    bs = cuda.local.array(ARC_BUFFER, dtype=np.float64)
    be = cuda.local.array(ARC_BUFFER, dtype=np.float64)
    dummy = cuda.local.array((1, _ARC_COLUMNS), dtype=np.float64)
    i = _pair_owner(nb_start, s)
    inside, meets, bad = _pair_arcs(pos, rad, i, s, nb_start, nb_index, nfree, g, bs, be, dummy)
    if bad:
        overflow[0] = 1
    if inside:
        nested[i] = True
    if meets:
        cuda.atomic.add(intersecting, i, 1)


@cuda.jit
def fill_circles_kernel(pos, rad, circ_i, circ_j, nb_start, nb_index, arc_start, geom, arcs):
    """Geometry and free arcs of circle ``c`` (one thread a circle); the frame engine's too."""
    c = cuda.grid(1)
    if c >= circ_i.shape[0]:
        return
    g = cuda.local.array(13, dtype=np.float64)
    bs = cuda.local.array(ARC_BUFFER, dtype=np.float64)
    be = cuda.local.array(ARC_BUFFER, dtype=np.float64)
    _fill_circle(pos, rad, c, circ_i[c], circ_j[c], nb_start, nb_index, arc_start, geom, arcs,
                 g, bs, be)  # fmt: skip


# ------------------------------------------------------------------ host wrappers
def blocks(n):
    """Blocks of ``THREADS`` threads that cover ``n`` work items."""
    return max(1, (n + THREADS - 1) // THREADS)


@functools.cache
def _cupy():
    """CuPy where it runs (a GPU, not the simulator), else None.

    The maps' many small inputs go through CuPy's memory pool: numba's ``to_device`` allocates
    and copies synchronously, with a Python overhead per array that dominated the κ̄² map's
    sub-sampled launches (BENCHMARKS.md, tenth session). The kernels take them as numba views
    (:func:`~pbsolver.backends.cuda.device.launch_on_legacy_stream`) on the legacy default
    stream, so the CuPy work here runs there too (``Stream.null``), whatever stream is current
    around it.
    """
    if simulated():
        return None
    try:
        import cupy
    except ImportError:
        return None
    return cupy


def device_copy(a):
    """A device copy of the host array ``a`` (C order)."""
    cp = _cupy()
    a = np.ascontiguousarray(a)
    if cp is None:
        return cuda.to_device(a)
    with cp.cuda.Stream.null:
        return cp.asarray(a)


def device_zeros(shape, dtype=np.float64):
    """A zeroed device array (CuPy's pool where it runs)."""
    cp = _cupy()
    if cp is None:
        return cuda.to_device(np.zeros(shape, dtype))
    with cp.cuda.Stream.null:
        return cp.zeros(shape, dtype)


def device_empty(shape, dtype=np.float64):
    """An uninitialised device array (CuPy's pool where it runs)."""
    cp = _cupy()
    if cp is None:
        return cuda.device_array(shape, dtype=dtype)
    with cp.cuda.Stream.null:
        return cp.empty(shape, dtype)


def host_copy(d):
    """The device array ``d`` as a NumPy array (synchronises)."""
    cp = _cupy()
    if cp is None:
        return d.copy_to_host()
    with cp.cuda.Stream.null:
        return cp.asnumpy(d)


def check_overflow(overflow, what):
    """Raise :class:`LineCapacityError` if a kernel set ``overflow[0]`` (a work item too big)."""
    if host_copy(overflow)[0]:
        raise LineCapacityError(f"{what} than the CUDA kernel holds")


def sphere_union_lines(out_shape, axis, us, vs, t0, h, nbins, pos, radius, bins):
    """CUDA :func:`.cpu.maps.sphere_union_lines` (same arguments, NumPy result)."""
    return sphere_union_sets(out_shape, axis, [(us, vs, bins)], t0, h, nbins, pos, radius)


def sphere_union_sets(out_shape, axis, line_sets, t0, h, nbins, pos, radius):
    """CUDA :func:`.cpu.maps.sphere_union_sets`: the sets summed on the device, one copy back."""
    return host_copy(device_sphere_union_sets(out_shape, axis, line_sets, t0, h, nbins, pos,
                                              radius))  # fmt: skip


#: Grid entries the fused κ̄² line sets may hold at once (one slot array a set): 256 MiB of
#: float64. More sets than fit are run in groups; a grid too big for two slots runs a launch a
#: set into the sum itself. The slots also take at most :data:`SLOT_SHARE` of the GPU memory
#: free when they are made (:func:`slot_group`).
SLOT_ENTRIES = 1 << 25
#: The share of the free GPU memory (the driver's, plus CuPy's pooled blocks) the slots may take.
SLOT_SHARE = 0.25


def slot_group(n_sets, size):
    """How many line sets of a grid of ``size`` nodes get a slot at once (< 2: none).

    At most :data:`SLOT_ENTRIES` entries in all, and :data:`SLOT_SHARE` of the GPU memory free
    now: the slots are transient memory that the solve's estimate
    (:mod:`pbsolver.resources`) does not count, so they must never be what runs a device out
    of memory; with too little free the sets run one launch a set, as for large grids.
    """
    size = max(int(size), 1)
    group = min(int(n_sets), SLOT_ENTRIES // size)
    cp = _cupy()
    if cp is not None and group >= 2:
        group = min(group, int(SLOT_SHARE * free_gpu_bytes(cp)) // (8 * size))
    return group


def free_gpu_bytes(cp):
    """Bytes CuPy can still allocate on the current device (driver's free + pool's free)."""
    free, _ = cp.cuda.runtime.memGetInfo()
    return int(free) + int(cp.get_default_memory_pool().free_bytes())


def device_sphere_union_sets(out_shape, axis, line_sets, t0, h, nbins, pos, radius):
    """:func:`sphere_union_sets` left on the device.

    Sets that share their atom bins and line counts (the ion-accessible map's subsampled lines)
    run as one launch over (set, line) pairs, each set into its own zeroed slot, then one
    launch adds the slots to the sum in the sets' order. A bin gets the CPU's sum but for where
    one set's line adds two intervals to it (a gap inside one bin): there the set's two shares
    are added together first, a difference of rounding. Other sets run one launch a set.
    The slots are transient GPU memory of up to :data:`SLOT_ENTRIES` float64 and a share of
    what is free (:func:`slot_group`).
    """
    out = device_zeros(out_shape)
    overflow = device_zeros(1, np.int64)
    maxr = float(radius.max()) if radius.size else 0.0
    pos_d, radius_d = device_copy(pos), device_copy(radius)
    uploaded = {}  # sets share their line coordinates and bins: each array goes up once

    def up(a):
        if id(a) not in uploaded:
            uploaded[id(a)] = (a, device_copy(a))  # (the host array kept: its id stays its own)
        return uploaded[id(a)][1]

    def bin_args(bins):
        u0, v0, bsize, nbu, nbv, bstart, border = bins
        return (float(u0), float(v0), float(bsize), int(nbu), int(nbv), up(bstart), up(border))

    reach = (float(t0), float(h), int(nbins), pos_d, radius_d, maxr)
    size = math.prod(out_shape)
    group = slot_group(len(line_sets), size)
    if group >= 2 and _fusable(line_sets):  # (one slot would only add a grid's copy)
        lines = len(line_sets[0][0]) * len(line_sets[0][1])
        for a in range(0, len(line_sets), group):
            sets = line_sets[a : a + group]
            us = device_copy(np.stack([s[0] for s in sets]))
            vs = device_copy(np.stack([s[1] for s in sets]))
            slots = device_zeros((len(sets), *out_shape))
            launch(_k_sphere_union_lines, blocks(len(sets) * lines), THREADS, slots, axis, us, vs,
                   *reach, *bin_args(sets[0][2]), overflow)  # fmt: skip
            launch(_k_add_slots, blocks(size), THREADS, out.reshape(-1),
                   slots.reshape(len(sets), size))  # fmt: skip
    else:
        for us, vs, bins in line_sets:
            launch(_k_sphere_union_lines, blocks(len(us) * len(vs)), THREADS, one_set(out), axis,
                   one_set(up(us)), one_set(up(vs)), *reach, *bin_args(bins), overflow)  # fmt: skip
    check_overflow(overflow, "a grid line meets more spheres")
    return out


def _fusable(line_sets):
    """Several sets with one atom binning and the same numbers of lines."""
    if len(line_sets) < 2:
        return False
    us0, vs0, bins0 = line_sets[0]
    return all(b is bins0 and len(u) == len(us0) and len(v) == len(vs0)
               for u, v, b in line_sets[1:])  # fmt: skip


def ses_lines(out_shape, axis, us, vs, t0, h, nbins, pos, vdw, acc, probe, step, nbisect,
              bins, ebins, features, nb, only=None):  # fmt: skip
    """CUDA :func:`.cpu.maps.ses_lines` (same arguments, NumPy result).

    ``only`` is accepted and every line is computed: a caller that passes it keeps only the
    lines it names.
    """
    return host_copy(device_ses_lines(out_shape, axis, us, vs, t0, h, nbins, pos, vdw, acc,
                                      probe, step, nbisect, bins, ebins, features,
                                      nb))  # fmt: skip


def device_ses_lines(out_shape, axis, us, vs, t0, h, nbins, pos, vdw, acc, probe, step, nbisect,
                     bins, ebins, features, nb, only=None):  # fmt: skip
    """:func:`ses_lines` left on the device (every line computed, ``only`` as there)."""
    _exposed, circ_start, _cj, geom, arc_start, arcs = features
    nb_start, nb_index = nb
    out = device_zeros(out_shape)
    overflow = device_zeros(1, np.int64)
    maxacc = float(acc.max())
    geom = geom if len(geom) else np.zeros((1, 13))
    arcs = arcs if len(arcs) else np.zeros((1, B.ARC_COLUMNS))
    pieces = B.line_pieces(nbins, len(us) * len(vs))
    launch(_k_ses_lines, blocks(len(us) * len(vs) * pieces), THREADS,
        out, axis, device_copy(us), device_copy(vs), float(t0), float(h), int(nbins), pieces,
        device_copy(pos), device_copy(vdw), device_copy(acc), float(probe), float(step),
        int(nbisect), maxacc, maxacc + float(probe),
        float(bins[0]), float(bins[1]), float(bins[2]), int(bins[3]), int(bins[4]),
        device_copy(bins[5]), device_copy(bins[6]),
        float(ebins[0]), float(ebins[1]), float(ebins[2]), int(ebins[3]), int(ebins[4]),
        device_copy(ebins[5]), device_copy(ebins[6]),
        device_copy(nb_start), device_copy(nb_index), device_copy(circ_start), device_copy(geom),
        device_copy(arc_start), device_copy(arcs), overflow,
    )  # fmt: skip
    check_overflow(overflow, "a grid line meets more spheres")
    return out


def coulomb_sum(shape, origin, spacing, pos, q, scale, box=None):
    """CUDA :func:`.cpu.maps.coulomb_sum` (same arguments, NumPy result).

    Without a periodic box, the tiled float64 kernel of
    :mod:`pbsolver.backends.cuda.coulomb_tiles` and the on-node pass; with one, one thread a
    node over the nearest-image pair body.
    """
    return host_copy(device_coulomb_sum(shape, origin, spacing, pos, q, scale, box))


def device_coulomb_sum(shape, origin, spacing, pos, q, scale, box=None):
    """:func:`coulomb_sum` left on the device."""
    shape = tuple(int(n) for n in shape)
    out = device_empty(shape)
    q = np.asarray(q, float)
    charged = q != 0.0  # the charged atoms only: fewer pairs
    d_origin = device_copy(np.asarray(origin, float))
    d_spacing = device_copy(np.asarray(spacing, float))
    d_pos, d_q = device_copy(np.asarray(pos, float)[charged]), device_copy(q[charged])
    tol2 = B.on_node_tol2(spacing)
    nn = int(np.prod(shape))
    if box is not None:
        launch(_k_coulomb_periodic, blocks(nn), THREADS,
            out, d_origin, d_spacing, d_pos[None], d_q, float(scale),
            device_copy(np.asarray(box, float)), tol2,
        )  # fmt: skip
        return out
    if not charged.any():
        return device_zeros(shape)
    # the tiled kernel: positions relative to the origin, one frame
    rel = device_copy((np.asarray(pos, float)[charged] - np.asarray(origin, float))[None])
    kernel = tiled_coulomb_kernel(np.float64, COULOMB_NODES, rsqrt64)
    grid = (blocks(-(-nn // COULOMB_NODES)), 1)
    launch(kernel, grid, THREADS, out, rel, d_q, float(scale), *shape, 0, d_spacing)
    launch(_k_coulomb_on_nodes, blocks(int(charged.sum())), THREADS, out, d_origin, d_spacing,
           d_pos, d_q, tol2)  # fmt: skip
    return out


def coulomb_points(points, pos, q, scale, tol2):
    """CUDA :func:`.cpu.maps.coulomb_points` (same arguments, NumPy result)."""
    out = device_empty(len(points))
    launch(_k_coulomb_points, blocks(len(points)), THREADS,
        out, device_copy(np.asarray(points, float)), device_copy(np.asarray(pos, float)[None]),
        device_copy(np.asarray(q, float)), float(scale), float(tol2),
    )  # fmt: skip
    return host_copy(out)


def debye_huckel_points(points, pos, q, radii, kappa, coulomb, eps_out, eps_cavity):
    """CUDA :func:`.cpu.maps.debye_huckel_points` (same arguments, NumPy result)."""
    out = device_empty(len(points))
    launch(_k_debye_huckel_points, blocks(len(points)), THREADS,
        out, device_copy(np.asarray(points, float)), device_copy(np.asarray(pos, float)[None]),
        device_copy(np.asarray(q, float)), device_copy(np.asarray(radii, float)), float(kappa),
        float(coulomb), float(eps_out), float(eps_cavity),
    )  # fmt: skip
    return host_copy(out)


def ses_features(pos, rad, nb_start, nb_index):
    """CUDA :func:`.cpu.maps.ses_features` (same outputs, as NumPy arrays).

    Two launches (one thread a neighbour pair to count free arcs, one a circle to fill them) and
    the host compaction between them. Raises :class:`LineCapacityError` when an atom has more
    than ``MAX_NEIGHBOURS`` neighbours.
    """
    n = pos.shape[0]
    npair = nb_index.shape[0]
    d_pos, d_rad = device_copy(pos), device_copy(rad)
    d_start, d_index = device_copy(nb_start), device_copy(nb_index)
    nfree = device_zeros(max(npair, 1), np.int64)
    nested = device_zeros(n, np.bool_)
    inter = device_zeros(n, np.int64)
    overflow = device_zeros(1, np.int64)
    launch(count_arcs_kernel, blocks(npair), THREADS, d_pos, d_rad, d_start, d_index, nfree,
           nested, inter, overflow)  # fmt: skip
    check_overflow(overflow, "an atom has more neighbours")
    exposed, circ_start, circ_i, circ_j, arc_start = B.compact_circles(
        nb_start, nb_index, host_copy(nfree)[:npair], host_copy(nested), host_copy(inter),
    )  # fmt: skip
    nc = len(circ_i)
    geom = np.zeros((nc, 13))
    arcs = np.zeros((int(arc_start[-1]), B.ARC_COLUMNS))
    if nc:
        d_geom = device_copy(geom)
        d_arcs = device_copy(arcs)
        launch(fill_circles_kernel, blocks(nc), THREADS,
            d_pos, d_rad, device_copy(circ_i), device_copy(circ_j), d_start, d_index,
            device_copy(arc_start), d_geom, d_arcs,
        )  # fmt: skip
        geom = host_copy(d_geom)
        arcs = host_copy(d_arcs)
    return exposed, circ_start, circ_j, geom, arc_start, arcs


# ------------------------------------------------------------------ maps left on the device
_snap = _dev(B.snap_fraction_body)
_face_eps = _dev(B.face_eps_body)
_smooth_node = make_frame_ses(_dev, *compile_lines(_dev)).smooth_node


@cuda.jit
def _k_snap(f):
    n = cuda.grid(1)
    if n < f.shape[0]:
        f[n] = _snap(f[n])


@cuda.jit
def _k_faces(f, eps_in, eps_out, out):
    n = cuda.grid(1)
    if n < f.shape[0]:
        out[n] = _face_eps(f[n], eps_in, eps_out)


@cuda.jit
def _k_smooth(fx, fy, fz, ox, oy, oz):
    node = cuda.grid(1)
    nx, ny, nz = fx.shape
    if node < nx * ny * nz:
        i = node // (ny * nz)
        j = (node // nz) % ny
        _smooth_node(fx, fy, fz, ox, oy, oz, 0, i, j, node % nz, nx, ny, nz)


def device_snap_fractions(f):
    """Snap the C-ordered device array ``f`` in place; :func:`.cpu.maps.snap_fractions`' body."""
    flat = f.reshape(-1)
    launch(_k_snap, blocks(flat.shape[0]), THREADS, flat)
    return f


def device_faces_from_fractions(f, eps_in, eps_out):
    """Face ε of the C-ordered device fractions ``f``: :func:`.cpu.maps.faces_from_fractions`."""
    out = device_empty(f.shape)
    launch(_k_faces, blocks(f.size), THREADS, f.reshape(-1), float(eps_in), float(eps_out),
           out.reshape(-1))  # fmt: skip
    return out


def device_smooth_fractions(fx, fy, fz):
    """APBS' 9-point smoothing of snapped device fractions, new arrays (the frame engine's body)."""
    out = tuple(device_empty(fx.shape) for _ in range(3))
    launch(_k_smooth, blocks(fx.size), THREADS, fx, fy, fz, *out)
    return out


@functools.cache
def device_results():
    """The map kernels whose results stay on the GPU (CuPy arrays); None without CuPy.

    A namespace: ``xp`` (CuPy), ``sphere_union_sets``, ``ses_lines`` and ``coulomb_sum`` (the
    arguments of the host wrappers, device results), ``snap_fractions`` (in place),
    ``faces_from_fractions`` and ``smooth_fractions``. Under numba's simulator there is no
    CuPy: None, and the maps are host arrays.
    """
    cp = _cupy()
    if cp is None:
        return None
    return SimpleNamespace(
        xp=cp, sphere_union_sets=device_sphere_union_sets, ses_lines=device_ses_lines,
        coulomb_sum=device_coulomb_sum, snap_fractions=device_snap_fractions,
        faces_from_fractions=device_faces_from_fractions,
        smooth_fractions=device_smooth_fractions,
    )  # fmt: skip


#: The CUDA map kernels (:meth:`pbsolver.backends.cuda.CUDABackend.map_kernels`); the
#: neighbour lists and bins are built on the host.
KERNELS = B.MapKernels(sys.modules[__name__])

__all__ = [
    "KERNELS",
    "LineCapacityError",
    "make_ses_lines_kernel",
    "make_union_lines_kernel",
    "one_set",
    "count_arcs_kernel",
    "fill_circles_kernel",
    "neighbour_lists",
    "plane_bins",
]
