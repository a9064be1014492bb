"""Energies, potentials and forces at atoms from a reaction-field solution.

With ε_c = ε_in and a reference state of homogeneous ε_in without salt (README), the polar
solvation energy is G = ½ Σ_i q_i φ_rf(r_i) (the nonlinear equation adds the mobile ions'
terms of :mod:`pbsolver.nonlinear.energy`), the reaction-field potential at atom i is
φ_rf(r_i), and the reaction-field force on it is −q_i ∇φ_rf(r_i). Values at atoms come from
trilinear interpolation of the grid field; gradients are central differences at the nodes,
interpolated the same way (continuous across cells, second-order accurate for smooth fields).

Units (:data:`pbsolver.options.UNITS`): kJ/mol (default) or kcal/mol (``units="kcal/mol"``);
potentials in kJ mol⁻¹ e⁻¹ (or kcal mol⁻¹ e⁻¹); forces in kJ mol⁻¹ Å⁻¹ (or kcal mol⁻¹ Å⁻¹).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pbsolver.arrays import to_numpy
from pbsolver.exceptions import InputError
from pbsolver.grid import Grid
from pbsolver.nonlinear.energy import SolvationTerms, ion_terms
from pbsolver.options import KCAL, UNITS, PhysicsOptions, unit_factor  # noqa: F401


def node_coordinates(grid: Grid, points, periodic: bool) -> np.ndarray:
    """Points (Å) in node units, ``(p − origin) / h``: an (n, 3) float64 array, checked.

    Raises
    ------
    InputError
        A non-finite point, or (``periodic=False``) a point outside the grid (beyond a
        rounding tolerance).
    """
    pts = np.asarray(points, dtype=np.float64).reshape(-1, 3)
    if not np.all(np.isfinite(pts)):
        raise InputError("points must be finite")
    s = (pts - np.asarray(grid.origin)) / np.asarray(grid.spacing)
    if not periodic:
        tol = 1e-9
        bad = np.any((s < -tol) | (s > np.asarray(grid.shape) - 1 + tol), axis=1)
        if bad.any():
            k = int(np.argmax(bad))
            raise InputError(f"point {k} at {pts[k].tolist()} Å lies outside the grid")
    return s


def sample_field(grid: Grid, field, points, *, periodic: bool = False):
    """φ and ∇φ at points: trilinear interpolation of the node values and of their gradient.

    The gradient at a node is the central difference (one-sided on the outer layer, as
    :func:`numpy.gradient`; wrapped when periodic). One body computes both
    (:func:`pbsolver.backends.bodies.sampling.sample_body`).

    Parameters
    ----------
    grid : Grid
    field : array (nx, ny, nz)
        NumPy or CuPy (copied to the host).
    points : array_like (n, 3)
        Å.
    periodic : bool
        Wrap points into the periodic box of the grid (n·h a side); otherwise a point outside
        the grid raises :class:`~pbsolver.InputError`.

    Returns
    -------
    values : ndarray (n,)
    gradient : ndarray (n, 3)
    """
    from pbsolver.backends.cpu.sampling import sample_points

    f = np.asarray(to_numpy(field), dtype=np.float64)
    if f.shape != grid.shape:
        raise InputError(f"field has shape {f.shape}, the grid needs {grid.shape}")
    out = sample_points(f, grid.spacing, node_coordinates(grid, points, periodic), periodic)
    return out[:, 0], out[:, 1:]


def interpolate(grid: Grid, field, points, *, periodic: bool = False) -> np.ndarray:
    """Trilinear interpolation of a node field at points (Å); returns one value per point.

    The values of :func:`sample_field` (same parameters).
    """
    return sample_field(grid, field, points, periodic=periodic)[0]


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
    return sample_field(grid, field, points, periodic=periodic)[1]


def reaction_field_potentials(atoms, grid, phi_rf, *, units="kJ/mol", periodic=False):
    """φ_rf at each atom (kJ mol⁻¹ e⁻¹, or kcal with ``units="kcal/mol"``)."""
    return unit_factor(units) * interpolate(grid, phi_rf, atoms.positions, periodic=periodic)


def reaction_field_energy(atoms, grid, phi_rf, *, units="kJ/mol", periodic=False) -> float:
    """G = ½ Σ_i q_i φ_rf(r_i) (kJ/mol by default): the polar solvation energy when ε_c = ε_in."""
    phi = reaction_field_potentials(atoms, grid, phi_rf, units=units, periodic=periodic)
    return 0.5 * float(np.dot(atoms.charges, phi))


def reaction_field_forces(atoms, grid, phi_rf, *, units="kJ/mol", periodic=False):
    """F_i = −q_i ∇φ_rf(r_i), shape (n, 3), kJ mol⁻¹ Å⁻¹ (or kcal)."""
    grad = interpolate_gradient(grid, phi_rf, atoms.positions, periodic=periodic)
    return -unit_factor(units) * atoms.charges[:, None] * grad


def solvation_terms(atoms, problem, phi_rf, *, units="kJ/mol") -> SolvationTerms:
    """The polar solvation energy of ``atoms`` at a nonlinear solution, term by term.

    The fixed charges' ½ Σ q_i φ_rf(r_i) (:func:`reaction_field_energy`) and the mobile ions'
    terms (:func:`pbsolver.nonlinear.energy.ion_terms`, whose module docstring derives ΔG and
    names what it includes).

    Parameters
    ----------
    atoms : Atoms
        The charges whose φ_c the problem holds.
    problem : Problem
    phi_rf : array (nx, ny, nz)
        φ_rf of the nonlinear equation, kJ mol⁻¹ e⁻¹ (NumPy or CuPy).
    units : {"kJ/mol", "kcal/mol"}

    Returns
    -------
    SolvationTerms
        ``total`` is ΔG; for a linearised solution use the fixed term alone.
    """
    factor = unit_factor(units)
    periodic = problem.boundary == "periodic"
    fixed = reaction_field_energy(atoms, problem.grid, phi_rf, units=units, periodic=periodic)
    mobile, osmotic = ion_terms(problem, phi_rf)
    return SolvationTerms(fixed, factor * mobile, factor * osmotic, units)


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
        Reaction-field forces −q ∇φ_rf (the fixed charges' part; a nonlinear solution's
        ionic boundary forces are not included).
    problem : Problem
    result : SolveResult
    units : str
    terms : SolvationTerms or None
        A nonlinear solve's energy terms (:func:`solvation_terms`);
        None for a linearised one.
    """

    energy: float
    potentials: np.ndarray
    forces: np.ndarray
    problem: object
    result: object
    units: str
    terms: object = None


def solvate(
    atoms,
    *,
    spacing=0.5,
    margin=8.0,
    physics=None,
    backend="auto",
    method="auto",
    units="kJ/mol",
    rtol=1e-6,
    dtype=np.float32,
    strict=True,
    problem_options=None,
    **options,
) -> Solvation:
    """Build the problem for ``atoms``, solve it and evaluate energy, potentials and forces.

    Parameters
    ----------
    atoms : Atoms
    spacing, margin : float
        Grid spacing and least gap between the atoms and the outer layer, Å.
    physics : PhysicsOptions, optional
        The physics in one object; physics keywords override its fields.
    backend, method, rtol, dtype, strict
        Options of :class:`pbsolver.Solver`; ``strict=True`` raises
        :class:`~pbsolver.ConvergenceError` when the solve does not converge.
    units : {"kJ/mol", "kcal/mol"}
    problem_options : dict, optional
        Further options of :meth:`pbsolver.Problem.from_atoms` (``boundary``, ``box``,
        ``grid``, ``shape``, ``center``, ``ses_step``, ``kappa_subsamples``, ``maps_backend``;
        ``physics`` and physics fields too, below those given as keywords).
    **options
        Fields of :class:`~pbsolver.PhysicsOptions` (``eps_in``, ``eps_out``,
        ``ionic_strength``, ``surface``, ``probe_radius``, ``ion_radius``, ``temperature``,
        ``boundary_kind``, ``ion_valence``, ``nonlinear``; None: its default, or
        ``physics``' value), and further options of :class:`pbsolver.Solver` (``maxiter``,
        ``omega``, ``check_every``, ``newton_maxiter``, ...).

    Notes
    -----
    With ``nonlinear=True`` (and salt) the energy is the nonlinear polar solvation energy
    ½ Σ q_i φ_rf(r_i) plus the mobile ions' terms (:mod:`pbsolver.nonlinear.energy`, whose
    docstring derives it and names the terms), held in :attr:`Solvation.terms`.
    """
    from pbsolver.problem import Problem
    from pbsolver.solving.solver import Solver

    unit_factor(units)
    physics, solver_options, problem_options = PhysicsOptions.split(
        options, problem_options, physics=physics
    )
    problem = Problem.from_atoms(
        atoms, spacing=spacing, margin=margin, physics=physics, **problem_options
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
    terms = None
    if result.newton_steps is not None:  # the nonlinear equation was solved
        terms = solvation_terms(atoms, problem, phi, units=units)
        energy = terms.total
    return Solvation(energy, pot, forces, problem, result, units, terms)


def solvation_energy(atoms, **options) -> float:
    """Polar solvation energy of ``atoms`` (kJ/mol by default) in one call.

    Builds the grid and maps (:meth:`pbsolver.Problem.from_atoms`), solves for φ_rf and returns
    ½ Σ q_i φ_rf(r_i): :func:`solvate`'s energy, with the same keywords (``spacing=0.5``,
    ``margin=8.0``, ``physics=`` and the fields of :class:`~pbsolver.PhysicsOptions`:
    ``eps_in``, ``eps_out``, ``ionic_strength``, ``surface``, ``probe_radius``, ``ion_radius``,
    ``temperature``, ``boundary_kind``, ``ion_valence``, ``nonlinear``; ``backend="auto"``,
    ``method="auto"``,
    ``units="kJ/mol"``, ``rtol``, ``dtype``, ``strict``, ``problem_options`` and further
    options of :class:`pbsolver.Solver`).

    Examples
    --------
    >>> import pbsolver as pb
    >>> ion = pb.Atoms([[0.0, 0.0, 0.0]], [1.0], [3.0])
    >>> g = pb.solvation_energy(ion, spacing=0.5, margin=2.0, eps_in=1.0, method="sor",
    ...                         backend="cpu")
    >>> abs(g / -228.611 - 1) < 0.005
    True
    """
    return solvate(atoms, **options).energy
