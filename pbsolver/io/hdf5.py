"""HDF5 files in the pbsolver layout (README, *Files*): many grids per file, inputs and results.

Layout (version "1")::

    /                       @pbsolver_layout="1"  @creator="pbsolver X.Y"
    /grids/<name>/          @origin f8[3] Å (centre of node [0,0,0])  @spacing f8[3] Å
                            @axis_order="xyz"  @eps_cavity f8  @boundary "dirichlet" | "periodic"
                            @face_rule "arithmetic" | "harmonic" (optional, node maps only)
                            @nonlinear 1 (optional: the nonlinear equation; absent or 0:
                            linearised) with @ion_valence i8 (z of the z:z salt, default 1)
                            and @temperature_K f8 (kT of the sinh term, default 298.15)
        epsilon             f4[nx,ny,nz] relative permittivity at nodes, or
        epsilon_x/_y/_z     f4[nx,ny,nz] face permittivities (ex[i,j,k]: face (i,j,k)-(i+1,j,k))
        phi_coulomb         f4[nx,ny,nz] @units="kJ/mol/e" (or "kT/e" with @temperature_K)
        kappa2              f4[nx,ny,nz] optional, κ̄² in Å⁻²
        boundary_values     f4[nx,ny,nz] optional, φ_rf on the outer layer (absent: zero)
        reaction_field      f4[nx,ny,nz] @units="kJ/mol/e" (output; f8 when solved in float64)
        solver/             @method @backend @iterations @residual @converged @seconds @version
                            @reason @rtol @atol @dtype [@omega] [@newton_steps] [@input_key]
            residual_norms  f8[n] relative residual at each check

Arrays are indexed ``[i, j, k]`` ↔ ``origin + (i, j, k)·spacing`` (x slowest, z fastest; the
OpenDX order). Datasets are written with gzip (level 4) and the shuffle filter, in chunks of at
most 64³, readable by any HDF5 reader without plugins.

Reading checks every grid's metadata first (attributes, dataset ranks, shapes and dtypes, and
the declared size against ``max_points``) and only then reads data, so a file that declares an
absurd grid is refused before anything is allocated. Writing goes to a temporary name that is
renamed onto the target when complete (see :mod:`pbsolver.io._atomic`).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import h5py
import numpy as np

from pbsolver._version import __version__
from pbsolver.exceptions import InputError
from pbsolver.grid import MAX_POINTS, Grid, check_points
from pbsolver.io.atomic import atomic_path
from pbsolver.io.safety import check_grid_name, check_group, check_link, require_free_space
from pbsolver.io.units import DEFAULT_TEMPERATURE, KJ_PER_MOL_E, potential_scale
from pbsolver.problem import BOUNDARIES, FACE_RULES, Problem

#: Version of the layout this module reads and writes.
LAYOUT = "1"
GRIDS = "grids"
NODE_EPSILON = "epsilon"
FACE_EPSILON = ("epsilon_x", "epsilon_y", "epsilon_z")
INPUT_DATASETS = (NODE_EPSILON, *FACE_EPSILON, "phi_coulomb", "kappa2", "boundary_values")
RESULT = "reaction_field"
SOLVER = "solver"
GRID_DATASETS = (*INPUT_DATASETS, RESULT)
#: Datasets that hold potentials (kJ/mol/e; convertible to kT/e).
POTENTIALS = ("phi_coulomb", "boundary_values", RESULT)
UNITS = {
    NODE_EPSILON: "1",
    **dict.fromkeys(FACE_EPSILON, "1"),
    "phi_coulomb": KJ_PER_MOL_E,
    "kappa2": "1/angstrom^2",
    "boundary_values": KJ_PER_MOL_E,
    RESULT: KJ_PER_MOL_E,
}
#: Default gzip level (1–9): level 4 + shuffle compresses these smooth fields nearly as well as
#: level 9 in a fraction of its time.
COMPRESSION_LEVEL = 4
CHUNK = 64
#: Attributes larger than this many elements are refused unread.
_MAX_ATTR_ELEMENTS = 64


def default_max_points() -> int:
    """The largest grid (nodes) read from files: ``$PBSOLVER_MAX_POINTS`` or 1024³."""
    value = os.environ.get("PBSOLVER_MAX_POINTS")
    if not value:
        return MAX_POINTS
    try:
        n = int(float(value))
    except ValueError:
        raise InputError(f"PBSOLVER_MAX_POINTS must be a positive integer, got {value!r}") from None
    if n <= 0:
        raise InputError(f"PBSOLVER_MAX_POINTS must be a positive integer, got {value!r}")
    return n


# ---------------------------------------------------------------------- metadata
@dataclass
class GridInfo:
    """What a grid group declares, read from metadata only (no data read).

    Attributes
    ----------
    name : str
        Group name under ``/grids``.
    shape, spacing, origin : tuple
        The grid (nodes, Å, Å).
    eps_cavity : float or None
        ε_c of ``phi_coulomb`` (None in a results-only group without it).
    boundary, face_rule : str
        Boundary kind and node-map face rule.
    nonlinear : bool
        The nonlinear equation (``@nonlinear``; False when absent).
    ion_valence : int
        z of the salt (``@ion_valence``, default 1).
    temperature : float
        K (``@temperature_K``, default 298.15): kT of the nonlinear term.
    datasets : dict
        Known datasets present: name → (shape, dtype string).
    solver : dict
        Attributes of the ``solver/`` group (empty when not solved).
    """

    name: str
    shape: tuple[int, int, int]
    spacing: tuple[float, float, float]
    origin: tuple[float, float, float]
    eps_cavity: float | None
    boundary: str
    face_rule: str
    datasets: dict = field(default_factory=dict)
    solver: dict = field(default_factory=dict)
    nonlinear: bool = False
    ion_valence: int = 1
    temperature: float = DEFAULT_TEMPERATURE

    @property
    def grid(self) -> Grid:
        """The :class:`~pbsolver.Grid` (already validated)."""
        return Grid(self.shape, self.spacing, self.origin, max_points=math.prod(self.shape))

    @property
    def solved(self) -> bool:
        """True when the group holds a ``reaction_field`` and a ``solver`` group."""
        return RESULT in self.datasets and bool(self.solver)

    @property
    def has_inputs(self) -> bool:
        """True when the group holds what a solve needs (ε and φ_c)."""
        eps = NODE_EPSILON in self.datasets or all(f in self.datasets for f in FACE_EPSILON)
        return eps and "phi_coulomb" in self.datasets and self.eps_cavity is not None

    @property
    def nbytes(self) -> int:
        """Bytes of all known datasets, uncompressed."""
        return sum(math.prod(s) * np.dtype(d).itemsize for s, d in self.datasets.values())


def _where(filename, name=None) -> str:
    text = str(filename) if filename is not None else "<hdf5>"
    return f"{text}: grid {name!r}" if name is not None else text


def _decode(value):
    if isinstance(value, bytes | np.bytes_):
        return value.decode("utf-8", "replace")
    if isinstance(value, np.ndarray) and value.dtype.kind in "SUO" and value.size == 1:
        return _decode(value.reshape(()).item())
    if isinstance(value, np.generic):
        return value.item()
    return value


def _attr(obj, name, where, default=None):
    """Read a small attribute, refusing big ones unread."""
    if name not in obj.attrs:
        return default
    try:
        shape = obj.attrs.get_id(name).shape
    except Exception as exc:  # noqa: BLE001 - h5py raises assorted errors on corrupt attributes
        raise InputError(f"{where}: cannot read attribute {name!r}: {exc}") from None
    if shape is not None and math.prod(shape) > _MAX_ATTR_ELEMENTS:
        raise InputError(f"{where}: attribute {name!r} has {math.prod(shape)} elements")
    try:
        return _decode(obj.attrs[name])
    except Exception as exc:  # noqa: BLE001
        raise InputError(f"{where}: cannot read attribute {name!r}: {exc}") from None


def _float_triple(obj, name, where, required=True, allow_scalar=False):
    value = _attr(obj, name, where)
    if value is None:
        if required:
            raise InputError(f"{where}: missing attribute @{name} (3 numbers, Å)")
        return None
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise InputError(f"{where}: attribute @{name} must be 3 numbers, got {value!r}") from None
    if arr.ndim == 0 and allow_scalar:
        arr = np.repeat(arr, 3)
    if arr.shape != (3,):
        raise InputError(f"{where}: attribute @{name} must be 3 numbers, got {value!r}")
    if not np.isfinite(arr).all():
        raise InputError(f"{where}: attribute @{name} must be finite, got {arr.tolist()}")
    return tuple(float(v) for v in arr)


def _check_layout(f: h5py.File, filename) -> None:
    version = _attr(f, "pbsolver_layout", _where(filename))
    if version is None:
        return  # written by another tool without the tag: read it by the layout's rules
    major = str(version).split(".")[0]
    if major != LAYOUT:
        raise InputError(
            f"{filename}: pbsolver_layout {version!r} is not supported (this pbsolver reads "
            f"layout {LAYOUT!r})"
        )


def open_hdf5(path) -> h5py.File:
    """Open an existing pbsolver HDF5 file read-only, with one-line errors.

    Raises
    ------
    InputError
        Missing file, a directory, a non-HDF5 or truncated file, or an unsupported layout.
    """
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path}: no such file")
    if path.is_dir():
        raise InputError(f"{path}: is a directory, not an HDF5 file")
    try:
        f = h5py.File(path, "r", locking="best-effort")
    except OSError as exc:
        msg = str(exc)
        if "signature not found" in msg:
            raise InputError(f"{path}: not an HDF5 file") from None
        if "truncated" in msg:
            raise InputError(f"{path}: truncated HDF5 file ({_inner(msg)})") from None
        raise InputError(f"{path}: cannot open as HDF5: {_inner(msg)}") from None
    try:
        _check_layout(f, path)
    except BaseException:
        f.close()
        raise
    return f


def _inner(msg: str) -> str:
    """The useful part of an h5py error message, on one line."""
    if "(" in msg and msg.endswith(")"):
        msg = msg[msg.index("(") + 1 : -1]
    return " ".join(msg.split())


def list_grids(source) -> list[str]:
    """Names of the grid groups under ``/grids``, in file order (an open file or a path).

    Raises
    ------
    InputError
        If the file cannot be read or has no ``/grids`` group.
    """
    if isinstance(source, h5py.File):
        return _list_grids(source, source.filename)
    with open_hdf5(source) as f:
        return _list_grids(f, source)


def _list_grids(f: h5py.File, filename) -> list[str]:
    # Links are checked before anything is opened through them: an external link (or a soft
    # link leading out of the file) would make the reader open another file (see .safety).
    if check_link(f, GRIDS, _where(filename)) is None or not isinstance(f[GRIDS], h5py.Group):
        raise InputError(f"{filename}: no /{GRIDS} group (not a pbsolver grid file)")
    names = []
    grids = f[GRIDS]
    for name in grids:
        check_link(grids, name, _where(filename, name))
        obj = grids.get(name)
        if isinstance(obj, h5py.Group):
            names.append(name)
    return names


def inspect_grid(
    group: h5py.Group,
    name: str | None = None,
    *,
    max_points: int | None = None,
    need_inputs: bool = True,
    filename=None,
) -> GridInfo:
    """Read and check one grid group's metadata, without reading any array.

    Parameters
    ----------
    group : h5py.Group
        The ``/grids/<name>`` group.
    name : str, optional
        Its name (default: the group's last path component).
    max_points : int, optional
        Refuse grids with more nodes (default :func:`default_max_points`).
    need_inputs : bool
        Require the inputs of a solve (ε and φ_c, ``@eps_cavity``).
    filename : optional
        Used in error messages.

    Raises
    ------
    InputError
        Naming the file, the grid and the problem: missing or malformed attributes, datasets of
        the wrong rank, shape or dtype, a declared size above ``max_points``, missing inputs.
    """
    name = name if name is not None else group.name.rsplit("/", 1)[-1]
    where = _where(filename if filename is not None else group.file.filename, name)
    max_points = default_max_points() if max_points is None else int(max_points)
    check_grid_name(name, where)
    # Only data stored in this file is read: no external links, external raw storage or
    # virtual datasets anywhere in the group (they would read other files; see .safety).
    check_group(group, where)

    datasets = {}
    for key in GRID_DATASETS:
        obj = group.get(key, getlink=False)
        if obj is None:
            continue
        obj = group.get(key)
        if not isinstance(obj, h5py.Dataset):
            raise InputError(f"{where}: {key} must be a dataset, found {type(obj).__name__}")
        shape, dtype = obj.shape, obj.dtype
        if shape is None or len(shape) != 3:
            rank = 0 if shape is None else len(shape)
            raise InputError(
                f"{where}: {key} has {rank} dimension(s), shape {shape}; the layout needs 3 "
                "(nx, ny, nz)"
            )
        if dtype.kind not in "fiu" or dtype.itemsize > 8:
            raise InputError(f"{where}: {key} has dtype {dtype}; a real number type is needed")
        check_points(
            shape,
            max_points,
            f"{where}: {key} of the declared shape {shape}",
            " (raise it with --max-points or PBSOLVER_MAX_POINTS)",
        )
        datasets[key] = (tuple(int(n) for n in shape), dtype.str)

    shapes = {s for s, _ in datasets.values()}
    if len(shapes) > 1:
        detail = ", ".join(f"{k} {s}" for k, (s, _) in datasets.items())
        raise InputError(f"{where}: datasets have different shapes: {detail}")

    axis_order = _attr(group, "axis_order", where, "xyz")
    if str(axis_order) != "xyz":
        raise InputError(
            f"{where}: @axis_order {axis_order!r} is not supported; arrays must be [x, y, z] "
            "(axis_order='xyz')"
        )
    origin = _float_triple(group, "origin", where)
    spacing = _float_triple(group, "spacing", where, allow_scalar=True)
    if not all(h > 0 for h in spacing):
        raise InputError(f"{where}: @spacing must be > 0 Å, got {list(spacing)}")
    boundary = str(_attr(group, "boundary", where, "dirichlet"))
    if boundary not in BOUNDARIES:
        raise InputError(f"{where}: @boundary must be one of {BOUNDARIES}, got {boundary!r}")
    face_rule = str(_attr(group, "face_rule", where, "arithmetic"))
    if face_rule not in FACE_RULES:
        raise InputError(f"{where}: @face_rule must be one of {FACE_RULES}, got {face_rule!r}")
    eps_cavity = _attr(group, "eps_cavity", where)
    if eps_cavity is not None:
        try:
            eps_cavity = float(np.asarray(eps_cavity, dtype=np.float64).reshape(()))
        except (TypeError, ValueError):
            raise InputError(f"{where}: @eps_cavity must be a number, got {eps_cavity!r}") from None
        if not (math.isfinite(eps_cavity) and eps_cavity > 0):
            raise InputError(f"{where}: @eps_cavity must be finite and > 0, got {eps_cavity}")

    nonlinear, ion_valence, temperature = _nonlinear_attrs(group, where)

    if need_inputs:
        if "phi_coulomb" not in datasets:
            raise InputError(f"{where}: missing dataset phi_coulomb")
        faces = [f for f in FACE_EPSILON if f in datasets]
        if NODE_EPSILON in datasets and faces:
            raise InputError(
                f"{where}: has both epsilon and {'/'.join(faces)}; give either the node map or "
                "the three face maps"
            )
        if faces and len(faces) != 3:
            missing = [f for f in FACE_EPSILON if f not in datasets]
            raise InputError(f"{where}: face maps incomplete, missing {', '.join(missing)}")
        if NODE_EPSILON not in datasets and not faces:
            raise InputError(f"{where}: missing dataset epsilon (or epsilon_x/_y/_z)")
        if eps_cavity is None:
            raise InputError(f"{where}: missing attribute @eps_cavity (ε_c of phi_coulomb)")
        if "boundary_values" in datasets and boundary == "periodic":
            raise InputError(f"{where}: boundary_values given with @boundary='periodic'")
    if not datasets:
        raise InputError(f"{where}: no grid datasets")

    shape = next(iter(shapes))
    try:
        Grid(shape, spacing, origin, max_points=max_points)
    except InputError as exc:
        raise InputError(f"{where}: {exc}") from None

    solver = {}
    sgroup = group.get(SOLVER)
    if isinstance(sgroup, h5py.Group):
        for key in sgroup.attrs:
            try:
                solver[key] = _attr(sgroup, key, where)
            except InputError:
                solver[key] = "<unreadable>"
    return GridInfo(
        name=name,
        shape=shape,
        spacing=spacing,
        origin=origin,
        eps_cavity=eps_cavity,
        boundary=boundary,
        face_rule=face_rule,
        datasets=datasets,
        solver=solver,
        nonlinear=nonlinear,
        ion_valence=ion_valence,
        temperature=temperature,
    )


def _nonlinear_attrs(group, where):
    """(nonlinear, ion_valence, temperature) of a grid group, checked; linear when absent."""
    raw = _attr(group, "nonlinear", where, 0)
    try:
        value = np.asarray(raw).reshape(())
        if value.dtype.kind not in "biu" or int(value) not in (0, 1):
            raise ValueError
        nonlinear = bool(value)
    except (TypeError, ValueError):
        raise InputError(f"{where}: @nonlinear must be 0 or 1, got {raw!r}") from None
    raw = _attr(group, "ion_valence", where, 1)
    try:
        value = np.asarray(raw).reshape(())
        if value.dtype.kind not in "iu" or int(value) < 1:
            raise ValueError
        valence = int(value)
    except (TypeError, ValueError):
        raise InputError(f"{where}: @ion_valence must be an integer >= 1, got {raw!r}") from None
    raw = _attr(group, "temperature_K", where, DEFAULT_TEMPERATURE)
    try:
        temperature = float(np.asarray(raw, dtype=np.float64).reshape(()))
    except (TypeError, ValueError):
        temperature = math.nan
    if not (math.isfinite(temperature) and temperature > 0):
        raise InputError(f"{where}: @temperature_K must be finite and > 0 K, got {raw!r}")
    return nonlinear, valence, temperature


def inspect_hdf5(path, *, max_points: int | None = None):
    """Metadata of every grid in a file: a list of ``(name, GridInfo or None, error or None)``.

    A grid whose metadata is invalid is listed with its error message instead of raising, so one
    bad grid does not hide the others.

    Raises
    ------
    InputError
        If the file itself cannot be read or has no ``/grids`` group.
    """
    out = []
    with open_hdf5(path) as f:
        for name in _list_grids(f, path):
            try:
                info = inspect_grid(
                    f[GRIDS][name], name, max_points=max_points, need_inputs=False, filename=path
                )
            except InputError as exc:
                out.append((name, None, str(exc)))
            else:
                out.append((name, info, None))
    return out


# ---------------------------------------------------------------------- reading data
def _check_read_memory(info: GridInfo, keys, where) -> None:
    """Refuse reading ``keys`` when they (plus a float64 copy and masks) exceed free memory.

    The node limit bounds what a file may declare, far above memory: a small file declaring
    1000³ nodes must be refused here, not by the kernel's out-of-memory killer.
    """
    from pbsolver.resources import check_bytes

    nodes = math.prod(info.shape)
    stored = sum(np.dtype(info.datasets[k][1]).itemsize for k in keys)
    # the arrays as stored, one float64 conversion (potential units, integer maps) and the
    # boolean masks of the value checks
    check_bytes(
        nodes * (stored + 8 + 2),
        f"{where}: reading {len(keys)} dataset(s) of {nodes:,} nodes",
        hint="the grid is too large for this machine; use a coarser grid",
    )


def _read_array(group, key, where):
    dset = group[key]
    try:
        return dset[()]
    except (OSError, ValueError, RuntimeError) as exc:
        raise InputError(
            f"{where}: cannot read dataset {key} ({_inner(str(exc))}); the file is corrupt or "
            "truncated"
        ) from None


def _read_potential(group, key, where):
    a = _read_array(group, key, where)
    dset = group[key]
    units = _attr(dset, "units", where)
    temperature = _attr(dset, "temperature_K", where, DEFAULT_TEMPERATURE)
    try:
        scale = potential_scale(units, temperature)
    except InputError as exc:
        raise InputError(f"{where}: {key}: {exc}") from None
    if scale != 1.0:
        a = a.astype(np.float64) * scale
    return a


def read_problem(source, name: str, *, max_points: int | None = None) -> Problem:
    """Read grid ``name`` of an HDF5 file as a :class:`~pbsolver.Problem`.

    Parameters
    ----------
    source : path-like or h5py.File
        The file (opened read-only when a path).
    name : str
        Grid group under ``/grids``.
    max_points : int, optional
        Refuse grids with more nodes than this (checked from metadata before any read).

    Raises
    ------
    InputError
        On any problem with the file, the metadata or the values (NaN, ε ≤ 0 ...), naming the
        file, the grid and the field.
    """
    if not isinstance(source, h5py.File):
        with open_hdf5(source) as f:
            return read_problem(f, name, max_points=max_points)
    f = source
    filename = f.filename
    grids = _list_grids(f, filename)
    if name not in grids:
        raise InputError(f"{filename}: no grid {name!r} (grids: {', '.join(grids) or 'none'})")
    group = f[GRIDS][name]
    where = _where(filename, name)
    info = inspect_grid(group, name, max_points=max_points, need_inputs=True, filename=filename)
    _check_read_memory(info, [k for k in INPUT_DATASETS if k in info.datasets], where)
    if NODE_EPSILON in info.datasets:
        eps = {"epsilon": _read_array(group, NODE_EPSILON, where)}
    else:
        eps = {"epsilon_faces": tuple(_read_array(group, k, where) for k in FACE_EPSILON)}
    phi_c = _read_potential(group, "phi_coulomb", where)
    kappa2 = _read_array(group, "kappa2", where) if "kappa2" in info.datasets else None
    bv = None
    if "boundary_values" in info.datasets:
        bv = _read_potential(group, "boundary_values", where)
    try:
        return Problem(
            info.grid,
            phi_coulomb=phi_c,
            eps_cavity=info.eps_cavity,
            kappa2=kappa2,
            boundary=info.boundary,
            boundary_values=bv,
            face_rule=info.face_rule,
            nonlinear=info.nonlinear,
            ion_valence=info.ion_valence,
            temperature=info.temperature,
            **eps,
        )
    except InputError as exc:
        raise InputError(f"{where}: {exc}") from None


def read_hdf5(path, name: str | None = None, *, max_points: int | None = None):
    """Read problems from a pbsolver HDF5 file.

    Parameters
    ----------
    path : path-like
        The file.
    name : str, optional
        One grid's name: return its :class:`~pbsolver.Problem`. None: all grids.
    max_points : int, optional
        Refuse grids with more nodes (default ``$PBSOLVER_MAX_POINTS`` or 1024³).

    Returns
    -------
    Problem or dict of str to Problem
        One problem, or every grid's problem in file order.

    Raises
    ------
    InputError
        On an unreadable file or any invalid grid.

    Examples
    --------
    >>> problems = read_hdf5("data/example_grids.h5")          # doctest: +SKIP
    >>> sphere = read_hdf5("data/example_grids.h5", "sphere")  # doctest: +SKIP
    """
    with open_hdf5(path) as f:
        if name is not None:
            return read_problem(f, name, max_points=max_points)
        names = _list_grids(f, path)
        for n in names:  # every grid's metadata first: refuse before reading anything
            inspect_grid(f[GRIDS][n], n, max_points=max_points, filename=path)
        return {n: read_problem(f, n, max_points=max_points) for n in names}


def read_dataset(path, name: str | None, dataset: str, *, max_points: int | None = None):
    """Read one dataset of one grid: ``(array, Grid, attrs)``.

    Parameters
    ----------
    path : path-like
        The file.
    name : str or None
        Grid name; None picks the only grid of a one-grid file.
    dataset : str
        A dataset of the layout (``reaction_field``, ``epsilon``, ``phi_coulomb`` ...).
        Potentials come back in kJ/mol/e whatever their stored units.

    Raises
    ------
    InputError
        Unknown grid or dataset, or an unreadable file.
    """
    with open_hdf5(path) as f:
        grids = _list_grids(f, path)
        if name is None:
            if len(grids) != 1:
                raise InputError(
                    f"{path}: has {len(grids)} grids ({', '.join(grids[:8])}"
                    f"{'...' if len(grids) > 8 else ''}); choose one with --grid"
                )
            name = grids[0]
        if name not in grids:
            raise InputError(f"{path}: no grid {name!r} (grids: {', '.join(grids) or 'none'})")
        group = f[GRIDS][name]
        info = inspect_grid(group, name, max_points=max_points, need_inputs=False, filename=path)
        where = _where(path, name)
        if dataset not in info.datasets:
            have = ", ".join(info.datasets) or "none"
            raise InputError(f"{where}: no dataset {dataset!r} (has: {have})")
        _check_read_memory(info, [dataset], where)
        if dataset in POTENTIALS:
            data = _read_potential(group, dataset, where)
        else:
            data = _read_array(group, dataset, where)
        attrs = {k: _attr(group[dataset], k, where) for k in group[dataset].attrs}
        return data, info.grid, attrs


def read_result(path, name: str | None = None, *, max_points: int | None = None):
    """Read a solved grid: ``(reaction_field, Grid, solver attributes)``.

    Raises
    ------
    InputError
        If the grid has no result.
    """
    data, grid, _ = read_dataset(path, name, RESULT, max_points=max_points)
    with open_hdf5(path) as f:
        name = name if name is not None else _list_grids(f, path)[0]
        sgroup = f[GRIDS][name].get(SOLVER)
        solver = {} if sgroup is None else {k: _decode(v) for k, v in sgroup.attrs.items()}
    return data, grid, solver


# ---------------------------------------------------------------------- writing
def _chunks(shape):
    return tuple(max(1, min(int(n), CHUNK)) for n in shape)


def create_file(path) -> h5py.File:
    """Create (truncate) an HDF5 file with the layout's root attributes and ``/grids``."""
    f = h5py.File(path, "w", libver=("earliest", "latest"))
    f.attrs["pbsolver_layout"] = LAYOUT
    f.attrs["creator"] = f"pbsolver {__version__}"
    f.create_group(GRIDS, track_order=True)  # grids listed in the order written
    return f


def write_array(group, key, data, *, dtype=np.float32, level=COMPRESSION_LEVEL, units=None):
    """Write one 3-D dataset with gzip + shuffle, replacing an existing one."""
    data = np.asarray(data)
    if key in group:
        del group[key]
    dset = group.create_dataset(
        key,
        data=data.astype(dtype, copy=False),
        chunks=_chunks(data.shape),
        compression="gzip",
        compression_opts=level,
        shuffle=True,
    )
    units = units if units is not None else UNITS.get(key)
    if units is not None:
        dset.attrs["units"] = units
    return dset


def grid_attrs(
    grid: Grid,
    eps_cavity=None,
    boundary="dirichlet",
    face_rule=None,
    *,
    nonlinear=False,
    ion_valence=1,
    temperature=DEFAULT_TEMPERATURE,
) -> dict:
    """The attributes of a ``/grids/<name>`` group for ``grid``.

    ``nonlinear``: also ``@nonlinear``, ``@ion_valence`` and ``@temperature_K`` (a linear
    problem writes none of them, as files did before the nonlinear equation).
    """
    attrs = {
        "origin": np.asarray(grid.origin, dtype=np.float64),
        "spacing": np.asarray(grid.spacing, dtype=np.float64),
        "axis_order": "xyz",
        "boundary": boundary,
    }
    if eps_cavity is not None:
        attrs["eps_cavity"] = float(eps_cavity)
    if face_rule is not None and face_rule != "arithmetic":
        attrs["face_rule"] = face_rule
    if nonlinear:
        attrs["nonlinear"] = np.int8(1)
        attrs["ion_valence"] = np.int64(ion_valence)
        attrs["temperature_K"] = float(temperature)
    return attrs


def problem_arrays(problem: Problem) -> dict:
    """The input datasets of ``problem`` as NumPy arrays, keyed by layout name."""
    from pbsolver.arrays import to_numpy

    out = {}
    if problem.epsilon is not None:
        out[NODE_EPSILON] = to_numpy(problem.epsilon)
    else:
        for key, face in zip(FACE_EPSILON, problem.epsilon_faces, strict=True):
            out[key] = to_numpy(face)
    out["phi_coulomb"] = to_numpy(problem.phi_coulomb)
    if problem.kappa2 is not None:
        out["kappa2"] = to_numpy(problem.kappa2)
    if problem.boundary_values is not None:
        out["boundary_values"] = to_numpy(problem.boundary_values)
    return out


def problem_attrs(problem: Problem) -> dict:
    """The group attributes describing ``problem``."""
    rule = problem.face_rule if problem.epsilon is not None else None
    return grid_attrs(problem.grid, problem.eps_cavity, problem.boundary, rule,
                      nonlinear=problem.nonlinear, ion_valence=problem.ion_valence,
                      temperature=problem.temperature)  # fmt: skip


def solver_attrs(result, **extra) -> dict:
    """The ``solver/`` attributes of a :class:`~pbsolver.SolveResult` (plus ``extra``)."""
    attrs = {
        "method": str(result.method),
        "backend": str(result.backend),
        "iterations": int(result.iterations),
        "residual": float(result.residual),
        "converged": bool(result.converged),
        "seconds": float(result.seconds),
        "version": __version__,
        "reason": str(result.reason),
    }
    if getattr(result, "omega", None) is not None:
        attrs["omega"] = float(result.omega)
    if getattr(result, "newton_steps", None) is not None:
        attrs["newton_steps"] = int(result.newton_steps)
    attrs.update({k: v for k, v in extra.items() if v is not None})
    return attrs


def write_solver(group, attrs: Mapping, residual_norms=None):
    """Write the ``solver/`` group of a grid (replacing an existing one)."""
    if SOLVER in group:
        del group[SOLVER]
    sgroup = group.create_group(SOLVER)
    for key, value in attrs.items():
        sgroup.attrs[key] = value
    if residual_norms is not None:
        sgroup.create_dataset("residual_norms", data=np.asarray(residual_norms, dtype=np.float64))
    return sgroup


def write_grid(
    parent,
    name: str,
    attrs: Mapping,
    arrays: Mapping | None = None,
    *,
    reaction_field=None,
    solver: Mapping | None = None,
    residual_norms=None,
    level: int = COMPRESSION_LEVEL,
    result_dtype=np.float32,
):
    """Write one grid group ``/grids/<name>`` into an open, writable file.

    Parameters
    ----------
    parent : h5py.File or h5py.Group
        The file (``/grids`` is created when missing) or the ``/grids`` group.
    name : str
        Grid name (no ``/``).
    attrs : mapping
        Group attributes (see :func:`grid_attrs`).
    arrays : mapping, optional
        Input datasets by layout name (see :func:`problem_arrays`).
    reaction_field : array, optional
        The result, kJ/mol/e, stored as ``result_dtype``.
    solver : mapping, optional
        ``solver/`` attributes (see :func:`solver_attrs`).
    residual_norms : sequence of float, optional
        Stored as ``solver/residual_norms``.
    level : int
        gzip level.
    result_dtype : numpy dtype
        float32 (the layout's default) or float64 (for solves in float64).
    """
    if not name or "/" in name or name in (".", ".."):
        raise InputError(f"grid name must be non-empty without '/', got {name!r}")
    grids = parent.require_group(GRIDS) if isinstance(parent, h5py.File) else parent
    if name in grids:
        del grids[name]
    group = grids.create_group(name)
    for key, value in attrs.items():
        group.attrs[key] = value
    for key, data in (arrays or {}).items():
        if key not in INPUT_DATASETS:
            raise InputError(f"unknown input dataset {key!r}; the layout has {INPUT_DATASETS}")
        write_array(group, key, data, level=level)
    if reaction_field is not None:
        write_array(group, RESULT, reaction_field, dtype=np.dtype(result_dtype), level=level)
    if solver is not None:
        write_solver(group, solver, residual_norms)
    return group


def write_hdf5(
    path,
    problems,
    results=None,
    *,
    results_only: bool = False,
    level: int = COMPRESSION_LEVEL,
    result_dtype=np.float32,
) -> Path:
    """Write problems (and their results) to a new HDF5 file, atomically.

    Parameters
    ----------
    path : path-like
        Target file; replaced only once the new file is complete.
    problems : Problem or mapping of str to Problem
        One problem (stored as grid ``"grid"``) or problems by grid name.
    results : SolveResult or mapping of str to SolveResult, optional
        Results to store as ``reaction_field`` and ``solver/``.
    results_only : bool
        Store only the grid attributes and the results, not the input maps.
    level : int
        gzip level 1–9.
    result_dtype : numpy dtype
        Storage type of ``reaction_field`` (float32, or float64 to keep a float64 solve's digits).

    Returns
    -------
    pathlib.Path
        ``path``.

    Raises
    ------
    InputError
        Bad names or arguments.
    OSError
        If the file cannot be written (the target is then untouched).

    Examples
    --------
    >>> write_hdf5("out.h5", {"sphere": problem}, {"sphere": result})  # doctest: +SKIP
    """
    if isinstance(problems, Problem):
        problems = {"grid": problems}
        if results is not None and not isinstance(results, Mapping):
            results = {"grid": results}
    if not isinstance(problems, Mapping):
        raise InputError("problems must be a Problem or a mapping of grid name to Problem")
    results = dict(results or {})
    unknown = set(results) - set(problems)
    if unknown:
        raise InputError(f"results for unknown grids: {sorted(unknown)}")
    path = Path(path)
    nbytes = 0
    for name, problem in problems.items():
        if not isinstance(problem, Problem):
            raise InputError(f"problems[{name!r}] is not a Problem")
        nbytes += (0 if results_only else 6) * problem.grid.size * 4
        nbytes += (name in results) * problem.grid.size * np.dtype(result_dtype).itemsize
    require_free_space(path, nbytes)  # before h5py writes: see safety.require_free_space
    with atomic_path(path) as tmp, create_file(tmp) as f:
        for name, problem in problems.items():
            if not isinstance(problem, Problem):
                raise InputError(f"problems[{name!r}] is not a Problem")
            res = results.get(name)
            write_grid(
                f,
                name,
                problem_attrs(problem),
                None if results_only else problem_arrays(problem),
                reaction_field=None if res is None else _host(res.phi_rf),
                solver=None if res is None else solver_attrs(res),
                residual_norms=None if res is None else res.residual_norms,
                level=level,
                result_dtype=result_dtype,
            )
    return path


def _host(a):
    from pbsolver.arrays import to_numpy

    return to_numpy(a)


__all__ = [
    "GRIDS",
    "INPUT_DATASETS",
    "LAYOUT",
    "RESULT",
    "GridInfo",
    "create_file",
    "default_max_points",
    "grid_attrs",
    "inspect_grid",
    "inspect_hdf5",
    "list_grids",
    "open_hdf5",
    "problem_arrays",
    "problem_attrs",
    "read_dataset",
    "read_hdf5",
    "read_problem",
    "read_result",
    "solver_attrs",
    "write_grid",
    "write_hdf5",
]
