"""Crash-safe file writing: write to a hidden temporary name, fsync, then rename.

A reader (or a rerun after ``kill -9``) sees either the old file, or the complete new one,
never a partial file. Temporary names start with a dot and end in ``.tmp`` (plus the real
suffix where a writer picks its format from the name, e.g. ``.dx.gz``), so they are easy to
recognise and to clean up after a crash.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
from pathlib import Path

TMP_TAG = ".tmp"


def temp_name(path: str | os.PathLike, keep_suffix: str = "") -> Path:
    """Return a hidden temporary name next to ``path`` (same directory, so rename is atomic).

    Parameters
    ----------
    path : path-like
        The final path.
    keep_suffix : str
        Appended after the temporary tag (for writers that choose a format by suffix).
    """
    path = Path(path)
    return path.with_name(f".{path.name}.{os.getpid()}{TMP_TAG}{keep_suffix}")


def fsync_path(path: str | os.PathLike, directory: bool = False) -> None:
    """fsync a file or a directory (best effort: some file systems refuse directory fsync)."""
    flags = os.O_RDONLY | (getattr(os, "O_DIRECTORY", 0) if directory else 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, keep_suffix: str = "", durable: bool = True):
    """Yield a temporary path; on success move it onto ``path`` atomically.

    On an exception the temporary file is removed and the exception propagates; ``path``
    is untouched. A ``path`` that is a symbolic link, directory, FIFO, socket or device node is
    refused (:class:`~pbsolver.InputError`) before anything is written.

    Parameters
    ----------
    path : path-like
        The final file.
    keep_suffix : str
        Suffix to keep at the end of the temporary name (e.g. ``".gz"``).
    durable : bool
        fsync the file and its directory, so the rename also survives a power cut.
    """
    from pbsolver.io.safety import check_special

    path = Path(path)
    # The rename would replace a symbolic link, FIFO or device node itself: refuse those (a
    # directory makes the rename fail with IsADirectoryError, which callers report).
    if not (os.path.isdir(path) and not os.path.islink(path)):
        check_special(path)
    tmp = temp_name(path, keep_suffix)
    try:
        yield tmp
        if durable:
            fsync_path(tmp)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    if durable:
        fsync_path(path.parent, directory=True)


def remove_stale_temps(directory: str | os.PathLike, name: str | None = None) -> int:
    """Delete temporary files a killed writer left in ``directory``.

    Parameters
    ----------
    directory : path-like
        Where to look.
    name : str, optional
        Only the temporaries of the final file ``name`` (``.{name}.{pid}.tmp*``); None: every
        temporary file of that form in the directory.

    Call only while holding the output's lock (:class:`OutputLock`). Returns the count removed.
    """
    directory = Path(directory)
    if not directory.is_dir():
        return 0
    stem = re.escape(name) if name is not None else r".+"
    pattern = re.compile(rf"^\.{stem}\.\d+{re.escape(TMP_TAG)}(\..*)?$")
    removed = 0
    for p in directory.iterdir():
        if pattern.match(p.name) and p.is_file():
            with contextlib.suppress(OSError):
                p.unlink()
                removed += 1
    return removed


class OutputLock:
    """An exclusive advisory lock on ``.{name}.lock`` next to an output file.

    The operating system drops the lock when the process dies (even with ``kill -9``), so a
    stale lock file never blocks a rerun. The lock file is removed on release.

    Raises
    ------
    BlockingIOError
        From :meth:`acquire` when another process holds the lock.
    """

    def __init__(self, output: str | os.PathLike):
        output = Path(output)
        self.path = output.with_name(f".{output.name}.lock")
        self.fd = None

    def acquire(self):
        """Take the lock without waiting (raises :class:`BlockingIOError` if it is held)."""
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                os.close(fd)
                if exc.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                    raise BlockingIOError(
                        errno.EWOULDBLOCK, f"another pbsolver process is writing {self.path}"
                    ) from None
                raise
            # The holder before us may have unlinked the file after we opened it: retry then.
            try:
                same = os.path.samestat(os.fstat(fd), os.stat(self.path))
            except FileNotFoundError:
                same = False
            if same:
                self.fd = fd
                return self
            os.close(fd)

    def release(self):
        """Remove the lock file and drop the lock."""
        if self.fd is None:
            return
        with contextlib.suppress(OSError):
            os.unlink(self.path)
        os.close(self.fd)
        self.fd = None

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()
