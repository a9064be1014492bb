"""pbsolver: the linearised Poisson–Boltzmann reaction field on 3D grids, on GPUs and CPUs.

Units everywhere: lengths Å, charges e, energies kJ/mol, potentials kJ mol⁻¹ e⁻¹.

>>> import pbsolver as pb
>>> pb.Grid((9, 9, 9), spacing=0.5)
Grid(shape=(9, 9, 9), spacing=0.5, origin=(0, 0, 0))
"""

from __future__ import annotations

import importlib

from pbsolver._version import __version__
from pbsolver.exceptions import BackendUnavailableError, ConvergenceError, InputError, PBSolverError
from pbsolver.grid import Grid
from pbsolver.options import PhysicsOptions
from pbsolver.problem import Problem
from pbsolver.solving.solver import Solver, SolveResult, solve

#: Public names defined in modules that are imported on first use (heavy or optional parts).
_LAZY = {
    "Atoms": "molecule.atoms",
    "read_pqr": "molecule.atoms",
    "solvation_energy": "molecule.energy",
    "nonpolar_energy": "molecule.nonpolar",
    "sasa": "molecule.nonpolar",
    "solvate": "molecule.energy",
    "focus_grids": "molecule.focusing",
    "binding_energy": "molecule.binding",
    "binding_energies": "molecule.binding",
    "BindingEnergy": "molecule.binding",
    "ReactionFieldCalculator": "md.calculator",
    "solve_batch": "solving.batched",
    "clear_workspaces": "solving.system",
    "read_hdf5": "io.hdf5",
    "write_hdf5": "io.hdf5",
    "read_dx": "io.dx",
    "write_dx": "io.dx",
    "data": "data",
    "apbs": "apbs",
    "plot": "plot",
}

#: Physical constants used throughout.
COULOMB_KJ = 1389.35457  # N_A e² / (4π ε0), kJ Å mol⁻¹ e⁻²


def __getattr__(name):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'pbsolver' has no attribute {name!r}")
    mod = importlib.import_module(f".{module}", __name__)
    value = mod if module == name else getattr(mod, name)
    globals()[name] = value
    return value


__all__ = [
    "COULOMB_KJ",
    "BackendUnavailableError",
    "ConvergenceError",
    "Grid",
    "InputError",
    "PBSolverError",
    "PhysicsOptions",
    "Problem",
    "SolveResult",
    "Solver",
    "__version__",
    "solve",
    *_LAZY,
]
