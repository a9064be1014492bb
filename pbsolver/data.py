"""Example data shipped with pbsolver: a Born ion, a small protein, example grids.

The files live in the repository's top-level ``data/`` folder; a wheel carries them as
``pbsolver/_data`` (see ``[tool.hatch.build.targets.wheel.force-include]`` in pyproject.toml), so
the same names work from a source checkout and from an installed package.

>>> import pbsolver as pb
>>> "README.md" in pb.data.list()
True
>>> pb.data.path("README.md").name
'README.md'
"""

from __future__ import annotations

import builtins
from pathlib import Path

from pbsolver.exceptions import InputError

_PACKAGE_DIR = Path(__file__).resolve().parent

#: Where the data may be, in order: inside an installed wheel, then beside a source checkout.
_CANDIDATES = (_PACKAGE_DIR / "_data", _PACKAGE_DIR.parent / "data")


def root() -> Path:
    """The folder holding the example data.

    Returns
    -------
    pathlib.Path
        ``pbsolver/_data`` in an installed wheel, else the checkout's ``data/`` folder.

    Raises
    ------
    FileNotFoundError
        When neither exists (a broken install).
    """
    for candidate in _CANDIDATES:
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(
        "pbsolver's example data folder is missing; looked in "
        + ", ".join(str(c) for c in _CANDIDATES)
    )


def list() -> builtins.list[str]:  # noqa: A001 - the public name is pb.data.list()
    """Names of the shipped data files, sorted (sub-folders as ``"folder/file"``).

    Returns
    -------
    list of str
        Every name :func:`path` accepts.
    """
    base = root()
    names = []
    for p in base.rglob("*"):
        rel = p.relative_to(base)
        if p.is_file() and not any(
            part.startswith(".") or part == "__pycache__" for part in rel.parts
        ):
            names.append(rel.as_posix())
    return sorted(names)


def path(name: str) -> Path:
    """Path of a shipped data file.

    Parameters
    ----------
    name : str
        File name as given by :func:`list`, e.g. ``"born_ion.pqr"``.

    Returns
    -------
    pathlib.Path
        Absolute path of an existing file.

    Raises
    ------
    InputError
        For a name that is not shipped; the message lists the available names.
    """
    if not isinstance(name, str) or not name:
        raise InputError(f"data file name must be a non-empty string, got {name!r}")
    available = list()
    if name not in available:
        raise InputError(
            f"no data file {name!r} in pbsolver; available: " + ", ".join(available)
            if available
            else f"no data file {name!r}: pbsolver's data folder {root()} is empty"
        )
    return root() / name


__all__ = ["list", "path", "root"]
