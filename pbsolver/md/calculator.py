"""A persistent reaction-field calculator for molecular-dynamics pipelines.

:class:`ReactionFieldCalculator` is built once for a solute and then called every few MD steps
with new coordinates. Between calls it keeps what does not change: the grid (while the solute
stays inside it), the :class:`~pbsolver.Solver` and its backend, the map options, and the previous
frame's reaction field, which is the initial guess of the next solve (a warm start); on CUDA the
warm start, the solution and the values at the atoms stay on the device.

On CUDA the backend instance (its stream, CuPy's memory pool and its cache of captured graphs,
keyed by buffer addresses, shapes and scalars) lives as long as the process. Each frame's maps and
stencil are new arrays of the same sizes; the pool usually hands back the same addresses, and the
graphs recorded for them are then replayed instead of captured again. The maps themselves
(surface, φ_c, boundary values) are computed on the CPU and copied to the device every frame.
The stacked engine (``engine="stacked"``, the default on CUDA where it applies) computes them on
the device instead.

Grid placement
--------------
``box=None`` (default): a Dirichlet grid follows the solute. It is placed on the first frame with
``margin + skin`` Å between the atomic spheres and its outer layer and then kept as long as every
sphere stays at least ``margin`` Å inside. When one comes closer the grid is re-placed around the
solute, shifted by a whole number of nodes (same shape and spacing, so buffers and graphs are
reused), or grown if the solute no longer fits. The previous solution is then carried over by
the same integer shift; nodes the old grid did not cover start from the Debye–Hückel estimate.

``box=(Lx, Ly, Lz)``: a fixed periodic grid fills the MD box (n nodes a side, spacing L/n);
atoms are wrapped into it and the maps use periodic images. A new box may be passed to
:meth:`~ReactionFieldCalculator.compute` (NPT); the previous solution stays the initial guess
when the node counts do not change.

What a frame returns
--------------------
``energy`` = ½ Σ_i q_i φ_rf(r_i), the polar solvation energy (ε_c = ε_in; README, *The equation*);
with ``nonlinear=True`` (and salt) the nonlinear equation's ΔG, which adds the mobile ions' terms
(:mod:`pbsolver.nonlinear.energy`; ``FrameResult.terms``), each frame a Newton solve on the general
engine warm-started from the previous frame's φ_rf (the stacked engine solves linear systems only);
``potentials`` = φ_rf(r_i); ``forces`` = −q_i ∇φ_rf(r_i). Values at atoms are interpolations
of the grid field exactly as in :mod:`pbsolver.molecule.energy` (``interpolation=``: trilinear
by default; "cubic", Keys' cubic convolution, for molecular dynamics: the energy is then C¹
as an atom crosses a plane of nodes, where the trilinear one has a kink).

**What the forces are.** A frame on the smooth vdW surface "svdw" (``forces="auto"``, the
default, or ``"exact"``), or on "vdw", "mol" or "smol" with ``forces="exact"``, returns
F_i = −∂G/∂r_i, the exact gradient of the discrete energy it reports at a fixed grid (charge,
dielectric-boundary, ionic-boundary, φ_c and boundary-value terms; :mod:`pbsolver.forces`), at
the cost of one more (adjoint) solve, warm-started like the forward one. On the stacked engine
that is one more stacked solve for the whole batch, and every frame's terms are taken at once
from the maps the engine solved (:meth:`~pbsolver.md.engine.StackedFrames.stack_problem`).
Everywhere else (``forces="field"``; "vdw", "mol" and "smol" under "auto") ``forces`` is
−q_i ∇φ_rf(r_i), the force of the reaction field on each charge: −∂G/∂r_i only for charges
inside a rigid cavity, missing the dielectric and ionic boundary forces (measured 5–75 % off on a
protein). :attr:`ReactionFieldCalculator.force_kind` and :attr:`FrameResult.forces_kind` say
which ("exact" or "field"); "auto" logs a warning when it falls back to "field".

Energy and forces are those of a fixed grid: when the following grid is re-placed (by whole
nodes), the energy jumps by the discretisation error and no force sees that. The "vdw"
surface's energy is continuous but has kinks and integrable slope singularities (chord ends
crossing nodes, lines grazing spheres), "mol" and "smol" more kinks where the reentrant surface
changes feature and, at the map's bisection resolution (``ses_step·2⁻¹⁴``), steps; "svdw" (a
smooth union) is differentiable, the surface for dynamics.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field

import numpy as np

from pbsolver.arrays import array_module, is_device_array, require_real_numbers, to_numpy
from pbsolver.exceptions import ConvergenceError, InputError
from pbsolver.grid import Grid
from pbsolver.md.prediction import FieldHistory
from pbsolver.molecule import maps
from pbsolver.molecule.atoms import Atoms
from pbsolver.molecule.build import build_problem
from pbsolver.molecule.energy import sample_field
from pbsolver.molecule.kept import recording_lines
from pbsolver.nonlinear.energy import SolvationTerms, ion_terms
from pbsolver.options import (
    INTERPOLATIONS,
    PhysicsOptions,
    check_box,
    choice,
    nonnegative,
    positive,
    unit_factor,
)
from pbsolver.problem import Problem

#: Map options beside the physics, passed through to :func:`pbsolver.molecule.maps.build_maps`.
MAP_OPTIONS = ("ses_step", "kappa_subsamples", "maps_backend")
#: Physics fields also accepted in ``map_options`` (as before :class:`PhysicsOptions`).
_PHYSICS_IN_MAP_OPTIONS = ("ion_radius", "temperature", "boundary_kind")


@dataclass
class FrameResult:
    """What :meth:`ReactionFieldCalculator.compute` returns for one frame.

    Attributes
    ----------
    energy : float
        Polar solvation energy ½ Σ q φ_rf (kJ/mol, or the calculator's ``units``); a nonlinear
        frame's adds the mobile ions' terms (:mod:`pbsolver.nonlinear.energy`).
    forces : array (n, 3)
        Forces on the atoms (kJ mol⁻¹ Å⁻¹), NumPy or CuPy like the positions given: the exact
        −∂G/∂r (``forces_kind == "exact"``) or −q ∇φ_rf (``"field"``).
    potentials : array (n,)
        φ_rf at the atoms (kJ mol⁻¹ e⁻¹), NumPy or CuPy like the positions given.
    iterations : int
        Solver iterations (sweeps or cycles) of this frame.
    converged : bool
        Whether the solve met the tolerance.
    seconds : float
        Wall time of the whole frame (maps + solve + energy and forces).
    timings : dict
        Seconds spent in ``"maps"``, ``"solve"`` and ``"evaluate"``.
    warm_start : bool
        Whether the solve started from the previous frame's solution.
    regridded : bool
        Whether the grid was (re)placed for this frame.
    grid : Grid
        The grid of this frame.
    solve : SolveResult
        The solver's full report, the frame's φ_rf included (a whole grid, on the device with
        CUDA): over a long trajectory keep the energies and forces, not the FrameResults.
    units : str
    forces_kind : {"exact", "field"}
        What ``forces`` are (see :attr:`ReactionFieldCalculator.force_kind`).
    terms : SolvationTerms or None
        A nonlinear frame's energy term by term (fixed charges, mobile ions, osmotic; in
        ``units``), whose total is ``energy``; None for the linearised equation.
    """

    energy: float
    forces: object
    potentials: object
    iterations: int
    converged: bool
    seconds: float
    timings: dict
    warm_start: bool
    regridded: bool
    grid: Grid
    solve: object = field(repr=False)
    units: str = "kJ/mol"
    forces_kind: str = "field"
    terms: object = field(default=None, repr=False)

    def __repr__(self) -> str:
        return (
            f"FrameResult(energy={self.energy:.6g} {self.units}, iterations={self.iterations}, "
            f"converged={self.converged}, seconds={self.seconds:.3g}, "
            f"warm_start={self.warm_start}, regridded={self.regridded})"
        )


class ReactionFieldCalculator:
    """Reaction-field energies and forces of one solute over many frames.

    Parameters
    ----------
    atoms : Atoms
        The solute: charges and radii are fixed; positions are the first frame's unless
        :meth:`compute` is given others.
    physics : PhysicsOptions, optional
        The physics (permittivities, salt, surface, probe and ion radii, temperature, boundary
        kind; ε_c = ε_in). Its fields may also be given as keywords (``eps_in=``,
        ``ionic_strength=``, ``surface=``...), which override those of ``physics``.
    spacing : float
        Grid spacing, Å.
    backend : {"auto", "cpu", "cuda"}
        Where to solve; "auto" picks CUDA where a GPU is usable or the positions are CuPy.
    method : {"auto", "multigrid", "mgcg", "sor", "jacobi"}
        Solver method ("auto": multigrid).
    rtol : float
        Relative residual tolerance of every solve of the energies.
    adjoint_rtol : float, optional
        Relative residual tolerance of the exact forces' adjoint solve (default ``10 * rtol``).
        The forces' error then comes from both solves in about equal parts (the forward
        solution's at ``rtol`` and the adjoint's at ten times it, measured by
        ``benchmarks/adjoint_tolerance.py``). ``adjoint_rtol=rtol`` shrinks the adjoint's
        share; a smaller value buys little, the forward solve's remaining.
    box : 3 floats, optional
        Periodic MD box (Å): a fixed periodic grid filling it. None: a Dirichlet grid that
        follows the solute.
    margin : float
        Least gap between the atomic spheres and the outer layer of a following grid, Å.
    skin : float
        Extra gap given when the grid is (re)placed, Å, so that it can stay put for many frames.
    shape : 3 ints, optional
        Fixed node counts of a following grid (default: from the first frame, ``margin + skin``,
        rounded to multigrid-friendly sizes; grown when the solute outgrows it).
    warm_start : bool
        Start each solve from the previous frames' solutions: the last one moved onto the
        frame's grid, or, on an unmoved grid, the last two extrapolated along the atoms' steps
        (:mod:`pbsolver.md.prediction`). The calculator then keeps two solutions (and, with
        exact forces, two adjoint fields) of the grid's size.
    units : {"kJ/mol", "kcal/mol"}
        Units of energies, potentials and forces.
    dtype : {numpy.float32, numpy.float64}
        Solver storage precision.
    strict : bool
        Raise :class:`~pbsolver.ConvergenceError` when a frame's solve does not converge.
    engine : {"auto", "general", "stacked"}
        How frames are computed. ``"general"``: :func:`pbsolver.molecule.build.build_problem` and a
        :class:`~pbsolver.Solver` per frame (any surface, periodic boxes, multigrid).
        ``"stacked"``: :class:`pbsolver.md.engine.StackedFrames`, batched map kernels and a
        stacked solve (multigrid coarsening every frame's block separately, or SOR with
        ``method="sor"``) on buffers kept across calls (surfaces "vdw", "mol" and "smol" with the
        same edge fractions as the general path, following grid; the
        fastest way on a GPU, and what :meth:`compute_batch` uses to run B frames in one
        launch). ``"auto"``: stacked on CUDA (with CuPy) where the set-up allows it and
        ``method`` is "auto", "multigrid" or "sor", else general. ``nonlinear=True`` (with
        salt) runs on the general engine ("stacked" is refused): one Newton solve per frame,
        warm-started from the previous frame's φ_rf like a linear solve.
    forces : {"auto", "exact", "field"}
        "exact": the exact gradient of the energy (:mod:`pbsolver.forces`; either engine,
        surfaces "vdw", "svdw", "mol" and "smol"; anything else is refused). "field":
        −q ∇φ_rf. "auto": exact where the energy is also smooth ("svdw"), else field with a
        logged warning.
        :attr:`force_kind` says which.
    interpolation : {"linear", "cubic"}
        How φ_rf is sampled at the atoms (:func:`pbsolver.molecule.energy.sample_field`), for
        energies, potentials and both kinds of forces. "linear" (trilinear, as APBS); "cubic"
        (C¹ in the positions: an NVE run's energy does not jump in slope where an atom crosses
        a plane of nodes).
    map_options : dict, optional
        ``ses_step``, ``kappa_subsamples``, ``maps_backend`` ("cpu" default, or "cuda": the
        numba-cuda map kernels) (see :func:`pbsolver.molecule.maps.build_maps`); the physics
        fields ``ion_radius``, ``temperature`` and ``boundary_kind`` are accepted here too.
    **options
        Fields of :class:`~pbsolver.PhysicsOptions`, and further options of
        :class:`~pbsolver.Solver` (``maxiter``, ``check_every``, method options such as
        ``cycle``...).

    Examples
    --------
    >>> import numpy as np, pbsolver as pb
    >>> ion = pb.Atoms([[0.0, 0.0, 0.0]], [1.0], [3.0])
    >>> calc = pb.ReactionFieldCalculator(ion, spacing=0.5, eps_in=1.0, margin=2.0, skin=1.0,
    ...                                   surface="vdw", backend="cpu")
    >>> first = calc.compute()
    >>> abs(first.energy / -228.611 - 1) < 0.01
    True
    >>> second = calc.compute(np.array([[0.05, 0.0, 0.0]]))  # warm start, same grid
    >>> second.warm_start, second.regridded
    (True, False)
    """

    def __init__(
        self,
        atoms,
        *,
        physics=None,
        spacing=0.5,
        backend="auto",
        method="auto",
        rtol=1e-6,
        adjoint_rtol=None,
        box=None,
        margin=8.0,
        skin=2.0,
        shape=None,
        warm_start=True,
        units="kJ/mol",
        dtype=np.float32,
        strict=False,
        engine="auto",
        forces="auto",
        interpolation="linear",
        map_options=None,
        **options,
    ):
        from pbsolver.backends import get_backend
        from pbsolver.solving.solver import Solver

        if not isinstance(atoms, Atoms):
            raise InputError(f"atoms must be a pbsolver.Atoms, got {type(atoms).__name__}")
        self.atoms = atoms
        self.map_options = dict(map_options or {})
        unknown = set(self.map_options) - set(MAP_OPTIONS) - set(_PHYSICS_IN_MAP_OPTIONS)
        if unknown:
            known = MAP_OPTIONS + _PHYSICS_IN_MAP_OPTIONS
            raise InputError(f"unknown map_options {sorted(unknown)}; known: {known}")
        #: The physics of every frame.
        self.physics, options, self.map_options = PhysicsOptions.split(
            options, self.map_options, physics=physics
        )
        self.spacing = positive(spacing, "spacing")
        self.margin = nonnegative(margin, "margin")
        self.skin = nonnegative(skin, "skin")
        self.units = units
        self._factor = unit_factor(units)
        self.warm_start = bool(warm_start)
        self.box = None if box is None else check_box(box)
        self._shape = None
        if shape is not None:
            if self.box is not None:
                raise InputError("shape is for a following grid; a periodic box sets its own")
            self._shape = Grid(shape, spacing=self.spacing).shape
        self.solver = Solver(
            method=method, backend=backend, rtol=rtol, dtype=dtype, strict=False, **options
        )
        #: Relative residual tolerance of the exact forces' adjoint solves.
        self.adjoint_rtol = positive(10.0 * rtol if adjoint_rtol is None else adjoint_rtol,
                                     "adjoint_rtol")  # fmt: skip
        self._adjoint_solver = Solver(**{**self.solver.options(), "rtol": self.adjoint_rtol})
        self.strict = bool(strict)
        self.backend = get_backend(backend)
        self.frames = 0
        self.grid: Grid | None = None
        self.problem: Problem | None = None
        self._batch_mode = "auto"
        #: How φ_rf is sampled at the atoms ("linear" or "cubic").
        self.interpolation = choice(interpolation, "interpolation", INTERPOLATIONS)
        self.engine = self._resolve_engine(engine, method, forces)
        #: What the frames' forces are: "exact" (−∂G/∂r) or "field" (−q ∇φ_rf).
        self.force_kind = self._resolve_forces(forces)
        #: The last two frames' solutions and adjoint fields, on the solver's device: the solves
        #: start from their prediction (:mod:`pbsolver.md.prediction`).
        self._solutions = FieldHistory()
        self._adjoints = FieldHistory()
        self._stacked = None  # StackedFrames, made for the grid shape in use

    # the physics fields, read as before
    eps_in = property(lambda self: self.physics.eps_in, doc="Solute permittivity ε_in (= ε_c).")
    eps_out = property(lambda self: self.physics.eps_out, doc="Solvent permittivity ε_out.")
    ionic_strength = property(lambda self: self.physics.ionic_strength, doc="1:1 salt, mol/L.")
    surface = property(lambda self: self.physics.surface, doc="Dielectric surface.")
    probe_radius = property(lambda self: self.physics.probe_radius, doc="Probe radius, Å.")

    # ------------------------------------------------------------------ public API
    def compute(self, positions=None, *, box=None) -> FrameResult:
        """Energy, forces and potentials of one frame.

        Parameters
        ----------
        positions : array (n, 3), optional
            Coordinates in Å, NumPy or CuPy (results come back in the same library). Default:
            the positions of the atoms the calculator was built with.
        box : 3 floats, optional
            A new periodic box (only for a calculator built with ``box``).

        Returns
        -------
        FrameResult

        Raises
        ------
        InputError
            Wrong shape or non-finite positions, or a box for a non-periodic calculator.
        ConvergenceError
            With ``strict=True``, when the solve did not converge.
        """
        if self.engine == "stacked":
            return self._compute_stacked([positions], box)[0]
        start = time.perf_counter()
        atoms, xp = self._frame_atoms(positions)
        grid, regridded, x0 = self._prepare(atoms, box)
        problem = self._problem(atoms, grid)
        t_maps = time.perf_counter() - start
        # exact forces: the adjoint solve reuses this solve's stencils and hierarchy
        result = self.solver.solve(problem, x0=x0, keep_system=self.force_kind == "exact")
        t_solve = time.perf_counter() - start - t_maps
        return self._finish(atoms, xp, grid, problem, result, x0, regridded, t_maps, t_solve)

    def compute_batch(self, frames, *, mode="auto", box=None) -> list[FrameResult]:
        """Several frames at once: maps one by one, then one :func:`pbsolver.solve_batch`.

        Every frame starts from the solution before the batch (transported to its grid), so
        the frames are independent problems that the backend may solve together (stacked in
        one launch on the GPU with ``method="sor"``; see :mod:`pbsolver.solving.batched`). The last
        frame's solution is the next warm start. With ``engine="stacked"`` the frames share
        one grid placed around all of them, and maps, solve and sampling of all frames run as
        batched launches on buffers kept for the next batch of the same size
        (``mode="loop"``: one frame at a time through the same engine).

        Parameters
        ----------
        frames : sequence of arrays (n, 3)
            Coordinates of each frame, Å (NumPy or CuPy).
        mode : {"auto", "loop", "stacked", "streams"}
            Passed to :func:`pbsolver.solve_batch`.
        box : 3 floats, optional
            A new periodic box for all the frames.

        Returns
        -------
        list of FrameResult
            ``seconds`` and ``timings["solve"]`` are the batch's shares per frame.

        Raises
        ------
        InputError
            On the stacked engine, a batch whose buffers would not fit in the device's memory
            (:meth:`pbsolver.md.engine.StackedFrames.check_room`, before they are made). More
            frames than half the memory holds run as chunks of as many as it holds, one after
            another (:meth:`~pbsolver.md.engine.StackedFrames.batch_size_for`), so this is
            raised only where not one frame fits.
        """
        from pbsolver.solving.batched import solve_batch

        frames = list(frames)
        if not frames:
            return []
        if self.engine == "stacked":
            if mode == "loop":
                return [self._compute_stacked([f], box)[0] for f in frames]
            return self._compute_stacked(frames, box)
        prepared = []
        prev_phi, prev_grid = self._solutions.last
        for positions in frames:
            t0 = time.perf_counter()
            atoms, xp = self._frame_atoms(positions)
            grid, regridded, _ = self._place(atoms, box)
            x0 = self._carry(prev_phi, prev_grid, grid, atoms) if self.warm_start else None
            problem = self._problem(atoms, grid)
            prepared.append((atoms, xp, grid, regridded, x0, problem, time.perf_counter() - t0))
        t1 = time.perf_counter()
        results = solve_batch([p[5] for p in prepared], x0=[p[4] for p in prepared], mode=mode,
                              **self.solver.options())  # fmt: skip
        t_solve = (time.perf_counter() - t1) / len(frames)
        out = []
        for (atoms, xp, grid, regridded, x0, problem, t_maps), res in zip(
            prepared, results, strict=True
        ):
            out.append(self._finish(atoms, xp, grid, problem, res, x0, regridded, t_maps, t_solve))
        return out

    def atoms_at(self, positions) -> Atoms:
        """The solute (charges, radii, names) at ``positions`` (Å, NumPy or CuPy; host copy)."""
        return self._frame_atoms(positions)[0]

    @property
    def phi_rf(self):
        """The last frame's φ_rf on its grid (on the solver's device), or None before any."""
        return self._solutions.last[0]

    def reset(self) -> None:
        """Forget the grid and the previous solution (the next frame starts cold)."""
        self.grid = None
        self.problem = None
        self._solutions.clear()
        self._adjoints.clear()

    def __repr__(self) -> str:
        where = "periodic box" if self.box is not None else "following grid"
        grid = "not placed" if self.grid is None else f"{self.grid.shape}"
        return (
            f"ReactionFieldCalculator(n_atoms={len(self.atoms)}, {where}, grid={grid}, "
            f"spacing={self.spacing:g}, surface={self.surface!r}, method={self.solver.method!r}, "
            f"backend={self.backend.name!r}, frames={self.frames})"
        )

    # ------------------------------------------------------------------ stacked engine
    def _resolve_engine(self, engine, method, forces="field") -> str:
        from pbsolver.md.engine import STACKED_METHODS, supports

        if engine not in ("auto", "general", "stacked"):
            raise InputError(f"engine must be 'auto', 'general' or 'stacked', got {engine!r}")
        kind = self.physics.boundary_kind
        ok = supports(self.surface, self.box is not None, kind)
        nonlinear = self.physics.nonlinear and self.physics.has_salt
        if engine == "stacked" and nonlinear:
            raise InputError(
                "engine='stacked' solves the linearised equation only; nonlinear=True runs on "
                "engine='general' (or 'auto'), one Newton solve per frame"
            )
        if nonlinear:  # Newton solves one problem at a time: the general path
            return "general"
        if engine == "stacked":
            if not ok:
                raise InputError(
                    "engine='stacked' handles surfaces 'vdw', 'mol' and 'smol' on a following "
                    "(Dirichlet) grid with boundary_kind 'mdh' or 'zero'; got "
                    f"surface={self.surface!r}, "
                    f"box={'set' if self.box is not None else None}, boundary_kind={kind!r}"
                )
            if method not in STACKED_METHODS:
                raise InputError(
                    f"engine='stacked' solves with {STACKED_METHODS}, got method={method!r}"
                )
            return "stacked"
        if engine == "general" or not ok or method not in STACKED_METHODS:
            return "general"
        return "stacked" if self.backend.array_library == "cupy" else "general"

    def _resolve_forces(self, forces) -> str:
        """The force kind ("exact" or "field") of the option ``forces`` (see the class)."""
        from pbsolver.forces import EXACT_SURFACES, SMOOTH_SURFACES, supports

        if forces not in ("auto", "exact", "field"):
            raise InputError(f"forces must be 'auto', 'exact' or 'field', got {forces!r}")
        if forces == "field":
            return "field"
        # "auto" takes exact forces only where the energy is smooth ("svdw"): on "vdw" they are
        # exact but unbounded where grid lines graze spheres
        if supports(self.physics, smooth=forces == "auto"):
            return "exact"
        surfaces = SMOOTH_SURFACES if forces == "auto" else EXACT_SURFACES
        why = (
            f"surface={self.surface!r}, nonlinear={self.physics.nonlinear} (exact forces: "
            f"{surfaces}, linearised equation)"
        )
        if forces == "exact":
            raise InputError(f"forces='exact' is not available for {why}")
        import logging

        logging.getLogger("pbsolver").warning(
            "ReactionFieldCalculator: forces are -q grad(phi_rf), not the exact gradient of the "
            "energy, for %s (force_kind='field')",
            why,
        )
        return "field"

    def _exact_forces(self, atoms, grid, problem, phi_rf, system=None):
        """The exact −∂G/∂r of this frame (:func:`pbsolver.forces.solvation_forces`).

        ``system``: the forward solve's (``keep_system=True``), for the adjoint solve.
        """
        from pbsolver.forces import solvation_forces

        guess = None
        if self.warm_start:
            guess = self._adjoints.predict(atoms.positions, grid)
            if guess is None:
                guess, _ = self._shift(*self._adjoints.last, grid)
        out = solvation_forces(
            atoms, problem, phi_rf, physics=self.physics, box=self.box,
            solver=self._adjoint_solver,
            kappa_subsamples=self.map_options.get("kappa_subsamples", 4), units=self.units,
            adjoint_guess=guess, ses_step=self.map_options.get("ses_step"),
            interpolation=self.interpolation, system=system,
        )  # fmt: skip
        self._adjoints.record(atoms.positions, grid, out.adjoint)
        return out

    def _stacked_engine(self, grid):
        """The StackedFrames of ``grid``'s shape (made again when the shape changes)."""
        from pbsolver.md.engine import StackedFrames

        eng = self._stacked
        if eng is None or eng.grid.shape != grid.shape:
            solver = self.solver
            method = solver.method if solver.method in ("sor", "multigrid") else "auto"
            eng = StackedFrames(
                self.atoms.charges,
                self.atoms.radii,
                grid.shape,
                grid.spacing,
                solver,
                physics=self.physics,
                kappa_subsamples=self.map_options.get("kappa_subsamples", 4),
                method=method,
                backend=self.backend,
                surface=self.surface,
                ses_step=self.map_options.get("ses_step"),
                interpolation=self.interpolation,
            )
            self._stacked = eng
        return eng

    def _compute_stacked(self, frames, box) -> list[FrameResult]:
        """Frames through :class:`pbsolver.md.engine.StackedFrames` (one grid for all of them)."""
        from pbsolver.solving.solver import SolveResult

        start = time.perf_counter()
        if box is not None:
            raise InputError("box= is only accepted by a calculator built with a periodic box")
        host, xp = self._batch_positions(frames)  # (B, N, 3) float64, validated
        # over the frames first (contiguous slabs), then over the atoms: an (B·N, 3) reduction
        # along its short axis costs milliseconds a batch
        pad = self.atoms.radii[:, None]
        lo = (host.min(axis=0) - pad).min(axis=0)
        hi = (host.max(axis=0) + pad).max(axis=0)
        grid, regridded, _ = self._place(_Bounds(lo, hi), None)
        engine = self._stacked_engine(grid)
        size = engine.batch_size_for(len(frames), exact=self.force_kind == "exact")
        if size < len(frames):  # more than half the memory holds: in chunks, one after another
            return [result for k in range(0, len(frames), size)
                    for result in self._compute_stacked(frames[k : k + size], box)]  # fmt: skip
        x0 = fill = None
        if self.warm_start:  # the engine fills uncovered nodes with Debye–Hückel on its device
            x0, fill = self._shift(*self._solutions.last, grid)
        if all(is_device_array(p) for p in frames) and engine.xp is not np:
            # device positions stay on the engine's device
            positions = engine.xp.stack([engine.xp.asarray(p) for p in frames])
        else:
            positions = host
        origins = np.repeat(np.asarray(grid.origin, dtype=np.float64)[None], len(frames), axis=0)
        res = engine.run(positions, origins, x0, fill_nodes=fill,
                         record_ends=self.force_kind == "exact")  # fmt: skip
        q = self.atoms.charges
        f = self._factor
        nf = len(frames)
        # the whole batch at once (one array operation each, one transfer to CuPy if asked)
        energies = 0.5 * f * (res.values @ q)
        adjoint_converged = np.ones(nf, dtype=bool)
        if self.force_kind == "exact":
            t_forces0 = time.perf_counter()
            exact, adjoint_converged = self._stacked_exact_forces(engine, host, grid, res)
            forces = _to_library(exact, xp)
            res.timings["forces"] = time.perf_counter() - t_forces0
        else:
            forces = _to_library(res.gradients * (-f * q)[None, :, None], xp)
        potentials = _to_library(f * res.values, xp)
        seconds = time.perf_counter() - start
        timings = {k: v / nf for k, v in res.timings.items()}
        out = []
        for k in range(nf):
            solve = SolveResult(
                phi_rf=res.phi[k],
                converged=bool(res.converged[k]),
                iterations=res.iterations,
                residual_norms=[float(res.initial[k]), float(res.residuals[k])],
                seconds=timings["solve"],
                method=res.method,
                backend=self.backend.name,
                reason="converged" if res.converged[k] else res.reason,
                omega=res.omega,
                extra={"engine": "stacked", "batch_size": nf},
            )
            out.append(
                FrameResult(
                    energy=float(energies[k]),
                    forces=forces[k],
                    potentials=potentials[k],
                    iterations=res.iterations,
                    converged=bool(res.converged[k] and adjoint_converged[k]),
                    seconds=seconds / nf,
                    timings=timings,
                    warm_start=x0 is not None,
                    regridded=regridded and k == 0,
                    grid=grid,
                    solve=solve,
                    units=self.units,
                    forces_kind=self.force_kind,
                )
            )
            self.frames += 1
        self.problem = None
        self._solutions.record(host[-1], grid, res.phi[-1])
        if self.strict:
            for k, fr in enumerate(out):
                if not adjoint_converged[k]:
                    raise ConvergenceError(
                        f"frame {self.frames - nf + k}: the adjoint solve of the forces did not "
                        "converge",
                        fr.solve,
                    )
                if not fr.converged:
                    raise ConvergenceError(
                        f"frame {self.frames - nf + k}: the solve did not converge "
                        f"({fr.solve.reason}) after {fr.iterations} iterations, relative "
                        f"residual {res.residuals[k]:.3g}",
                        fr.solve,
                    )
        return out

    def _stacked_exact_forces(self, engine, host, grid, res):
        """The exact −∂G/∂r of the engine's last call: ((B, n, 3) array, adjoint converged).

        One stacked adjoint solve for all B frames (:meth:`StackedFrames.solve_adjoint`), then
        every term of every frame at once on the stack's maps
        (:meth:`StackedFrames.stack_problem`, :func:`pbsolver.forces.frames_forces_from_adjoint`).
        """
        from pbsolver.forces import adjoint_source, frames_forces_from_adjoint
        from pbsolver.forces.gradient import stacked_atoms
        from pbsolver.forces.interpolation import interpolation_gradient, stack_offsets

        nf, n = host.shape[:2]
        xp, stride = engine.xp, engine.stride
        # every frame's ½ Iᵀq and charge-term slopes at once, in the engine's stack
        positions = host.reshape(-1, 3)
        batch = stacked_atoms(self.atoms, host)
        sampling = {"interpolation": self.interpolation,
                    "offsets": stack_offsets(grid, nf, n, stride, xp)}  # fmt: skip
        sources = adjoint_source(batch, grid, xp=xp, size=res.stack.size,
                                 **sampling).reshape(res.stack.shape)  # fmt: skip
        slopes = interpolation_gradient(grid, res.stack, positions, **sampling).reshape(nf, n, 3)
        guess = None
        if self.warm_start:  # every frame starts from the last λ, predicted for the first
            guess = self._adjoints.predict(host[0], grid)
            if guess is None:
                guess, _ = self._shift(*self._adjoints.last, grid)
        t0 = time.perf_counter()
        lam, outcome = engine.solve_adjoint(sources, guess, rtol=self.adjoint_rtol)
        res.timings["adjoint"] = time.perf_counter() - t0
        # every frame's SES line ends and ion-accessible end sums, where the engine has them
        ends = engine.ses_interval_ends()
        ion_ends = engine.ion_end_sums(nf) if self.physics.has_salt else None
        out = frames_forces_from_adjoint(
            self.atoms, host, grid, engine.stack_problem(nf, grid), res.stack, lam, sources,
            stride=stride, physics=self.physics,
            kappa_subsamples=self.map_options.get("kappa_subsamples", 4), units=self.units,
            ses_step=self.map_options.get("ses_step"), interpolation=self.interpolation,
            ses_ends=ends, ion_ends=ion_ends, field_gradient=slopes,
        )  # fmt: skip
        last = (nf - 1) * stride
        self._adjoints.record(host[-1], grid, lam[last : last + grid.shape[0]].copy())
        return out.forces, np.asarray(outcome.converged, dtype=bool)

    # ------------------------------------------------------------------ frames
    def _batch_positions(self, frames):
        """All frames' positions as one host (B, N, 3) float64 array, and the first's library.

        The checks and messages of :meth:`_frame_atoms`, with the finiteness test made once
        over the whole batch (per frame it was a measurable share of a batched frame).
        """
        hosts, libs = zip(*(self._host_positions(p) for p in frames), strict=True)
        stack = np.stack(hosts)
        _require_finite(stack)
        return stack, libs[0]

    def _host_positions(self, positions):
        """(host float64 (N, 3) copy or view, array library of the caller) of one frame."""
        if positions is None:
            return self.atoms.positions, np
        xp = array_module(positions)
        if is_device_array(positions) and xp is np:
            import cupy as cp

            positions = cp.asarray(positions)
            xp = cp
        require_real_numbers(positions, "positions")
        host = np.asarray(to_numpy(positions), dtype=np.float64)
        n = len(self.atoms)
        if host.shape != (n, 3):
            raise InputError(f"positions must have shape ({n}, 3), got {host.shape}")
        return host, xp

    def _frame_atoms(self, positions):
        """The solute at ``positions`` (host copy) and the caller's array library."""
        if positions is None:
            return self.atoms, np
        host, xp = self._host_positions(positions)
        _require_finite(host)
        return self.atoms.with_positions(host), xp

    def _prepare(self, atoms, box):
        """Place the grid for this frame; return it, whether it moved, and the initial guess."""
        grid, regridded, _ = self._place(atoms, box)
        if not self.warm_start:
            return grid, regridded, None
        x0 = self._solutions.predict(atoms.positions, grid)
        if x0 is None:
            x0 = self._carry(*self._solutions.last, grid, atoms)
        return grid, regridded, x0

    def _place(self, atoms, box):
        """The grid of this frame (kept, shifted, grown, or the periodic box's)."""
        if box is not None and self.box is None:
            raise InputError("box= is only accepted by a calculator built with a periodic box")
        if self.box is not None:
            new_box = self.box if box is None else check_box(box)
            if self.grid is None or not np.array_equal(new_box, self.box):
                self.box = new_box
                self.grid = maps.grid_for_box(new_box, self.spacing)
                return self.grid, True, None
            return self.grid, False, None
        lo, hi = atoms.bounds()
        g = self.grid
        if g is not None:
            origin = np.asarray(g.origin)
            end = origin + np.asarray(g.lengths)
            if np.all(lo - origin >= self.margin) and np.all(end - hi >= self.margin):
                return g, False, None
        h = self.spacing
        gap = self.margin + self.skin
        if self._shape is not None:
            shape = self._shape
            room = (np.asarray(shape) - 1) * h - (hi - lo)
            if np.any(room < 2 * self.margin):
                raise InputError(
                    f"the solute ({(hi - lo).round(2).tolist()} Å with its radii) does not fit in "
                    f"the fixed shape {shape} at spacing {h} with margin {self.margin} Å"
                )
        else:
            shape = maps.grid_for_atoms(atoms, h, gap).shape
            if g is not None:
                shape = tuple(max(a, b) for a, b in zip(shape, g.shape, strict=True))
        center = 0.5 * (lo + hi)
        origin = center - 0.5 * (np.asarray(shape) - 1) * h
        if g is not None:  # stay on the old lattice: the old solution moves by whole nodes
            old = np.asarray(g.origin)
            origin = old + np.rint((origin - old) / h) * h
        self.grid = Grid(shape, spacing=h, origin=tuple(origin))
        return self.grid, True, None

    def _carry(self, phi, old: Grid | None, new: Grid, atoms):
        """The previous solution as an initial guess on ``new`` (None when there is none).

        Nodes the old grid did not cover get the Debye–Hückel estimate (on the host).
        """
        x0, uncovered = self._shift(phi, old, new)
        if x0 is None or uncovered is None:
            return x0
        h = np.asarray(new.spacing)
        values = _debye_huckel(atoms, np.asarray(new.origin) + uncovered * h, self)
        fill = np.zeros(new.shape)
        fill[tuple(uncovered.T)] = values
        xp = array_module(x0)
        return x0 + xp.asarray(fill, dtype=x0.dtype)

    def _shift(self, phi, old: Grid | None, new: Grid):
        """The previous solution moved onto ``new`` by whole nodes: (x0, uncovered nodes).

        ``x0`` is None when there is no usable solution; ``uncovered`` is an (M, 3) array of
        the nodes the old grid did not cover (zero in x0), or None when it covered them all.
        """
        if phi is None or old is None:
            return None, None
        if old == new:
            return phi, None
        if self.box is not None:
            return (phi if old.shape == new.shape else None), None
        xp = array_module(phi)
        h = np.asarray(new.spacing)
        offset = np.rint((np.asarray(new.origin) - np.asarray(old.origin)) / h).astype(int)
        # new node i sits on old node i + offset
        dst, src = [], []
        for a in range(3):
            lo_new = max(0, -offset[a])
            hi_new = min(new.shape[a], old.shape[a] - offset[a])
            if hi_new <= lo_new:
                return None, None  # no overlap: start cold
            dst.append(slice(lo_new, hi_new))
            src.append(slice(lo_new + offset[a], hi_new + offset[a]))
        covered = np.zeros(new.shape, dtype=bool)
        covered[tuple(dst)] = True
        x0 = xp.zeros(new.shape, dtype=phi.dtype)
        x0[tuple(dst)] = phi[tuple(src)]
        uncovered = np.argwhere(~covered)
        return x0, (uncovered if uncovered.size else None)

    def _problem(self, atoms, grid) -> Problem:
        """All maps of this frame on ``grid`` (on the device when solving with CUDA).

        With exact forces the CPU maps keep the geometry the forces differentiate
        (:func:`pbsolver.molecule.kept.recording_lines`), which then do not compute it again.
        """
        record = recording_lines() if self.force_kind == "exact" else contextlib.nullcontext()
        with record:
            problem = build_problem(
                atoms,
                grid,
                physics=self.physics,
                boundary="periodic" if self.box is not None else "dirichlet",
                box=self.box,
                **self.map_options,
            )
        return problem.to(self.backend.array_library)

    def _finish(self, atoms, xp, grid, problem, result, x0, regridded, t_maps, t_solve):
        t_eval0 = time.perf_counter()
        periodic = self.box is not None
        phi_at, grad_at = sample_field(grid, result.phi_rf, atoms.positions, periodic=periodic,
                                       interpolation=self.interpolation)  # fmt: skip
        fxp = array_module(phi_at)
        q = fxp.asarray(atoms.charges)
        energy = 0.5 * self._factor * float(fxp.sum(q * phi_at))
        terms = None
        if result.newton_steps is not None:  # a nonlinear solve: ΔG adds the ions' terms
            mobile, osmotic = ion_terms(problem, result.phi_rf)
            f = self._factor
            terms = SolvationTerms(energy, f * mobile, f * osmotic, self.units)
            energy = terms.total
        potentials = self._factor * phi_at
        forces = -self._factor * q[:, None] * grad_at
        timings = {"maps": t_maps, "solve": t_solve}
        converged = result.converged
        if self.force_kind == "exact":
            t_forces0 = time.perf_counter()
            exact = self._exact_forces(atoms, grid, problem, result.phi_rf, result.system)
            result.system = None  # the frame's result does not hold the solve's arrays
            forces = exact.forces
            converged = converged and exact.result.converged
            timings["forces"] = time.perf_counter() - t_forces0
        potentials, forces = _to_library(potentials, xp), _to_library(forces, xp)
        t_eval = time.perf_counter() - t_eval0 - timings.get("forces", 0.0)
        timings["evaluate"] = t_eval
        self.problem = problem
        self._solutions.record(atoms.positions, grid, result.phi_rf)
        self.frames += 1
        frame = FrameResult(
            energy=energy,
            forces=forces,
            potentials=potentials,
            iterations=result.iterations,
            converged=converged,
            seconds=sum(timings.values()),
            timings=timings,
            warm_start=x0 is not None,
            regridded=regridded,
            grid=grid,
            solve=result,
            units=self.units,
            forces_kind=self.force_kind,
            terms=terms,
        )
        if self.strict and not result.converged:
            raise ConvergenceError(
                f"frame {self.frames - 1}: the solve did not converge ({result.reason}) after "
                f"{result.iterations} iterations, relative residual {result.residual:.3g}",
                result,
            )
        if self.strict and not converged:
            raise ConvergenceError(
                f"frame {self.frames - 1}: the adjoint solve of the forces did not converge",
                result,
            )
        return frame


# ---------------------------------------------------------------------- helpers
class _Bounds:
    """Stands in for the atoms of several frames when placing one grid around all of them."""

    def __init__(self, lo, hi):
        self._lo, self._hi = lo, hi

    def bounds(self):
        return self._lo, self._hi


def _debye_huckel(atoms, points, calc) -> np.ndarray:
    """The Debye–Hückel estimate of φ_rf at points (the boundary-value formula, "mdh")."""
    from pbsolver.backends import get_backend

    kappa = calc.physics.kappa
    kernels = get_backend("cpu").map_kernels()
    return kernels.debye_huckel_points(
        np.ascontiguousarray(points, dtype=np.float64),
        np.ascontiguousarray(atoms.positions),
        np.ascontiguousarray(atoms.charges, dtype=np.float64),
        np.ascontiguousarray(atoms.radii, dtype=np.float64),
        kappa,
        maps.COULOMB_KJ,
        calc.eps_out,
        calc.eps_in,
    )


def _require_finite(positions) -> None:
    """InputError naming the first atom with a non-finite coordinate (any leading frame axes)."""
    bad = ~np.isfinite(positions)
    if bad.any():
        idx = int(np.argwhere(bad)[0][-2])
        raise InputError(f"position of atom {idx} is not finite")


def _to_library(a, xp):
    """``a`` in array library ``xp`` (NumPy or CuPy), copying across only when needed."""
    if array_module(a) is xp:
        return a
    if xp is np:
        return to_numpy(a)
    return xp.asarray(a)


__all__ = ["FrameResult", "ReactionFieldCalculator", "sample_field"]
