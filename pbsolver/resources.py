"""Memory estimates: refuse a solve, a file read or a map build that cannot fit, before allocating.

The node limit of the readers (``--max-points``, 1024³) bounds what a file may declare; it is far
above what fits in memory (1000³ float32 nodes need about 100 GB to solve). The functions here
estimate the bytes a solve needs from the arrays the solver allocates, compare them with the
memory available (host, and the GPU's free memory for the CUDA backend) and raise a one-line
:class:`~pbsolver.InputError` naming both numbers instead of letting the process die allocating.

Bytes per node of a linear solve, with ``s`` the storage itemsize (4 for float32, 8 for
float64); the peak is the largest of three moments: the stencil's build, the multigrid
hierarchy's set-up and the iteration (``benchmarks/memory_per_node.py`` measures them and says
who holds what; BENCHMARKS.md has the numbers):

================================  =====================================================
sweep stencil                     5·s (cx, cy, cz, diag, b; under refinement b is the
                                  phases' residual r); CUDA 5·s too: no diagonal (the
                                  kernels form it), κ̄² for the sweeps instead
checked operator (refine)         8: the float64 b; the float64 faces are formed from
                                  the problem's own maps in the residual kernels
                                  (:class:`pbsolver.backends.ProblemOperator`)
iterate and correction            refine: the float64 iterate (also the returned φ_rf)
                                  and the phases' correction e, 8 + s; else s
building                          the stencil's float64 b while its float32 copy is
                                  made (8, float32 only); then φ₀ (boundary values, zero
                                  inside) on the host and its copy, two arrays of the
                                  iterate's dtype, beside the stencil and the checked
                                  operator
method                            SOR 0; Jacobi s; multigrid 2·s + ½ (the fine residual,
                                  the coarse levels ≈ 1/7 of 7 fine arrays), plus s/7
                                  while it is set up on the CPU (each level's κ̄² work
                                  array: the level kernels write straight into the levels'
                                  stencils, before e exists), 12 on a GPU (CuPy's pool,
                                  measured); MG-CG multigrid + 5·s (r, z,
                                  p, q, a zero b)
problem's maps on a GPU           16 (ε and κ̄², float64) where they are host arrays:
                                  the kernels read them on the device
multigrid's coarsest level        6 MiB (not per node) while its dense inverse is made
molecule maps (from_atoms)        12·8 (face fractions and face ε, κ̄², φ_c, boundary
                                  values, the surface's distance fields), plus 64 per atom
================================  =====================================================

Measured CPU peaks (tracemalloc, the solve's own arrays on top of the problem's, 129³, the
issue-18 sphere map with salt, float32 with refinement): multigrid 48.8 B/node, estimated 48.5;
see ``tests/test_memory_estimate.py`` for the traced comparison of every method.

Nonlinear (Newton) solves, in float64 unless stated:

================================  =====================================================
nonlinear (Newton) steady state   the float64 stencil 5·8 (its diag and b are the
                                  steps' own), the steps' stencil in the storage
                                  precision 5·s (none in float64), their iterate 8 and
                                  the refinement's r, e 2·s, the method's buffers (as
                                  above, without the set-up term), and
                                  :data:`NONLINEAR_ARRAYS` float64 arrays: the
                                  equation's seven (κ̄², κ̄² on the unknowns, φ_c,
                                  A_ε's diagonal, b_ε, a zero right-hand side, a work
                                  array), the steps' κ̄² g'(x), the iterate u, x =
                                  zφ/kT, the line search's weights and the Boltzmann
                                  terms' temporaries
building the float64 stencil      5·8 + 10·8 transient (float64 faces, coefficients, φ_c,
                                  κ̄², b, diagonal)
================================  =====================================================

Measured peak resident growth of nonlinear CPU solves on 129³ (the RNA of
``benchmarks/nonlinear_robust.py --n 129 --salts 0.15 --method M --dtype D``, 4–5 Newton
steps): float32 with refinement SOR / multigrid / MG-CG 214 / 218 / 227 bytes per node
(estimated 212 / 225 / 249), float64 174 / 190 / 222 (estimated 184 / 205 / 253); a solute
needing 10–12 Newton steps measured 214 / 219 / 244 and 173 / 198 / 239.

``$PBSOLVER_MEMORY_LIMIT`` (bytes; suffixes K, M, G, T accepted) replaces the available memory
that the estimates are compared with (host and GPU alike): tests and shared machines set it to
get deterministic refusals.
"""

from __future__ import annotations

import contextlib
import math
import os

import numpy as np

from pbsolver.backends import LARGE_METHODS, MEMORY
from pbsolver.exceptions import InputError

ENV = "PBSOLVER_MEMORY_LIMIT"
#: Transient float64 arrays while a nonlinear solve's float64 stencil is built (docstring).
_BUILD = 10 * 8
#: A grid hierarchy's set-up arrays on the CPU, per storage byte: each coarse level's κ̄² work
#: array (the level kernels write its faces into the level's own stencil), 1/8 + 1/64 + … ≈ 1/7
#: of the fine nodes (tracemalloc's peak, tests/test_memory_estimate.py).
_MG_SETUP_PER_ITEM_BYTE = 1 / 7
#: The same on a GPU, bytes a node: what CuPy's pool holds while the levels are made (measured
#: by ``pbsolver bench`` on the H200: 68 and 72 B/node for multigrid at 129³ and 257³).
_MG_SETUP_GPU = 12
#: The problem's ε and κ̄² in float64 on a GPU (read there by the kernels).
_GPU_MAPS = 2 * 8
#: Bytes (not per node) of a grid hierarchy's coarsest dense inverse while it is computed:
#: three float64 matrices of the largest coarsest level (512 nodes by default).
_DENSE_BYTES = 3 * 8 * 512**2
#: float64 arrays a nonlinear solve adds beyond its stencils, iterate and method (docstring).
NONLINEAR_ARRAYS = 17
#: Bytes per node of the molecule maps, and per atom.
_MAPS_PER_NODE = 12 * 8
_MAPS_PER_ATOM = 64
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def _method_bytes(method: str, s: int) -> float:
    """Bytes per node a method keeps while it iterates (see the module docstring)."""
    if method == "jacobi":
        return s
    if method == "multigrid":
        return 2 * s + 0.5
    if method == "mgcg":
        return 7 * s + 0.5
    if method == "spectral":
        return 24.0  # the float64 right-hand side and two transform passes' float64 arrays
    return 0  # sor


def _resolve(method: str, backend: str) -> str:
    """The method ``auto`` stands for on large grids (the ones whose memory matters)."""
    if method == "auto":
        return LARGE_METHODS.get(backend, LARGE_METHODS["cpu"])
    return method


def bytes_per_node(
    method: str = "auto",
    backend: str = "cpu",
    dtype=np.float32,
    refine: bool = True,
    *,
    molecule: bool = False,
    nonlinear: bool = False,
) -> float:
    """Estimated peak bytes per grid node of a solve (see the module docstring's tables).

    The solve's own arrays, on top of the problem's (except on a GPU, where the problem's ε
    and κ̄² are counted: its kernels read them in device memory).

    Parameters
    ----------
    method : {"auto", "sor", "jacobi", "multigrid", "mgcg", "spectral"}
        The solver's method ("auto": the large-grid choice, multigrid on the CPU, MG-CG on CUDA).
    backend : {"auto", "cpu", "cuda"}
        Where the arrays live.
    dtype : numpy dtype
        Storage precision of the iteration.
    refine : bool
        float64 iterative refinement (only with float32 storage).
    molecule : bool
        Add the maps that :meth:`pbsolver.Problem.from_atoms` builds.
    nonlinear : bool
        A nonlinear solve (Newton; :mod:`pbsolver.nonlinear`) instead of a linear one.
    """
    s = np.dtype(dtype).itemsize
    refine = bool(refine) and s == 4
    name = _resolve(method, backend)
    gpu = MEMORY.get(backend) == "gpu"
    if nonlinear:
        # the float64 equation first (its build's temporaries), then the Newton steps
        build = 5 * 8 + _BUILD
        steady = 5 * 8 + (5 * s if s < 8 else 0) + 8 + (2 * s if refine else 0)
        steady += NONLINEAR_ARRAYS * 8 + _method_bytes(name, s)
        total = max(build, steady)
    else:
        stencil = 5 * s
        checked = 8 if refine else 0
        iterate = 8 if refine else s
        build = max(stencil + (8 if s < 8 else 0), stencil + checked + 2 * iterate)
        method_bytes = _method_bytes(name, s)
        setup = 0.0
        if name in ("multigrid", "mgcg"):
            setup = stencil + checked + iterate + _method_bytes("multigrid", s)
            setup += _MG_SETUP_GPU if gpu else s * _MG_SETUP_PER_ITEM_BYTE
        steady = stencil + checked + iterate + (s if refine else 0) + method_bytes
        total = max(build, setup, steady) + (_GPU_MAPS if gpu else 0)
    if molecule:
        total += _MAPS_PER_NODE
    return float(total)


def estimate_bytes(
    shape,
    method: str = "auto",
    backend: str = "cpu",
    dtype=np.float32,
    refine: bool = True,
    *,
    molecule: bool = False,
    n_atoms: int = 0,
    nonlinear: bool = False,
) -> int:
    """Estimated peak bytes of solving on a grid of ``shape`` (maps included with ``molecule``).

    ``nonlinear``: a Newton solve of the nonlinear equation (:func:`bytes_per_node`). The
    multigrid methods add a fixed 6 MiB (their coarsest level's dense inverse being made).

    Examples
    --------
    >>> estimate_bytes((129, 129, 129), "sor", "cpu") // 2**20
    90
    """
    return _estimate(shape, method, backend, dtype, refine, molecule, n_atoms, nonlinear)[0]


def _estimate(shape, method, backend, dtype, refine, molecule, n_atoms, nonlinear):
    """``(bytes, how)``: :func:`estimate_bytes`' estimate and its terms in words."""
    nodes = math.prod(int(n) for n in shape)
    per = bytes_per_node(method, backend, dtype, refine, molecule=molecule, nonlinear=nonlinear)
    need = nodes * per
    how = f"{per:.0f} bytes a node × {nodes:,} nodes"
    if _resolve(method, backend) in ("multigrid", "mgcg"):
        need += _DENSE_BYTES
        how += f" + {format_bytes(_DENSE_BYTES)} for the coarsest level"
    if molecule and n_atoms:
        need += _MAPS_PER_ATOM * int(n_atoms)
        how += f" + {_MAPS_PER_ATOM} × {int(n_atoms):,} atoms"
    return int(need), how


def memory_limit() -> int | None:
    """``$PBSOLVER_MEMORY_LIMIT`` in bytes, or None when unset."""
    value = os.environ.get(ENV, "").strip()
    if not value:
        return None
    text = value.upper().removesuffix("IB").removesuffix("B")
    unit = text[-1] if text and text[-1].isalpha() else ""
    number = text[:-1] if unit else text
    try:
        n = int(float(number) * _UNITS[unit])
    except (KeyError, ValueError):
        raise InputError(f"{ENV} must be a number of bytes (e.g. 8G), got {value!r}") from None
    if n <= 0:
        raise InputError(f"{ENV} must be > 0, got {value!r}")
    return n


def available_host_bytes() -> int | None:
    """Memory this process may still use: MemAvailable, capped by a cgroup limit (or None)."""
    avail = None
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    avail = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError, IndexError):
        avail = None
    if avail is None:
        try:
            avail = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, AttributeError):
            return None
    try:  # a container's memory limit (cgroup v2)
        with open("/sys/fs/cgroup/memory.max") as fh:
            limit = fh.read().strip()
        if limit != "max":
            with open("/sys/fs/cgroup/memory.current") as fh:
                used = int(fh.read().strip())
            avail = min(avail, max(0, int(limit) - used))
    except (OSError, ValueError):
        pass
    return avail


def available_gpu_bytes() -> int | None:
    """Free memory of the current CUDA device (imports CuPy; None when it cannot tell)."""
    try:
        import cupy as cp

        free, _ = cp.cuda.runtime.memGetInfo()
    except Exception:  # noqa: BLE001 - no CuPy, no device: nothing to compare with
        return None
    # CuPy's pool holds freed blocks that it reuses before asking the driver for more
    with contextlib.suppress(Exception):
        free += cp.get_default_memory_pool().free_bytes()
    return int(free)


def available_bytes(device: str = "host") -> tuple[int | None, str]:
    """The bytes the estimates are compared with, and where that number comes from.

    ``$PBSOLVER_MEMORY_LIMIT`` where set, else the GPU's free memory (``device="gpu"``) or the
    host's available memory; None where it cannot be told.
    """
    limit = memory_limit()
    if limit is not None:
        return limit, f"the limit set by ${ENV}"
    if device == "gpu":
        return available_gpu_bytes(), "free on the GPU"
    return available_host_bytes(), "available to this process"


def format_bytes(n: float) -> str:
    """``n`` bytes as a short human string (binary units)."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"  # pragma: no cover


def check_bytes(need: int, what: str, *, device: str = "host", hint: str | None = None,
                detail: str | None = None) -> None:  # fmt: skip
    """Refuse ``need`` bytes when more than the memory available (or ``$PBSOLVER_MEMORY_LIMIT``).

    Parameters
    ----------
    need : int
        Estimated bytes.
    what : str
        What needs them (starts the message, e.g. ``"in.h5: grid 'g0'"``).
    device : {"host", "gpu"}
        Which memory to compare with.
    hint : str, optional
        What to do instead (default: a coarser spacing or another method).
    detail : str, optional
        How the estimate was made (e.g. ``"57 bytes a node × 16,974,593 nodes"``), put after
        the number.

    Raises
    ------
    InputError
        ``what: needs about X of <device> memory (estimated: <detail>), Y available (<the
        limit: $PBSOLVER_MEMORY_LIMIT, or the memory free>); <hint>``.
    """
    avail, source = available_bytes(device)
    if avail is None or need <= avail:
        return
    where = "GPU" if device == "gpu" else "host"
    hint = hint or "use a coarser spacing, a smaller grid, or method 'sor' (the least memory)"
    how = f" (estimated: {detail})" if detail else ""
    raise InputError(
        f"{what}: needs about {format_bytes(need)} of {where} memory{how}, "
        f"{format_bytes(avail)} available ({source}); {hint}"
    )


def check_memory(
    shape,
    method: str = "auto",
    backend: str = "cpu",
    dtype=np.float32,
    refine: bool = True,
    *,
    molecule: bool = False,
    n_atoms: int = 0,
    what: str | None = None,
    nonlinear: bool = False,
) -> int:
    """Refuse a solve on ``shape`` that would not fit in memory; return the estimate (bytes).

    The estimate (:func:`estimate_bytes`; ``nonlinear`` for a Newton solve of the nonlinear
    equation) is compared with the host's available memory, and for ``backend="cuda"`` with
    the GPU's free memory (CuPy is imported only then).

    Raises
    ------
    InputError
        Naming the estimate (and how it was made: bytes a node × nodes), the memory
        available or the limit of ``$PBSOLVER_MEMORY_LIMIT``, and a way out.
    """
    need, detail = _estimate(shape, method, backend, dtype, refine, molecule, n_atoms, nonlinear)
    shape_text = "×".join(str(int(n)) for n in shape)
    what = what or f"a {shape_text} grid"
    name = _resolve(method, backend)
    hint = "use a coarser spacing or a smaller grid"
    if name != "sor":
        hint += f", or method 'sor' instead of {name!r} (the least memory)"
    if MEMORY.get(backend) == "gpu":
        check_bytes(need, f"{what} ({name} on {backend})", device="gpu", hint=hint,
                    detail=detail)  # fmt: skip
        if molecule:
            check_bytes(
                estimate_bytes(shape, "sor", "cpu", dtype, False, molecule=True, n_atoms=n_atoms),
                what,
                hint=hint,
            )
    else:
        check_bytes(need, f"{what} ({name} on {backend})", hint=hint, detail=detail)
    return need


__all__ = [
    "available_gpu_bytes",
    "available_host_bytes",
    "bytes_per_node",
    "check_bytes",
    "check_memory",
    "estimate_bytes",
    "format_bytes",
    "memory_limit",
]
