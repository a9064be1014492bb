"""A one-time note when the CPU kernels will be compiled (the first run is otherwise silent).

numba compiles the CPU kernels on their first call and caches them on disk (``cache=True``);
later runs load them. This module only looks for the cache's index files, without importing
numba, so the note costs nothing when the cache exists.
"""

from __future__ import annotations

import logging
from pathlib import Path

from pbsolver.backends import kernel_cache

log = logging.getLogger("pbsolver")
#: Modules whose kernels the CPU solver compiles.
KERNEL_MODULES = ("kernels", "mg_kernels")
_noted = False


def kernel_cache_dirs() -> list[Path]:
    """Where numba keeps the kernels' cache: this version's directory, or ``cpu/__pycache__``.

    The first is :func:`pbsolver.backends.kernel_cache.configure`'s; numba falls back to the
    second where the first cannot be written.
    """
    return [Path(kernel_cache.configure()), Path(__file__).resolve().parent / "__pycache__"]


def kernels_cached() -> bool:
    """Whether every module of :data:`KERNEL_MODULES` has cached kernels (index files)."""
    for module in KERNEL_MODULES:
        found = False
        for d in kernel_cache_dirs():
            if not d.is_dir():
                continue
            pattern = f"{module}.*.nbi"
            # $NUMBA_CACHE_DIR mirrors the source path below it: search it recursively
            hits = d.rglob(pattern) if d.name != "__pycache__" else d.glob(pattern)
            if next(iter(hits), None) is not None:
                found = True
                break
        if not found:
            return False
    return True


def note_compilation(backend: str = "auto") -> bool:
    """Log once per process that the CPU kernels are compiled now; return whether it did.

    Called by the command line before the first solve. Nothing is logged for
    ``backend="cuda"``, when the cache exists, or after the first call.
    """
    global _noted
    if _noted or backend == "cuda":
        return False
    _noted = True
    if kernels_cached():
        return False
    log.info("compiling the CPU kernels on first use (cached for later runs)")
    return True
