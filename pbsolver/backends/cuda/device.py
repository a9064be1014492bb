"""Device memory, streams and CUDA-graph replay for the CUDA backend.

Two array layers share one small interface, so the same backend code runs on a GPU with CuPy
and in numba's CUDA simulator (CI) without it:

:class:`CuPyDevice`
    CuPy arrays, one non-blocking CuPy stream, numba views made once per buffer, kernels launched
    on ``cuda.external_stream(stream.ptr)`` inside ``with stream:``, CUDA graphs captured with
    CuPy stream capture and replayed, scalars read back through one pinned buffer + event.
:class:`NumbaDevice`
    numba device arrays on the default stream, no graphs (``NUMBA_ENABLE_CUDASIM=1`` or no CuPy).
"""

from __future__ import annotations

import contextlib
import math
import sys
import threading
import warnings
from collections import OrderedDict

import numpy as np
from numba import cuda

#: Captured graphs kept per backend (least recently used dropped first). A multigrid
#: hierarchy alone brings a few dozen (each level's repeated kernels are captured while its
#: cycle first runs eagerly), and an evicted graph is captured again on its next use.
GRAPH_CACHE = 256
#: numba views kept per backend (they are cheap; the dict only bounds growth).
VIEW_CACHE = 1024


#: Launches of fewer blocks than this (one-block reductions, coarse multigrid levels) are small
#: on purpose: numba's low-occupancy warning is silenced for them, and only for them.
SMALL_GRID = 128


def _launch(kernel, grid, block, stream, args):
    blocks = grid if isinstance(grid, int) else math.prod(grid)
    if blocks >= SMALL_GRID:
        kernel[grid, block, stream](*args)
        return
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*will likely result in GPU under-utilization")
        kernel[grid, block, stream](*args)


def numba_view(a, shape=None, owner=None):
    """numba view of the CuPy array ``a``, without numba's stream import.

    ``cuda.as_cuda_array`` and a kernel given a CuPy array read its
    ``__cuda_array_interface__``, which names the current CuPy stream; numba then synchronises
    that stream from the host, once per array argument and launch. This view names no stream,
    so making it costs no synchronisation: the caller orders the work (same stream, or
    :func:`launch_on_legacy_stream`). ``shape`` reshapes a C-contiguous ``a`` (e.g.
    ``(a.size,)``); ``owner`` is kept alive by the view (None: the caller keeps ``a`` alive until
    the work is enqueued).
    """
    contiguous = a.flags.c_contiguous
    if shape is not None and not contiguous:
        raise ValueError("CUDA backend arrays must be C-contiguous")
    desc = {
        "shape": tuple(a.shape if shape is None else shape),
        "strides": None if contiguous else tuple(a.strides),
        "typestr": a.dtype.str,
        "data": (a.data.ptr, False),
        "version": 3,
    }
    return cuda.from_cuda_array_interface(desc, owner=owner, sync=False)


def launch_on_legacy_stream(kernel, grid, block, *args):
    """Launch ``kernel`` on the legacy default stream, CuPy arguments passed as numba views.

    The map and force kernels run on the legacy stream, where their CuPy inputs are made
    (``Stream.null``) or, inside a caller's ``with stream:``, on that stream. The first case is
    ordered by the stream itself; in the second the caller's stream is synchronised once here,
    where numba would synchronise it once per CuPy argument. The views are kept
    (:data:`VIEW_CACHE` of them, by device, address, shape, strides and type): making a view
    costs more than numba's own import of the array (``benchmarks/launch_overhead.py``).
    """
    cp = _cupy_module(args)
    if cp is not None:
        current = cp.cuda.get_current_stream()
        if current.ptr != 0:
            current.synchronize()
        device = cp.cuda.runtime.getDevice()
        args = [_kept_view(a, device) if isinstance(a, cp.ndarray) else a for a in args]
    _launch(kernel, grid, block, 0, args)


def _kept_view(a, device):
    """The kept numba view of the CuPy array ``a`` (made on first use; it holds no reference).

    A view is looked up only for a live array at its address, so an entry left by a freed array
    describes exactly the array that now lives there.
    """
    key = (device, a.data.ptr, a.shape, a.strides, a.dtype.str)
    with _VIEWS_LOCK:
        view = _LEGACY_VIEWS.get(key)
        if view is None:
            view = numba_view(a)
            _LEGACY_VIEWS.put(key, view)
    return view


def _cupy_module(args):
    """CuPy, when one of ``args`` is a CuPy array (never imports it otherwise)."""
    cp = sys.modules.get("cupy")
    if cp is not None and any(isinstance(a, cp.ndarray) for a in args):
        return cp
    return None


class LRUCache(OrderedDict):
    """A dictionary that keeps its ``size`` most recently used entries."""

    def __init__(self, size):
        super().__init__()
        self.size = size

    def get(self, key, default=None):
        value = super().get(key, default)
        if value is not default:
            self.move_to_end(key)
        return value

    def put(self, key, value):
        self[key] = value
        self.move_to_end(key)
        while len(self) > self.size:
            self.popitem(last=False)


#: numba views of the CuPy arguments of :func:`launch_on_legacy_stream` (all devices).
_LEGACY_VIEWS = LRUCache(VIEW_CACHE)
_VIEWS_LOCK = threading.Lock()


class NumbaDevice:
    """numba device arrays on the default stream (the simulator's layer, and a fallback)."""

    name = "numba"
    graphs = False

    def __init__(self):
        self.capturing = False
        self.launches = 0

    # --- arrays --------------------------------------------------------------------------
    def is_array(self, a) -> bool:
        # numba device arrays and the simulator's fake ones both have copy_to_host
        return hasattr(a, "copy_to_host") and not isinstance(a, np.ndarray)

    def empty(self, shape, dtype):
        return cuda.device_array(shape, dtype=np.dtype(dtype))

    def asarray(self, a, dtype):
        if self.is_array(a):
            a = a.copy_to_host()
        from pbsolver.arrays import to_numpy

        host = np.ascontiguousarray(to_numpy(a), dtype=np.dtype(dtype))
        return cuda.to_device(host)

    def to_numpy(self, a):
        return a.copy_to_host()

    def copy_into(self, dst, src):
        """Copy ``src`` (any array, cast to ``dst``'s dtype) into the 1-D device array ``dst``."""
        from pbsolver.arrays import to_numpy

        if self.is_array(src):
            src = src.copy_to_host()
        dst.copy_to_device(np.ascontiguousarray(to_numpy(src), dtype=dst.dtype).reshape(-1))

    def to_caller(self, a, like):
        from pbsolver.arrays import array_module

        if array_module(like) is np and not self.is_array(like):
            return self.to_numpy(a)
        return a

    def flat(self, a):
        """The 1-D view the kernels take."""
        return a.reshape(a.size)

    def key(self, a):
        # id() alone can be reused by a new array once the old one is freed; with the shape and
        # dtype in the key a reused id can only ever map to a buffer that fits (the work-buffer
        # cache once handed a float32 buffer to a float64 sweep this way: a flaky 4.5e-8 error)
        return (id(a), tuple(a.shape), a.dtype.str)

    # --- launching -----------------------------------------------------------------------
    def launch(self, kernel, grid, block, *args):
        self.launches += 1
        _launch(kernel, grid, block, 0, args)

    @contextlib.contextmanager
    def io(self):
        yield

    def run(self, key, fn):
        fn()

    def copy_to_host_async(self, dev, slot=0):
        pass  # read_scalar copies synchronously

    def read_scalar(self, dev, slot=0):
        return float(dev[slot : slot + 1].copy_to_host()[0])

    def synchronize(self):
        cuda.synchronize()

    def sync_each_sweep(self):
        cuda.synchronize()


class CuPyDevice:
    """CuPy buffers, one non-blocking stream, graph capture and replay.

    Parameters
    ----------
    graphs : bool
        Capture and replay (``launch="graph"``); else launch every kernel from Python.
    """

    name = "cupy"

    def __init__(self, graphs: bool = True):
        import cupy as cp

        self.cp = cp
        self.graphs = graphs
        self.stream = cp.cuda.Stream(non_blocking=True)
        self.nb_stream = cuda.external_stream(self.stream.ptr)
        self.capturing = False
        self.launches = 0
        self.captures = 0
        self.replays = 0
        self._depth = 0
        self._views = LRUCache(VIEW_CACHE)
        self._graphs = LRUCache(GRAPH_CACHE)
        self._seen = LRUCache(4 * GRAPH_CACHE)
        self._failed = set()
        self._ev_in = cp.cuda.Event(disable_timing=True)
        self._ev_out = cp.cuda.Event(disable_timing=True)
        self._ev_done = cp.cuda.Event(disable_timing=True)
        # scalars come back through pinned memory: one async copy + one event sync
        self._pinned = cp.cuda.alloc_pinned_memory(64)
        self.host = np.frombuffer(self._pinned, dtype=np.float64, count=8)

    # --- arrays --------------------------------------------------------------------------
    def is_array(self, a) -> bool:
        return isinstance(a, self.cp.ndarray) or (
            cuda.is_cuda_array(a) and not isinstance(a, np.ndarray)
        )

    def empty(self, shape, dtype):
        with self.stream:
            return self.cp.empty(shape, dtype=np.dtype(dtype))

    def asarray(self, a, dtype):
        with self.stream:
            return self.cp.array(a, dtype=np.dtype(dtype), copy=True, order="C")

    def to_numpy(self, a):
        out = self.cp.asnumpy(a, stream=self.stream)
        self.stream.synchronize()
        return out

    def copy_into(self, dst, src):
        """Copy ``src`` (NumPy or device, cast to ``dst``'s dtype) into the 1-D array ``dst``."""
        cp = self.cp
        with self.stream:
            if isinstance(src, cp.ndarray):
                dst[...] = src.reshape(-1)  # one device copy (and cast) on this stream
            else:
                dst[...] = cp.asarray(np.ascontiguousarray(src).reshape(-1))

    def to_caller(self, a, like):
        from pbsolver.arrays import array_module

        if array_module(like) is np and not self.is_array(like):
            return self.to_numpy(a)
        return a

    def flat(self, a):
        """numba 1-D view of a CuPy buffer, made once per (pointer, size, dtype).

        The view holds no reference to the buffer: it is looked up only for a live array with
        that pointer, and used before that array can be freed.
        """
        key = (a.data.ptr, a.size, a.dtype.str)
        view = self._views.get(key)
        if view is None:
            view = numba_view(a, shape=(a.size,))
            self._views.put(key, view)
        return view

    def key(self, a):
        return (a.data.ptr, a.shape, a.dtype.str)

    # --- launching -----------------------------------------------------------------------
    def launch(self, kernel, grid, block, *args):
        self.launches += 1
        _launch(kernel, grid, block, self.nb_stream, args)

    @contextlib.contextmanager
    def io(self):
        """Order this backend's stream after the caller's, and the caller's after it.

        Both waits are GPU-side (event record + stream wait), so neither blocks the host. Skipped
        while capturing (cross-stream waits would join the caller's stream to the capture) and
        in nested calls.
        """
        caller = None  # the caller's stream, when it is another one and the waits are made
        if not (self.capturing or self._depth):
            current = self.cp.cuda.get_current_stream()
            if current.ptr != self.stream.ptr:
                caller = current
                self._ev_in.record(caller)
                self.stream.wait_event(self._ev_in)
        self._depth += 1
        try:
            with self.stream:
                yield
        finally:
            self._depth -= 1
            if caller is not None:
                self._ev_out.record(self.stream)
                caller.wait_event(self._ev_out)

    def run(self, key, fn):
        """Run ``fn`` (which enqueues work on the stream) as a replayed CUDA graph.

        First call with ``key``: run eagerly (compiles kernels, and one-off calls never pay for a
        capture). Second call: capture ``fn`` into a graph and launch it; later calls: launch.
        Inside a capture, or with graphs off, ``fn`` simply enqueues.
        """
        if not self.graphs or self.capturing or key is None or key in self._failed:
            fn()
            return
        graph = self._graphs.get(key)
        if graph is None:
            if self._seen.get(key) is None:
                self._seen.put(key, True)
                fn()
                return
            graph = self._capture(key, fn)
            if graph is None:
                return
        else:
            self.replays += 1
        graph.launch(self.stream)

    def _capture(self, key, fn):
        s = self.stream
        with s:
            s.begin_capture()
            self.capturing = True
            try:
                fn()
            except Exception:
                self.capturing = False
                with contextlib.suppress(Exception):
                    s.end_capture()
                raise
            self.capturing = False
            graph = s.end_capture()
        graph.upload(s)
        self.captures += 1
        self._graphs.put(key, graph)
        return graph

    def copy_to_host_async(self, dev, slot=0):
        """Enqueue ``host[slot] = dev[slot]`` (8 bytes, into pinned memory)."""
        rt = self.cp.cuda.runtime
        rt.memcpyAsync(
            self.host.ctypes.data + 8 * slot,
            dev.data.ptr + 8 * slot,
            8,
            rt.memcpyDeviceToHost,
            self.stream.ptr,
        )

    def read_scalar(self, dev, slot=0):
        """The value copied by :meth:`copy_to_host_async`: one event sync, nothing else."""
        self._ev_done.record(self.stream)
        self._ev_done.synchronize()
        return float(self.host[slot])

    def synchronize(self):
        self.stream.synchronize()

    def sync_each_sweep(self):
        self.stream.synchronize()


def grid_for(n: int, threads: int) -> int:
    """Blocks for a flat launch of ``n`` elements."""
    return max(1, math.ceil(n / threads))
