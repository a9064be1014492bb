"""The CUDA backend (numba-cuda kernels, CuPy buffers, streams and CUDA graphs).

Imported only when ``backend="cuda"`` is asked for (or ``"auto"`` finds a GPU); nothing here is
imported by ``import pbsolver``.

Launching (``CUDABackend(launch=...)``)
---------------------------------------
One non-blocking CuPy stream per backend instance. numba views of the CuPy buffers are made once
per buffer (no host synchronisation, no DLPack export per launch) and kernels are launched on
``cuda.external_stream(stream.ptr)`` inside ``with stream:``. Modes:

``"graph"`` (default)
    A call such as ``sor_sweeps(st, x, ω, k)`` runs eagerly the first time it is seen, is captured
    as one CUDA graph the second time (CuPy stream capture) and replayed from then on; the cache
    key is the pointers, shapes and dtypes of every array involved plus the scalars baked in
    (ω, k, kernel shape). ``residual_norm`` is a graph too: partial sums per block, one block
    adding them in a fixed order, and an 8-byte copy into pinned host memory; the host then waits
    on one event. Nothing else synchronises: there is no device- or stream-wide sync between
    convergence checks.
``"stream"``
    The same kernels launched one by one from Python (about 30 µs of host time each).
``"naive"``
    As "stream" plus a host synchronisation after every sweep (the seed thread's loop).

Work submitted by the caller on another CuPy stream is ordered before the backend's work, and the
backend's results before the caller's later work, by event waits on the GPU (no host blocking).

Red–black SOR kernel shapes (``CUDABackend(kernel=...)``)
---------------------------------------------------------
``"point"`` (default: fastest measured on the H200, see BENCHMARKS.md)
    One thread a node, colour-compacted along z, two launches per sweep, in place: each pass
    streams x, the three faces and b and writes x, 48 B/node per sweep nominal (+8 with salt);
    the 50–60 MB L2 keeps part of it between the two passes.
``"tile"``
    Shared-memory tiles, both colours fused into one pass: each block recomputes the red values of
    its tile plus a one-node halo from the previous iterate and keeps them in a four-plane ring
    in shared memory while it marches along x, then relaxes its black nodes from the ring and
    writes the new iterate to a second buffer. Race-free and bitwise deterministic; one read of
    x, cx, cy, cz, b and one write per node: 24 B/node per sweep (+4 with salt). Measured slower
    than "point" despite half the bytes: each block walks its planes one barrier at a time, so
    it is bound by load latency, not bandwidth.
``"march"``
    As "point" but each thread walks ``march_chunk`` x-planes (the z-marching shape; the colour
    offset flips every plane, so no register reuse is possible within one colour). 48 B/node.

Byte counts: the 16 B/node floor of the issue is one read of ε, φ_c-derived b and φ and one write
of φ (a node-map problem). With face maps the stencil has three face arrays, so one pass is
24 B/node; the diagonal is never stored for the sweeps (recomputed from the six faces they load
anyway), which saves 4 B/node per pass against the CPU layout.

``capture(fn)`` — the contract
------------------------------
``runner = backend.capture(fn)`` returns a callable; ``runner()`` has the effect of ``fn()``.
On the CUDA backend with ``launch="graph"`` the first call runs ``fn`` eagerly, the second
captures its device work into one CUDA graph and launches it, later calls launch the graph.
``fn`` must therefore:

* enqueue device work only through this backend's methods that do not return a value
  (``sor_sweeps``, ``jacobi_sweeps``, ``residual``, ``axpy``, ``axpby``, ``fill``,
  ``rb_sor_color``, ``restrict``, ``prolong_add``, ``remove_mean``, ...), never ``residual_norm``
  or ``dot`` (they read a value back), nor host copies;
* use the same arrays and scalars on every call (the graph holds their pointers and values):
  make a new runner when any of them changes, e.g. per solve phase;
* allocate nothing (preallocate all buffers outside ``fn``);
* make the same calls every time (no data-dependent branching on the host).

On the CPU backend (and with ``launch`` other than "graph") there is nothing to capture and
``runner`` just calls ``fn``.
"""

from pbsolver.backends.cuda.backend import (
    LAUNCH_MODES,
    SOR_KERNELS,
    SWEEP_BYTES,
    CUDABackend,
    CUDAStencil,
    KernelConfig,
)

__all__ = [
    "LAUNCH_MODES",
    "SOR_KERNELS",
    "SWEEP_BYTES",
    "CUDABackend",
    "CUDAStencil",
    "KernelConfig",
]
