"""Checks on hostile inputs and on output paths, made before any work.

Inputs are read only from themselves
------------------------------------
HDF5 can make a reader open other files without the caller asking: an external link
(``h5py.ExternalLink``, absolute or ``../``) opens another HDF5 file, a dataset with external
raw storage (``create_dataset(..., external=[("/etc/passwd", 0, n)])``) reads the bytes of any
file, and a virtual dataset maps other files' datasets. A service that solves uploaded files
would copy its own files into the results. :func:`check_group` refuses every link that is not a
hard link inside the file (soft links only when they resolve, inside the file, to an object)
and every dataset whose storage is not inside the file, looking at link types with
``getlink=True`` so that no link is ever followed.

Output paths
------------
:func:`check_output` refuses, before anything is solved: an output that is one of the inputs
(compared by device and inode, through symbolic and hard links), a suffix that does not match
the format written, a symbolic link, directory, FIFO, socket or device node where the output
file should go, and (:func:`check_results_origin`) an existing results file written from
another input unless ``overwrite``. A results file records the input it was written from in the
root attribute ``@source`` (the input's absolute, resolved path).

Free space
----------
:func:`require_free_space` refuses a write that will not fit on its file system before h5py
starts it (see its docstring for the h5py behaviour this avoids).
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
from pathlib import Path

from pbsolver.exceptions import InputError

HDF5_SUFFIXES = (".h5", ".hdf5")
MAP_SUFFIXES = (".dx", ".dx.gz", ".mrc", ".map", ".ccp4")
#: Root attribute of results files: the input they were written from.
SOURCE_ATTR = "source"
#: Soft links resolved at most this deep (a chain of soft links, or a cycle).
_MAX_SOFT_DEPTH = 16


# ---------------------------------------------------------------------- hostile inputs
def check_link(parent, name: str, where: str):
    """Refuse ``parent[name]`` unless it is a hard link, or a soft link resolving inside the file.

    Returns the link object (``h5py.HardLink`` ...) or None when ``name`` is absent. The target
    is never opened before its link type is known.

    Raises
    ------
    InputError
        External links, dangling soft links, soft links through an external link, other link
        classes (user-defined links).
    """
    import h5py

    try:
        link = parent.get(name, getlink=True)
    except (KeyError, TypeError, ValueError, OSError) as exc:
        raise InputError(f"{where}: {name}: unreadable link ({exc})") from None
    if link is None or isinstance(link, h5py.HardLink):
        return link
    if isinstance(link, h5py.ExternalLink):
        raise InputError(
            f"{where}: {name} is an external link to {link.filename}:{link.path}; pbsolver reads "
            "only data stored in the input file itself"
        )
    if isinstance(link, h5py.SoftLink):
        _resolve_soft(parent.file, link.path, where, name, 0)
        return link
    raise InputError(f"{where}: {name} is a {type(link).__name__}; only hard links are read")


def _resolve_soft(f, path: str, where: str, name: str, depth: int) -> None:
    """Walk a soft link's target from the root, link by link, without following any."""
    import h5py

    if depth > _MAX_SOFT_DEPTH:
        raise InputError(f"{where}: {name} is a soft link chain deeper than {_MAX_SOFT_DEPTH}")
    parts = [p for p in path.split("/") if p]
    if not path.startswith("/") or any(p in (".", "..") for p in parts):
        raise InputError(f"{where}: {name} is a soft link to {path!r}; only absolute paths")
    node = f["/"]
    for i, part in enumerate(parts):
        if not isinstance(node, h5py.Group):
            raise InputError(f"{where}: {name} is a dangling soft link to {path!r}")
        try:
            link = node.get(part, getlink=True)
        except (KeyError, TypeError, ValueError, OSError):
            link = None
        if link is None:
            raise InputError(f"{where}: {name} is a dangling soft link to {path!r}")
        if isinstance(link, h5py.ExternalLink):
            raise InputError(
                f"{where}: {name} is a soft link to {path!r}, which leads to another file "
                f"({link.filename}); pbsolver reads only data stored in the input file itself"
            )
        if isinstance(link, h5py.SoftLink):
            rest = "/".join(parts[i + 1 :])
            target = link.path.rstrip("/") + ("/" + rest if rest else "")
            _resolve_soft(f, target, where, name, depth + 1)
            return
        if not isinstance(link, h5py.HardLink):
            raise InputError(f"{where}: {name}: {type(link).__name__} in its soft link path")
        node = node[part]


def check_storage(dset, where: str, name: str) -> None:
    """Refuse a dataset whose data is not stored inside its file (external raw or virtual).

    Raises
    ------
    InputError
        Naming the dataset and, for external raw storage, the first file it names.
    """
    try:
        virtual = bool(dset.is_virtual)
        external = dset.external
    except (OSError, ValueError, RuntimeError) as exc:
        raise InputError(f"{where}: {name}: unreadable storage layout ({exc})") from None
    if virtual:
        raise InputError(
            f"{where}: {name} is a virtual dataset (its data lives in other files); pbsolver "
            "reads only data stored in the input file itself"
        )
    if external:
        first = external[0][0]
        first = first.decode("utf-8", "replace") if isinstance(first, bytes) else str(first)
        raise InputError(
            f"{where}: {name} stores its data in external file(s) ({first!r}"
            f"{', ...' if len(external) > 1 else ''}); pbsolver reads only data stored in the "
            "input file itself"
        )


def check_group(group, where: str, depth: int = 1) -> None:
    """Check every member of ``group`` (links, dataset storage), ``depth`` subgroup levels down.

    A grid group holds its datasets and the ``solver/`` group: ``depth=1`` covers them all.
    """
    import h5py

    for name in list(group.keys()):
        link = check_link(group, name, where)
        if isinstance(link, h5py.SoftLink):
            continue  # it resolves inside this file: the target is checked where it is
        obj = group.get(name)
        if isinstance(obj, h5py.Dataset):
            check_storage(obj, where, name if depth >= 1 else f"{group.name}/{name}")
        elif isinstance(obj, h5py.Group) and depth > 0:
            check_group(obj, f"{where}: {name}", depth - 1)


def check_grid_name(name: str, where: str) -> None:
    """Refuse grid names that cannot be written back or could act as path components.

    Raises
    ------
    InputError
        Empty, ``.``, ``..``, or holding ``/``, a backslash or control characters.
    """
    bad = (
        not name
        or name in (".", "..")
        or "/" in name
        or "\\" in name
        or any(ord(c) < 32 or ord(c) == 127 for c in name)
    )
    if bad:
        raise InputError(
            f"{where}: grid name {name!r} is not usable (it must be non-empty, not '.' or '..', "
            "without '/', '\\' or control characters)"
        )


# ---------------------------------------------------------------------- outputs
def same_file(a, b) -> bool:
    """Whether paths ``a`` and ``b`` are one file (device and inode; symbolic links followed)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        pass
    try:
        return Path(a).resolve() == Path(b).resolve()
    except (OSError, RuntimeError):
        return False


def output_format(path) -> str | None:
    """``"hdf5"`` or ``"map"`` from the output's suffix, or None."""
    name = Path(path).name.lower()
    if name.endswith(HDF5_SUFFIXES):
        return "hdf5"
    if name.endswith(MAP_SUFFIXES):
        return "map"
    return None


def check_special(path, what: str = "output") -> None:
    """Refuse an output path that is not a regular file or absent.

    A write replaces its target by renaming a temporary file onto it, so a symbolic link would
    be replaced by a file (not written through), and a FIFO, socket or device node would be
    replaced by a file. They are refused instead.

    Raises
    ------
    InputError
        Naming the path and what it is.
    """
    path = Path(path)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise InputError(f"{what} {path}: cannot check it ({exc.strerror or exc})") from None
    mode = st.st_mode
    if stat.S_ISREG(mode):
        return
    if stat.S_ISLNK(mode):
        raise InputError(
            f"{what} {path} is a symbolic link; give the real path ({os.path.realpath(path)})"
        )
    kinds = (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    )
    kind = next((text for test, text in kinds if test(mode)), "not a regular file")
    raise InputError(f"{what} {path} is {kind}; outputs are written as regular files")


def check_output(path, inputs=(), *, formats=("hdf5",), what: str = "output") -> str:
    """Check one output path before any work; return its format (``"hdf5"`` or ``"map"``).

    Parameters
    ----------
    path : path-like
        The output file.
    inputs : iterable of path-like
        Files the command reads; the output may be none of them.
    formats : tuple of str
        Formats the command writes there (``"hdf5"``, ``"map"``).
    what : str
        How messages name the output (e.g. ``"--output"``).

    Raises
    ------
    InputError
        Wrong suffix, a special file, or one of the inputs.
    """
    path = Path(path)
    check_special(path, what)
    fmt = output_format(path)
    if fmt not in formats:
        allowed = []
        if "hdf5" in formats:
            allowed += HDF5_SUFFIXES
        if "map" in formats:
            allowed += MAP_SUFFIXES
        raise InputError(
            f"{what} {path}: the name must end in {', '.join(allowed)} (the format is chosen "
            "by the suffix)"
        )
    for src in inputs:
        if os.path.lexists(path) and same_file(path, src):
            raise InputError(f"{what} {path} is the input {src}; inputs are never modified")
    return fmt


def check_results_origin(output, source, *, overwrite: bool = False) -> None:
    """Refuse to replace an existing results file written from another input.

    A results file written by pbsolver records its input in the root attribute ``@source``.
    An existing ``output`` is accepted (and resumed or replaced, as before) when it records
    ``source`` itself; otherwise (another input, no record, or not an HDF5 file at all) only
    with ``overwrite``.

    Raises
    ------
    InputError
        Naming the output and the input it came from.
    """
    output = Path(output)
    if overwrite or not output.is_file():
        return
    recorded = read_source(output)
    mine = str(Path(source).resolve())
    if recorded == mine:
        return
    if recorded is None:
        came = "records no input (not written by this pbsolver from an input, or not HDF5)"
    else:
        came = f"was written from {recorded}"
    raise InputError(
        f"output {output} exists and {came}, not from {source}; use --overwrite to replace it"
    )


def read_source(path) -> str | None:
    """The ``@source`` a results file records, or None (no attribute, unreadable, not HDF5)."""
    import h5py

    try:
        with h5py.File(path, "r", locking="best-effort") as f:
            value = f.attrs.get(SOURCE_ATTR)
    except (OSError, ValueError, KeyError):
        return None
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    return None if value is None else str(value)


# ---------------------------------------------------------------------- free space
#: Room left on top of the estimate: HDF5 metadata, chunk index, file system blocks.
SLACK_BYTES = 4 << 20


def require_free_space(path, nbytes: int, what: str | None = None) -> None:
    """Refuse to write about ``nbytes`` at ``path`` when its file system has less free.

    h5py 3.16 raises ``OSError`` when the disk fills while it writes a gzip-compressed chunked
    dataset, and the interpreter then crashes (segfault, exit 139) when the file is closed or
    collected: the error can never be reported cleanly. Checking the free space first (the
    uncompressed size of the data plus :data:`SLACK_BYTES`, an upper bound of what gzip
    writes) keeps h5py off that path.

    Raises
    ------
    OSError
        ``ENOSPC`` naming the file, the bytes needed and the bytes free.
    """
    from pbsolver.resources import format_bytes

    path = Path(path)
    directory = path.parent if str(path.parent) else Path(".")
    try:
        free = shutil.disk_usage(directory).free
    except OSError:
        return  # cannot tell: let the write try (its failure is reported)
    need = int(nbytes) + SLACK_BYTES
    if need > free:
        raise OSError(
            errno.ENOSPC,
            f"not enough free space: needs about {format_bytes(need)}, "
            f"{format_bytes(free)} free; free some space and run again",
            str(what or path),
        )


__all__ = [
    "HDF5_SUFFIXES",
    "MAP_SUFFIXES",
    "SOURCE_ATTR",
    "check_grid_name",
    "check_group",
    "check_link",
    "check_output",
    "check_results_origin",
    "check_special",
    "check_storage",
    "read_source",
    "require_free_space",
    "same_file",
]
