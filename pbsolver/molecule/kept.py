"""Results of costly maps kept for reuse, keyed by the contents of their inputs.

APBS inputs and focusing map one molecule on several grids, and a solvated and a reference
calculation on the same grid: :mod:`pbsolver.molecule.maps` keeps its last few SES geometries,
φ_c maps and ion-accessibility maps in :class:`KeptResults`, under keys made of
:func:`content_key` (a digest of the arrays) and :func:`grid_key`.

Exact forces differentiate the maps' own geometry: within :func:`recording_lines` the CPU maps
keep it (:data:`RECORDS`: the line intervals of the SES and ion-accessible maps, the smooth
surface's sample pairs), and the forces take it from there instead of computing it again.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import threading

import numpy as np


class KeptResults:
    """The last few results of a costly map, by a key of its inputs' contents (thread-safe).

    A result of more than ``most_bytes`` is not kept, and the oldest go while all of them
    together hold more than ``total_bytes``.
    """

    def __init__(self, kept: int, most_bytes: int | None = None, total_bytes: int | None = None):
        self.kept, self.most_bytes, self.total_bytes = kept, most_bytes, total_bytes
        self._items: dict = {}  # key: (value, nbytes), the most recently used last
        self._lock = threading.Lock()

    def values(self) -> list:
        """The kept results, oldest first (a snapshot; using one does not renew it)."""
        with self._lock:
            return [value for value, _ in self._items.values()]

    def get(self, key):
        """The result kept under ``key`` (now the most recent), or None."""
        with self._lock:
            item = self._items.pop(key, None)
            if item is None:
                return None
            self._items[key] = item
            return item[0]

    def put(self, key, value, nbytes: int = 0):
        """Keep ``value`` (of ``nbytes``) under ``key``, letting the oldest go past the limits."""
        if self.most_bytes is not None and nbytes > self.most_bytes:
            return
        with self._lock:
            self._items.pop(key, None)
            self._items[key] = (value, nbytes)
            total = sum(n for _, n in self._items.values())
            while len(self._items) > self.kept or (
                self.total_bytes is not None and total > self.total_bytes
            ):
                total -= self._items.pop(next(iter(self._items)))[1]

    def clear(self):
        """Forget every kept result."""
        with self._lock:
            self._items.clear()


def content_key(*arrays) -> tuple:
    """A key of the arrays' contents (shape and float64 bytes)."""
    key = []
    for a in arrays:
        a = np.ascontiguousarray(a, dtype=np.float64)
        key += [a.shape, hashlib.blake2b(a.tobytes(), digest_size=16).digest()]
    return tuple(key)


def grid_key(grid, box) -> tuple:
    """A key of a grid (shape, spacing, origin) and its periodic box (None: none)."""
    return (tuple(grid.shape), tuple(grid.spacing), tuple(grid.origin),
            None if box is None else tuple(float(b) for b in box))  # fmt: skip


#: How many recorded geometries are kept (one frame's: three SES axes or three smooth-surface
#: axes, and the ion-accessible lines), and how many bytes all of them at most.
RECORDS_KEPT, RECORD_BYTES_KEPT = 4, 1 << 27
#: The maps' recorded geometry (:func:`recording_lines`), by the contents of its inputs.
RECORDS = KeptResults(RECORDS_KEPT, RECORD_BYTES_KEPT, RECORD_BYTES_KEPT)
_recording = contextvars.ContextVar("pbsolver_recording_lines", default=False)


@contextlib.contextmanager
def recording_lines():
    """Within it, the CPU maps keep the geometry that the exact forces differentiate.

    The SES and ion-accessible line kernels then record each line's intervals and add them to
    the edges afterwards (the same fractions, bit for bit), the smooth surface keeps its sample
    pairs, and the last frame's are kept in :data:`RECORDS` by the contents of their inputs;
    :mod:`pbsolver.forces` finds them there instead of computing them a second time. Maps built
    on a GPU, and records past what is kept, are recomputed by the forces as before.
    """
    token = _recording.set(True)
    try:
        yield
    finally:
        _recording.reset(token)


def recording() -> bool:
    """Whether the maps are being built within :func:`recording_lines`."""
    return _recording.get()
