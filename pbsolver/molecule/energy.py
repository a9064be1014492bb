"""Energies, potentials and forces at atoms from a reaction-field solution.

With ε_c = ε_in and a reference state of homogeneous ε_in without salt (DESIGN §1), the polar
solvation energy is G = ½ Σ_i q_i φ_rf(r_i), the reaction-field potential at atom i is
φ_rf(r_i), and the reaction-field force on it is −q_i ∇φ_rf(r_i). Values at atoms come from
trilinear interpolation of the grid field; gradients are central differences at the nodes,
interpolated the same way (continuous across cells, second-order accurate for smooth fields).

Units: kJ/mol (default) or kcal/mol (``units="kcal/mol"``); potentials in kJ mol⁻¹ e⁻¹ (or
kcal mol⁻¹ e⁻¹); forces in kJ mol⁻¹ Å⁻¹ (or kcal mol⁻¹ Å⁻¹).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pbsolver.arrays import to_numpy
from pbsolver.exceptions import InputError
from pbsolver.grid import Grid

KCAL = 4.184  # kJ per kcal
UNITS = {"kJ/mol": 1.0, "kcal/mol": 1.0 / KCAL}


def _unit_factor(units: str) -> float:
    try:
        return UNITS[units]
    except KeyError:
        raise InputError(f"units must be one of {tuple(UNITS)}, got {units!r}") from None


def _cell_coordinates(grid: Grid, points, periodic: bool):
    """Cell index (lower node) and fractional offsets of each point, checked against the grid."""
    pts = np.asarray(points, dtype=np.float64).reshape(-1, 3)
    if not np.all(np.isfinite(pts)):
        raise InputError("points must be finite")
    origin = np.asarray(grid.origin)
    h = np.asarray(grid.spacing)
    shape = np.asarray(grid.shape)
    s = (pts - origin) / h
    if periodic:
        s = np.mod(s, shape)
        i0 = np.floor(s).astype(np.int64)
        i0 = np.minimum(i0, shape - 1)
    else:
        tol = 1e-9
        bad = np.any((s < -tol) | (s > shape - 1 + tol), axis=1)
        if bad.any():
            k = int(np.argmax(bad))
            raise InputError(f"point {k} at {pts[k].tolist()} Å lies outside the grid")
        s = np.clip(s, 0.0, shape - 1)
        i0 = np.minimum(np.floor(s).astype(np.int64), shape - 2)
    return i0, s - i0


def interpolate(grid: Grid, field, points, *, periodic: bool = False) -> np.ndarray:
    """Trilinear interpolation of a node field at points (Å); returns one value per point.

    Parameters
    ----------
    grid : Grid
    field : array (nx, ny, nz)
        NumPy or CuPy (copied to the host).
    points : array_like (n, 3)
    periodic : bool
        Wrap points into the periodic box of the grid (n·h a side); otherwise a point outside
        the grid raises :class:`~pbsolver.InputError`.
    """
    f = np.asarray(to_numpy(field), dtype=np.float64)
    if f.shape != grid.shape:
        raise InputError(f"field has shape {f.shape}, the grid needs {grid.shape}")
    i0, t = _cell_coordinates(grid, points, periodic)
    shape = np.asarray(grid.shape)
    out = np.zeros(i0.shape[0])
    for dx in (0, 1):
        wx = t[:, 0] if dx else 1.0 - t[:, 0]
        for dy in (0, 1):
            wy = t[:, 1] if dy else 1.0 - t[:, 1]
            for dz in (0, 1):
                wz = t[:, 2] if dz else 1.0 - t[:, 2]
                idx = i0 + np.array([dx, dy, dz])
                if periodic:
                    idx = np.mod(idx, shape)
                w = wx * wy * wz
                vals = f[idx[:, 0], idx[:, 1], idx[:, 2]]
                # a zero weight never multiplies an infinite value into NaN
                out += np.where(w != 0.0, w * vals, 0.0)
    return out


def gradient_field(grid: Grid, field, *, periodic: bool = False):
    """Central-difference gradient of a node field (one-sided on the outer layer): 3 arrays."""
    f = np.asarray(to_numpy(field), dtype=np.float64)
    grads = []
    for axis, h in enumerate(grid.spacing):
        if periodic:
            g = (np.roll(f, -1, axis) - np.roll(f, 1, axis)) / (2.0 * h)
        else:
            g = np.gradient(f, h, axis=axis)
        grads.append(g)
    return tuple(grads)


def interpolate_gradient(grid: Grid, field, points, *, periodic: bool = False) -> np.ndarray:
    """∇field at points (n, 3): central differences at nodes, interpolated trilinearly."""
    grads = gradient_field(grid, field, periodic=periodic)
    return np.stack([interpolate(grid, g, points, periodic=periodic) for g in grads], axis=1)


def reaction_field_potentials(atoms, grid, phi_rf, *, units="kJ/mol", periodic=False):
    """φ_rf at each atom (kJ mol⁻¹ e⁻¹, or kcal with ``units="kcal/mol"``)."""
    return _unit_factor(units) * interpolate(grid, phi_rf, atoms.positions, periodic=periodic)


def reaction_field_energy(atoms, grid, phi_rf, *, units="kJ/mol", periodic=False) -> float:
    """G = ½ Σ_i q_i φ_rf(r_i) (kJ/mol by default): the polar solvation energy when ε_c = ε_in."""
    phi = reaction_field_potentials(atoms, grid, phi_rf, units=units, periodic=periodic)
    return 0.5 * float(np.dot(atoms.charges, phi))


def reaction_field_forces(atoms, grid, phi_rf, *, units="kJ/mol", periodic=False):
    """F_i = −q_i ∇φ_rf(r_i), shape (n, 3), kJ mol⁻¹ Å⁻¹ (or kcal)."""
    grad = interpolate_gradient(grid, phi_rf, atoms.positions, periodic=periodic)
    return -_unit_factor(units) * atoms.charges[:, None] * grad


@dataclass
class Solvation:
    """Everything :func:`solvate` computed.

    Attributes
    ----------
    energy : float
        Polar solvation (reaction-field) energy, in ``units``.
    potentials : ndarray (n,)
        φ_rf at the atoms.
    forces : ndarray (n, 3)
        Reaction-field forces −q ∇φ_rf.
    problem : Problem
    result : SolveResult
    units : str
    """

    energy: float
    potentials: np.ndarray
    forces: np.ndarray
    problem: object
    result: object
    units: str


def solvate(
    atoms,
    *,
    spacing=0.5,
    margin=8.0,
    eps_in=2.0,
    eps_out=78.54,
    ionic_strength=0.0,
    surface="mol",
    probe_radius=1.4,
    backend="auto",
    method="auto",
    units="kJ/mol",
    rtol=1e-6,
    dtype=np.float32,
    strict=True,
    problem_options=None,
    **solver_options,
) -> Solvation:
    """Build the problem for ``atoms``, solve it and evaluate energy, potentials and forces.

    Parameters are those of :meth:`pbsolver.Problem.from_atoms` (``problem_options`` takes
    the rest, e.g. ``ion_radius``, ``temperature``, ``boundary``, ``box``) and of
    :class:`pbsolver.Solver` (``backend``, ``method``, ``rtol``, ``dtype`` and further keyword
    arguments). ``strict=True`` raises :class:`~pbsolver.ConvergenceError` when the solve
    does not converge.
    """
    from pbsolver.arrays import to_numpy
    from pbsolver.problem import Problem
    from pbsolver.solve.solver import Solver

    _unit_factor(units)
    problem = Problem.from_atoms(
        atoms,
        spacing=spacing,
        margin=margin,
        eps_in=eps_in,
        eps_out=eps_out,
        ionic_strength=ionic_strength,
        surface=surface,
        probe_radius=probe_radius,
        **(problem_options or {}),
    )
    solver = Solver(
        method=method, backend=backend, rtol=rtol, dtype=dtype, strict=strict, **solver_options
    )
    result = solver.solve(problem)
    phi = to_numpy(result.phi_rf)
    periodic = problem.boundary == "periodic"
    pot = reaction_field_potentials(atoms, problem.grid, phi, units=units, periodic=periodic)
    forces = reaction_field_forces(atoms, problem.grid, phi, units=units, periodic=periodic)
    energy = 0.5 * float(np.dot(atoms.charges, pot))
    return Solvation(energy, pot, forces, problem, result, units)


def solvation_energy(
    atoms,
    *,
    spacing=0.5,
    margin=8.0,
    eps_in=2.0,
    eps_out=78.54,
    ionic_strength=0.0,
    surface="mol",
    probe_radius=1.4,
    backend="auto",
    method="auto",
    units="kJ/mol",
    **options,
) -> float:
    """Polar solvation energy of ``atoms`` (kJ/mol by default) in one call.

    Builds the grid and maps (:meth:`pbsolver.Problem.from_atoms`), solves for φ_rf and returns
    ½ Σ q_i φ_rf(r_i). Other keyword arguments go to :func:`solvate`.

    Examples
    --------
    >>> import pbsolver as pb
    >>> ion = pb.Atoms([[0.0, 0.0, 0.0]], [1.0], [3.0])
    >>> g = pb.solvation_energy(ion, spacing=0.5, margin=2.0, eps_in=1.0, method="sor",
    ...                         backend="cpu")
    >>> abs(g / -228.611 - 1) < 0.005
    True
    """
    return solvate(
        atoms,
        spacing=spacing,
        margin=margin,
        eps_in=eps_in,
        eps_out=eps_out,
        ionic_strength=ionic_strength,
        surface=surface,
        probe_radius=probe_radius,
        backend=backend,
        method=method,
        units=units,
        **options,
    ).energy
