"""OpenDX (``.dx``, ``.dx.gz``) files through GridDataFormats, in the layout APBS writes.

Potentials are written in kT/e at a stated temperature (default 298.15 K), APBS' convention,
which PyMOL, VMD and ChimeraX read as "APBS potential" maps; the header comments record the
units and the temperature. The data type is ``double`` (PyMOL needs it), three values a line
(VMD), C order with z fastest, origin at the centre of node [0, 0, 0].

Writing goes through GridDataFormats' objects (the same bytes as its writer), with the data
section formatted a block of rows at a time instead of a value at a time, and gzip at level 4;
reading uses a strict parser of the same regular-grid subset (GridDataFormats 1.2 hangs on a
truncated file), which checks the header's declared counts against a size limit before reading
the data.
"""

from __future__ import annotations

import functools
import gzip
import math
import re
import zlib
from pathlib import Path

import numpy as np

from pbsolver._version import __version__
from pbsolver.arrays import to_numpy
from pbsolver.exceptions import InputError
from pbsolver.grid import Grid, check_points
from pbsolver.io.atomic import atomic_path
from pbsolver.io.units import DEFAULT_TEMPERATURE, check_temperature, kT_kj_per_mol

#: gzip level of ``.dx.gz`` files, as the HDF5 datasets' (GridDataFormats' gzip.open default
#: is 9: about four times the time for 8 % less size on a potential map).
GZIP_LEVEL = 4
#: Values formatted in one pass when writing (a multiple of 3: whole rows).
_CHUNK = 3 * 65536

_KEYWORD_LINE = re.compile(r"^[ \t]*[A-Za-z]", re.MULTILINE)
_DX_TYPES = ("float", "double", "int", "unsigned int", "short", "byte", "signed byte")


def _is_gz(path: Path) -> bool:
    return path.name.endswith(".gz")


@functools.cache
def _writer_classes():
    """GridDataFormats' ``array`` and ``field``, writing blocks of rows and gzip at GZIP_LEVEL.

    The bytes are those of GridDataFormats' own writer: each value formatted as ``{:.Nf}``
    (N = the dtype's decimal precision) or ``{:d}``, followed by a tab, three a line, then one
    line with the values left over (empty when none are).
    """
    from gridData import OpenDX

    class RowsArray(OpenDX.array):
        def write(self, stream):
            if self.type not in self.dx_types:
                raise ValueError(f"DX type {self.type} is not supported in the DX format")
            label = self.typequote + self.type + self.typequote
            OpenDX.DXclass.write(
                self, stream, f"type {label} rank 0 items {self.array.size} data follows"
            )
            fmt = "%d"
            if self.array.dtype.kind in "fc":
                fmt = f"%.{np.finfo(self.array.dtype).precision}f"
            flat = self.array.reshape(-1)
            full = flat.size - flat.size % 3
            row = (fmt + "\t") * 3 + "\n"
            for a in range(0, full, _CHUNK):
                values = flat[a : min(a + _CHUNK, full)].tolist()
                self._write_line(stream, row * (len(values) // 3) % tuple(values))
            tail = "".join((fmt + "\t") % v for v in flat[full:].tolist())
            self._write_line(stream, tail + "\n")
            self._write_line(stream, 'attribute "dep" string "positions"\n')

    class Field(OpenDX.field):
        def _openfile_writing(self, filename):
            if filename.endswith(".gz"):
                return gzip.open(filename, "wb", compresslevel=GZIP_LEVEL)
            return open(filename, "w")

    return RowsArray, Field


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
    rows_array, dx_field = _writer_classes()
    field = dx_field(
        "density",
        components={
            "positions": OpenDX.gridpositions(1, grid.shape, grid.origin, grid.spacing),
            "connections": OpenDX.gridconnections(2, grid.shape),
            "data": rows_array(3, data, type=dx_type),
        },
        comments=comments,
    )
    with atomic_path(path, keep_suffix=".gz" if _is_gz(path) else "") as tmp:
        field.write(str(tmp))
    return path


def _floats(words, n, what, path, lineno):
    try:
        values = [float(w) for w in words[:n]]
    except ValueError:
        values = []
    if len(values) != n or not all(math.isfinite(v) for v in values):
        raise InputError(f"{path}:{lineno}: malformed OpenDX {what} line (need {n} numbers)")
    return values


def _parse_dx(path: Path, max_points: int):
    """Strictly parse the regular-grid subset of OpenDX that APBS and viewers use.

    Returns (counts, origin, deltas, values, comments). Sizes are checked against
    ``max_points`` from the header before the data are read.
    """
    opener = gzip.open if _is_gz(path) else open
    counts = origin = items = None
    deltas, comments = [], []
    try:
        with opener(path, "rt", encoding="utf-8", errors="strict") as fh:
            lineno = 0
            for line in fh:
                lineno += 1
                text = line.strip()
                if not text:
                    continue
                if text.startswith("#"):
                    comments.append(text[1:].strip())
                    continue
                words = text.split()
                head = words[0]
                if head == "origin":
                    origin = _floats(words[1:], 3, "origin", path, lineno)
                elif head == "delta":
                    deltas.append(_floats(words[1:], 3, "delta", path, lineno))
                elif head == "object" and "gridpositions" in words and "counts" in words:
                    rest = words[words.index("counts") + 1 :]
                    try:
                        counts = tuple(int(w) for w in rest)
                    except ValueError:
                        counts = ()
                    if len(counts) != 3 or min(counts) < 1:
                        raise InputError(
                            f"{path}:{lineno}: OpenDX grid must be 3-D with positive counts, "
                            f"got {' '.join(rest)!r}"
                        )
                    check_points(counts, max_points, f"{path}: the declared {counts} grid")
                elif head == "object" and "gridconnections" in words:
                    continue
                elif head == "object" and "array" in words:
                    if "binary" in words or "follows" not in words:
                        raise InputError(
                            f"{path}:{lineno}: only text arrays ('data follows') are supported"
                        )
                    try:
                        items = int(words[words.index("items") + 1])
                    except (ValueError, IndexError):
                        raise InputError(f"{path}:{lineno}: array without 'items N'") from None
                    if counts is None:
                        raise InputError(f"{path}: data array before the gridpositions counts")
                    if items != math.prod(counts):
                        raise InputError(
                            f"{path}:{lineno}: declares {items} data items for a {counts} grid"
                        )
                    rest = fh.read()
                    m = _KEYWORD_LINE.search(rest)
                    data = rest[: m.start()] if m else rest
                    values = _numbers(data, path, lineno)
                    break
                else:
                    raise InputError(f"{path}:{lineno}: malformed OpenDX line {text[:60]!r}")
            else:
                raise InputError(f"{path}: malformed OpenDX file (no data array)")
    except (UnicodeDecodeError, gzip.BadGzipFile, EOFError, zlib.error) as exc:
        raise InputError(f"{path}: not an OpenDX text file ({exc})") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory") from None
    if origin is None or len(deltas) != 3:
        raise InputError(f"{path}: malformed OpenDX header (needs origin and 3 delta lines)")
    if values.size != items:
        raise InputError(
            f"{path}: has {values.size} data values, the header declares {items} (truncated file?)"
        )
    if not np.isfinite(values).all():
        raise InputError(f"{path}: data contain non-finite values")
    return counts, origin, np.array(deltas), values.reshape(counts), comments


def _numbers(text: str, path, lineno) -> np.ndarray:
    tokens = text.split()
    try:
        return np.array(tokens, dtype=np.float64)
    except ValueError:
        for i, tok in enumerate(tokens):
            try:
                float(tok)
            except ValueError:
                raise InputError(
                    f"{path}: data value {i + 1} after line {lineno} is not a number: {tok[:20]!r}"
                ) from None
        raise


def read_dx(
    path,
    *,
    potential: bool | None = None,
    temperature: float | None = None,
    max_points: int | None = None,
):
    """Read an OpenDX map: ``(values, Grid)``.

    The regular-grid subset written by APBS, GridDataFormats, VMD and pbsolver is parsed here,
    strictly: GridDataFormats 1.2's reader loops forever on a file whose data stop short of the
    declared count (it keeps reading empty lines at the end of the file), so a truncated map
    would hang. Writing goes through GridDataFormats.

    Parameters
    ----------
    path : path-like
        ``.dx`` or ``.dx.gz`` file.
    potential : bool, optional
        Convert kT/e → kJ/mol/e. Default: when the header comments say kT/e (APBS and pbsolver
        potentials).
    temperature : float, optional
        Temperature of the kT/e values, K. Default: the one in a pbsolver header, else 298.15 K.
    max_points : int, optional
        Refuse files declaring more nodes (default ``$PBSOLVER_MAX_POINTS`` or 1024³); checked
        from the header before the data are read.

    Returns
    -------
    values : numpy.ndarray (nx, ny, nz), float64
    grid : Grid

    Raises
    ------
    InputError
        Missing, malformed or truncated file, a declared size above the limit, non-finite data,
        non-orthorhombic axes.
    """
    from pbsolver.io.hdf5 import default_max_points

    path = Path(path)
    if not path.exists():
        raise InputError(f"{path}: no such file")
    max_points = default_max_points() if max_points is None else int(max_points)
    counts, origin, delta, values, comments = _parse_dx(path, max_points)
    if np.count_nonzero(delta - np.diag(np.diag(delta))):
        raise InputError(f"{path}: only axis-aligned (orthorhombic) OpenDX grids are supported")
    try:
        grid = Grid(counts, np.diag(delta), origin, max_points=max_points)
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
