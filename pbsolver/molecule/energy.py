"""Energies, potentials and forces at atoms from a reaction-field solution.

With ε_c = ε_in and a reference state of homogeneous ε_in without salt (README), the polar
solvation energy is G = ½ Σ_i q_i φ_rf(r_i) (the nonlinear equation adds the mobile ions'
terms of :mod:`pbsolver.nonlinear.energy`), the reaction-field potential at atom i is
φ_rf(r_i), and the reaction-field force on it is −q_i ∇φ_rf(r_i). Values at atoms come from
interpolation of the grid field (``interpolation=``, :mod:`pbsolver.backends.bodies.sampling`):

* "linear" (the default, as APBS): trilinear; gradients are central differences at the nodes,
  interpolated the same way (continuous across cells, second-order accurate for smooth
  fields). The energy's slope jumps where an atom crosses a plane of nodes.
* "cubic": Keys' cubic convolution on the 4×4×4 nodes around the atom, C¹ in the atom's
  position (third-order accurate); gradients are the exact derivative of that interpolant.
  The energy for molecular dynamics (:class:`pbsolver.ReactionFieldCalculator`).

Units (:data:`pbsolver.options.UNITS`): kJ/mol (default) or kcal/mol (``units="kcal/mol"``);
potentials in kJ mol⁻¹ e⁻¹ (or kcal mol⁻¹ e⁻¹); forces in kJ mol⁻¹ Å⁻¹ (or kcal mol⁻¹ Å⁻¹).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from pbsolver.arrays import array_module, to_numpy
from pbsolver.exceptions import InputError
from pbsolver.grid import Grid
from pbsolver.molecule.maps import COULOMB_KJ
from pbsolver.nonlinear.energy import SolvationTerms, ion_terms
from pbsolver.options import (  # noqa: F401
    INTERPOLATIONS,
    KCAL,
    UNITS,
    PhysicsOptions,
    choice,
    positive,
    unit_factor,
)


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


def sample_field(grid: Grid, field, points, *, periodic: bool = False, interpolation="linear"):
    """φ and ∇φ at points, interpolated from the node values.

    "linear": trilinear interpolation of the node values and of their gradient, the central
    difference at the nodes (one-sided on the outer layer, as :func:`numpy.gradient`; wrapped
    when periodic). "cubic": Keys' cubic convolution and its exact derivative. One body computes
    both (:func:`pbsolver.backends.bodies.sampling.make_sample`).

    Parameters
    ----------
    grid : Grid
    field : array (nx, ny, nz)
        NumPy, or CuPy (sampled on its device, the results copied to the host).
    points : array_like (n, 3)
        Å.
    periodic : bool
        Wrap points into the periodic box of the grid (n·h a side); otherwise a point outside
        the grid raises :class:`~pbsolver.InputError`.
    interpolation : {"linear", "cubic"}

    Returns
    -------
    values : ndarray (n,)
    gradient : ndarray (n, 3)
    """
    from pbsolver.backends.sampling import sampling_loops

    cubic = choice(interpolation, "interpolation", INTERPOLATIONS) == "cubic"
    xp = array_module(field)  # sampled where it lives: from a GPU only (n, 4) numbers return
    f = xp.ascontiguousarray(xp.asarray(field), dtype=xp.float64)
    if f.shape != grid.shape:
        raise InputError(f"field has shape {f.shape}, the grid needs {grid.shape}")
    s = node_coordinates(grid, points, periodic)
    out = to_numpy(sampling_loops(xp).sample_points(f, grid.spacing, s, periodic, cubic))
    return out[:, 0], out[:, 1:]


def interpolate(grid: Grid, field, points, *, periodic: bool = False,
                interpolation="linear") -> np.ndarray:  # fmt: skip
    """A node field interpolated at points (Å); returns one value per point.

    The values of :func:`sample_field` (same parameters; trilinear by default).
    """
    return sample_field(grid, field, points, periodic=periodic, interpolation=interpolation)[0]


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


def interpolate_gradient(grid: Grid, field, points, *, periodic: bool = False,
                         interpolation="linear") -> np.ndarray:  # fmt: skip
    """∇field at points (n, 3): the gradients of :func:`sample_field` (same parameters)."""
    return sample_field(grid, field, points, periodic=periodic, interpolation=interpolation)[1]


def reaction_field_potentials(atoms, grid, phi_rf, *, units="kJ/mol", periodic=False,
                              interpolation="linear"):  # fmt: skip
    """φ_rf at each atom (kJ mol⁻¹ e⁻¹, or kcal with ``units="kcal/mol"``)."""
    values = interpolate(grid, phi_rf, atoms.positions, periodic=periodic,
                         interpolation=interpolation)  # fmt: skip
    return unit_factor(units) * values


def reaction_field_energy(atoms, grid, phi_rf, *, units="kJ/mol", periodic=False,
                          interpolation="linear") -> float:  # fmt: skip
    """G = ½ Σ_i q_i φ_rf(r_i) (kJ/mol by default): the polar solvation energy when ε_c = ε_in."""
    phi = reaction_field_potentials(atoms, grid, phi_rf, units=units, periodic=periodic,
                                    interpolation=interpolation)  # fmt: skip
    return 0.5 * float(np.dot(atoms.charges, phi))


def reaction_field_forces(atoms, grid, phi_rf, *, units="kJ/mol", periodic=False,
                          interpolation="linear"):  # fmt: skip
    """F_i = −q_i ∇φ_rf(r_i), shape (n, 3), kJ mol⁻¹ Å⁻¹ (or kcal)."""
    grad = interpolate_gradient(grid, phi_rf, atoms.positions, periodic=periodic,
                                interpolation=interpolation)  # fmt: skip
    return -unit_factor(units) * atoms.charges[:, None] * grad


def _potentials_and_forces(atoms, grid, phi_rf, *, units, periodic=False, interpolation):
    """:func:`reaction_field_potentials` and :func:`reaction_field_forces` from one sampling."""
    values, grad = sample_field(grid, phi_rf, atoms.positions, periodic=periodic,
                                interpolation=interpolation)  # fmt: skip
    scale = unit_factor(units)
    return scale * values, -scale * atoms.charges[:, None] * grad


def solvation_terms(atoms, problem, phi_rf, *, units="kJ/mol",
                    interpolation="linear") -> SolvationTerms:  # fmt: skip
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
    interpolation : {"linear", "cubic"}
        Of φ_rf at the atoms (:func:`sample_field`).

    Returns
    -------
    SolvationTerms
        ``total`` is ΔG; for a linearised solution use the fixed term alone.
    """
    factor = unit_factor(units)
    periodic = problem.boundary == "periodic"
    fixed = reaction_field_energy(atoms, problem.grid, phi_rf, units=units, periodic=periodic,
                                  interpolation=interpolation)  # fmt: skip
    mobile, osmotic = ion_terms(problem, phi_rf)
    return SolvationTerms(fixed, factor * mobile, factor * osmotic, units)


@dataclass
class Solvation:
    """Everything :func:`solvate` computed, and the energy terms formed from it.

    Attributes
    ----------
    energy : float
        Polar solvation (reaction-field) energy G_rf = ½ Σ qᵢ φ_rf(rᵢ), in ``units``.
    potentials : ndarray (n,)
        φ_rf at the atoms.
    forces : ndarray (n, 3)
        Forces on the atoms: −q ∇φ_rf (``forces_kind == "field"``; the fixed charges' part, a
        nonlinear solution's ionic boundary forces not included) or the exact −∂G/∂r
        (``"exact"``, :func:`pbsolver.forces.solvation_forces`).
    problem : Problem
        The (finest) grid's problem.
    result : SolveResult
        The (finest) grid's solve.
    units : str
    atoms : Atoms
    levels : list of FocusLevel
        With focusing: every level, coarsest first (:mod:`pbsolver.molecule.focusing`);
        empty otherwise.
    atom_levels : ndarray of int (n,), optional
        With focusing: the level each atom's φ_rf came from (the finest that holds it).

    terms : SolvationTerms or None
        A nonlinear solve's energy terms (:func:`solvation_terms`); None for a linearised one.
    forces_kind : {"field", "exact"}
        What ``forces`` are (:func:`solvate`'s ``forces``).

    Notes
    -----
    The energy terms (APBS ``calcenergy comps`` and ``total``): ``rf_terms`` (½ qᵢ φ_rf(rᵢ)),
    ``coulomb_terms`` (½ qᵢ Σ_{j≠i} k qⱼ / (ε_in rᵢⱼ), :func:`coulomb_energy`) and their sums
    ``energy`` and ``coulomb``; ``total`` = ``coulomb`` + ``energy`` is the electrostatic free
    energy of the solute in solvent without self energies, so a binding energy is
    ``complex.total − a.total − b.total`` (with the same grids and physics for the three).
    """

    energy: float
    potentials: np.ndarray
    forces: np.ndarray
    problem: object
    result: object
    units: str
    atoms: object = None
    levels: list = field(default_factory=list)
    atom_levels: np.ndarray | None = None
    terms: object = None
    forces_kind: str = "field"

    @property
    def rf_terms(self) -> np.ndarray:
        """Per-atom reaction-field terms ½ qᵢ φ_rf(rᵢ), in ``units``; they sum to ``energy``."""
        return 0.5 * self._charges() * self.potentials

    @cached_property
    def coulomb_terms(self) -> np.ndarray:
        """Per-atom Coulomb terms in ε_in (:func:`coulomb_energy`), in ``units``.

        Computed on first use (O(n²)). A periodic problem has no such sum without Ewald
        summation: :class:`~pbsolver.InputError`.
        """
        if self.problem.boundary == "periodic":
            raise InputError(
                "the Coulomb energy of a periodic system needs Ewald summation; pbsolver "
                "computes the open-boundary pair sum only"
            )
        return coulomb_energy(
            self._atoms(), self.problem.eps_cavity, per_atom=True, units=self.units
        )

    @property
    def coulomb(self) -> float:
        """Coulomb energy of the charges in ε_in (self terms excluded), in ``units``."""
        return float(np.sum(self.coulomb_terms))

    @property
    def total_terms(self) -> np.ndarray:
        """Per-atom totals ``coulomb_terms + rf_terms``, in ``units``."""
        return self.coulomb_terms + self.rf_terms

    @property
    def total(self) -> float:
        """Electrostatic free energy ``coulomb + energy`` (no self energies), in ``units``."""
        return self.coulomb + self.energy

    def _atoms(self):
        if self.atoms is None:
            raise InputError("this Solvation carries no atoms: energy terms need them")
        return self.atoms

    def _charges(self) -> np.ndarray:
        return np.asarray(self._atoms().charges, dtype=np.float64)


def reaction_field_terms(atoms, grid, phi_rf, *, units="kJ/mol", periodic=False) -> np.ndarray:
    """Per-atom reaction-field terms ½ qᵢ φ_rf(rᵢ) (kJ/mol by default), shape (n,).

    They sum to :func:`reaction_field_energy`; APBS' per-atom ``calcenergy comps`` values of
    a solvated-minus-reference pair are the same quantity.
    """
    phi = reaction_field_potentials(atoms, grid, phi_rf, units=units, periodic=periodic)
    return 0.5 * np.asarray(atoms.charges, dtype=np.float64) * phi


def _charged_atoms(atoms, eps_in, units):
    """``(k/ε_in in the units, indices of the charged atoms, their positions, their charges)``."""
    scale = unit_factor(units) * COULOMB_KJ / positive(eps_in, "eps_in")
    q_all = np.asarray(atoms.charges, dtype=np.float64)
    charged = np.flatnonzero(q_all)
    return scale, charged, np.asarray(atoms.positions, dtype=np.float64)[charged], q_all[charged]


def coulomb_energy(atoms, eps_in=2.0, *, per_atom=False, units="kJ/mol"):
    """Coulomb energy of the charges in a uniform medium ε_in: Σ_{i<j} k qᵢ qⱼ / (ε_in rᵢⱼ).

    The analytic pair sum (self terms excluded; no periodic images), in float64
    (:func:`pbsolver.molecule.pair_sums.pair_potentials`: O(n²) time, O(n) memory). With
    ``per_atom`` each pair is split evenly between its two atoms: term i = ½ qᵢ Σ_{j≠i} k qⱼ /
    (ε_in rᵢⱼ), and the terms sum to the energy. Uncharged atoms contribute nothing (and may
    share a position).

    Parameters
    ----------
    atoms : Atoms
    eps_in : float
        Relative permittivity of the medium (the solute's, as ε_c of φ_c).
    per_atom : bool
        Return the (n,) per-atom terms instead of their sum.
    units : {"kJ/mol", "kcal/mol"}

    Returns
    -------
    float or ndarray (n,)

    Raises
    ------
    InputError
        A bad ``eps_in``, or two charged atoms at the same position (an infinite energy).

    Examples
    --------
    >>> import pbsolver as pb
    >>> pair = pb.Atoms([[0.0, 0.0, 0.0], [0.0, 0.0, 2.0]], [1.0, -1.0], [1.0, 1.0])
    >>> round(coulomb_energy(pair, 1.0), 4)  # -k / 2 Å
    -694.6773
    """
    from pbsolver.molecule.pair_sums import first_coincident_pair, pair_potentials

    scale, charged, pos, q = _charged_atoms(atoms, eps_in, units)
    phi = pair_potentials(pos, None, q)  # φ_i = Σ_{j≠i} q_j / r_ij
    pair = first_coincident_pair(phi, pos)
    if pair is not None:
        i, j = pair
        raise InputError(
            f"charged atoms {charged[i]} and {charged[j]} sit at the same position "
            f"{pos[i].tolist()} Å: their Coulomb energy is infinite"
        )
    terms = np.zeros(len(atoms))
    terms[charged] = 0.5 * scale * q * phi
    return terms if per_atom else float(np.sum(terms))


def coulomb_forces(atoms, eps_in=2.0, *, units="kJ/mol") -> np.ndarray:
    """Coulomb forces in a uniform medium ε_in: Fᵢ = −∂/∂rᵢ of :func:`coulomb_energy`.

    Fᵢ = k qᵢ Σ_{j≠i} qⱼ (rᵢ − rⱼ) / (ε_in rᵢⱼ³), in float64 NumPy blocks (O(n²) time,
    O(n) memory), kJ mol⁻¹ Å⁻¹ (or kcal).

    Parameters
    ----------
    atoms : Atoms
    eps_in : float
    units : {"kJ/mol", "kcal/mol"}

    Returns
    -------
    ndarray (n, 3)

    Raises
    ------
    InputError
        A bad ``eps_in``, or two charged atoms at the same position.

    Examples
    --------
    >>> import pbsolver as pb
    >>> pair = pb.Atoms([[0.0, 0.0, 0.0], [0.0, 0.0, 2.0]], [1.0, -1.0], [1.0, 1.0])
    >>> coulomb_forces(pair, 1.0)[:, 2].round(4)  # attraction: k / (2 Å)²
    array([ 347.3387, -347.3387])
    """
    from pbsolver.molecule.pair_sums import PAIR_BLOCK

    scale, charged, pos, q = _charged_atoms(atoms, eps_in, units)
    out = np.zeros((len(atoms), 3))
    rows = max(1, PAIR_BLOCK // (4 * max(len(q), 1)))  # (rows, n, 3) differences: 24 MiB
    for a in range(0, len(q), rows):
        b = min(len(q), a + rows)
        d = pos[a:b, None, :] - pos[None, :, :]  # rᵢ − rⱼ
        r2 = np.einsum("ijk,ijk->ij", d, d)
        r2[np.arange(b - a), np.arange(a, b)] = np.inf  # no self term
        if np.any(r2 == 0):
            i, j = np.argwhere(r2 == 0)[0]
            raise InputError(
                f"charged atoms {charged[a + i]} and {charged[j]} sit at the same position "
                f"{pos[j].tolist()} Å: their Coulomb force is infinite"
            )
        w = q[None, :] / (r2 * np.sqrt(r2))
        out[charged[a:b]] = scale * q[a:b, None] * np.einsum("ij,ijk->ik", w, d)
    return out


def coulomb_interaction(first, second, eps_in=2.0, *, per_atom=False, units="kJ/mol"):
    """Coulomb energy between two sets of charges in a uniform medium ε_in, kJ/mol by default.

    Σ_{i∈first, j∈second} k qᵢ qⱼ / (ε_in rᵢⱼ): the pairs of :func:`coulomb_energy` of the two
    sets together that join one set to the other (so it equals ``coulomb_energy`` of the union
    minus that of each set), in float64 (O(n·m) time).
    With ``per_atom`` each pair is split evenly between its two atoms.

    Parameters
    ----------
    first, second : Atoms
    eps_in : float
        Relative permittivity of the medium.
    per_atom : bool
        Return the per-atom terms of ``first`` and of ``second`` (two arrays that together sum
        to the energy) instead of the energy.
    units : {"kJ/mol", "kcal/mol"}

    Returns
    -------
    float or (ndarray (n,), ndarray (m,))

    Raises
    ------
    InputError
        A bad ``eps_in``, or a charged atom of one set at the position of a charged atom of
        the other.
    """
    from pbsolver.molecule.pair_sums import first_coincident_pair, pair_potentials

    eps = positive(eps_in, "eps_in")
    scale = unit_factor(units) * COULOMB_KJ / eps
    q1_all = np.asarray(first.charges, dtype=np.float64)
    q2_all = np.asarray(second.charges, dtype=np.float64)
    c1, c2 = np.flatnonzero(q1_all), np.flatnonzero(q2_all)
    pos1 = np.asarray(first.positions, dtype=np.float64)[c1]
    pos2 = np.asarray(second.positions, dtype=np.float64)[c2]
    q1, q2 = q1_all[c1], q2_all[c2]
    phi1 = pair_potentials(pos1, pos2, q2)  # Σ q/r from the other set
    pair = first_coincident_pair(phi1, pos1, pos2)
    if pair is not None:
        i, j = pair
        raise InputError(
            f"charged atom {c1[i]} of the first set and {c2[j]} of the second sit at the "
            f"same position {pos1[i].tolist()} Å: their Coulomb energy is infinite"
        )
    phi2 = pair_potentials(pos2, pos1, q1)
    t1, t2 = np.zeros(len(q1_all)), np.zeros(len(q2_all))
    t1[c1] = 0.5 * scale * q1 * phi1
    t2[c2] = 0.5 * scale * q2 * phi2
    return (t1, t2) if per_atom else float(np.sum(t1) + np.sum(t2))


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
    focus=None,
    forces="field",
    interpolation="linear",
    **options,
) -> Solvation:
    """Build the problem for ``atoms``, solve it and evaluate energy, potentials and forces.

    Parameters
    ----------
    atoms : Atoms
    spacing, margin : float
        Grid spacing and least gap between the atoms and the outer layer, Å (with ``focus``
        they only shape the grids of ``focus=True``).
    focus : list of Grid or True, optional
        Focusing (APBS ``mg-auto``; :mod:`pbsolver.molecule.focusing`): solve on each grid in
        turn, coarsest first, each finer one taking its boundary values from the one before.
        ``True``: :func:`~pbsolver.molecule.focusing.focus_grids` with ``spacing`` and
        ``margin`` (a fine grid as without focusing, inside one twice as long). Energies,
        potentials and forces come from the finest grid holding each atom
        (``Solvation.atom_levels``); ``Solvation.levels`` holds every level. Placement options
        (``grid``, ``shape``, ``center``, ``box``) and periodic boundaries are refused.
    physics : PhysicsOptions, optional
        The physics in one object; physics keywords override its fields.
    backend, method, rtol, dtype, strict
        Options of :class:`pbsolver.Solver`; ``strict=True`` raises
        :class:`~pbsolver.ConvergenceError` when the solve does not converge.
    units : {"kJ/mol", "kcal/mol"}
    problem_options : dict, optional
        Further options of :meth:`pbsolver.Problem.from_atoms` (``boundary``, ``box``,
        ``grid``, ``shape``, ``center``, ``ses_step``, ``kappa_subsamples``, ``maps_backend``,
        ``on_device``: the maps left on the GPU for a solve there, CuPy arrays in ``problem``;
        ``physics`` and physics fields too, below those given as keywords).
    forces : {"field", "exact"}
        "field": −q ∇φ_rf at the atoms. "exact": F = −∂G/∂r, the exact gradient of the energy
        returned (one more, adjoint, solve; :func:`pbsolver.forces.solvation_forces` says which
        set-ups it covers: the linearised equation, no focusing), in kJ mol⁻¹ Å⁻¹ (or kcal).
    interpolation : {"linear", "cubic"}
        Of φ_rf at the atoms (module docstring): "linear" (trilinear, as APBS) or "cubic"
        (C¹ in the positions).
    **options
        Fields of :class:`~pbsolver.PhysicsOptions` (``eps_in``, ``eps_out``,
        ``ionic_strength``, ``surface``, ``probe_radius``, ``ion_radius``, ``temperature``,
        ``boundary_kind``, ``ions``, ``ion_valence``, ``nonlinear``; None: its default, or
        ``physics``' value), and further options of :class:`pbsolver.Solver` (``maxiter``,
        ``omega``, ``check_every``, ``newton_maxiter``, ...).

    Notes
    -----
    With ``nonlinear=True`` (and salt) the energy is the nonlinear polar solvation energy
    ½ Σ q_i φ_rf(r_i) plus the mobile ions' terms (:mod:`pbsolver.nonlinear.energy`, whose
    docstring derives it and names the terms), held in :attr:`Solvation.terms`. Focusing
    solves the linearised equation only.
    """
    from pbsolver.problem import Problem
    from pbsolver.solving.solver import Solver

    unit_factor(units)
    choice(interpolation, "interpolation", INTERPOLATIONS)
    if forces not in ("field", "exact"):
        raise InputError(f"forces must be 'field' or 'exact', got {forces!r}")
    physics, solver_options, problem_options = PhysicsOptions.split(
        options, problem_options, physics=physics
    )
    solver = Solver(
        method=method, backend=backend, rtol=rtol, dtype=dtype, strict=strict, **solver_options
    )
    if focus is not None and focus is not False:
        if forces == "exact":
            raise InputError("forces='exact' is not available with focusing (focus=...)")
        return _solvate_focused(atoms, focus, spacing, margin, physics, solver, units,
                                problem_options, interpolation)  # fmt: skip
    problem = Problem.from_atoms(
        atoms, spacing=spacing, margin=margin, physics=physics, **problem_options
    )
    result = solver.solve(problem)
    phi = to_numpy(result.phi_rf)
    periodic = problem.boundary == "periodic"
    sampling = {"units": units, "periodic": periodic, "interpolation": interpolation}
    if forces == "exact":
        pot = reaction_field_potentials(atoms, problem.grid, phi, **sampling)
        force_values = exact_forces(atoms, problem, result, solver, physics, problem_options, units,
                                    interpolation)  # fmt: skip
    else:
        pot, force_values = _potentials_and_forces(atoms, problem.grid, phi, **sampling)
    energy = 0.5 * float(np.dot(atoms.charges, pot))
    terms = None
    if result.newton_steps is not None:  # the nonlinear equation was solved
        terms = solvation_terms(atoms, problem, phi, units=units, interpolation=interpolation)
        energy = terms.total
    return Solvation(energy, pot, force_values, problem, result, units, atoms, terms=terms,
                     forces_kind=forces)  # fmt: skip


def exact_forces(atoms, problem, result, solver, physics, problem_options, units,
                 interpolation="linear"):  # fmt: skip
    """−∂G/∂r of :func:`solvate`'s energy, (n, 3) NumPy (:func:`pbsolver.forces.solvation_forces`).

    ``problem_options`` are those the problem was built with (its ``box`` and
    ``kappa_subsamples``); the adjoint is solved by ``solver``, the forward solve's.
    """
    from pbsolver.forces import solvation_forces

    opts = problem_options or {}
    out = solvation_forces(
        atoms, problem, result.phi_rf, physics=physics, box=opts.get("box"), solver=solver,
        kappa_subsamples=opts.get("kappa_subsamples", 4), units=units,
        ses_step=opts.get("ses_step"), interpolation=interpolation,
    )  # fmt: skip
    solver.check(out.result)
    return to_numpy(out.forces)


def _solvate_focused(atoms, focus, spacing, margin, physics, solver, units, problem_options,
                     interpolation):  # fmt: skip
    """:func:`solvate` on focusing grids: each atom sampled on the finest level holding it."""
    import logging

    from pbsolver.molecule import focusing

    if physics.nonlinear and physics.has_salt:
        raise InputError(
            "focusing solves the linearised equation only: nonlinear=True with focus= is not "
            "available"
        )
    grids = focusing.focus_grids(atoms, spacing, margin=margin) if focus is True else focus
    levels = focusing.solve_focused(atoms, grids, physics=physics, solver=solver, **problem_options)
    which = focusing.finest_level([lv.grid for lv in levels], atoms.positions)
    pot = np.zeros(len(atoms))
    forces = np.zeros((len(atoms), 3))
    for k in np.unique(which):
        sel = np.flatnonzero(which == k)
        phi = levels[k].result.phi_rf  # sampled where it lives (sample_field)
        pot[sel], forces[sel] = _potentials_and_forces(
            atoms[sel], levels[k].grid, phi, units=units, interpolation=interpolation
        )
    outside = int(np.count_nonzero(which < len(levels) - 1))
    if outside:
        logging.getLogger("pbsolver").info(
            "focusing: %d of %d atoms lie outside the finest grid; their reaction field comes "
            "from coarser levels (as APBS' total energy)", outside, len(atoms)
        )  # fmt: skip
    energy = 0.5 * float(np.dot(atoms.charges, pot))
    finest = levels[-1]
    return Solvation(energy, pot, forces, finest.problem, finest.result, units, atoms, levels,
                     which)  # fmt: skip


def solvation_energy(atoms, **options) -> float:
    """Polar solvation energy of ``atoms`` (kJ/mol by default) in one call.

    Builds the grid and maps (:meth:`pbsolver.Problem.from_atoms`), solves for φ_rf and returns
    ½ Σ q_i φ_rf(r_i): :func:`solvate`'s energy, with the same keywords (``spacing=0.5``,
    ``margin=8.0``, ``physics=`` and the fields of :class:`~pbsolver.PhysicsOptions`:
    ``eps_in``, ``eps_out``, ``ionic_strength``, ``surface``, ``probe_radius``, ``ion_radius``,
    ``temperature``, ``boundary_kind``, ``ions``, ``ion_valence``, ``nonlinear``;
    ``backend="auto"``, ``method="auto"``,
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
