"""File input and output: HDF5 (the pbsolver layout), OpenDX and CCP4/MRC maps.

* :mod:`pbsolver.io.hdf5` — many grids per file, inputs and results (README, *Files*);
* :mod:`pbsolver.io.dx` — OpenDX through GridDataFormats (APBS layout, kT/e);
* :mod:`pbsolver.io.mrc` — CCP4/MRC through mrcfile.

Every writer writes to a temporary name and renames it onto the target when complete.
"""

from __future__ import annotations

import importlib

_LAZY = {
    "read_hdf5": "hdf5",
    "write_hdf5": "hdf5",
    "read_problem": "hdf5",
    "read_dataset": "hdf5",
    "read_result": "hdf5",
    "list_grids": "hdf5",
    "inspect_hdf5": "hdf5",
    "read_dx": "dx",
    "write_dx": "dx",
    "read_mrc": "mrc",
    "write_mrc": "mrc",
}


def __getattr__(name):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'pbsolver.io' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


__all__ = list(_LAZY)
