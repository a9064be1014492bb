"""The whole SOR loop on the device: one graph launch with a conditional WHILE node.

The graph's body is ``check_every`` sweeps, the residual reduction, and a one-thread kernel that
counts sweeps and sets the loop condition with ``cudaGraphSetConditional`` (a CUDA device
runtime function numba declares as an external device function). The host launches the graph
once and waits once, whatever the number of sweeps. Built with cuda.core's ``GraphBuilder``
(``create_condition`` / ``while_loop``, cuda.core ≥ 1.0, CUDA ≥ 12.4 driver); numba-cuda
launches into a ``GraphBuilder`` as into a stream (numba-cuda ≥ 0.29).

Used by :meth:`CUDABackend.sor_until`; the Solver keeps its host loop (it records every
residual), so this path is an option for callers that need only the final state.
"""

from __future__ import annotations

import functools
import math

import numpy as np
from numba import cuda, uint32


@functools.cache
def while_check():
    """The one-thread kernel that decides whether the WHILE body runs again."""
    set_condition = cuda.declare_device("cudaGraphSetConditional", "void(uint64, uint32)", abi="c")

    @cuda.jit
    def check(sums, count, step, maxiter, threshold2, handle):
        n = count[0] + step
        count[0] = n
        keep = uint32(1) if (sums[0] > threshold2 and n < maxiter) else uint32(0)
        set_condition(handle, keep)

    return check


class WhileLoop:
    """A completed WHILE-node graph for one (stencil, x, ω, threshold, maxiter, batch)."""

    def __init__(self, backend, st, x, omega, threshold, maxiter, check_every):
        from cuda.core import Device, Stream

        self.backend = backend
        dev = backend.dev
        self.count = dev.empty((1,), np.int64)
        device = Device()
        device.set_current()
        check = while_check()
        gb = device.create_graph_builder().begin_building()
        cond = gb.create_condition(default_value=1)
        body = gb.while_loop(cond)
        body.begin_building()
        self.holds = {}  # work buffers the graph writes: alive as long as the loop
        saved, dev.nb_stream, dev.capturing = dev.nb_stream, body, True
        backend._collect = self.holds
        try:
            w = x.dtype.type(omega)
            backend._sor(st, x, w, check_every, backend.kernel)
            backend._residual_sumsq(st, x, copy=False)
            dev.launch(
                check, 1, 1, backend._v(backend._sums), backend._v(self.count), check_every,
                maxiter, float(threshold) ** 2, np.uint64(int(cond.handle)),
            )  # fmt: skip
        finally:
            dev.nb_stream, dev.capturing = saved, False
            backend._collect = None
        body.end_building()
        gb.end_building()
        self.graph = gb.complete()
        self.core_stream = Stream.from_handle(dev.stream.ptr)
        self.graph.upload(self.core_stream)

    def run(self):
        """Launch the loop once and wait for it; return (sweeps done, residual norm)."""
        dev, be = self.backend.dev, self.backend
        with dev.io():
            be._fill(self.count, 0)
            self.graph.launch(self.core_stream)
            dev.copy_to_host_async(be._sums, 0)
            rt = dev.cp.cuda.runtime
            rt.memcpyAsync(
                dev.host.ctypes.data + 8,
                self.count.data.ptr,
                8,
                rt.memcpyDeviceToHost,
                dev.stream.ptr,
            )
            r2 = dev.read_scalar(be._sums, 0)
            sweeps = int(dev.host[1:2].view(np.int64)[0])
        return sweeps, math.sqrt(r2)
