"""CCP4/MRC maps through ``mrcfile`` (a GridDataFormats dependency).

Written with ``mrcfile`` directly rather than ``gridData.Grid.export``: GridDataFormats 1.2
rounds the origin to whole voxels; mrcfile keeps it exact in the
header's ORIGIN words (some programs, e.g. gemmi, ignore those). Potentials are in kT/e, as in
the DX files. DX is the primary export; MRC is the secondary one.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from pbsolver.arrays import to_numpy
from pbsolver.exceptions import InputError
from pbsolver.grid import Grid
from pbsolver.io.atomic import atomic_path
from pbsolver.io.units import DEFAULT_TEMPERATURE, check_temperature, kT_kj_per_mol


def write_mrc(
    path,
    values,
    grid: Grid,
    *,
    potential: bool = True,
    temperature: float = DEFAULT_TEMPERATURE,
) -> Path:
    """Write a 3-D map as CCP4/MRC (float32), atomically.

    Parameters
    ----------
    path : path-like
        Target (``.mrc``, ``.map`` or ``.ccp4``).
    values : array (nx, ny, nz)
        The map, kJ/mol/e when ``potential`` (written in kT/e at ``temperature``).
    grid : Grid
        Its grid.
    potential : bool
        Convert kJ/mol/e → kT/e.
    temperature : float
        K.

    Raises
    ------
    InputError
        A shape mismatch or non-finite values.
    """
    import mrcfile

    path = Path(path)
    data = np.asarray(to_numpy(values), dtype=np.float64)
    if data.shape != grid.shape:
        raise InputError(f"values have shape {data.shape}, the grid needs {grid.shape}")
    if not np.isfinite(data).all():
        raise InputError("values are not finite; MRC readers cannot take them")
    label = "pbsolver map"
    if potential:
        t = check_temperature(temperature)
        data = data / kT_kj_per_mol(t)
        label = f"pbsolver potential kT/e T={t:g}K"
    with atomic_path(path) as tmp:
        with mrcfile.new(str(tmp), overwrite=True) as m:
            m.set_data(np.ascontiguousarray(data.astype(np.float32).transpose(2, 1, 0)))
            m.voxel_size = tuple(float(h) for h in grid.spacing)
            m.header.origin = tuple(float(o) for o in grid.origin)
            m.header.nxstart = m.header.nystart = m.header.nzstart = 0
            m.header.label[0] = label.encode("ascii")[:80]
            m.header.nlabl = 1
    return path


def read_mrc(path, *, potential: bool = False, temperature: float = DEFAULT_TEMPERATURE):
    """Read a CCP4/MRC map written by :func:`write_mrc`: ``(values, Grid)`` indexed [x, y, z].

    Parameters
    ----------
    potential : bool
        Convert kT/e → kJ/mol/e.

    Raises
    ------
    InputError
        If the file cannot be read as MRC.
    """
    import mrcfile

    path = Path(path)
    try:
        with mrcfile.open(str(path), permissive=False) as m:
            data = np.asarray(m.data, dtype=np.float64).transpose(2, 1, 0).copy()
            vs = m.voxel_size
            spacing = (float(vs.x), float(vs.y), float(vs.z))
            o = m.header.origin
            origin = (float(o.x), float(o.y), float(o.z))
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: cannot read as MRC: {exc}") from None
    if potential:
        data *= kT_kj_per_mol(temperature)
    return data, Grid(data.shape, spacing, origin)


__all__ = ["read_mrc", "write_mrc"]
