"""Where numba keeps the compiled CPU kernels: one directory per version of their sources.

numba's disk cache (``cache=True``) checks a cached kernel against the time stamp of the file
that defines the kernel, and nothing else. Most CPU kernels here compile bodies written in
other files (:mod:`pbsolver.backends.bodies`) and read constants from them, so an edit to a
body would leave the cached machine code of every kernel that calls it in place, and numba
would load it: old arithmetic, with no error. The cache therefore lives in a directory named
after a digest of every source the kernels are compiled from (:data:`SOURCES`); a change to
any of them starts a fresh directory, and numba compiles again.

The base directory is ``$NUMBA_CACHE_DIR`` when the user (or :func:`pbsolver.cli.numba_cache_dir`)
set it, else the package's ``backends/__pycache__``. :func:`configure` sets
``$NUMBA_CACHE_DIR`` (and numba's config, if numba is imported) to ``<base>/kernels-<digest>``
and remembers the base in ``$PBSOLVER_NUMBA_CACHE_BASE``, so that child processes arrive at the
same directory. Where that directory cannot be written, numba falls back to its own locations.
This module imports no numba.
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1]
#: What the CPU kernels are compiled from (relative to the package): files, or folders of them.
SOURCES = ("backends", "options.py", "molecule/nonpolar.py")
#: The environment variable that keeps the base directory for child processes.
BASE_ENV = "PBSOLVER_NUMBA_CACHE_BASE"
_configured: str | None = None


def source_digest(package: Path = PACKAGE) -> str:
    """A digest of the kernels' sources: every ``.py`` file of :data:`SOURCES`, by path."""
    digest = hashlib.sha256()
    for entry in SOURCES:
        path = package / entry
        files = sorted(path.rglob("*.py")) if path.is_dir() else [path]
        for f in files:
            digest.update(f.relative_to(package).as_posix().encode())
            digest.update(f.read_bytes())
    return digest.hexdigest()[:16]


def configure() -> str:
    """Point numba's cache at ``<base>/kernels-<digest>`` (once per process); the directory."""
    global _configured
    if _configured is not None:
        return _configured
    base = (
        os.environ.get(BASE_ENV)
        or os.environ.get("NUMBA_CACHE_DIR")
        or str(PACKAGE / "backends" / "__pycache__")
    )
    chosen = str(Path(base) / f"kernels-{source_digest()}")
    os.environ[BASE_ENV] = base
    os.environ["NUMBA_CACHE_DIR"] = chosen
    if "numba" in sys.modules:  # numba read the environment on import: tell its config too
        sys.modules["numba"].config.CACHE_DIR = chosen
    _configured = chosen
    return chosen


__all__ = ["BASE_ENV", "SOURCES", "configure", "source_digest"]
