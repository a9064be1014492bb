"""numba-cuda loops of the force sums (bodies in :mod:`pbsolver.backends.bodies.forces`).

The CUDA twins of :func:`pbsolver.backends.cpu.forces.coulomb_sums` and
:func:`~pbsolver.backends.cpu.forces.debye_huckel_sums` (:func:`radial_sums`: two centres a
thread, the nodes cut into chunks that blocks read in shared-memory tiles, float32 terms as on
the CPU, each chunk's sums kept apart and added in a fixed order, so the result does not depend
on scheduling); and of
:func:`~pbsolver.backends.cpu.forces.coulomb_sensitivity` and
:func:`~pbsolver.backends.cpu.forces.kappa_sensitivity` (one thread a node) and
:func:`~pbsolver.backends.cpu.forces.grid_nodes` (array code). Device arrays in (CuPy, or NumPy
under numba's simulator), an array of the same library out. Compiled lazily on first launch.
"""

from __future__ import annotations

import functools
import math

import numpy as np
from numba import cuda
from numba.cuda import libdevice

from pbsolver.arrays import array_module, to_numpy
from pbsolver.backends.bodies import forces as B
from pbsolver.backends.cuda.device import launch_on_legacy_stream as launch
from pbsolver.backends.cuda.kernels import B as OPERATOR
from pbsolver.backends.launch_sizes import THREADS, simulated

_dev = cuda.jit(device=True)
# the radial sums' terms in float32 with approximate arithmetic, as the CPU forms them (its
# loops' fastmath flags); 1/r³ from one reciprocal square root
_fast = cuda.jit(device=True, fastmath=True)


def _simulated_rsqrt(x):
    """1/√x where numba's simulator has no ``libdevice.rsqrtf`` (its stub returns None)."""
    return 1.0 / math.sqrt(x)


_bodies32 = B.radial_bodies(
    np.float32, rsqrt=_fast(_simulated_rsqrt) if simulated() else libdevice.rsqrtf
)
_term32 = _fast(B.make_radial_term(*(_fast(body) for body in _bodies32)))
_sensitivity = _dev(B.coulomb_sensitivity_body)
_kappa = _dev(B.kappa_sensitivity_body)
_fraction = _dev(B.fraction_sensitivity_body)


_node_dev = _dev(B.node_body)


@cuda.jit
def _k_fraction_sensitivities(lam, phic, phi, fx, fy, fz, cx, cy, cz, slope, ox, oy, oz):
    p = cuda.grid(1)
    if p >= lam.size:
        return
    i, j, k = _node_dev(p, lam.shape)
    ox[i, j, k] = _fraction(lam, phic, phi, fx, 0, i, j, k, cx, slope)
    oy[i, j, k] = _fraction(lam, phic, phi, fy, 1, i, j, k, cy, slope)
    oz[i, j, k] = _fraction(lam, phic, phi, fz, 2, i, j, k, cz, slope)


def fraction_sensitivities(lam, phi_coulomb, phi, faces, spacing, slope):
    """∂G/∂f of every face; see :func:`pbsolver.backends.cpu.forces.fraction_sensitivities`."""
    xp = array_module(lam)
    out = tuple(xp.empty(lam.shape) for _ in range(3))
    c = [1.0 / (h * h) for h in spacing]
    blocks = (lam.size + THREADS - 1) // THREADS
    launch(_k_fraction_sensitivities, blocks, THREADS,
        *(xp.ascontiguousarray(a) for a in (lam, phi_coulomb, phi, *faces)), *c, float(slope),
        *out,
    )  # fmt: skip
    return out


@cuda.jit
def _k_kappa_sensitivity(lam, phic, phi, out):
    p = cuda.grid(1)
    if p >= lam.size:
        return
    i, j, k = _node_dev(p, lam.shape)
    out[i, j, k] = _kappa(lam, phic, phi, i, j, k)


def kappa_sensitivity(lam, phi_coulomb, phi):
    """∂G/∂κ̄² at every node; see :func:`pbsolver.backends.cpu.forces.kappa_sensitivity`."""
    xp = array_module(lam)
    out = xp.empty(lam.shape)
    blocks = (lam.size + THREADS - 1) // THREADS
    launch(_k_kappa_sensitivity, blocks, THREADS,
           *(xp.ascontiguousarray(a) for a in (lam, phi_coulomb, phi)), out)  # fmt: skip
    return out


@cuda.jit
def _k_coulomb_sensitivity(lam, fx, fy, fz, kappa2, salt, eps_c, cx, cy, cz, out):
    p = cuda.grid(1)
    if p >= lam.size:
        return
    i, j, k = _node_dev(p, lam.shape)
    im, ip = OPERATOR.neighbours(i, lam.shape[0])
    jm, jp = OPERATOR.neighbours(j, lam.shape[1])
    km, kp = OPERATOR.neighbours(k, lam.shape[2])
    out[i, j, k] = _sensitivity(lam, fx, fy, fz, kappa2, salt, i, j, k, im, ip, jm, jp, km, kp,
                                eps_c, cx, cy, cz)  # fmt: skip


def coulomb_sensitivity(lam, faces, kappa2, eps_cavity, spacing):
    """μ = ∂G/∂φ_c at every node; see :func:`pbsolver.backends.cpu.forces.coulomb_sensitivity`."""
    xp = array_module(lam)
    lam = xp.ascontiguousarray(lam, dtype=xp.float64)
    out = xp.empty(lam.shape)
    salt = kappa2 is not None
    c = [1.0 / (h * h) for h in spacing]
    blocks = (lam.size + THREADS - 1) // THREADS
    launch(_k_coulomb_sensitivity, blocks, THREADS,
        lam, *(xp.ascontiguousarray(f) for f in faces),
        xp.ascontiguousarray(kappa2) if salt else lam, salt, float(eps_cavity), *c, out,
    )  # fmt: skip
    return out


def grid_nodes(field, origin, spacing, stride=None):
    """Coordinates (3, m) and values (m,) of the nodes where ``field`` ≠ 0 (array code).

    With ``stride``, ``field`` is a stack of blocks of ``stride`` planes, each a grid of its
    own: a node's x is its block's (plane − f·stride).
    """
    xp = array_module(field)
    flat = field.reshape(-1)
    idx = xp.flatnonzero(flat)
    ijk = list(xp.unravel_index(idx, field.shape))
    if stride is not None:
        ijk[0] = ijk[0] % int(stride)
    points = xp.stack([origin[a] + ijk[a] * spacing[a] for a in range(3)])
    return points, flat[idx].astype(xp.float64)


#: Threads a block of the radial sums; their nodes go by in shared-memory tiles of as many.
SUM_THREADS = 32 if simulated() else 128
#: Centres a thread of the radial sums (the kernel is written for two): each node read from the
#: tile serves both, so a tile's shared-memory loads and loop steps are shared by two terms.
SUM_CENTRES = 2
#: Blocks the radial sums aim for (the node list is cut into as many chunks as it takes to
#: reach this count with the centres' blocks, eight a multiprocessor on an H200); each chunk's
#: sums are kept apart and added in a fixed order, so the result depends on the sizes only.
SUM_BLOCKS = 8 if simulated() else 1056
#: The radial sums' shared-memory tile rows start on 16 bytes, so that a node is one vector
#: load (numba's simulator takes no alignment).
TILE_ALIGNMENT = None if simulated() else 16


def _make_radial_sums(periodic, mdh):
    """The radial sums' kernel with ``periodic`` and ``mdh`` fixed (their branches compiled out).

    Thread t of block (b, y, f) holds frame f = ``blockIdx.z``'s centres
    i = ``centre_start[f] + b·SUM_CENTRES·SUM_THREADS + t`` and i + SUM_THREADS, and adds the
    nodes of chunk y (``chunk`` of them, from ``node_start[f]``), read in shared-memory tiles of
    SUM_THREADS nodes, one row of (x, y, z, w) a node, that every thread of the block reads;
    float32 terms (coordinates relative to a point near the centres) summed in float32 over a
    tile and in float64 over the tiles. Each centre's three sums go to ``partial[y, i]``: the
    caller adds the chunks in order.
    """

    @cuda.jit(fastmath=True)
    def radial_sums_kernel(px, py, pz, weights, centres, box, radii, kappa, eps_out, inv_c,
                           node_start, centre_start, chunk, partial):  # fmt: skip
        f = cuda.blockIdx.z
        t = cuda.threadIdx.x
        first, last = centre_start[f], centre_start[f + 1]
        block_first = first + cuda.blockIdx.x * (SUM_CENTRES * SUM_THREADS)
        i0 = block_first + t
        i1 = i0 + SUM_THREADS
        lo = node_start[f] + cuda.blockIdx.y * chunk
        hi = min(node_start[f + 1], lo + chunk)
        if block_first >= last or lo >= hi:
            return  # the whole block: a frame with fewer centres or nodes than the launch's most
        # one 16-byte row a node: a thread reads a node in one shared-memory load
        tile = cuda.shared.array((SUM_THREADS, 4), dtype=np.float32, alignment=TILE_ALIGNMENT)
        c0 = min(i0, last - 1)  # past the frame's last centre: the last again, not written
        c1 = min(i1, last - 1)
        ax, ay, az, ra = centres[c0, 0], centres[c0, 1], centres[c0, 2], radii[c0]
        bx, by, bz, rb = centres[c1, 0], centres[c1, 1], centres[c1, 2], radii[c1]
        gx, gy, gz = 0.0, 0.0, 0.0
        hx, hy, hz = 0.0, 0.0, 0.0
        for base in range(lo, hi, SUM_THREADS):
            p = base + t
            if p < hi:
                tile[t, 0] = px[p]
                tile[t, 1] = py[p]
                tile[t, 2] = pz[p]
                tile[t, 3] = weights[p]
            cuda.syncthreads()
            tx, ty, tz = np.float32(0.0), np.float32(0.0), np.float32(0.0)
            ux, uy, uz = np.float32(0.0), np.float32(0.0), np.float32(0.0)
            for k in range(min(SUM_THREADS, hi - base)):
                q = np.uint32(k)  # unsigned: no negative-index wrap-around in the loop
                x, y, z, w = tile[q, 0], tile[q, 1], tile[q, 2], tile[q, 3]
                fx, fy, fz = _term32(x, y, z, w, ax, ay, az, box, periodic, mdh, ra, kappa,
                                     eps_out, inv_c)  # fmt: skip
                tx += fx
                ty += fy
                tz += fz
                fx, fy, fz = _term32(x, y, z, w, bx, by, bz, box, periodic, mdh, rb, kappa,
                                     eps_out, inv_c)  # fmt: skip
                ux += fx
                uy += fy
                uz += fz
            gx += tx
            gy += ty
            gz += tz
            hx += ux
            hy += uy
            hz += uz
            cuda.syncthreads()
        if i0 < last:
            partial[cuda.blockIdx.y, i0, 0] = gx
            partial[cuda.blockIdx.y, i0, 1] = gy
            partial[cuda.blockIdx.y, i0, 2] = gz
        if i1 < last:
            partial[cuda.blockIdx.y, i1, 0] = hx
            partial[cuda.blockIdx.y, i1, 1] = hy
            partial[cuda.blockIdx.y, i1, 2] = hz

    return radial_sums_kernel


@functools.cache
def radial_sums_kernel(periodic, mdh):
    """The kernel of :func:`radial_sums` for a periodic box or not, "mdh" terms or Coulomb's.

    Made on first use, one a pair of flags.
    """
    return _make_radial_sums(periodic, mdh)


def radial_sums(points, weights, centres, box=None, radii=None, kappa=0.0, eps_out=1.0,
                inv_c=1.0, node_start=None, centre_start=None):  # fmt: skip
    """Σ_p w_p g(|p − c_i|)(p − c_i) for every centre: (n, 3) float64, in the arrays' library.

    g is the Coulomb slope 1/r³, or with ``radii`` the "mdh" slope. ``points`` (3, m), one row
    per axis. With ``node_start``/``centre_start`` (host int arrays of B + 1 offsets) the
    centres of frame f sum over the nodes of frame f only: B frames in one launch. The terms
    are float32 as on the CPU (:func:`pbsolver.backends.cpu.forces.coulomb_sums`), relative to
    the middle of all the centres.
    """
    xp = array_module(points)
    n, m = len(centres), points.shape[1]
    if n == 0 or m == 0:
        return xp.zeros((n, 3))
    node_start = np.asarray([0, m] if node_start is None else node_start, dtype=np.int64)
    centre_start = np.asarray([0, n] if centre_start is None else centre_start, dtype=np.int64)
    frames = len(node_start) - 1
    periodic = box is not None
    mdh = radii is not None
    centres = xp.asarray(centres, dtype=xp.float64)
    ref = 0.5 * (centres.min(axis=0) + centres.max(axis=0))  # float32 differences near them
    rows = (xp.asarray(points, dtype=xp.float64) - ref[:, None]).astype(xp.float32)

    def f32(a):
        return xp.ascontiguousarray(xp.asarray(a, dtype=xp.float32))

    most_centres = int(np.diff(centre_start).max())
    most_nodes = int(np.diff(node_start).max())
    across = -(-most_centres // (SUM_CENTRES * SUM_THREADS))
    chunks = max(1, min(-(-most_nodes // SUM_THREADS), -(-SUM_BLOCKS // (across * frames))))
    chunk = -(-most_nodes // chunks)
    partial = xp.zeros((chunks, n, 3))  # a frame's chunks past its nodes add nothing
    launch(radial_sums_kernel(periodic, mdh), (across, chunks, frames), SUM_THREADS,
        xp.ascontiguousarray(rows[0]), xp.ascontiguousarray(rows[1]),
        xp.ascontiguousarray(rows[2]), f32(weights),
        f32(centres - ref),
        f32(box if periodic else (1.0, 1.0, 1.0)),
        f32(radii if mdh else np.zeros(n)), np.float32(kappa), np.float32(eps_out),
        np.float32(inv_c), xp.asarray(node_start), xp.asarray(centre_start), int(chunk), partial,
    )  # fmt: skip
    return partial.sum(axis=0)  # a fixed order: the same sums whatever the scheduling


def coulomb_sums(points, weights, centres, box=None):
    """Σ_p w_p (p − c_i)/|p − c_i|³ for every centre (nearest image with ``box``): (n, 3)."""
    return radial_sums(points, weights, centres, box)


def coulomb_grid_sums(field, origin, spacing, centres, box=None):
    """:func:`coulomb_sums` over the nodes where ``field`` ≠ 0 (:func:`grid_nodes`'s list)."""
    return coulomb_sums(*grid_nodes(field, origin, spacing), centres, box)


def frame_radial_sums(points, weights, centres, node_start, centre_start, box=None, radii=None,
                      kappa=0.0, eps_out=1.0, inv_c=1.0):  # fmt: skip
    """The radial sums of B frames in one launch (:func:`radial_sums`).

    See :func:`pbsolver.backends.cpu.forces.frame_radial_sums`.
    """
    return radial_sums(points, weights, centres, box, radii, kappa, eps_out, inv_c,
                       node_start=node_start, centre_start=centre_start)  # fmt: skip


def frame_grid_coulomb_sums(field, origin, spacing, stride, nx, centres, centre_start, box=None):
    """The φ_c sums of B frames of a stack in one launch (:func:`radial_sums`).

    See :func:`pbsolver.backends.cpu.forces.frame_grid_coulomb_sums`. One list of the stack's
    weighted nodes, in order, so each frame's are a contiguous run; their x is the frame's own
    (plane − f·stride). ``nx`` is not needed: a block's padding planes (nx … stride − 1) hold
    no weighted node.
    """
    xp = array_module(field)
    frames = len(centre_start) - 1
    counts = xp.count_nonzero(field.reshape(frames, -1), axis=1)
    node_start = np.concatenate([[0], np.cumsum(np.asarray(to_numpy(counts)))])
    return radial_sums(*grid_nodes(field, origin, spacing, stride), centres, box,
                       node_start=node_start, centre_start=centre_start)  # fmt: skip


def debye_huckel_sums(points, weights, centres, radii, kappa, eps_out, eps_cavity):
    """Σ_p w_p (−T_i'(r)/r)(p − c_i) of the "mdh" terms for every centre: (n, 3)."""
    return radial_sums(
        points, weights, centres, None, radii, kappa, eps_out, 1.0 / float(eps_cavity)
    )


__all__ = [
    "coulomb_grid_sums",
    "frame_grid_coulomb_sums",
    "frame_radial_sums",
    "coulomb_sensitivity",
    "coulomb_sums",
    "debye_huckel_sums",
    "fraction_sensitivities",
    "grid_nodes",
    "kappa_sensitivity",
]
