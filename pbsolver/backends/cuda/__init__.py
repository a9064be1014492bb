"""The CUDA backend (numba-cuda kernels, CuPy buffers, streams and CUDA graphs).

Imported only when ``backend="cuda"`` is asked for (or ``"auto"`` finds a GPU); nothing here is
imported by ``import pbsolver``.

Launching
---------
One non-blocking CuPy stream per backend instance. numba views of the CuPy buffers are made once
per buffer (no host synchronisation, no DLPack export per launch) and kernels are launched on
``cuda.external_stream(stream.ptr)`` inside ``with stream:``. A call such as
``sor_sweeps(st, x, ω, k)`` runs eagerly the first time it is seen, is captured as one CUDA
graph the second time (CuPy stream capture) and replayed from then on; the cache key is the
pointers, shapes and dtypes of every array involved plus the scalars baked in (ω, k).
``residual_norm`` is a graph too: partial sums per block, one block adding them in a fixed
order, and an 8-byte copy into pinned host memory; the host then waits on one event. Nothing
else synchronises: there is no device- or stream-wide sync between convergence checks.

Work submitted by the caller on another CuPy stream is ordered before the backend's work, and the
backend's results before the caller's later work, by event waits on the GPU (no host blocking).

Red–black SOR
-------------
One thread a node, colour-compacted along z, two launches per sweep, in place: each pass
streams x, the three faces and b and writes x, :data:`SWEEP_BYTES` (48) bytes a node per sweep
(+8 with salt). The diagonal is never stored for the sweeps (recomputed from the six faces they
load anyway), 4 bytes a node per pass fewer than the CPU layout. The multigrid smoother sweeps
its large levels with :mod:`~pbsolver.backends.cuda.fused_sweep` instead (both colours in one
pass, from the level's iterate into its residual buffer and back, the same values bit for bit).
Other kernel shapes and launch modes, kept for measurement, live in
``benchmarks/sweep_variants.py``.

``capture(fn)`` — the contract
------------------------------
``runner = backend.capture(fn)`` returns a callable; ``runner()`` has the effect of ``fn()``.
On the CUDA backend (CuPy layer) the first call runs ``fn`` eagerly, the second
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

On the CPU backend (and on the simulator's numba layer) there is nothing to capture and
``runner`` just calls ``fn``.
"""

from pbsolver.backends.cuda.backend import (
    SWEEP_BYTES,
    CUDABackend,
    CUDAStencil,
    KernelConfig,
)

__all__ = [
    "SWEEP_BYTES",
    "CUDABackend",
    "CUDAStencil",
    "KernelConfig",
]
