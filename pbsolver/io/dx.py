"""OpenDX (``.dx``, ``.dx.gz``) files through GridDataFormats, in the layout APBS writes.

Potentials are written in kT/e at a stated temperature (default 298.15 K), APBS' convention,
which PyMOL, VMD and ChimeraX read as "APBS potential" maps; the header comments record the
units and the temperature. The data type is ``double`` (PyMOL needs it), three values a line
(VMD), C order with z fastest, origin at the centre of node [0, 0, 0].

Reading checks the header's declared counts against a size limit before GridDataFormats
parses (and allocates) the data.
"""

from __future__ import annotations

import gzip
import math
import re
from pathlib import Path

import numpy as np

from .._arrays import to_numpy
from .._version import __version__
from ..exceptions import InputError
from ..grid import Grid
from ._atomic import atomic_path
from .units import DEFAULT_TEMPERATURE, check_temperature, kT_kj_per_mol

_HEADER_LINES = 200
_COUNTS = re.compile(r"^\s*object\s+\S+\s+class\s+gridpositions\s+counts\s+(.*)$")
_DATA = re.compile(r"^\s*object\s+\S+\s+class\s+array\b.*\bitems\s+(\d+)")


def _is_gz(path: Path) -> bool:
    return path.name.endswith(".gz")


def write_dx(
    path,
    values,
    grid: Grid,
    *,
    potential: bool = True,
    temperature: float = DEFAULT_TEMPERATURE,
    dx_type: str = "double",
    title: str | None = None,
) -> Path:
    """Write a 3-D map as OpenDX (``.dx`` or gzipped ``.dx.gz``), atomically.

    Parameters
    ----------
    path : path-like
        Target file; ``.gz`` at the end writes gzip.
    values : array (nx, ny, nz)
        The map. With ``potential=True`` it is in kJ mol⁻¹ e⁻¹ and is written in kT/e.
    grid : Grid
        Its grid (origin, spacing).
    potential : bool
        Convert kJ/mol/e → kT/e at ``temperature`` (False: write the values unchanged, e.g. ε).
    temperature : float
        Temperature of the kT/e unit, K.
    dx_type : {"double", "float"}
        DX array type (PyMOL needs "double").
    title : str, optional
        First comment line (default ``POTENTIAL (kT/e)`` for potentials, as APBS writes).

    Returns
    -------
    pathlib.Path

    Raises
    ------
    InputError
        A shape that does not match the grid, non-finite values, a bad temperature or type.
    """
    from gridData import OpenDX

    path = Path(path)
    if not isinstance(grid, Grid):
        raise InputError(f"grid must be a pbsolver.Grid, got {type(grid).__name__}")
    if dx_type not in ("double", "float"):
        raise InputError(f"dx_type must be 'double' or 'float', got {dx_type!r}")
    data = np.asarray(to_numpy(values), dtype=np.float64)
    if data.shape != grid.shape:
        raise InputError(f"values have shape {data.shape}, the grid needs {grid.shape}")
    if not np.isfinite(data).all():
        idx = tuple(int(i) for i in np.unravel_index(np.argmax(~np.isfinite(data)), data.shape))
        raise InputError(
            f"values are not finite at node {idx} ({data[idx]}); OpenDX readers cannot take them"
        )
    comments = []
    if potential:
        t = check_temperature(temperature)
        data = data / kT_kj_per_mol(t)
        comments.append(title or "POTENTIAL (kT/e)")
        comments.append(
            f"units kT/e at temperature {t:g} K (1 kT/e = {kT_kj_per_mol(t):.6f} kJ/mol/e)"
        )
    else:
        comments.append(title or "MAP")
    comments.append(
        f"written by pbsolver {__version__}; origin = centre of node [0,0,0], z fastest"
    )
    field = OpenDX.field(
        "density",
        components={
            "positions": OpenDX.gridpositions(1, grid.shape, grid.origin, grid.spacing),
            "connections": OpenDX.gridconnections(2, grid.shape),
            "data": OpenDX.array(3, data, type=dx_type),
        },
        comments=comments,
    )
    with atomic_path(path, keep_suffix=".gz" if _is_gz(path) else "") as tmp:
        field.write(str(tmp))
    return path


def _read_header(path: Path) -> tuple[tuple[int, ...] | None, int | None, list[str]]:
    """Declared grid counts and data items from the first lines of a DX file."""
    opener = gzip.open if _is_gz(path) else open
    counts, items, comments = None, None, []
    try:
        with opener(path, "rt", encoding="utf-8", errors="strict") as fh:
            for _ in range(_HEADER_LINES):
                line = fh.readline()
                if not line:
                    break
                if line.startswith("#"):
                    comments.append(line[1:].strip())
                    continue
                m = _COUNTS.match(line)
                if m:
                    try:
                        counts = tuple(int(v) for v in m.group(1).split())
                    except ValueError:
                        raise InputError(
                            f"{path}: malformed DX header line: {line.strip()[:80]!r}"
                        ) from None
                m = _DATA.match(line)
                if m:
                    items = int(m.group(1))
                    break
    except (UnicodeDecodeError, gzip.BadGzipFile, EOFError) as exc:
        raise InputError(f"{path}: not an OpenDX text file ({exc})") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from None
    return counts, items, comments


def read_dx(
    path,
    *,
    potential: bool | None = None,
    temperature: float | None = None,
    max_points: int | None = None,
):
    """Read an OpenDX map: ``(values, Grid)``.

    Parameters
    ----------
    path : path-like
        ``.dx`` or ``.dx.gz`` file (APBS, pbsolver, GridDataFormats, VMD ... output).
    potential : bool, optional
        Convert kT/e → kJ/mol/e. Default: when the header says kT/e (APBS and pbsolver files).
    temperature : float, optional
        Temperature of the kT/e values, K. Default: the one in a pbsolver header, else 298.15 K.
    max_points : int, optional
        Refuse files declaring more nodes (default ``$PBSOLVER_MAX_POINTS`` or 1024³).

    Returns
    -------
    values : numpy.ndarray (nx, ny, nz), float64
    grid : Grid

    Raises
    ------
    InputError
        Missing or malformed file, a declared size above the limit, non-uniform axes.
    """
    from gridData import OpenDX

    from .hdf5 import default_max_points

    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such file")
    max_points = default_max_points() if max_points is None else int(max_points)
    counts, items, comments = _read_header(path)
    if counts is None or items is None:
        raise InputError(f"{path}: malformed OpenDX file (no gridpositions counts / data array)")
    if len(counts) != 3:
        raise InputError(f"{path}: OpenDX grid must be 3-D, header declares counts {counts}")
    npoints = math.prod(counts)
    if npoints > max_points or items > max_points:
        raise InputError(
            f"{path}: declares {max(npoints, items):,} values, more than the limit of "
            f"{max_points:,}"
        )
    if items != npoints:
        raise InputError(f"{path}: declares {items} data items for a {counts} grid ({npoints})")
    dx = OpenDX.field(0)
    try:
        dx.read(str(path))
        values, edges = dx.histogramdd()
    except Exception as exc:  # noqa: BLE001 - the parser raises many kinds on bad input
        text = " ".join(str(exc).split())[:200]
        raise InputError(f"{path}: malformed OpenDX file: {type(exc).__name__}: {text}") from None
    positions = dx.components["positions"]
    delta = np.asarray(positions.delta, dtype=np.float64)
    if delta.shape != (3, 3) or np.count_nonzero(delta - np.diag(np.diag(delta))):
        raise InputError(f"{path}: only axis-aligned (orthorhombic) OpenDX grids are supported")
    values = np.asarray(values, dtype=np.float64)
    if values.shape != tuple(counts):
        raise InputError(f"{path}: data do not fill the declared {counts} grid")
    try:
        grid = Grid(values.shape, np.diag(delta), positions.origin, max_points=max_points)
    except InputError as exc:
        raise InputError(f"{path}: {exc}") from None
    header = " ".join(comments).lower()
    if potential is None:
        potential = "kt/e" in header
    if potential:
        if temperature is None:
            m = re.search(r"temperature\s+([0-9.eE+-]+)\s*k", header)
            temperature = float(m.group(1)) if m else DEFAULT_TEMPERATURE
        values = values * kT_kj_per_mol(temperature)
    return values, grid


__all__ = ["read_dx", "write_dx"]
