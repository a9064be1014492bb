"""Field sampling on the GPU: the bodies of :mod:`pbsolver.backends.bodies.sampling` as kernels.

The CUDA twins of :func:`pbsolver.backends.cpu.sampling.sample_points` (one thread a point) and
:func:`~pbsolver.backends.cpu.sampling.tensor_lerp` (one thread an output node), for fields that
live on the device (CuPy; numba device arrays under the simulator): the field is read where it
is, and only the points, or the tensor grid's cells, go up. The results stay on the device.
Compiled lazily on first launch.
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from pbsolver.arrays import array_module
from pbsolver.backends.bodies.sampling import make_sample, tensor_lerp_node
from pbsolver.backends.cuda.device import launch_on_legacy_stream as launch
from pbsolver.backends.cuda.maps import blocks, device_copy, device_empty
from pbsolver.backends.launch_sizes import THREADS

_dev = cuda.jit(device=True)
_sample = make_sample(_dev)
_lerp = _dev(tensor_lerp_node)


@cuda.jit
def _k_sample(phi, hx, hy, hz, coords, periodic, cubic, out):
    p = cuda.grid(1)
    if p < coords.shape[0]:
        nx, ny, nz = phi.shape
        _sample(phi, 0, nx, ny, nz, hx, hy, hz, coords[p, 0], coords[p, 1], coords[p, 2],
                periodic, cubic, out[p])  # fmt: skip


@cuda.jit
def _k_tensor_lerp(f, ix, wx, iy, wy, iz, wz, out):
    n = cuda.grid(1)
    na, nb, nc = out.shape
    if n < na * nb * nc:
        a = n // (nb * nc)
        b = (n // nc) % nb
        c = n % nc
        out[a, b, c] = _lerp(f, ix[a], wx[a], iy[b], wy[b], iz[c], wz[c])


def _contiguous(a):
    """A CuPy field as C-ordered float64 (a copy only where it is not); others as they are."""
    xp = array_module(a)
    return a if xp is np else xp.ascontiguousarray(a, dtype=xp.float64)


def sample_points(phi, spacing, coords, periodic: bool, cubic: bool = False):
    """φ and ∇φ of a device node field at points in node units: an (n, 4) device array.

    The arguments of :func:`pbsolver.backends.cpu.sampling.sample_points`; ``phi`` (nx, ny,
    nz) on the device; ``coords`` (n, 3) on the host.
    """
    phi = _contiguous(phi)
    coords = device_copy(np.asarray(coords, dtype=np.float64).reshape(-1, 3))
    out = device_empty((coords.shape[0], 4))
    if coords.shape[0]:
        hx, hy, hz = (float(h) for h in spacing)
        launch(_k_sample, blocks(coords.shape[0]), THREADS, phi, hx, hy, hz, coords,
               bool(periodic), bool(cubic), out)  # fmt: skip
    return out


def tensor_lerp(f, cells, weights):
    """A device field trilinearly interpolated at the nodes of a tensor grid, on the device.

    The arguments of :func:`pbsolver.backends.cpu.sampling.tensor_lerp` (``f`` float64, C
    order, on the device; ``cells`` and ``weights`` on the host). Equal to the CPU's to
    rounding: the GPU compiler may fuse a multiply and an add of the body.
    """
    f = _contiguous(f)
    ix, iy, iz = (device_copy(np.asarray(c, dtype=np.int64)) for c in cells)
    wx, wy, wz = (device_copy(np.asarray(w, dtype=np.float64)) for w in weights)
    out = device_empty((ix.shape[0], iy.shape[0], iz.shape[0]))
    if out.size:
        launch(_k_tensor_lerp, blocks(out.size), THREADS, f, ix, wx, iy, wy, iz, wz, out)
    return out
